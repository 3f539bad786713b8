"""Running a model under test on the ``capabilities`` stage's suite: its predictions (the
result rows), the released CheckList suite, and neuron coverage (Figure 4). The coverage
bounds, computed on training texts, are cached; a model's answers are cached by its revision
(``answering``), but for an LLM classifier, whose answer store keeps what it was told and
asks again what failed."""
from __future__ import annotations


import numpy as np
import pandas as pd
from prefect.cache_policies import NO_CACHE

from lingtest.tasks.capabilities import checklist_run, coverage, search
from lingtest.tasks.core.caching import ContentInputs, task
from lingtest.tasks.core.schema import UNDEFINED
from lingtest.tasks.models.llm_classifier import llm_classifier_of
from lingtest.tasks.models.sentiment import SentimentModel


RESULT_COLUMNS = ["case_id", "method", "model_id", "revision", "capability", "kind",
                  "parent_case_id", "text", "expectation", "output", "p_neg", "p_neutral",
                  "p_pos", "score", "verdict"]


PROBABILITY_COLUMNS = {"neg": "p_neg", "neutral": "p_neutral", "pos": "p_pos"}


@task(name="run-suite", task_run_name="run-suite-{model.model_id}", cache_policy=NO_CACHE)
def run_suite(model: SentimentModel, suite: pd.DataFrame) -> pd.DataFrame:
    """Every seed case and expansion on one model: pass when its 3-way label is expected.

    The label (``output``) is the model's ``predict`` (a binary model's neutral band, VADER's
    compound score), not the argmax of ``probabilities3``: a binary model padded to
    [P(neg), 0, P(pos)] could never be neutral, and VADER's proportions almost always are.
    ``score`` is the probability the model gave the expected label: the sum of ``p_neg`` /
    ``p_neutral`` / ``p_pos`` over the labels the expectation accepts (so a binary model,
    whose padded ``p_neutral`` is 0, scores 0 on a case that expects only neutral).

    A model whose answer names no label (``undefined``, an LLM classifier's; its probability
    row NaN) gets the verdict ``undefined`` and score NaN: neither a pass nor a fail."""
    if len(suite):
        prediction, probs = model.predict_with_probabilities3(suite["text"].tolist())
    else:
        prediction, probs = [], np.zeros((0, 3))
    prediction = [str(x) for x in prediction]
    verdict = [UNDEFINED if p == UNDEFINED else "pass" if p in e.split("|") else "fail"
               for p, e in zip(prediction, suite["expectation"])]
    frame = pd.DataFrame({
        "case_id": suite["case_id"], "method": search.METHOD, "model_id": model.model_id,
        "revision": model.revision or "", "capability": suite["capability"],
        "kind": suite["kind"], "parent_case_id": suite["parent_case_id"],
        "text": suite["text"], "expectation": suite["expectation"], "output": prediction,
        "p_neg": probs[:, 0].round(6), "p_neutral": probs[:, 1].round(6),
        "p_pos": probs[:, 2].round(6), "verdict": verdict})
    frame["score"] = np.where(frame["verdict"] == UNDEFINED, np.nan,
                              expected_probability(frame))
    return frame[RESULT_COLUMNS]


def answering(step, model: SentimentModel):
    """``step`` (``run_suite``, ``run_checklist``) as a task cached by the model's revision
    and its inputs — so testing an unchanged model again (a live object's state, a module's
    file, a folder's weights) asks it nothing — or as the plain function for an LLM
    classifier: its answer store already keeps each answer, and a cached table would keep
    the rows of failed calls that the next run must ask again. Outside a flow (``retest``)
    the plain function too: it needs no Prefect run."""
    from prefect.context import FlowRunContext

    if llm_classifier_of(model) is not None or FlowRunContext.get() is None:
        return step.fn
    return step.with_options(cache_policy=ContentInputs(), persist_result=True)


def expected_probability(rows: pd.DataFrame) -> np.ndarray:
    """P(an accepted label) per row: the ``p_*`` columns of the expectation's labels, summed."""
    labels = list(PROBABILITY_COLUMNS)
    accepted = np.array([[label in e.split("|") for label in labels]
                         for e in rows["expectation"]], dtype=float).reshape(-1, len(labels))
    probs = rows[list(PROBABILITY_COLUMNS.values())].to_numpy(dtype=float)
    return (probs * accepted).sum(axis=1).round(6)


@task(name="run-checklist", task_run_name="run-checklist-{model.model_id}", cache_policy=NO_CACHE)
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
