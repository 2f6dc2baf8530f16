import hashlib

import pyarrow.parquet as pq

from curation.sources import sample


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_same_arguments_same_bytes(tmp_path, sample_snapshot):
    sample.generate(tmp_path, pages=160, files=4, seed=0)
    assert digest(tmp_path) == digest(sample_snapshot)


def test_truth_covers_every_kind_and_dups_are_measured(sample_snapshot):
    truth = pq.read_table(sample_snapshot / sample.TRUTH_FILE).to_pandas()
    assert len(truth) == 160 and truth["doc_id"].is_unique
    assert set(truth["kind"]) == {kind for kind, _ in sample.KIND_SHARES}
    assert truth[truth.kind == "foreign"]["language"].nunique() >= 5
    by_url = truth.set_index("url")
    for _, page in truth[truth.kind == "near_dup"].iterrows():
        original = by_url.loc[page.dup_of]
        assert 0.68 <= page.jaccard <= 0.96
        assert abs(sample.jaccard(original.body, page.body) - page.jaccard) < 1e-3
    for _, page in truth[truth.kind == "exact_dup"].iterrows():
        assert by_url.loc[page.dup_of].body == page.body
    pii = truth[truth.kind == "pii"].iloc[0]
    assert {"EMAIL_ADDRESS", "PHONE_NUMBER", "IP_ADDRESS", "CREDIT_CARD", "PERSON"} == set(pii.pii_types)
    assert all(value in pii.body for value in pii.pii_values)
    assert set(truth[truth.kind == "non_utf8"]["charset"]) == {"iso-8859-1", "koi8-r", "shift_jis"}
