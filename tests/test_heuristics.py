"""The heuristics stage: each reason on hand-made documents, and the same decisions as datatrove's filters."""

import glob
import random
import sys

import pyarrow as pa
import pytest
import regex

from curation.sources.warc import WarcReader
from filters import HtmlExtractor
from filters.heuristics import TERMINAL_PUNCTUATION, HeuristicFilters, Words, _covering, datatrove_reference
from tests.conftest import SHARED_DATA

S = [
    "The river carries fine sediment from the high mountains down to the wide delta every spring.",
    "Farmers along the banks have relied on these seasonal floods to renew the soil of their fields.",
    "In the old town, merchants sold wool, salt and copper tools to travellers from distant valleys.",
    "Scholars still argue about when the first stone bridge was built across the northern channel.",
    "A small museum near the harbour keeps maps, letters and ledgers that survived the great fire.",
    "Each autumn the village holds a market where bakers compete to make the largest honey cake.",
    "The railway arrived late, and with it came a slow change in how people worked and travelled.",
    "Today the valley is known for its orchards, quiet walking paths and a remarkable choir that sings.",
    "Visitors who climb to the ridge at dawn can see three lakes glittering below the morning mist.",
    "Local historians have collected oral accounts from elderly residents about life before the war.",
]
NO_STOP_WORDS = [
    "Bright rivers carry fine sediment across wide valleys every spring.",
    "Farmers along green banks rely on seasonal floods for fertile soil.",
    "Old merchants sold wool, salt, copper tools for distant travellers.",
    "Scholars still argue about when builders finished this stone bridge.",
    "A small museum near our harbour keeps maps, letters, ledgers today.",
    "Each autumn villagers hold markets where bakers bake enormous cakes.",
    "Railways arrived late, bringing slow changes in how people travelled.",
    "Today this valley is known for orchards, quiet paths, remarkable choirs.",
    "Visitors climbing ridges at dawn see three lakes glittering below mist.",
    "Local historians collected oral accounts from elderly residents there.",
]
GOOD = "\n".join(S)
WORDS = " ".join(S).replace(".", "").replace(",", "").split()
LONG = " ".join(S[:4])
CASES = {
    None: GOOD,
    "gopher_repetition/dup_para_frac": "\n\n".join([S[0]] * 4 + S[1:5]),
    "gopher_repetition/dup_para_char_frac": "\n\n".join(S[3:10] + [LONG, LONG]),
    "gopher_repetition/dup_line_frac": "\n".join([S[0]] * 5 + S[1:7]),
    "gopher_repetition/dup_line_char_frac": "\n".join(S + [LONG, LONG]),
    "gopher_repetition/top_2_gram": GOOD + "\n" + " ".join(["red apples"] * 120) + ".",
    "gopher_repetition/duplicated_5_n_grams": GOOD + "\n" + " ".join(S),
    "gopher_quality/gopher_short_doc": " ".join(S[:2]),
    "gopher_quality/gopher_below_avg_threshold": GOOD.replace("e", " e "),
    "gopher_quality/gopher_above_avg_threshold": "\n".join(" ".join(w + "extraordinarily" for w in s.split()) for s in S),
    "gopher_quality/gopher_too_many_hashes": GOOD + "\n" + " ".join(f"#{w}{i}" for i, w in enumerate(WORDS[:40])),
    "gopher_quality/gopher_too_many_ellipsis": GOOD + "\n" + " ".join(f"{w}..." for w in WORDS[:40]) + ".",
    "gopher_quality/gopher_too_many_bullets": "\n".join("- " + s for s in S),
    "gopher_quality/gopher_too_many_end_ellipsis": "\n".join(s[:-1] + "..." if i % 2 else s for i, s in enumerate(S)),
    "gopher_quality/gopher_below_alpha_threshold": GOOD + "\n" + " ".join(str(i) for i in range(60)) + ".",
    "gopher_quality/gopher_enough_stop_words": "\n".join(NO_STOP_WORDS),
    "c4/lorem_ipsum": GOOD + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "c4/curly_bracket": GOOD + "\nThe function returns {value} when the key is found in the table.",
    "c4/too_few_sentences": "\n".join(S[2 * i][:-1] + ", " + S[2 * i + 1][:-1] for i in range(4)),
    "fineweb_quality/line_punct_ratio": "\n".join(s[:-1] for s in S),
    "fineweb_quality/short_line_ratio": GOOD + "\n" + "\n".join(" ".join(WORDS[i : i + 3]) + "." for i in range(0, 90, 3)),
    "fineweb_quality/char_dup_ratio": GOOD + "\n" + "\n".join(["Read the full story on our website today."] * 2),
    "fineweb_quality/list_ratio": "\n".join(
        (" " * 10).join(WORDS[i : i + 3]) + ("." if i % 15 == 0 else "") for i in range(0, 150, 3)
    ),
}


