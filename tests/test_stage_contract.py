import pyarrow as pa
import pytest

from filters.base import Annotation, Stage

PROSE = (
    "The old harbour town wakes early. Fishermen check their nets while the bakery on the corner opens its doors, and "
    "the smell of fresh bread drifts down to the water. By nine the market is full of people who have come from the "
    "villages in the hills to sell cheese, honey and wool. Children run between the stalls, and an old man plays the "
    "accordion near the fountain. In the afternoon the wind turns, the boats come back with their catch, and the whole "
    "town gathers on the quay to see what the sea has given them that day."
)


class EvenLength(Stage):
    """A toy stage: keeps texts of even length, annotates the length."""

    name = "even"
    adds = {"length": pa.int32()}
    setups = 0  # per instance: a count on the class would carry over from whichever test made one before

    def setup(self):
        self.setups += 1

    def annotate(self, table):
        lengths = [len(t) for t in table["text"].to_pylist()]
        return Annotation([None if n % 2 == 0 else "odd_length" for n in lengths], {"length": lengths})


def test_base_class_splits_counts_and_keeps_every_column():
    table = pa.table({"id": ["a", "b", "c"], "text": ["xx", "y", "zzzz"], "url": ["u1", "u2", "u3"]})
    stage = EvenLength()
    result = stage.process(table)
    stage.process(table)
    assert stage.setups == 1
    assert result.kept.column_names == ["id", "text", "url", "length"]
    assert result.kept["id"].to_pylist() == ["a", "c"] and result.kept["length"].to_pylist() == [2, 4]
    assert result.dropped == {"odd_length": 1}
    assert result.removed.to_pylist() == [{"id": "b", "text": "y", "url": "u2", "length": 1, "drop_reason": "odd_length"}]


def test_missing_column_is_named():
    with pytest.raises(ValueError, match=r"needs columns \['text'\]"):
        EvenLength().process(pa.table({"id": ["a"]}))


