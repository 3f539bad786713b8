"""Fill-in and validation of masked seeds (S²LCT step 6) with the packaged SmolLM2 and spaCy."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pandas as pd
import pytest

from lingtest.tasks.capabilities.fill import (Candidate, Expansions, MaskedFiller, expand, fill_kind,
                                     load_fill_model, propose)
from lingtest.tasks.capabilities.validation import Tagged, check, spec_still_matches, tag, validate
from lingtest.tasks.capabilities.masks import MASK, Masked, mask_candidates
from lingtest.tasks.capabilities.specs import load_spec
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT

SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
OR_BOTH = "(FRAG (CC Or) (NP (DT both)) (. .))"
TWO_MASKS = Masked(("The", MASK, MASK, "movie", "works", "."), (1, 2), ("JJ", "NN"),
                   ("NP", ("DT", "NN"), ("DT", "JJ", "NN", "NN")), 1, (0, 2))


@pytest.fixture(scope="module")
def lm():
    return load_fill_model(SMOLLM, offline=True)


@pytest.fixture(scope="module")
def polarity(table) -> pd.DataFrame:
    return table("word_polarity")


@pytest.fixture(scope="module")
def or_both() -> Masked:
    [masked] = mask_candidates(OR_BOTH, {"NP": Counter({("DT", "NNS"): 1})})
    assert masked.text == "Or both {MASK} ." and masked.mask_symbols == ("NNS",)
    return masked


def test_running_example_accepts_only_plural_nouns(lm, nlp, polarity, or_both):
    found = propose(or_both, lm, 10)
    assert 0 < len(found) <= 10
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
    kept = expand([or_both], lm, nlp, polarity, k=10, max_keep=5)
    assert isinstance(kept, Expansions) and kept, kept.report()
    for exp in kept:
        assert exp.text == f"Or both {exp.words[0]}."
        doc_tags = tag([list(exp.tokens)], nlp)[0].tag
        assert doc_tags[2] == "NNS" and exp.symbols == ("NNS",)
    report = kept.report()
    assert report["proposed"] == len(found)
    assert report["proposed"] == report["valid"] + sum(
        report[f"rejected_{r}"] for r in ("pos", "polarity", "rule", "agreement",
                                          "confidence", "duplicate"))
    assert report["rejected_pos"] >= 1  # SmolLM2 proposes "are", "can" ... after "Or both"


def test_pos_filter_rejects_wrong_tag(nlp, polarity, or_both):
    verb = Candidate(or_both, ("are",), -1.0)
    noun = Candidate(or_both, ("sides",), -2.0)
    kept, rejected = validate([verb, noun], nlp, polarity)
    assert kept == [noun]
    assert rejected == Counter({"pos": 1})


def test_neutrality_filter_rejects_sentiment_words(nlp, polarity):
    masked = Masked(("A", MASK, "movie", "."), (1,), ("JJ",), ("NP", ("DT", "NN"),
                    ("DT", "JJ", "NN")), 1, (0, 2))
    wonderful = Candidate(masked, ("wonderful",), -1.0)
    french = Candidate(masked, ("French",), -2.0)
    kept, rejected = validate([wonderful, french], nlp, polarity)
    assert [c.words for c in kept] == [("French",)]
    assert rejected == Counter({"polarity": 1})


def test_still_matches_callback_is_applied(lm, nlp, polarity, or_both):
    seen: list[Tagged] = []

    def refuse(tagged: Tagged) -> bool:
        seen.append(tagged)
        return False

    refused = expand([or_both], lm, nlp, polarity, k=10, max_keep=5, still_matches=refuse)
    assert len(refused) == 0 and refused.report()["rejected_rule"] == len(seen) >= 1
    assert all(t.tokens[:2] == ["Or", "both"] for t in seen)
    allowed = expand([or_both], lm, nlp, polarity, k=10, max_keep=5,
                     still_matches=lambda t: t.tag[2] == "NNS")
    assert allowed and allowed.report()["rejected_rule"] == 0


def test_spec_rule_callback_for_lc1(nlp, polarity):
    spec = load_spec(PACKAGE_ROOT / "tasks" / "capabilities" / "specs" / "LC1.yaml")
    rule = spec_still_matches(spec, "neutral", polarity)
    masked = Masked(("A", MASK, "movie", "about", "trains", "."), (1,), ("JJ",),
                    ("NP", ("DT", "NN"), ("DT", "JJ", "NN")), 1, (0, 2))
    neutral = Candidate(masked, ("French",), -1.0)
    good = Candidate(masked, ("wonderful",), -1.0)
    [t_neutral, t_good] = tag([neutral.tokens, good.tokens], nlp)
    assert rule(t_neutral) and not rule(t_good)
    # with a label the rule does not accept, even the neutral expansion fails
    assert not spec_still_matches(spec, "pos", polarity)(t_neutral)
    assert check(neutral, t_neutral, lambda w, p: None, rule) is neutral.masked


def test_ranking_is_deterministic(lm, nlp, polarity, or_both):
    first = expand([or_both, TWO_MASKS], lm, nlp, polarity, k=3, max_keep=3)
    second = expand([or_both, TWO_MASKS], lm, nlp, polarity, k=3, max_keep=3)
    assert first == second and first.report() == second.report()
    assert [e.score for e in first] == sorted((e.score for e in first), reverse=True)


def test_only_valid_fills_are_rescored_each_in_its_own_pass(lm, nlp, polarity, or_both,
                                                             monkeypatch):
    """Validation reads no score, so re-scoring only what passed it keeps the earlier
    expansions; each re-scored text has a pass of its own, so its score is the text's alone."""
    passes: list[list[str]] = []
    real = type(lm).score

    def recording(self, texts, batch_size=16):
        passes.append(list(texts))
        return real(self, texts, batch_size)

    monkeypatch.setattr(type(lm), "score", recording)
    found = expand([or_both, TWO_MASKS], lm, nlp, polarity, k=10, max_keep=5)
    ours, passes[:] = list(passes), []
    earlier = expand([or_both, TWO_MASKS], lm, nlp, polarity, k=10, max_keep=5,
                     rescore_first=True)
    assert found and [e.text for e in found] == [e.text for e in earlier]
    assert found.report() == earlier.report()
    assert [e.score for e in found] == pytest.approx([e.score for e in earlier], abs=1e-3)
    assert [len(p) for p in passes] == [found.proposed]  # earlier: every proposal, one call
    assert all(len(p) == 1 for p in ours)  # ours: one text per pass, only the valid ones
    assert len(ours) == found.valid + found.rejected["duplicate"] < found.proposed
    for exp in found:
        assert exp.score == float(real(lm, [exp.text])[0])  # bit for bit: the text's own