@pytest.fixture(scope="module")
def stage() -> HeuristicFilters:
    stage = HeuristicFilters()
    stage.setup()
    return stage


def datatrove_judge():
    pytest.importorskip("datatrove", reason="the parity tests need `pip install datatrove==0.10.1` (the test extra)")
    return datatrove_reference()


@pytest.mark.parametrize("reason", list(CASES))
def test_each_reason_on_a_hand_made_document(stage, reason):
    assert stage.judge(CASES[reason])[0] == reason


def test_c4_keeps_only_good_lines_and_disabled_filters_pass():
    text = GOOD + "\nPlease enable JavaScript to view this page properly.\nRead our privacy policy and terms of use here.\nOk."
    result = HeuristicFilters().process(pa.table({"id": ["a", "b"], "text": [text, CASES["c4/lorem_ipsum"]]}))
    assert result.kept.to_pylist() == [{"id": "a", "text": GOOD}]
    assert result.dropped == {"c4/lorem_ipsum": 1}
    lenient = HeuristicFilters(HeuristicFilters.Params(gopher_quality={"enabled": False}))
    lenient.setup()
    assert lenient.judge(CASES["gopher_quality/gopher_enough_stop_words"])[0] is None


def test_same_decisions_as_datatrove_on_hand_made_documents(stage):
    judge = datatrove_judge()
    for reason, text in CASES.items():
        theirs = judge(text)
        assert theirs[0] == reason, f"datatrove says {theirs[0]} for the {reason} case"
        ours = stage.judge(text)
        assert ours[0] == theirs[0] and (ours[0] is not None or ours[1] == theirs[1])


@pytest.fixture(scope="module")
def pages(sample_snapshot) -> list[str]:
    """Extracted texts of the real WARC pages in ../shared/data (when present) and of the sample snapshot."""
    files = sorted(glob.glob(str(SHARED_DATA / "warc" / "*.gz"))) + sorted(glob.glob(str(sample_snapshot / "*.warc.gz")))
    texts = HtmlExtractor().process(pa.concat_tables([WarcReader("x").read(f).table for f in files]))
    return texts.kept["text"].to_pylist()


# what trips a per-line or per-token shortcut: citations, odd line breaks and spaces, special cases, words that
# join alike ("ab c", "a bc"), a word over C4's 1000 characters, and lines C4 drops or that end a document
AWKWARD = ["[1]", "[edit]", "[citation needed]", " [2] ", "e.g.", "U.S.", "(see", "this)", "...", "…", "\u2028", "\x0c",
           "\x1c", "\r\n", "\x85", "\xa0", "\u3000", "\t", "  ", "\n\n", "\n", "!", "?", "。", " - ", "•", "#", "''", "``",
           "don't", "\u200b", "ab c", "a bc", "x" * 1001, " javascript ", " privacy policy ", "{", "Mr.", " . . . ", "?!"]  # fmt: skip


def mutated(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.choice([1, 3, 10, 30])):
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(AWKWARD))
    lines = "".join(chars).split("\n")
    if rng.random() < 0.3:
        rng.shuffle(lines)
    return "\n".join(lines).replace(".", "", rng.choice([0, 0, 5, 50]))


def assert_same_decisions_as_datatrove(stage, texts):
    judge = datatrove_judge()
    differ = []
    for text in texts:
        theirs, ours = judge(text), stage.judge(text)
        if ours[0] != theirs[0] or (ours[0] is None and ours[1] != theirs[1]):
            differ.append((theirs[0], ours[0], text[:80]))
    assert not differ, f"{len(differ)} of {len(texts)} documents differ: {differ[:3]}"


def test_same_decisions_as_datatrove_on_real_and_sample_pages(stage, pages):
    assert len(pages) >= 150
    assert_same_decisions_as_datatrove(stage, pages)


def test_same_decisions_as_datatrove_on_awkwardly_edited_pages(stage, pages):
    rng = random.Random(0)
    assert_same_decisions_as_datatrove(stage, [mutated(rng.choice(pages), rng) for _ in range(300)])


def test_n_gram_rules_match_datatrove_where_words_join_alike(stage):
    """datatrove's repeated n-grams compare ""-joined strings ("ab ba" repeats "a bba"), its top n-gram " "-joined
    ones with the first seen winning ties: texts of few short words hit both."""
    gopher = pytest.importorskip("datatrove.pipeline.filters.gopher_repetition_filter")
    from datatrove.utils.text import split_into_words

    rng = random.Random(0)
    for _ in range(300):
        text = " ".join(rng.choice(["a", "b", "ab", "ba", "bba", "aab"]) for _ in range(rng.randint(1, 80)))
        words, theirs = Words(text, stage.tokenize(text)), split_into_words(text, "en")
        for n in range(2, 5):
            if len(theirs) >= n:
                assert words.top_gram_chars(n) == gopher.find_top_duplicate(gopher.get_n_grams(theirs, n)), (text, n)
        for n in range(5, 11):
            assert words.repeated_chars(n) == gopher.find_all_duplicate(theirs, n), (text, n)


