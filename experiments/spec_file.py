"""An experiment's spec: a YAML file (or a preset) of a pydantic model's fields with CLI values on top, validated at
load with one-line errors that name the file and the field."""

from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError


def load_spec(model: type[BaseModel], path: str | None, what: str, overrides: dict, presets: dict | None = None):
    """`path` a YAML file, a preset name or None; `overrides` that are None are not given."""
    data = {}
    if path in (presets or {}):
        data = dict(presets[path])
    elif path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ValueError(f"{path}: cannot read the {what}: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a {what} is a mapping of its fields")
    data |= {key: value for key, value in overrides.items() if value is not None}
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])  # empty for a check across fields: its message names them
        message = first["msg"].removeprefix("Value error, ")
        raise ValueError(f"{path or what}: {where + ': ' if where else ''}{message}") from None
