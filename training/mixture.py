"""Mixture YAML: named sources of token shards with weights by tokens, in phases. Validated at load."""

import glob
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class MixtureError(ValueError):
    pass


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(min_length=1, description="globs of token shards, relative to the working directory")
    weight: float = Field(gt=0)


class Phase(BaseModel):
    """A curriculum phase; later issues give phases a length. One phase with the sources' weights is the default."""

    model_config = ConfigDict(extra="forbid")
    name: str
    weights: dict[str, float]


class Mixture(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    tokenizer: str | None = Field(None, description="tokenizer.json; default: the one beside the first source's shards")
    sources: dict[str, SourceSpec] = Field(min_length=1)
    phases: list[Phase] = Field(default_factory=list)

    @model_validator(mode="after")
    def phases_name_known_sources(self):
        if not self.phases:
            self.phases = [Phase(name="main", weights={name: s.weight for name, s in self.sources.items()})]
        for index, phase in enumerate(self.phases):
            unknown = sorted(set(phase.weights) - set(self.sources))
            if unknown:
                raise ValueError(f"phases[{index}].weights names unknown sources {unknown}")
            if any(w < 0 for w in phase.weights.values()) or sum(phase.weights.values()) <= 0:
                raise ValueError(f"phases[{index}].weights must be >= 0 with a positive sum")
        return self

    def source_names(self) -> list[str]:
        return list(self.sources)

    def weights(self, phase: int = 0) -> list[float]:
        """Normalized weights of phase `phase`, in source order."""
        raw = [self.phases[phase].weights.get(name, 0.0) for name in self.sources]
        return [w / sum(raw) for w in raw]

    def shard_files(self, name: str) -> list[str]:
        files = sorted({f for pattern in self.sources[name].paths for f in glob.glob(pattern)})
        if not files:
            raise MixtureError(
                f"mixture {self.name!r}: source {name!r} has no token shards at {self.sources[name].paths}; "
                "curate and tokenize it first (`curate run ...`, `curate tokenize RUN_DIR`)"
            )
        return files

    def tokenizer_path(self) -> str:
        if self.tokenizer:
            return self.tokenizer
        return str(Path(self.shard_files(self.source_names()[0])[0]).parent / "tokenizer.json")


def load_mixture(path: str) -> Mixture:
    file = Path(path)
    if not file.is_file():
        raise MixtureError(f"mixture file not found: {path}")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as error:
        raise MixtureError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise MixtureError(f"{path}: a mixture is a mapping with `name` and `sources`")
    try:
        return Mixture.model_validate(data)
    except ValidationError as error:
        lines = [f"  {'.'.join(str(p) for p in item['loc']) or '(mixture)'}: {item['msg']}" for item in error.errors()]
        raise MixtureError(f"{path}: invalid mixture\n" + "\n".join(lines)) from None
