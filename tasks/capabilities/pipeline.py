"""Prefect tasks of the ``capabilities`` stage (S²LCT): the plain functions, cached by content.

The expensive steps (tagging SST, inducing the PCFG, expanding each capability with the fill
model) are cached on what determines them — file contents, parameters, the code of the
modules that compute them — so a rerun after an unrelated change recomputes nothing, and a
new capability only expands itself. Model calls are not cached: they take seconds.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE

from tasks.capabilities import checklist_run, coverage, expansion, grammar, search
from tasks.capabilities.fill import tag_lexicon
from tasks.capabilities.masks import reference_cfg
from tasks.capabilities.specs import CapabilitySpec
from tasks.core.caching import model_id, task
from tasks.core.cases import provenance_json
from tasks.models.registry import resolve
from tasks.models.sentiment import SentimentModel

SpacyModel = model_id("spacy", resolve=resolve)
FillModel = model_id("causal_lm", "masked_lm", resolve=resolve)  # keyed on its revision
RESULT_COLUMNS = ["case_id", "method", "model_id", "revision", "capability", "kind",
                  "parent_case_id", "text", "expectation", "output", "p_neg", "p_neutral",
                  "p_pos", "score", "verdict"]
PROBABILITY_COLUMNS = {"neg": "p_neg", "neutral": "p_neutral", "pos": "p_pos"}


@task(name="tag-sst")
def tag_sentences(sst_path: Path, spacy_model: SpacyModel, offline: bool) -> pd.DataFrame:
    """spaCy tags of every SST sentence, shared by all capabilities' searches."""
    from tasks.models.nlp import load_spacy

    return search.tag_sst(pd.read_parquet(sst_path), load_spacy(spacy_model, offline=offline))


@task(name="induce-pcfg")
def induce_grammar(ptb_path: Path, heldout: int) -> dict:
    """The PCFG from the treebank's training part (``pcfg``: the flow saves it) and its
    bracket F1 on the held-out part (parsed from their gold tags, so the figure is the
    grammar's, not the tagger's). Writes nothing: a cache hit must not skip a file."""
    trees = pd.read_parquet(ptb_path)["tree"].tolist()
    train, held = grammar.split_heldout(trees, heldout)
    pcfg = grammar.induce_pcfg(train)
    predicted = [pcfg.parse(*grammar.gold_tags_words(t)).tree for t in held]
    scores = grammar.bracket_f1(held, predicted) if held else {}
    return {"pcfg": pcfg, "grammar": pcfg.describe(), "bracket": scores,
            "train_trees": len(train)}


