"""Dedup stages on plain tables and the corpus-wide pass's steps on local files, without Ray."""

import random
import re
import unicodedata

import numpy as np
import pyarrow as pa
import pytest
from datasketch import LeanMinHash, MinHash
from pydantic import ValidationError

from curation import dedup, dedup_kernels
from curation.io import read_parquet
from curation.recipe import parse_recipe
from curation.sources.parquet_documents import ParquetReader
from filters.dedup_exact import ExactDedup
from filters.duplicates import MAX_PRIORITY, size_bucket
from filters.minhash import MinhashDedup, MinHasher, MinhashParams, band_keys
from filters.normalization import normalize_batch, normalized_bytes
from tests.conftest import SHARED_DATA

TEXTS = [
    "",
    "one",
    "two words",
    "exactly five words right here",
    "Ünïcödé wörds, ünïcödé wörds — and 字 漢字 テキスト with emoji 🙂 too and more",
    " ".join(["supercalifragilisticexpialidocious-and-a-very-long-token-indeed"] * 9),  # shingles over 55 and 119 bytes
    " ".join(random.Random(0).choices(["alpha", "beta", "gamma", "delta", "x"], k=700)),
]


@pytest.mark.parametrize("scheme", ["affine32", "legacy"])
def test_signatures_are_datasketchs_bit_for_bit(scheme):
    normalized = normalize_batch(TEXTS, "whitespace")
    signatures, _, _ = MinHasher(num_perm=112, seed=7, scheme=scheme, ngram=5).signatures(*normalized_bytes(TEXTS, "whitespace"))
    for text, signature in zip(normalized, signatures):
        words = text.split(" ") if text else []
        shingles = [" ".join(words[i : i + 5]).encode() for i in range(len(words) - 4)] or ([text.encode()] if text else [])
        reference = MinHash.bulk([shingles], num_perm=112, seed=7, scheme=scheme)[0]
        assert np.array_equal(reference.hashvalues.astype(np.uint64), signature.astype(np.uint64)), text[:40]
        rebuilt = LeanMinHash(seed=7, hashvalues=signature, scheme=scheme)
        assert rebuilt.jaccard(reference) == 1.0


def simplify_text(text: str) -> str:
    """The rules of datatrove's `simplify_text` as FineWeb's MinHash uses them, one regex at a time."""
    text = unicodedata.normalize("NFC", re.sub(r"[\u0300-\u036f]", "", unicodedata.normalize("NFD", text.lower())))
    text = re.sub(r"\d", "0", re.sub(r"[^\w\s]|_", "", text))
    return " ".join(text.split())


def test_normalization_modes():
    text = "  Héllo,\tWORLD!\n\n2024 was_here  "
    assert normalize_batch([text], "whitespace") == ["Héllo, WORLD! 2024 was_here"]
    assert normalize_batch([text], "lower") == ["héllo, world! 2024 was_here"]
    assert normalize_batch([text, None, "a\ue000b", "\u00a0x\u2003y\x1f"], "fineweb") == ["hello world 0000 washere", "", "a b", "x y"]


def test_fineweb_normalization_equals_the_regex_rules_on_many_scripts():
    texts = list(TEXTS) + ["Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ １２３ «quotes» — dash… ¿qué? İstanbul ΣΊΣΥΦΟΣ ٣٤ ४५ x²"]
    folder = SHARED_DATA / "langid" / "sentences"
    if folder.exists():
        texts += [path.read_text() for path in sorted(folder.glob("*.txt"))]
    assert normalize_batch(texts, "fineweb") == [simplify_text(text) for text in texts]


def test_band_keys_collide_exactly_when_a_band_agrees():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2**32, size=(1, 112), dtype=np.uint32)
    b = rng.integers(0, 2**32, size=(1, 112), dtype=np.uint32)
    b[0, 24:32] = a[0, 24:32]  # band 3 of 14 x 8
    keys = band_keys(np.vstack([a, b]), 14, 8)
    assert [bool(x) for x in keys[0] == keys[1]] == [band == 3 for band in range(14)]


def test_minhash_params_are_validated_and_bands_can_follow_the_threshold():
    with pytest.raises(ValidationError, match="exceeds num_perm"):
        MinhashParams(bands=20, rows=8)
    with pytest.raises(ValidationError, match="both bands and rows"):
        MinhashParams(bands=None)
    chosen = MinhashParams(bands=None, rows=None, threshold=0.8, num_perm=128)
    assert (chosen.bands, chosen.rows) == (9, 13)  # what datasketch's MinHashLSH(threshold=0.8, num_perm=128) picks
    assert abs((1 / chosen.bands) ** (1 / chosen.rows) - 0.8) < 0.05  # the S-curve turns at the threshold
    with pytest.raises(Exception, match=r"stages\[0\]\.params\.bands"):
        parse_recipe({"name": "x", "stages": [{"stage": "minhash", "params": {"bands": 0}}]}, "x.yaml")