def test_two_mask_beam(lm):
    found = propose(TWO_MASKS, lm, 3)
    assert 0 < len(found) <= 3
    assert all(len(c.words) == 2 and all(w.isalpha() for w in c.words) for c in found)
    assert len({c.words for c in found}) == len(found)
    for c in found:
        assert c.tokens == ["The", c.words[0], c.words[1], "movie", "works", "."]
    # batched and one-by-one re-scoring agree
    single = propose(TWO_MASKS, lm, 3, batched=False)
    assert [c.words for c in single] == [c.words for c in found]
    assert [c.score for c in single] == pytest.approx([c.score for c in found], abs=1e-3)


def test_masked_lm_path_uses_the_mask_token_and_beam():
    calls: list[str] = []

    def pipe(text: str, top_k: int):
        calls.append(text)
        first = [{"token_str": w, "score": s} for w, s in (("big", 0.5), ("old", 0.3))]
        second = [{"token_str": w, "score": s} for w, s in (("red", 0.6), ("##s", 0.2))]
        return [first, second][:top_k] if text.count("[MASK]") == 2 else second

    pipe.tokenizer = SimpleNamespace(mask_token="[MASK]")  # what MaskedFiller reads
    filler = MaskedFiller("fake", pipe)
    found = propose(TWO_MASKS, filler, 2)
    assert calls[0] == "The [MASK] [MASK] movie works."
    assert found[0].words == ("big", "red")  # "##s" is no whole word and is dropped
    assert {c.words for c in found} == {("big", "red"), ("old", "red")}