@task(name="seed-cases", cache_policy=NO_CACHE)
def seed_cases(specs: list[CapabilitySpec], tagged: pd.DataFrame,
               polarity: search.WordPolarity, seeds_per_lc: int, seed: int,
               trials: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Search, sample and transform (seconds: not worth a cache entry), ``trials`` times:
    trial t samples with ``seed + t`` (trial 0 is the one-trial run's), each case held once;
    with more than one trial its provenance names the trials that drew it (``trials``).
    Counts: trial 0's, and the union's cases beside (``cases_all_trials``)."""
    seeds, counts = search.seed_cases(specs, tagged, polarity, seeds_per_lc, seed)
    if trials == 1:
        return seeds, counts
    drawn = pd.concat([seeds.assign(trial=0), *[
        search.seed_cases(specs, tagged, polarity, seeds_per_lc, seed + t)[0].assign(trial=t)
        for t in range(1, trials)]], ignore_index=True)
    member = drawn.groupby("case_id", sort=False)["trial"].agg(lambda t: sorted(set(t)))
    union = drawn.drop_duplicates("case_id").drop(columns="trial").reset_index(drop=True)
    union["provenance"] = [provenance_json(**{**json.loads(p), "trials": member[c]})
                           for c, p in zip(union["case_id"], union["provenance"])]
    counts["cases_all_trials"] = counts["capability"].map(union["capability"].value_counts()
                                                          ).fillna(0).astype(int)
    return union, counts


# ``polarity`` is a closure over ``polarity_path`` and ``settings["word_sentiment"]``, both keyed.
@task(name="expand", task_run_name="expand-{spec.id}", exclude=("polarity",))
def expand_capability(spec: CapabilitySpec, cases: pd.DataFrame, grammar_path: Path,
                      polarity_path: Path | None, polarity: search.WordPolarity,
                      treebank_path: Path, tagged: pd.DataFrame, settings: dict,
                      seed: int, fill_model_id: FillModel, parser: str,
                      spacy_model: SpacyModel, offline: bool) -> tuple[pd.DataFrame, dict]:
    """One capability's expansions (parse → Algorithm 1 masks → fill → validate)."""
    from tasks.capabilities.fill import load_fill_model
    from tasks.models.nlp import load_spacy

    nlp = load_spacy(spacy_model, offline=offline)
    pcfg = grammar.Grammar.load(grammar_path) if parser == "pcfg" else None
    trees = expansion.parse_texts(cases["text"].tolist(), nlp, pcfg, parser)
    treebank = pd.read_parquet(treebank_path)["tree"].tolist()
    cfg = reference_cfg(treebank)
    tags = tag_lexicon([grammar.gold_tags_words(t)[::-1] for t in treebank]
                       + list(zip(tagged["tokens"], tagged["tag"])))
    model = load_fill_model(fill_model_id, offline=offline)
    frame, stats = expansion.expand_capability(spec, cases, trees, cfg, model, fill_model_id,
                                               nlp, polarity, settings, seed, tags)
    get_run_logger().info("%s: %d seed cases → %d expansions (%d proposed, %d valid)",
                          spec.id, len(cases), len(frame), stats["proposed"], stats["valid"])
    return frame, {"capability": spec.id, **stats}


@task(name="run-suite", task_run_name="run-suite-{model.model_id}", cache_policy=NO_CACHE)
def run_suite(model: SentimentModel, suite: pd.DataFrame) -> pd.DataFrame:
    """Every seed case and expansion on one model: pass when its 3-way label is expected.

    The label (``output``) is the model's ``predict`` (a binary model's neutral band, VADER's
    compound score), not the argmax of ``probabilities3``: a binary model padded to
    [P(neg), 0, P(pos)] could never be neutral, and VADER's proportions almost always are.
    ``score`` is the probability the model gave the expected label: the sum of ``p_neg`` /
    ``p_neutral`` / ``p_pos`` over the labels the expectation accepts (so a binary model,
    whose padded ``p_neutral`` is 0, scores 0 on a case that expects only neutral)."""
    if len(suite):
        prediction, probs = model.predict_with_probabilities3(suite["text"].tolist())
    else:
        prediction, probs = [], np.zeros((0, 3))
    prediction = [str(x) for x in prediction]
    verdict = ["pass" if p in e.split("|") else "fail"
               for p, e in zip(prediction, suite["expectation"])]
    frame = pd.DataFrame({
        "case_id": suite["case_id"], "method": search.METHOD, "model_id": model.model_id,
        "revision": model.revision or "", "capability": suite["capability"],
        "kind": suite["kind"], "parent_case_id": suite["parent_case_id"],
        "text": suite["text"], "expectation": suite["expectation"], "output": prediction,
        "p_neg": probs[:, 0].round(6), "p_neutral": probs[:, 1].round(6),
        "p_pos": probs[:, 2].round(6), "verdict": verdict})
    frame["score"] = expected_probability(frame)
    return frame[RESULT_COLUMNS]


def expected_probability(rows: pd.DataFrame) -> np.ndarray:
    """P(an accepted label) per row: the ``p_*`` columns of the expectation's labels, summed."""
    labels = list(PROBABILITY_COLUMNS)
    accepted = np.array([[label in e.split("|") for label in labels]
                         for e in rows["expectation"]], dtype=float).reshape(-1, len(labels))
    probs = rows[list(PROBABILITY_COLUMNS.values())].to_numpy(dtype=float)
    return (probs * accepted).sum(axis=1).round(6)


@task(name="run-checklist", task_run_name="checklist-{model.model_id}", cache_policy=NO_CACHE)
def run_checklist(model: SentimentModel, suite: pd.DataFrame, max_examples: int | None,
                  seed: int, batch_size: int) -> pd.DataFrame:
    """The released CheckList sentiment suite (a seeded sample per test) on one model."""
    verdicts = checklist_run.run_checklist(suite, model, max_examples_per_test=max_examples,
                                           seed=seed, batch_size=batch_size)
    return verdicts.assign(model_id=model.model_id)


def coverage_pairs(suite: pd.DataFrame, checklist: pd.DataFrame, capabilities: list[str],
                   seed: int) -> dict[str, tuple[str, list[str], list[str]]]:
    """LC → (its CheckList test in ALiCT's map, the LC's distinct texts, as many distinct texts
    of the test drawn with the seed): the like-for-like comparison of the coverage report.
    LCs outside the map, or whose test is absent from the table, are left out."""
    pairs = {}
    for lc in capabilities:
        test = coverage.LC_TO_CHECKLIST.get(lc)
        ours = list(dict.fromkeys(suite.loc[suite["capability"] == lc, "text"]))
        rows = checklist[checklist["test"] == test]
        if test is None or rows.empty or not ours:
            continue
        theirs = list(dict.fromkeys(t for texts in rows["texts"] for t in texts))
        if len(theirs) > len(ours):
            rng = np.random.default_rng([seed, *lc.encode("utf-8")])  # per LC, as sample_suite
            theirs = [theirs[i] for i in np.sort(rng.choice(len(theirs), len(ours),
                                                            replace=False))]
        pairs[lc] = (test, ours, theirs)
    return pairs


def has_hidden_states(model: SentimentModel) -> bool:
    """A torch network with a tokenizer (MiniLM, hub checkpoints): coverage can hook it."""
    import torch

    return isinstance(getattr(model, "model", None), torch.nn.Module) and hasattr(
        model, "tokenizer")


@task(name="coverage-bounds", task_run_name="coverage-bounds-{model.model_id}")
def neuron_bounds(model: SentimentModel, train_texts: list[str],
                  pass_tokens: int | None) -> coverage.Bounds:
    """Each neuron's (low, high) over the training texts: cached, so the early ``bounds``
    unit computes it beside the suite's build and the ``coverage`` unit finds it."""
    return coverage.text_bounds(model.model, model.tokenizer, train_texts,
                                int(getattr(model, "max_length", 128)), pass_tokens,
                                coverage.default_layers(model.model))


@task(name="coverage", task_run_name="coverage-{model.model_id}", cache_policy=NO_CACHE)
def coverage_curve(model: SentimentModel, low_high: coverage.Bounds,
                   suites: dict[str, list[str]], pairs: dict[str, tuple[str, list, list]],
                   sizes: list[int], repeats: int, seed: int, pass_tokens: int | None = None
                   ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """BoundCov / SActCov of one model against its training ``low_high`` bounds: equal-size
    samples of each whole suite (sizes above the smaller suite are dropped), and each
    capability against its CheckList test at equal size (``pairs``: LC → (test, LC texts,
    test texts)).

    The samples are drawn first (they depend on the suites' sizes alone); only the texts they
    take, and the pairs' texts, run through the model, each once, in exact-length passes (so
    a text's flags do not depend on which others run), kept as bit-packed corner flags."""
    torch_model, tokenizer = model.model, model.tokenizer
    max_length = int(getattr(model, "max_length", 128))
    layers = coverage.default_layers(torch_model)
    smallest = min(len(texts) for texts in suites.values())
    usable = sorted({s for s in sizes if s <= smallest} | {smallest})
    drawn = [suites[name][row] for name, _, draws in coverage.curve_draws(
        {name: len(texts) for name, texts in suites.items()}, usable, seed, repeats)
        for rows in draws for row in rows]
    needed = list(dict.fromkeys(drawn + [t for _, a, b in pairs.values() for t in (*a, *b)]))
    flags = coverage.text_corner_flags(torch_model, tokenizer, needed, low_high, max_length,
                                       pass_tokens, layers)
    row = {text: i for i, text in enumerate(needed)}

    def of(texts: list[str]) -> coverage.FlagRows:
        return coverage.FlagRows(flags, np.array([row.get(t, -1) for t in texts], np.int64))

    curve = coverage.coverage_curve(low_high, {n: of(t) for n, t in suites.items()}, usable,
                                    seed, repeats)
    by_lc = coverage.paired_coverage(
        low_high, {lc: (test, of(a), of(b)) for lc, (test, a, b) in pairs.items()}, seed,
        repeats)
    info = {"neurons": int(len(low_high[0])), "layers": len(layers), "sizes": usable,
            **{f"{name} texts": len(t) for name, t in suites.items()},
            "texts run (drawn or paired)": len(needed)}
    return curve.assign(model_id=model.model_id), by_lc.assign(model_id=model.model_id), info