def test_an_empty_shard_has_no_keys():
    empty = pa.table({"id": pa.array([], pa.string()), "text": pa.array([], pa.string())})
    assert normalize_batch([], "fineweb") == []
    for stage in (ExactDedup(), MinhashDedup()):
        keys = stage.candidate_keys(empty)
        assert len(keys.rows) == len(keys.keys) == 0 and keys.stats["empty_text"] == 0


def test_exact_keys_follow_the_normalization():
    table = pa.table({"id": list("abcd"), "text": ["Same text.", "same   text.", "Same text.\n", ""]})
    keys = ExactDedup(ExactDedup.Params()).candidate_keys(table)
    assert keys.rows.tolist() == [0, 1, 2] and keys.stats == {"empty_text": 1}
    assert keys.keys[0] == keys.keys[2] != keys.keys[1]
    lower = ExactDedup(ExactDedup.Params(normalization="lower")).candidate_keys(table)
    assert lower.keys[0] == lower.keys[1] == lower.keys[2]


def test_minhash_keys_and_shingles_per_row():
    table = pa.table({"id": ["a", "b", "c"], "text": ["one two three four five six", "", "one two three four five six"]})
    stage = MinhashDedup(MinhashDedup.Params(verify=True))
    keys = stage.candidate_keys(table)
    assert keys.rows.tolist() == [0] * 14 + [2] * 14 and keys.bands.tolist() == list(range(14)) * 2
    assert np.array_equal(keys.keys[:14], keys.keys[14:])
    assert [len(s) for s in keys.shingles] == [2, 0, 2] and keys.stats["empty_text"] == 1


def test_filter_keeps_one_per_cluster_and_reports_clusters():
    table = pa.table({
        "id": list("abcdef"), "text": list("abcdef"), "url": [f"https://x/{c}" for c in "abcdef"],
        "dup_cluster": pa.array([32, 32, None, 32, 5, 5], pa.int64()),
        "dup_cluster_size": pa.array([3, 3, 1, 3, 2, 2], pa.int32()),
        "dup_keep": [True, False, True, False, False, True],
    })  # fmt: skip
    result = MinhashDedup().process(table)
    assert result.kept["id"].to_pylist() == ["a", "c", "f"]
    assert result.kept.column_names == ["id", "text", "url", "near_cluster", "near_cluster_size"]
    assert result.kept["near_cluster"].to_pylist() == [32, None, 5] and result.kept["near_cluster_size"].to_pylist() == [3, 1, 2]
    assert result.dropped == {"near_duplicate": 3}
    assert result.stats["cluster_sizes"] == {"3": 1, "2": 1}
    [sample] = result.stats["cluster_samples"]  # cluster 32 hashes into the sample, 5 does not
    assert sample["cluster"] == 32 and [m["id"] for m in sample["members"]] == ["a", "b", "d"]
    assert [size_bucket(n) for n in (2, 3, 4, 7, 8, 100)] == ["2", "3", "4-7", "4-7", "8-15", "64-127"]


def test_which_member_is_kept():
    table = pa.table({"id": list("abc"), "text": ["short", "the longest text", "mid text"], "quality_score": [0.2, 0.1, 0.9]})
    assert ExactDedup(ExactDedup.Params(keep="first")).priority(table).tolist() == [0, 0, 0]
    longest = ExactDedup(ExactDedup.Params(keep="longest")).priority(table)
    assert longest.argmin() == 1 and longest.max() <= MAX_PRIORITY
    assert ExactDedup(ExactDedup.Params(keep="quality")).priority(table).argmin() == 2
    with pytest.raises(ValueError, match="no quality stage ran before it"):
        ExactDedup(ExactDedup.Params(keep="quality")).priority(table.drop_columns(["quality_score"]))


def test_node_ids_carry_priority_shard_and_row():
    nodes = dedup.node_ids(37, np.array([0, 5, 2**24 - 1]), np.array([0, MAX_PRIORITY, 1]))
    assert dedup.node_shard(nodes).tolist() == [37] * 3 and dedup.node_row(nodes).tolist() == [0, 5, 2**24 - 1]
    assert (nodes > 0).all() and nodes[1] > nodes[2] > nodes[0]
    with pytest.raises(ValueError, match="rows at most"):
        dedup.node_ids(0, np.array([2**24]), np.array([0]))


