import gzip

import pytest

from curation.recipe import RecipeError, builtin_recipes, config_hash, load_recipe
from curation.sources.commoncrawl import commoncrawl_warc_urls, snapshot_of, warc_paths_url
from filters import HtmlExtractor, LanguageFilter


def write(tmp_path, text: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return str(path)


def test_builtin_fineweb_snapshot_recipe():
    recipe = load_recipe("fineweb-snapshot")
    assert "fineweb-snapshot" in builtin_recipes()
    assert recipe.stage_dirs() == [
        "00_read", "01_url_filter", "02_extract", "03_langid", "04_badwords", "05_heuristics", "06_quality", "07_dedup_exact",
        "08_minhash", "09_decontam", "10_pii",
    ]  # fmt: skip
    assert recipe.build(0).params.fineweb_lists and recipe.build(5).params.model_path is None  # shipped defaults
    assert [b.format for b in recipe.build(8).params.benchmarks] == ["gsm8k", "humaneval"]
    extract, langid = recipe.build(1), recipe.build(2)
    assert isinstance(extract, HtmlExtractor) and extract.params.backend == "trafilatura"
    assert isinstance(langid, LanguageFilter) and langid.params.languages == ["en"] and langid.params.min_score == 0.65


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nstages: [\n", "not valid YAML"),
        ("- just a list", "a recipe is a mapping"),
        ("name: x\nstages: []\n", "stages: List should have at least 1 item"),
        ("name: x\nstages:\n  - stage: dedupe\n", "stages[0].stage: unknown stage 'dedupe'"),
        ("name: x\nstages:\n  - stage: langid\n    params: {min_score: 2}\n", "stages[0].params.min_score"),
        ("name: x\nstages:\n  - stage: extract\n    params: {backend: lxml}\n", "stages[0].params.backend"),
        ("name: x\nstages:\n  - stage: extract\n    params: {timeout: 3}\n", "stages[0].params.timeout: Extra inputs"),
        ("name: x\nsource: {max_payload_bytes: -1}\nstages:\n  - stage: extract\n", "source.max_payload_bytes"),
        ("stages:\n  - stage: extract\n", "name: Field required"),
        ("name: x\nstages:\n  - stage: url_filter\n    params: {domain_lists: [no/such.txt]}\n",
         "stages[0].params.domain_lists: blocklist 'no/such.txt' is neither a file nor"),
        ("name: x\nstages:\n  - stage: decontam\n    params: {benchmarks: [{name: g, format: gsm8k, path: no/gsm.jsonl}]}\n",
         "stages[0].params.benchmarks[0]: benchmark file not found: no/gsm.jsonl"),
        ("name: x\nstages:\n  - stage: quality\n    params: {model_path: no/model.bin}\n",
         "stages[0].params.model_path: quality model not found: no/model.bin"),
    ],
)
def test_invalid_recipes_name_the_field(tmp_path, text, message):
    with pytest.raises(RecipeError) as error:
        load_recipe(write(tmp_path, text))
    assert message in str(error.value)
    assert "recipe.yaml" in str(error.value)


def test_unknown_recipe_name_lists_the_builtin_ones():
    with pytest.raises(RecipeError, match="fineweb-snapshot"):
        load_recipe("no-such-recipe")


def test_config_hash_changes_with_any_parameter():
    assert config_hash({"a": 1}, ["x"]) == config_hash({"a": 1}, ["x"])
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_commoncrawl_urls_from_a_local_paths_file(tmp_path):
    listing = tmp_path / "warc.paths.gz"
    paths = [
        f"crawl-data/CC-MAIN-2024-10/segments/1707947473347.0/warc/CC-MAIN-20240220211055-20240221001055-{i:05d}.warc.gz"
        for i in range(5)
    ]
    listing.write_bytes(gzip.compress(("\n".join(paths) + "\n").encode()))
    urls = commoncrawl_warc_urls("CC-MAIN-2024-10", max_files=3, paths_file=str(listing))
    assert urls == ["https://data.commoncrawl.org/" + p for p in paths[:3]]
    s3 = commoncrawl_warc_urls("CC-MAIN-2024-10", paths_file=str(listing), base="s3://commoncrawl/")
    assert len(s3) == 5 and s3[0].startswith("s3://commoncrawl/crawl-data/CC-MAIN-2024-10/")
    assert warc_paths_url("CC-MAIN-2024-10") == "https://data.commoncrawl.org/crawl-data/CC-MAIN-2024-10/warc.paths.gz"
    assert snapshot_of(urls[0]) == "CC-MAIN-2024-10"