def test_sentences_and_words_of_lines_are_datatroves(stage, pages):
    """C4 counts each kept line's sentences and words as datatrove's spaCy sentencizer and word split do, on the
    document's tokens where they cover the line exactly: many lines in one go."""
    pytest.importorskip("datatrove", reason="needs `pip install datatrove==0.10.1` (the test extra)")
    from datatrove.utils.text import split_into_sentences, split_into_words

    rng = random.Random(2)
    marks_across_lines = " Spaces first. A mark ends it.\n(see this) opens with punctuation!\n\"Quoted\" start. And … more\n- x."
    for text in [marks_across_lines] + pages[:40] + [mutated(rng.choice(pages), rng) for _ in range(40)]:
        tokens = stage.tokenize(text)
        starts, stops = tokens.starts.tolist(), tokens.stops.tolist()
        spans, expected, position = [], [0, 0], 0
        for line in text.split("\n"):
            begin = position + len(line) - len(line.lstrip())
            span = _covering(starts, stops, begin, begin + len(line.strip()))
            position += len(line) + 1
            if line.strip() and span:
                spans.append(span)
                expected[0] += len(split_into_sentences(line.strip(), "en"))
                expected[1] += len(split_into_words(line.strip(), "en"))
        assert [tokens.sentences(spans), tokens.words_in(spans)] == expected


def test_cached_tokenization_is_spacys(stage, pages):
    """tokenize() fills spaCy's chunk cache ahead of each document: the tokens must be a fresh tokenizer's."""
    import spacy

    fresh = spacy.blank("en").tokenizer
    rng = random.Random(1)
    for text in pages[:60] + [mutated(rng.choice(pages), rng) for _ in range(60)]:
        tokens = stage.tokenize(text)
        assert list(zip(tokens.starts.tolist(), tokens.stops.tolist())) == [(t.idx, t.idx + len(t)) for t in fresh(text)]


def test_a_small_token_cache_changes_no_decision(stage, pages):
    """Rebuilt every few documents (the cache bounds memory), the stage decides and writes as it does with its cache
    of 500,000."""
    small = HeuristicFilters(HeuristicFilters.Params(token_cache_limit=2_000))
    small.setup()
    table = pa.table({"id": [str(i) for i in range(len(pages))], "text": pages})
    rebuilt = []
    small._new_tokenizer = lambda rebuild=small._new_tokenizer: (rebuilt.append(1), rebuild())
    assert small.annotate(table) == stage.annotate(table)
    assert len(rebuilt) >= 3
    with pytest.raises(ValueError, match="token_cache_limit"):
        HeuristicFilters.Params(token_cache_limit=764)


@pytest.mark.parametrize(
    "params, text, reason",
    [
        ({"gopher_repetition": {"enabled": False}, "gopher_quality": {"max_doc_words": 100}}, GOOD + "\n" + GOOD,
         "gopher_quality/gopher_long_doc"),
        ({"gopher_repetition": {"top_n_grams": [(3, 0.18)]}}, CASES["gopher_repetition/top_2_gram"], "gopher_repetition/top_3_gram"),
        ({"gopher_repetition": {"top_n_grams": [(4, 0.16)]}}, CASES["gopher_repetition/top_2_gram"], "gopher_repetition/top_4_gram"),
        ({"gopher_repetition": {"dup_n_grams": [(10, 0.10)]}}, CASES["gopher_repetition/duplicated_5_n_grams"],
         "gopher_repetition/duplicated_10_n_grams"),
        ({}, "", "gopher_repetition/empty"),
    ],
)  # fmt: skip
def test_overridden_thresholds_reach_the_other_reasons(params, text, reason):
    stage = HeuristicFilters(HeuristicFilters.Params(**params))
    stage.setup()
    assert stage.judge(text)[0] == reason


def test_terminal_punctuation_is_unicode_s_sentence_terminals_and_three_khmer_signs():
    every_code_point = "".join(map(chr, range(sys.maxunicode + 1)))
    expected = frozenset(regex.findall(r"\p{Sentence_Terminal}", every_code_point)) | {"\u17d6", "\u17d9", "\u17da"}
    assert TERMINAL_PUNCTUATION == expected and {".", "!", "?", "\u3002", "\u0964"} <= TERMINAL_PUNCTUATION