def test_filters_import_nothing_from_curation_training_or_ray():
    """A stage is tested with a plain table: the filters package stays below curation/ and training/."""
    import ast
    from pathlib import Path

    import filters

    upward = []
    for path in Path(filters.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            upward += [f"{path.name}: {name}" for name in names if name.split(".")[0] in ("curation", "training", "ray")]
    assert not upward


def test_no_two_stages_write_the_same_column_but_text():
    """A later stage never overwrites an earlier one's annotation (the near-duplicate stage once overwrote the exact
    stage's clusters); only `text` is rewritten on purpose (extraction, C4 lines, PII, decontamination cuts), and a
    repository document replaces its files' columns. `language` is the prose language of web text (langid) or the
    programming language of code (code_language): one recipe never holds both, which its load checks."""
    from collections import defaultdict

    from curation.recipe import RecipeError, parse_recipe
    from filters import STAGES

    writers = defaultdict(list)
    for name, stage_class in STAGES.items():
        for column in set(stage_class.adds) - set(stage_class.rewrites):
            writers[column].append(name)
    shared = {column: names for column, names in writers.items() if len(names) > 1 and column != "text"}
    assert shared == {"language": ["langid", "code_language"]}
    both = {"name": "x", "stages": [{"stage": "langid"}, {"stage": "code_language"}]}
    with pytest.raises(RecipeError, match=r"x.yaml: stages\[1\] \(code_language\) would overwrite the `language` column that stages\[0\] \(langid\) writes"):
        parse_recipe(both, "x.yaml")
    twice = {"name": "x", "stages": [{"stage": "pii"}, {"stage": "pii", "params": {"entities": ["EMAIL_ADDRESS"]}}]}
    with pytest.raises(RecipeError, match=r"stages\[1\] \(pii\) would overwrite the `pii_counts` column that stages\[0\] \(pii\) writes"):
        parse_recipe(twice, "x.yaml")  # the second one's counts would replace the first one's, silently
    twice["stages"][1]["overwrite"] = True
    assert len(parse_recipe(twice, "x.yaml").stages) == 2
    assert {"exact_cluster", "exact_cluster_size"} <= set(STAGES["dedup_exact"].adds)
    assert {"near_cluster", "near_cluster_size"} <= set(STAGES["minhash"].adds)


def test_the_stage_registry_names_every_stage_and_its_report():
    """filters/__init__ names each stage's module, class and report without importing them; what it says must be
    what the classes say."""
    from filters import REPORT_NAMES, STAGES

    assert len(STAGES) == 22 and "url_filter" in STAGES and "no_such_stage" not in STAGES
    for name in STAGES:
        stage_class = STAGES[name]
        assert stage_class.name == name and stage_class.report_name == REPORT_NAMES.get(name)
    with pytest.raises(KeyError):
        STAGES["no_such_stage"]


def test_a_process_imports_only_the_stages_of_its_recipe_and_spacy_without_torch(tmp_path):
    """Loading a recipe imports its stages alone (the driver and every Ray worker do), and building the heuristics
    and PII stages loads neither torch nor transformers nor other packages' spaCy plugins: each cost a worker seconds
    and hundreds of MiB for code it never ran."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = (
        "import sys\n"
        "from curation.recipe import parse_recipe\n"
        "recipe = parse_recipe({'name': 'x', 'stages': [{'stage': 'url_filter'}, {'stage': 'heuristics'}, {'stage': 'pii'}]}, 'x.yaml')\n"
        "for index in range(3):\n"
        "    recipe.build(index).ready()\n"
        "print(sorted(m for m in sys.modules if m.startswith('filters.') and m.count('.') == 1))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'presidio_analyzer'}))\n"
        "print('spacy.cli' in sys.modules)\n"
        "import torch\n"  # still importable afterwards
        "import spacy.cli\n"
        "print(spacy.cli.download.__name__, 'spaCy' in spacy.info(markdown=True))\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": root})  # fmt: skip
    lines = run.stdout.splitlines()
    loaded = eval(lines[0])
    assert {"filters.url_filter", "filters.heuristics", "filters.pii"} <= set(loaded)
    assert not {"filters.decontam", "filters.code_signals", "filters.datatrove_step", "filters.license"} & set(loaded)
    assert eval(lines[1]) == ["presidio_analyzer"]
    assert lines[2:] == ["False", "download True"]  # spaCy's command line: skipped, yet importable


def test_a_spared_worker_imports_no_pandas_for_pyarrow_and_converts_nanosecond_times_as_before(tmp_path):
    """pyarrow imports pandas (~0.3 s, ~48 MiB) at its first conversion of Python objects: a worker spares it; a
    fused task whose input holds nanosecond times has pyarrow look for pandas again (without it such a time not in
    whole microseconds cannot become a Python value), and `to_pandas` still gets pandas."""
    probe = (
        "import sys\n"
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "from curation.pyarrow_without_pandas import spare_workers_pandas\n"
        "from curation.recipe import parse_recipe\n"
        "from curation.run_folder import RunFolder\n"
        "from curation.segment import SegmentTask, run_segment\n"
        "spare_workers_pandas()\n"
        "stage = parse_recipe({'name': 'x', 'stages': [{'stage': 'heuristics'}]}, 'x.yaml').build(0)\n"
        f"text = {PROSE!r}\n"
        "table = pa.Table.from_pylist([{'id': 'a', 'text': text}, {'id': 'b', 'text': 'short'}])\n"
        "print(stage.process(table).kept.num_rows, 'pandas' in sys.modules)\n"
        "fetched = pa.array([1_700_000_000_123_456_789], pa.timestamp('ns'))\n"
        "path = sys.argv[1] + '/docs.parquet'\n"
        "pq.write_table(pa.table({'id': ['a'], 'text': [text], 'fetched': fetched}), path)\n"
        "step = {'stage': 'datatrove', 'params': {'step': 'datatrove.pipeline.filters.GopherQualityFilter'}}\n"
        "recipe = parse_recipe({'name': 'p', 'source': {'kind': 'parquet'}, 'stages': [step]}, 'p.yaml')\n"
        "folder = RunFolder(sys.argv[1] + '/run', recipe.stage_dirs())\n"
        "task = SegmentTask(recipe, 0, 1, 0, path, folder, frozenset({1}), False, 's', recipe.stage_hashes([path], 's'))\n"
        "stats = run_segment(task)\n"
        "print(stats[1]['docs_out'], pq.read_table(folder.part(1, 0))['fetched'].equals(pa.chunked_array([fetched])))\n"
        "import pandas\n"
        "print(type(pq.read_table(path).to_pandas()).__name__, pa.array(pandas.Series([1.5, None])).null_count)\n"
    )
    assert fresh_process_prints(probe, tmp_path) == ["1 False", "1 True", "DataFrame 1"]


def test_a_spared_worker_reads_a_text_parquet_whose_id_is_a_nanosecond_time(tmp_path):
    """The text reader converts its Parquet rows before any stage sees them: an id of nanosecond times converts as it
    did with pandas (a pandas Timestamp's text), not into an error that fails the shard."""
    probe = (
        "import sys\n"
        "import pyarrow as pa, pyarrow.parquet as pq\n"
        "from curation.pyarrow_without_pandas import spare_workers_pandas\n"
        "from curation.sources.text_corpus import TextReader\n"
        "spare_workers_pandas()\n"
        "ids = pa.array([1_700_000_000_123_456_789], pa.timestamp('ns'))\n"
        "pq.write_table(pa.table({'text': ['a document'], 'id': ids}), sys.argv[1] + '/docs.parquet')\n"
        "result = TextReader('s').read(sys.argv[1] + '/docs.parquet')\n"
        "print(result.table['id'].to_pylist(), dict(result.dropped))\n"
    )
    assert fresh_process_prints(probe, tmp_path) == ["['2023-11-14 22:13:20.123456789'] {}"]


def test_planning_a_run_loads_no_kernels_nor_another_sources_reader(tmp_path):
    """The driver loads the recipe, readies the duplicate stages to plan their passes and imports the runner; the
    compiled kernels belong to the workers alone (the driver never builds them), and go-enry (11 MiB) to code runs."""
    probe = (
        "import sys\n"
        "from curation import dedup, runner\n"
        "from curation.recipe import load_recipe\n"
        "recipe = load_recipe('fineweb-snapshot')\n"
        "for index in range(len(recipe.stages)):\n"
        "    stage = recipe.build(index)\n"
        "    if stage.name in ('dedup_exact', 'minhash'):\n"
        "        stage.ready()\n"
        "print('filters.compiled_kernels' in sys.modules, 'curation.sources.code_repositories' in sys.modules,\n"
        "      'enry' in sys.modules)\n"
    )
    assert fresh_process_prints(probe, tmp_path) == ["False False False"]


KERNEL_PROBE = (
    "import sys\n"
    "import numpy as np\n"
    "from curation.dedup_kernels import union_find\n"
    "from filters.normalization import normalize_batch\n"
    "print(union_find(np.array([0, 1]), np.array([1, 2]), 4).tolist(), normalize_batch(['Ça  va?'], 'fineweb'),\n"
    "      'numba' in sys.modules)\n"
)


def test_the_kernels_are_built_once_per_machine_and_a_failed_build_names_its_source(tmp_path, monkeypatch):
    """The first process on a machine builds filters/kernels.c into the cache; later ones load that build without
    running the compiler (here it fails once the first build is done), and none imports numba. Where the build
    fails, the error names the source and the compiler's first line."""
    import shutil
    import subprocess
    import sys

    compiler = tmp_path / "cc"
    compiler.write_text(f"#!/bin/sh\nexec {shutil.which('cc') or shutil.which('gcc')} \"$@\"\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    assert fresh_process_prints(KERNEL_PROBE, tmp_path) == ["[0, 0, 0, 3] ['ca va'] False"]
    (build,) = (tmp_path / "cache" / "kernels").glob("*/kernels.so")
    compiler.write_text("#!/bin/sh\necho 'cc: no compiler here' >&2\nexit 1\n")
    assert fresh_process_prints(KERNEL_PROBE, tmp_path) == ["[0, 0, 0, 3] ['ca va'] False"]
    assert list((tmp_path / "cache" / "kernels").glob("*/kernels.so")) == [build]

    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "empty-cache"))
    failed = subprocess.run([sys.executable, "-c", KERNEL_PROBE], capture_output=True, text=True)
    assert failed.returncode == 1
    assert "RuntimeError: kernels.c: " in failed.stderr and "failed: cc: no compiler here" in failed.stderr


def fresh_process_prints(probe: str, folder) -> list[str]:
    """The lines `probe` prints in a new Python process (pyarrow's look for pandas is per process), given `folder`."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", probe, str(folder)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()


def test_kernels_refuse_what_would_crash_the_process_with_one_error():
    """A zero n (a modulo by zero in C) or missing offsets raise ValueError, not a signal that kills the worker."""
    import numpy as np

    from filters.benchmark_index_kernels import ngram_hashes
    from filters.minhash_kernel import shingle_bounds
    from filters.repetition_kernels import repeated_chars

    words = np.frombuffer(b"a b", np.uint8)
    for call in (
        lambda: shingle_bounds(words, np.array([0, 3]), 0),
        lambda: shingle_bounds(words, np.empty(0, np.int64), 5),
        lambda: ngram_hashes(words, np.array([0, 3]), 0, np.empty(0, np.uint64)),
        lambda: repeated_chars(np.arange(3, dtype=np.uint64), np.array([0, 1, 2, 3]), 0),
    ):
        with pytest.raises(ValueError):
            call()
    assert shingle_bounds(words, np.array([0, 3]), 1)[0].tolist() == [0, 2]