def test_fill_model_kind_and_offline_error():
    assert fill_kind(SMOLLM) == "causal_lm"
    assert fill_kind("bert-base-uncased") == "masked_lm"
    with pytest.raises(LingtestError, match="not as a masked or causal LM"):
        fill_kind("sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(LingtestError, match="bert-base-uncased.*missing"):
        load_fill_model("bert-base-uncased", offline=True)


def test_batched_next_words_match_one_prefix_at_a_time(lm):
    prefixes = ["Or both", "The movie was", "", "I think that the"]
    batched = lm.next_token_candidates_batch(prefixes, k=5, batch_size=3)
    for prefix, found in zip(prefixes, batched):
        single = lm.next_token_candidates(prefix, k=5)
        assert [w for w, _ in found] == [w for w, _ in single]
        assert [lp for _, lp in found] == pytest.approx([lp for _, lp in single], abs=1e-3)


def test_tag_lexicon_narrows_proposals_to_the_masked_tag(lm, or_both):
    # the model's own top 30 after "Or both": call two of them plural nouns, the rest verbs
    top = [w for w, _ in lm.next_token_candidates("Or both", k=30)]
    plural = {top[12], top[25]}
    tags = {w.lower(): frozenset({"NNS"} if w in plural else {"VBP"}) for w in top}
    found = propose(or_both, lm, 3, tags=tags)
    assert {c.words[0] for c in found} == plural  # found below the unfiltered top 3


def test_confidence_floor_is_relative_to_the_seed(lm, nlp, polarity, or_both):
    """A floor above every fill's score drops all (counted as confidence); none keeps them."""
    free = expand([or_both], lm, nlp, polarity, k=10, max_keep=5)
    assert free and free.report()["rejected_confidence"] == 0
    strict = expand([or_both], lm, nlp, polarity, k=10, max_keep=5, min_logprob_per_word=0.0)
    assert len(strict) == 0 and strict.report()["rejected_confidence"] == free.report()["valid"]
    loose = expand([or_both], lm, nlp, polarity, k=10, max_keep=5, min_logprob_per_word=-50.0)
    assert [e.text for e in loose] == [e.text for e in free]


# ------------------------------------------------------------------ one-pass insertion path

SEED = "The film is a look at the way people live in a small town, and it works."
VARIANTS = ["The film is a quiet look at the way people live in a small town, and it works.",
            "The film is a look at the way young people live in a small town, and it works.",
            "Yet the film is a look at the way people live in a small town, and it works."]


def test_seed_pass_scores_variants_as_whole_sentences(lm):
    """The cached pass gives each filled sentence's whole score and right-context drop as
    scoring it whole does (``after=None``); a window of 8 tokens re-scores only those."""
    from lingtest.tasks.capabilities.fill import in_context_scores
    from lingtest.tasks.capabilities.wellformed import context_drops

    seed_pass = lm.text_pass(SEED)
    texts = [SimpleNamespace(text=t) for t in VARIANTS]
    scores, drops = in_context_scores(texts, seed_pass, after=None)
    assert scores == pytest.approx(list(lm.score(VARIANTS, batch_size=1)), abs=1e-3)
    assert drops == pytest.approx(context_drops(lm, SEED, VARIANTS), abs=1e-3)
    assert float(seed_pass.token_logprobs().sum()) == pytest.approx(lm.score([SEED])[0], abs=1e-3)
    windowed, _ = in_context_scores(texts, seed_pass, after=8)
    # a sentence-initial insertion changes the seed's first token ("The" → "the"): no pure
    # insertion, so it is scored whole; "quiet" re-scores 8 tokens and keeps the seed's rest
    assert windowed[2] == pytest.approx(scores[2], abs=1e-3)
    assert windowed[0] != pytest.approx(scores[0], abs=1e-3)


def test_in_context_proposals_search_the_whole_vocabulary_of_the_tag(lm, nlp):
    """Every one-word masked sentence gets k words of its tag from the seed's single pass,
    each scored by its log-probability after the left context (= next_token_candidates)."""
    from lingtest.tasks.capabilities.expansion import parse_texts
    from lingtest.tasks.capabilities.fill import in_context_path, propose_in_context
    from lingtest.tasks.capabilities.grammar import Grammar
    from lingtest.tasks.capabilities.masks import Surface

    tree = "(S (NP (DT The) (NN film)) (VP (VBZ works)) (. .))"
    surface = Surface.of("The film works.", tree)
    cfg = {"NP": Counter({("DT", "JJ", "NN"): 5}), "VP": Counter({("RB", "VBZ"): 3})}
    masked = mask_candidates(tree, cfg, surface=surface)
    assert {m.mask_symbols for m in masked} == {("JJ",), ("RB",)}
    assert in_context_path(masked, lm)
    tags = {"new": frozenset({"JJ"}), "old": frozenset({"JJ"}), "really": frozenset({"RB"}),
            "also": frozenset({"RB"}), "never": frozenset({"RB"})}
    found = propose_in_context(masked, lm.text_pass("The film works."), 2, tags)
    by_symbol = {}
    for cand in found:
        by_symbol.setdefault(cand.masked.mask_symbols[0], []).append(cand)
    assert sorted(len(v) for v in by_symbol.values()) == [2, 2]
    assert all(c.words[0] in ("new", "old") for c in by_symbol["JJ"])
    direct = dict(lm.next_token_candidates("The", k=20000))
    for cand in by_symbol["JJ"]:
        assert cand.score == pytest.approx(direct[cand.words[0]], abs=1e-3)
    assert by_symbol["JJ"][0].text in ("The new film works.", "The old film works.")


def test_fills_hopeless_by_their_word_alone_are_refused_unscored(lm, nlp, polarity,
                                                                  monkeypatch):
    """In-context path: a fill whose word after its left context is already more than
    UNSCORED_MARGIN below the confidence floor is refused (as confidence) without an LM
    score; the others are scored as before."""
    import lingtest.tasks.capabilities.fill as fill
    from lingtest.tasks.capabilities.masks import Surface

    tree = "(S (NP (DT The) (NN film)) (VP (VBZ works)) (. .))"
    masked = mask_candidates(tree, {"NP": Counter({("DT", "JJ", "NN"): 5})},
                             surface=Surface.of("The film works.", tree))
    tags = {w: frozenset({"JJ"}) for w in ("new", "old", "first", "short", "other")}
    scored: list[int] = []
    real = fill.in_context_scores
    monkeypatch.setattr(fill, "in_context_scores", lambda cands, seed_pass, after=8: (
        scored.append(len(cands)), real(cands, seed_pass, after))[1])
    free = expand(masked, lm, nlp, polarity, k=5, max_keep=None, tags=tags)
    assert free.report()["valid"] > 0 and scored == [free.report()["valid"]]
    words = {c.words[0]: c.score for c in fill.propose_in_context(
        masked, lm.text_pass("The film works."), 5, tags)}
    floor = min(words[e.words[0]] for e in free) + fill.UNSCORED_MARGIN + 1e-3
    bounded = expand(masked, lm, nlp, polarity, k=5, max_keep=None, tags=tags,
                     min_logprob_per_word=floor)
    hopeless = sum(words[e.words[0]] < floor - fill.UNSCORED_MARGIN for e in free)
    assert hopeless >= 1 and scored[-1] == free.report()["valid"] - hopeless
    assert bounded.report()["rejected_confidence"] >= hopeless


def test_a_fill_tagged_otherwise_stands_when_its_tag_makes_a_reference_rule(nlp):
    """pos_check in_context: "light" proposed as NN but tagged JJ before "film" is kept when
    NP → DT JJ NN is a reference rule (and the kept candidate names that rule); not without
    the rule, nor with exact checking, nor outside the allowed tags."""
    from lingtest.tasks.capabilities.validation import realised

    masked = Masked(("The", MASK, "film", "works", "."), (1,), ("NN",),
                    ("NP", ("DT", "NN"), ("DT", "NN", "NN")), 2, (0, 2))
    tags = ("DT", "JJ", "NN", "VBZ", ".")
    cfg = {"NP": Counter({("DT", "NN", "NN"): 2, ("DT", "JJ", "NN"): 9})}
    found = realised(masked, tags, cfg)
    assert found.mask_symbols == ("JJ",) and found.production[2] == ("DT", "JJ", "NN")
    assert found.ref_count == 9
    assert realised(masked, tags, None) is None  # exact
    assert realised(masked, tags, {"NP": Counter({("DT", "NN", "NN"): 2})}) is None
    assert realised(masked, tags, cfg, allowed=frozenset({"NN"})) is None