def _components_by_the_pass(tmp_path, u, v, partitions) -> dict[int, int]:
    """Large-star/small-star rounds and the assignment, each step a function on files as the Ray tasks run it."""
    ctx = dedup.PassContext(recipe=None, stage_index=0, stage_hash="", work=str(tmp_path), parts={}, partitions=partitions)
    dedup._write_edges_both_ends(ctx, "cc/r001-large/q", "seed", np.maximum(u, v), np.minimum(u, v))
    for round_ in range(1, dedup.MAX_ROUNDS + 1):
        if all([dedup.large_star_step(ctx, round_, q)["converged"] for q in range(partitions)]):
            break
        for q in range(partitions):
            dedup.small_star_step(ctx, round_, q)
    for q in range(partitions):
        dedup.assign_step(ctx, round_, q)
    assigned = dedup._read_folder(ctx, "assign", pa.schema([("node", pa.int64()), ("cluster", pa.int64()), ("size", pa.int32())]))
    found = dict(zip(assigned["node"].to_pylist(), assigned["cluster"].to_pylist()))
    sizes = dict(zip(assigned["node"].to_pylist(), assigned["size"].to_pylist()))
    for node, cluster in found.items():
        assert sizes[node] == sum(1 for c in found.values() if c == cluster)
    return found


def _reference_components(u, v) -> dict[int, int]:
    parent: dict[int, int] = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in zip(u.tolist(), v.tolist()):
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


@pytest.mark.parametrize("shape", ["random", "chain", "stars"])
def test_connected_components_across_partitions_match_union_find(tmp_path, shape):
    rng = np.random.default_rng(1)
    nodes = rng.choice(2**40, size=600, replace=False).astype(np.int64) + 1
    if shape == "random":
        u, v = rng.choice(nodes, 500), rng.choice(nodes, 500)
    elif shape == "chain":  # a long path in shuffled id order: the worst case for rounds
        u, v = nodes[:-1], nodes[1:]
    else:
        u, v = nodes[rng.integers(0, 20, 580)], nodes[20:]
    keep = u != v
    found = _components_by_the_pass(tmp_path, u[keep], v[keep], partitions=7)
    assert found == _reference_components(u[keep], v[keep])


def test_an_empty_partition_has_no_buckets(tmp_path):
    recipe = parse_recipe({"name": "t", "stages": [{"stage": "minhash"}]}, "t")
    ctx = dedup.PassContext(recipe, 0, "empty-partition", str(tmp_path), {}, partitions=1)
    assert dedup.buckets_step(ctx, 0) == {"keys": 0, "buckets": 0, "candidate_pairs": 0}


def test_local_components_reduce_edges_to_stars():
    u, v = np.array([9, 7, 5, 30]), np.array([7, 5, 3, 20])
    members, roots = dedup.local_components(u, v)
    assert dict(zip(members.tolist(), roots.tolist())) == {5: 3, 7: 3, 9: 3, 30: 20}


def test_jaccard_kernel():
    left = pa.array([[1, 2, 3, 4], [], [5]], pa.list_(pa.uint32()))
    right = pa.array([[2, 3, 4, 9], [], [6]], pa.list_(pa.uint32()))
    values = dedup_kernels.jaccard(left.values.to_numpy(), left.offsets.to_numpy(), right.values.to_numpy(), right.offsets.to_numpy())
    assert values.tolist() == [3 / 5, 1.0, 0.0]


def test_parquet_documents_reader(tmp_path):
    import pyarrow.parquet as pq

    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"text": ["a text", "", None], "url": ["u1", "u2", "u3"]}), path)
    result = ParquetReader("CC-TEST").read(str(path))
    assert result.table["url"].to_pylist() == ["u1"] and result.dropped == {"empty_text": 2}
    assert result.table["snapshot"].to_pylist() == ["CC-TEST"] and len(result.table["id"][0].as_py()) == 20
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: a Parquet input needs a `text` column"):
        ParquetReader("CC-TEST").read(str(tmp_path / "bad.parquet"))


def test_binary_text_is_read_as_utf8_and_what_is_not_text_is_one_line_naming_the_file(tmp_path):
    """Hive, Impala and older Spark write strings as bare bytes: those are the text; other bytes or types are refused."""
    import pyarrow.parquet as pq

    for kind in (pa.binary(), pa.large_binary()):
        pq.write_table(pa.table({"text": pa.array(["café page".encode(), b"", None], kind)}), tmp_path / "bytes.parquet")
        result = ParquetReader("CC-TEST").read(str(tmp_path / "bytes.parquet"))
        assert result.table["text"].type == pa.string() and result.table["text"].to_pylist() == ["café page"]
        assert result.dropped == {"empty_text": 2}
    refused = {
        "latin1.parquet": (pa.array(["café".encode("latin-1")], pa.binary()), "its `text` column is binary and not UTF-8"),
        "numbers.parquet": (pa.array([1, 2]), "its `text` column is int64, not text"),
    }
    for name, (column, message) in refused.items():
        pq.write_table(pa.table({"text": column}), tmp_path / name)
        with pytest.raises(ValueError) as error:
            ParquetReader("CC-TEST").read(str(tmp_path / name))
        assert str(error.value).startswith(f"{tmp_path / name}: {message}") and "\n" not in str(error.value)


