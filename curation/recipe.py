"""Recipes: an ordered list of stages and their parameters, validated at load with errors that name the field."""

import hashlib
import json
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from curation.file_digests import loaded_digests
from filters import STAGES
from filters.base import Stage


class RecipeError(ValueError):
    pass


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(
        "warc", pattern="^(warc|parquet|code|text|html)$",
        description="warc reads WARC and WET files alike, and a local directory or .html/.htm(.gz) file as html does, so "
        "a run can mix them; parquet documents with a `text` column; code a directory per repository; text a directory "
        "or file of .txt/.md/.jsonl(.gz)/.parquet documents or WikiExtractor output (books, papers, manuals, Wikipedia); "
        "html a directory or file of saved web pages (.html/.htm/.xhtml, .html.gz/.htm.gz), a page each, its URL from "
        "sidecar files where there are some",
    )  # fmt: skip
    source: str = "web"
    max_payload_bytes: int = Field(
        5_000_000, gt=0, description="warc: per record; html: per page, gzipped and not; text: per file when set, else 50 MB"
    )
    batch_documents: int = Field(
        250, gt=0, description="warc and html: pages read and run through the first stages together, which bounds a "
        "worker's memory by the batch instead of the file (a Common Crawl file holds ~45,000 pages)",
    )  # fmt: skip


class StageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    stage: str
    params: dict = Field(default_factory=dict)
    overwrite: bool = Field(False, description="let the stage replace a column the source or an earlier stage writes "
                            "(refused otherwise, so no score is silently lost)")  # fmt: skip

    def identity(self) -> dict:
        """What the stage's config hash covers: `overwrite` only when set, so runs made before it keep their hashes."""
        return self.model_dump(exclude=set() if self.overwrite else {"overwrite"})

    @field_validator("stage")
    @classmethod
    def known_stage(cls, value: str) -> str:
        if value not in STAGES:
            raise ValueError(f"unknown stage {value!r}; known stages: {sorted(STAGES)}")
        return value


class Recipe(BaseModel):
    """A recipe file's top-level fields."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="names its runs: `curate run` writes to runs/NAME unless --output says otherwise, "
                      "and its console lines and stats.json say which recipe made a run")  # fmt: skip
    description: str = Field("", description="for readers; not used")
    source: SourceSpec = Field(default_factory=SourceSpec, description="what the read stage reads and how")
    stages: list[StageSpec] = Field(min_length=1, description="the stages in order, each `{stage: NAME, params: {...}}` "
                                    "(`overwrite: true` lets one replace a column an earlier one writes)")  # fmt: skip

    def build(self, index: int) -> Stage:
        spec = self.stages[index]
        cls = STAGES[spec.stage]
        stage = cls(cls.Params.model_validate(spec.params))
        stage.overwrite = spec.overwrite
        return stage

    def stage_loads(self) -> list[dict[str, str | None]]:
        """Per stage folder, the content digest of every file the stage loads (none for the read)."""
        return [{}] + [loaded_digests(self.build(index).loaded_files()) for index in range(len(self.stages))]

    def stage_hashes(self, inputs: list[str], snapshot: str, loads: list[dict] | None = None) -> list[str]:
        """Per stage folder, a config hash chained through every earlier stage, with the digests of the files it loads
        (`loads`, from stage_loads): a change reruns that stage and all after it."""
        loads = self.stage_loads() if loads is None else loads
        hashes = [config_hash("read", self.source.model_dump(), inputs, snapshot)]
        for spec, files in zip(self.stages, loads[1:]):
            hashes.append(config_hash(hashes[-1], spec.identity(), *([files] if files else [])))
        return hashes

    def stage_dirs(self) -> list[str]:
        """Folder names in run order: 00_read, then one per stage."""
        return ["00_read"] + [f"{i + 1:02d}_{spec.stage}" for i, spec in enumerate(self.stages)]


def _describe(error: ValidationError, prefix: str) -> str:
    """One line for one error (the usual case, e.g. a missing file), else a line per error."""
    lines = []
    for item in error.errors():
        where = prefix + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"])
        lines.append(f"{where.lstrip('.')}: {item['msg'].removeprefix('Value error, ')}")  # pydantic's prefix says nothing
    return lines[0] if len(lines) == 1 else "\n" + "\n".join(f"  {line}" for line in lines)


def parse_recipe(data: object, origin: str) -> Recipe:
    if not isinstance(data, dict):
        raise RecipeError(f"{origin}: a recipe is a mapping with `name` and `stages`, got {type(data).__name__}")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as error:
        raise RecipeError(f"{origin}: invalid recipe: {_describe(error, '')}") from None
    for index, spec in enumerate(recipe.stages):
        try:
            STAGES[spec.stage].Params.model_validate(spec.params)
        except ValidationError as error:
            raise RecipeError(f"{origin}: invalid recipe: {_describe(error, f'stages[{index}].params')}") from None
    check_columns(recipe, source_columns(recipe.source.kind), origin)
    return recipe


def source_columns(kind: str) -> set[str]:
    """The columns a source of this kind writes whatever its files hold (a Parquet input may hold more: run time)."""
    from curation.schema import DOCUMENT_FIELDS

    columns = {field.name for field in DOCUMENT_FIELDS}
    if kind == "code":
        from curation.sources.code_repositories import CODE_SCHEMA

        columns |= set(CODE_SCHEMA.names)
    return columns


def check_columns(recipe: Recipe, source: set[str], origin: str) -> None:
    """Refuse a stage that would replace a column the source or an earlier stage writes (two `model_score` stages on
    one column, a `column: score` over FineWeb's own score) unless it says `overwrite: true`."""
    written = {column: "the source" for column in source}
    for index, spec in enumerate(recipe.stages):
        stage_class = STAGES[spec.stage]
        for column in sorted(set(recipe.build(index).adds) - {"text"} - set(stage_class.rewrites)):  # a column may be a param
            if column in written and not spec.overwrite and not (written[column] == "the source" and column in stage_class.fills):
                raise RecipeError(f"{origin}: stages[{index}] ({spec.stage}) would overwrite the `{column}` column that "
                                  f"{written[column]} writes: give it another column, or `overwrite: true` on the stage")  # fmt: skip
            written[column] = f"stages[{index}] ({spec.stage})"


def load_recipe(name_or_path: str) -> Recipe:
    """A built-in recipe name (curation/recipes/NAME.yaml) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        origin, text = str(path), _read(path)
    else:
        builtin = resources.files("curation") / "recipes" / f"{name_or_path}.yaml"
        if not builtin.is_file():
            raise RecipeError(f"no recipe named {name_or_path!r}; built-in recipes: {builtin_recipes()}")
        origin, text = f"{name_or_path}.yaml", builtin.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RecipeError(f"{origin}: not valid YAML: {error}") from None
    return parse_recipe(data, origin)


def _read(path: Path) -> str:
    if not path.is_file():
        raise RecipeError(f"recipe file not found: {path}")
    return path.read_text()


def builtin_recipes() -> list[str]:
    folder = resources.files("curation") / "recipes"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def config_hash(*parts: object) -> str:
    """Hash of JSON-able config; chained per stage so a change reruns that stage and everything after it."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