def test_commoncrawl_rejects_bad_names_and_foreign_listings(tmp_path):
    with pytest.raises(ValueError, match="CC-MAIN-2024-10"):
        commoncrawl_warc_urls("2024-10")
    listing = tmp_path / "warc.paths"
    listing.write_text("crawl-data/CC-MAIN-2023-50/segments/x/warc/a.warc.gz\n")
    with pytest.raises(ValueError, match="not a CC-MAIN-2024-10 WARC path"):
        commoncrawl_warc_urls("CC-MAIN-2024-10", paths_file=str(listing))


def test_curate_run_usage_errors_are_one_line_before_ray_starts(tmp_path):
    """Each exits before a Ray starts or a run folder appears, with one line naming the argument."""
    import importlib.util
    import subprocess
    import sys

    (tmp_path / "a-file").write_text("")
    cases = [
        (["--input", str(tmp_path / "missing.warc.gz")], "missing.warc.gz' is not a file"),
        (["--max-files", "0"], "--max-files: 0 is not a positive integer"),
        (["--output", str(tmp_path / "a-file")], "is a file; give a folder"),
    ]
    if importlib.util.find_spec("grpc") is None:  # with pretrain-stack[cluster] installed, Ray Client would be tried
        cases.append((["--ray-address", "ray://127.0.0.1:1"], "uses Ray Client, which needs grpcio"))
    for arguments, message in cases:
        done = subprocess.run([sys.executable, "-m", "curation", "run", "fineweb-snapshot", "--output", str(tmp_path / "out"),
                               *arguments], capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
        assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, (arguments, done.stderr)
        assert not (tmp_path / "out").exists()


def test_a_column_written_twice_is_refused_unless_the_stage_says_overwrite(tmp_path):
    from tests.test_model_score import save_model

    model = save_model(tmp_path / "model", 1, 0)
    two = f"name: t\nstages:\n  - stage: model_score\n    params: {{model_path: {model}}}\n  - stage: model_score\n    params: {{model_path: {model}}}\n"
    with pytest.raises(RecipeError, match=r"stages\[1\] \(model_score\) would overwrite the `model_score` column that "
                                          r"stages\[0\] \(model_score\) writes: give it another column, or `overwrite: true`"):
        load_recipe(write(tmp_path, two))
    allowed = load_recipe(write(tmp_path, two + "    overwrite: true\n"))
    assert allowed.build(1).overwrite and not allowed.build(0).overwrite
    first = allowed.stages[0]  # `overwrite` left out of the identity unless set: runs made before it keep their hashes
    assert first.identity() == {"stage": "model_score", "params": {"model_path": str(model)}} and "overwrite" in allowed.stages[1].identity()
    assert load_recipe("code-corpus").stages[0].stage == "license"  # it rewrites the source's license on purpose


def test_a_stage_over_a_column_of_the_parquet_input_is_refused_before_ray_starts(tmp_path):
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.test_model_score import save_model

    model = save_model(tmp_path / "model", 1, 0)
    pq.write_table(pa.table({"id": ["a"], "text": ["some words"], "score": pa.array([3], pa.int8())}), tmp_path / "in.parquet")
    recipe = write(tmp_path, f"name: t\nsource: {{kind: parquet}}\nstages:\n  - stage: model_score\n    params: {{model_path: {model}, column: score}}\n")
    done = subprocess.run([sys.executable, "-m", "curation", "run", recipe, "--input", str(tmp_path / "in.parquet"), "--output",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"curate: t on {tmp_path / 'in.parquet'}: stages[0] (model_score) would overwrite the `score` column that the "
        "source writes: give it another column, or `overwrite: true` on the stage"
    ]
    assert not (tmp_path / "out").exists()