def test_attach_clusters_marks_kept_and_dropped_rows(tmp_path):
    ctx = dedup.PassContext(recipe=None, stage_index=0, stage_hash="", work=str(tmp_path), parts={}, partitions=1)
    nodes = dedup.node_ids(3, np.array([0, 2, 1]), np.array([0, 0, 0]))
    assignment = pa.table({"node": nodes, "cluster": [nodes[0]] * 3, "size": pa.array([3, 3, 3], pa.int32())})
    dedup._write(ctx, "assign/s00003/q00000.parquet", assignment)
    table = dedup.attach_clusters(ctx, 3, pa.table({"id": list("abcd"), "text": list("abcd")}))
    assert table["dup_keep"].to_pylist() == [True, False, False, True]
    assert table["dup_cluster_size"].to_pylist() == [3, 3, 3, 1]
    assert table["dup_cluster"].to_pylist() == [nodes[0]] * 3 + [None]
    assert read_parquet(ctx.fs, str(tmp_path / "assign/s00003/q00000.parquet")).num_rows == 3


def _dedup_in_process(tmp_path, stage_spec: dict, shards: list[pa.Table]) -> list[pa.Table]:
    """The runner's order of pass steps, called in this process on local files: what each shard keeps."""
    import pyarrow.parquet as pq

    recipe = parse_recipe({"name": "t", "source": {"kind": "parquet"}, "stages": [stage_spec]}, "t")
    parts = {}
    for shard, table in enumerate(shards):
        parts[shard] = str(tmp_path / f"in-{shard}.parquet")
        pq.write_table(table, parts[shard])
    ctx = dedup.PassContext(recipe, 0, str(stage_spec), str(tmp_path / "work"), parts, partitions=3)
    for shard in parts:
        dedup.keys_step(ctx, shard)
    for q in range(3):
        dedup.buckets_step(ctx, q)
    if dedup.stage_of(ctx).verify_threshold is not None:
        for step in (dedup.verify_first_step, dedup.verify_second_step):
            for shard in parts:
                step(ctx, shard)
    round_ = 1
    while not all([dedup.large_star_step(ctx, round_, q)["converged"] for q in range(3)]):
        for q in range(3):
            dedup.small_star_step(ctx, round_, q)
        round_ += 1
    for q in range(3):
        dedup.assign_step(ctx, round_, q)
    stage = dedup.stage_of(ctx)
    return [stage.process(dedup.attach_clusters(ctx, shard, table)).kept for shard, table in enumerate(shards)]


@pytest.mark.parametrize("keep, kept_id", [("first", "a0"), ("longest", "b1"), ("quality", "a1")])
def test_the_kept_member_follows_the_keep_policy(tmp_path, keep, kept_id):
    text = "the same words in the same order here"
    shards = [
        pa.table({"id": ["a0", "a1", "a2"], "text": [text, text + " ", "something else"], "quality_score": [0.5, 0.9, 0.1]}),
        pa.table({"id": ["b0", "b1"], "text": [text, text + " " * 5], "quality_score": [0.2, 0.3]}),
    ]
    kept = _dedup_in_process(tmp_path, {"stage": "dedup_exact", "params": {"keep": keep}}, shards)
    ids = [i for table in kept for i in table["id"].to_pylist()]
    assert sorted(ids) == sorted([kept_id, "a2"])


def test_verified_minhash_in_process_joins_only_true_near_duplicates(tmp_path):
    from curation.sources.near_duplicates import near_duplicate_pairs

    pairs = near_duplicate_pairs(60, 0.3, 1.0, seed=5)
    docs = [(f"p{i}{side}", text) for i, p in enumerate(pairs) for side, text in (("a", p.original), ("b", p.copy))]
    random.Random(1).shuffle(docs)
    shards = [pa.table({"id": [d for d, _ in docs[s::2]], "text": [t for _, t in docs[s::2]]}) for s in range(2)]
    kept = _dedup_in_process(tmp_path, {"stage": "minhash", "params": {"verify": True, "threshold": 0.75}}, shards)
    kept_ids = {i for table in kept for i in table["id"].to_pylist()}
    for i, pair in enumerate(pairs):
        both = {f"p{i}a", f"p{i}b"} <= kept_ids
        if pair.jaccard < 0.75:
            assert both, f"pair {i} at Jaccard {pair.jaccard:.2f} was joined"
        elif pair.jaccard >= 0.9:
            assert not both, f"pair {i} at Jaccard {pair.jaccard:.2f} was missed"
