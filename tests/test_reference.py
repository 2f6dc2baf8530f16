"""docs/reference/ is written from the code (experiments/reference.py, `curate reference`): the committed pages must
be what the code writes now, so a parameter or flag cannot change without its page."""

import pytest

from experiments import reference
from experiments.cli import CURATE_COMMANDS, curate_main, train_main


def test_the_committed_stage_reference_is_what_the_code_writes():
    committed = (reference.FOLDER / "stages.md").read_text()
    assert committed == reference.stages_page(), "docs/reference/stages.md is stale: run `curate reference`"


def test_the_committed_command_reference_is_what_the_code_writes():
    committed = (reference.FOLDER / "cli.md").read_text()
    if reference.PYTHON_LINE not in committed:
        pytest.skip(f"docs/reference/cli.md was laid out by another Python's argparse than this one ({reference.PYTHON_LINE})")
    assert committed == reference.cli_page(CURATE_COMMANDS, train_main), "docs/reference/cli.md is stale: run `curate reference`"


def test_each_parameter_is_a_row_with_its_type_default_and_description():
    page = reference.stages_page()
    quality = page[page.index("## quality\n") : page.index("\n## ", page.index("## quality\n") + 1)]
    assert "| `top_fraction` | `float | None` | `None` | keep this best-scoring fraction of each shard |".replace(" | None", " \\| None") in quality
    assert "- adds `quality_score` (`float`)" in quality
    assert "| `gopher_quality.min_doc_words` | `int \\| None` | `50` |" in page  # a nested group's fields
    assert "| `model_path` | `str` | required |" in page
    commands = reference.cli_page(CURATE_COMMANDS, train_main)
    assert "## curate run\n" in commands and "## train plan\n" in commands


def test_every_field_of_a_recipe_file_is_a_row_and_name_is_required():
    """A recipe without `name` is refused at load: the page that lists the recipe's fields says so."""
    from curation.recipe import Recipe

    page = reference.stages_page()
    recipe = page[page.index("## recipe\n") : page.index("## source\n")]
    assert [field for field in Recipe.model_fields if f"| `{field}` |" not in recipe] == []
    assert "| `name` | `str` | required |" in recipe and "`source.kind`" not in recipe  # source has its own section


def test_check_names_a_stale_page_and_write_mends_it(tmp_path, capsys):
    assert curate_main(["reference", "--out", str(tmp_path)]) == 0
    assert curate_main(["reference", "--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "stages.md").write_text("edited by hand\n")
    assert curate_main(["reference", "--out", str(tmp_path), "--check"]) == 1
    assert "stages.md differs from what the code writes: run `curate reference`" in capsys.readouterr().out
