"""A classifier that names no label for some texts (an LLM's "I cannot tell"): every consumer
of its predictions gives those texts the verdict ``undefined`` (score NaN), counts them apart
and computes failure rates over the decided (pass/fail) cases only; a model that always
answers keeps today's tables (no undefined column, the same numbers).

The model under test is VADER with a deterministic hole: ``undefined`` (probability row NaN)
for texts holding ``???`` and for a fixed hash-chosen share of the others."""
from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.adaptive.cases import INVARIANCE, tree_to_cases
from lingtest.tasks.adaptive.debug import evaluate
from lingtest.tasks.adaptive.label_model import rank_suggestions
from lingtest.tasks.adaptive.method import topic_rates
from lingtest.tasks.adaptive.prompts import PromptSettings
from lingtest.tasks.adaptive.review import ModelOracle
from lingtest.tasks.adaptive.review_app.session import ReviewSession, ReviewSettings
from lingtest.tasks.adaptive.review_form import apply_review, review_input, review_markdown
from lingtest.tasks.adaptive.scoring import score_cases
from lingtest.tasks.adaptive.tree import read_tree
from lingtest.tasks.capabilities import report
from lingtest.tasks.capabilities.checklist_run import TABLE_COLUMNS, failure_table, run_checklist
from lingtest.tasks.capabilities.model_tasks import run_suite
from lingtest.tasks.core.cases import case_id
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Method
from lingtest.tasks.core.metrics import verdict_metrics
from lingtest.tasks.core.schema import UNDEFINED, Contract
from lingtest.tasks.core.side_by_side import side_by_side
from lingtest.tasks.models.sentiment import LABELS3, SentimentModel, VaderModel

MARK = "???"
HOTEL = ("neg", "pos")


class SilentVader(SentimentModel):
    """VADER's labels and proportions, but ``undefined`` with a NaN row for a text holding
    ``???`` (when ``mark``), one of ``texts``, or whose SHA-256 first byte is below
    ``share`` × 256."""

    def __init__(self, share: float = 0.25, mark: bool = True, model_id: str = "silent",
                 texts: tuple[str, ...] = ()):
        super().__init__(model_id, "v1", LABELS3)
        self.vader, self.share, self.mark, self.texts = VaderModel(), share, mark, texts

    def silent(self, text: str) -> bool:
        return (self.mark and MARK in text) or text in self.texts or \
            hashlib.sha256(text.encode()).digest()[0] < 256 * self.share

    def predict_with_probabilities3(self, texts):
        labels, probs = self.vader.predict_with_probabilities3(texts)
        probs = probs.copy()
        for i, text in enumerate(texts):
            if self.silent(text):
                labels[i], probs[i] = UNDEFINED, np.nan
        return labels, probs

    def predict_proba(self, texts):
        return self.predict_with_probabilities3(texts)[1]

    def predict(self, texts):
        return self.predict_with_probabilities3(texts)[0]


@pytest.fixture(scope="module")
def vader() -> VaderModel:
    return VaderModel()


# ------------------------------------------------------------------ S²LCT (capabilities)

SEEDS = {
    "LC1": ("pos", ["The staff were friendly", "A wonderful little film", "I loved the ending",
                    "The food was great ???", "What a beautiful view", "Such a lovely day"]),
    "LC2": ("neg", ["The plot was dull", "A terrible waste of time", "I hated the music ???",
                    "The room was dirty", "Nothing worked as promised", "The acting was awful"]),
    "LC3": ("neutral|pos", ["The film runs two hours", "It opens on Friday",
                            "The hotel is near the station ???", "We ate at eight",
                            "The cast includes a dog", "I watched it twice"]),
}
WORDS = ("really", "very", "rather", "quite")


def capability_suite() -> pd.DataFrame:
    """Six seeds per capability, four one-word expansions each; one expansion per seed of
    LC1 carries the marker, so a passed seed can have an undefined expansion."""
    rows = []
    for lc, (expectation, texts) in SEEDS.items():
        for s, text in enumerate(texts):
            seed = case_id("s2lct", [text], expectation)
            rows.append((seed, lc, "seed", "", text, expectation, json.dumps({"trials": [0]})))
            for k, word in enumerate(WORDS):
                words = text.split()
                grown = " ".join([*words[:-1], word, words[-1]])
                if lc == "LC1" and k == 0 and MARK not in grown:
                    grown = f"{grown} {MARK}"
                rows.append((case_id("s2lct", [grown], expectation), lc, "expansion", seed,
                             grown, expectation, json.dumps({"words": [word]})))
    return pd.DataFrame(rows, columns=["case_id", "capability", "kind", "parent_case_id",
                                       "text", "expectation", "provenance"])


LCS = list(SEEDS)
LEGACY_TABLE3 = ["capability", "seeds", "expansions", "seed_fail_%", "seed_fail_lo",
                 "seed_fail_hi", "exp_fail_%", "exp_fail_lo", "exp_fail_hi", "pass_to_fail",
                 "pass_to_fail_seeds", "paper_seed_fail_% BERT", "paper_seed_fail_% RoBERTa",
                 "paper_seed_fail_% DistilBERT"]


@pytest.fixture(scope="module")
def s2lct(vader):
    suite = capability_suite()
    silent = run_suite.fn(SilentVader(), suite)
    return suite, silent, run_suite.fn(vader, suite)


def test_run_suite_gives_undefined_verdicts_nan_scores_and_vaders_verdicts_elsewhere(s2lct):
    suite, silent, plain = s2lct
    model = SilentVader()
    hole = np.array([model.silent(t) for t in suite["text"]])
    assert 0 < hole.sum() < len(hole) and (suite["text"].str.contains(MARK, regex=False)
                                           <= hole).all()
    assert (silent["verdict"][hole] == UNDEFINED).all()
    assert (silent["output"][hole] == UNDEFINED).all()
    assert silent.loc[hole, ["p_neg", "p_neutral", "p_pos", "score"]].isna().all().all()
    answered = silent[~hole].drop(columns=["model_id", "revision"])
    assert answered.equals(plain[~hole].drop(columns=["model_id", "revision"]))


def test_table3_counts_undefined_and_rates_only_the_decided_cases(s2lct):
    suite, silent, _ = s2lct
    table = report.table3(silent, LCS, n_boot=200, seed=1)
    assert list(table.columns) == [*LEGACY_TABLE3[:3], "seed_undefined", "exp_undefined",
                                   *LEGACY_TABLE3[3:]]
    decided = silent[silent["verdict"] != UNDEFINED]
    # the decided rows alone give the same rates, intervals and pass→fail counts
    alone = report.table3(decided, LCS, n_boot=200, seed=1)
    same = [c for c in LEGACY_TABLE3 if c not in ("seeds", "expansions")]
    pd.testing.assert_frame_equal(table[same], alone[same])
    for _, row in table.iterrows():
        part = silent[silent["capability"] == row["capability"]]
        seeds = part[part["kind"] == "seed"]
        assert row["seeds"] == len(seeds)
        assert row["seed_undefined"] == (seeds["verdict"] == UNDEFINED).sum()
        assert row["exp_undefined"] == ((part["kind"] == "expansion")
                                        & (part["verdict"] == UNDEFINED)).sum()
        judged = seeds[seeds["verdict"] != UNDEFINED]
        assert row["seed_fail_%"] == round(100 * (judged["verdict"] == "fail").mean(), 2)
    assert table["exp_undefined"].sum() >= 6  # LC1's marked expansions at least
    metrics = report.headline_metrics({"silent": table}, suite, {"bracket": {"f1": 0.5}}, None)
    assert metrics["silent"]["undefined"] == int((silent["verdict"] == UNDEFINED).sum())
    weights = table["seeds"] - table["seed_undefined"]
    assert metrics["silent"]["seed_fail_%"] == round(
        float((table["seed_fail_%"] * weights).sum() / weights.sum()), 2)


def test_ase22_and_neutral_share_count_undefined_apart(s2lct):
    suite, silent, _ = s2lct
    membership = report.trial_membership(suite)
    ase = report.ase22_table(silent, LCS, membership, 1).set_index("capability")
    for lc in LCS:
        part = silent[silent["capability"] == lc]
        judged = part[part["verdict"] != UNDEFINED]
        assert ase.at[lc, "undefined (median)"] == (part["verdict"] == UNDEFINED).sum()
        assert ase.at[lc, "test_cases (median)"] == len(part)
        assert ase.at[lc, "fail_% (median)"] == pytest.approx(
            100 * (judged["verdict"] == "fail").mean(), abs=0.005)
    share = report.neutral_share(silent, LCS).set_index("capability")
    seeds = silent[silent["kind"] == "seed"]
    for lc in LCS:
        part = seeds[seeds["capability"] == lc]
        labelled = part[part["output"] != UNDEFINED]
        assert share.at[lc, "undefined_seeds"] == len(part) - len(labelled)
        assert share.at[lc, "neutral_%"] == round(100 * (labelled["output"] == "neutral")
                                                  .mean(), 2)


def test_a_model_that_always_answers_keeps_todays_tables(s2lct, vader):
    """No undefined verdict: not one new column, and the very tables VADER itself gets."""
    suite, _, plain = s2lct
    always = run_suite.fn(SilentVader(share=0, mark=False, model_id="vader"), suite)
    assert (always["revision"] != plain["revision"]).all()  # only the revision differs
    always = always.assign(revision=plain["revision"])
    pd.testing.assert_frame_equal(always, plain)
    table = report.table3(always, LCS, n_boot=200, seed=1)
    assert list(table.columns) == LEGACY_TABLE3
    pd.testing.assert_frame_equal(table, report.table3(plain, LCS, n_boot=200, seed=1))
    membership = report.trial_membership(suite)
    assert "undefined (median)" not in report.ase22_table(always, LCS, membership, 1)
    assert "undefined_seeds" not in report.neutral_share(always, LCS)
    metrics = report.headline_metrics({"vader": table}, suite, {"bracket": {"f1": 0.5}}, None)
    assert set(metrics["vader"]) == {"seed_fail_%", "exp_fail_%", "pass_to_fail",
                                     "pass_to_fail_seeds"}


def test_side_by_side_and_summaries_count_undefined_only_for_the_model_that_has_them(s2lct):
    suite, silent, plain = s2lct
    rows = pd.concat([silent, plain], ignore_index=True)
    contract = Contract("s2lct", "capability", ("text",))
    table = side_by_side(rows, suite, contract, ["silent", "vader"])
    assert list(table.columns) == ["capability", "cases", "silent fail %", "silent undefined",
                                   "vader fail %"]
    overall = table[table["capability"] == "all"].iloc[0]
    assert overall["silent undefined"] == (silent["verdict"] == UNDEFINED).sum()
    judged = silent[silent["verdict"] != UNDEFINED]
    assert overall["silent fail %"] == round(100 * (judged["verdict"] == "fail").mean(), 2)
    assert list(side_by_side(plain, suite, contract, ["vader"]).columns) == [
        "capability", "cases", "vader fail %"]
    assert verdict_metrics(silent["verdict"])["undefined"] == overall["silent undefined"]
    assert set(verdict_metrics(plain["verdict"])) == {"fail_%"}
    summary = Method.summary(None, suite, rows, [])  # the base summary reads no state
    assert summary["undefined"] == overall["silent undefined"]
    assert "undefined" not in Method.summary(None, suite, plain, [])


# ------------------------------------------------------------------ CheckList

TESTS = ["single positive words", "Sentiment-laden words in context", "typos", "change names",
         "add negative phrases", "intensifiers", "simple negations: not negative"]


@pytest.fixture(scope="module")
def checklist(mirror):
    from lingtest.tasks.data import TABLES

    full = TABLES["checklist_suite"](mirror)
    return pd.concat([full[full["test"] == t].head(25) for t in TESTS], ignore_index=True)


def test_checklist_undefined_examples_are_counted_apart(checklist, vader):
    model = SilentVader(share=0.3)
    verdicts = run_checklist(checklist, model)
    plain = run_checklist(checklist, vader)
    assert (verdicts["verdict"] == UNDEFINED).sum() > 0
    for (_, example), judged in zip(checklist.iterrows(), verdicts.itertuples()):
        texts = [str(t) for t in example["texts"]]
        silent = [model.silent(t) for t in texts]
        if silent[0] or (len(texts) > 1 and all(silent[1:])):
            assert judged.verdict == UNDEFINED, example["test"]
            continue
        # judged on the answered texts alone: VADER's verdict on the example without them
        kept = [t for t, s in zip(texts, silent) if not s]
        alone = run_checklist(pd.DataFrame([{**example.to_dict(), "texts": kept}]), vader)
        assert judged.verdict == alone["verdict"].iloc[0], (example["test"], texts)
        assert UNDEFINED not in judged.predictions or any(silent)
    table = failure_table(verdicts).set_index("test")
    assert list(table.reset_index().columns) == [*TABLE_COLUMNS[:5], UNDEFINED,
                                                 *TABLE_COLUMNS[5:]]
    for test, part in verdicts.groupby("test"):
        counts = part["verdict"].value_counts()
        assert table.at[test, UNDEFINED] == counts.get(UNDEFINED, 0)
        judged = counts.get("pass", 0) + counts.get("fail", 0)
        rate = table.at[test, "failure_rate"]
        assert (np.isnan(rate) if not judged else
                rate == round(100 * counts.get("fail", 0) / judged, 2))
    # one table of both models: the undefined count beside the model that has them only
    both = report.checklist_table(pd.concat([verdicts.assign(model_id="silent"),
                                             plain.assign(model_id="vader")]))
    assert [c for c in both.columns if c.startswith(UNDEFINED)] == ["undefined silent"]


def test_checklist_of_a_model_that_always_answers_is_todays(checklist, vader):
    always = run_checklist(checklist, SilentVader(share=0, mark=False))
    plain = run_checklist(checklist, vader)
    pd.testing.assert_frame_equal(always, plain)
    table = failure_table(always)
    assert list(table.columns) == TABLE_COLUMNS
    assert not any(c.startswith(UNDEFINED)
                   for c in report.checklist_table(plain.assign(model_id="vader")).columns)


# ------------------------------------------------------------------ AdaTest (adaptive)

@pytest.fixture()
def hotel(mirror, tmp_path):
    return shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tmp_path / "hotel.csv")


def test_adaptive_scores_undefined_apart_and_the_stage_counts_them(hotel, vader):
    cases = tree_to_cases(read_tree(hotel), HOTEL)
    model = SilentVader(share=0.3)
    silent = score_cases(cases, model)
    plain = score_cases(cases, vader)
    hole = cases["input"].map(model.silent).to_numpy()
    assert 0 < hole.sum() < len(hole)
    assert (silent["verdict"][hole] == UNDEFINED).all()
    assert (silent["output"][hole] == UNDEFINED).all() and silent["score"][hole].isna().all()
    assert json.loads(silent["probabilities"][np.flatnonzero(hole)[0]]) == {
        label: None for label in LABELS3}
    keep = ["case_id", "output", "verdict", "score", "probabilities"]
    pd.testing.assert_frame_equal(silent.loc[~hole, keep], plain.loc[~hole, keep])
    # an invariance pair with an unanswered side is undefined, never a pass or a fail
    pair = pd.DataFrame([{"case_id": "ab" * 8, "topic": "/Rooms", "input": "Nice room",
                          "input_b": f"Nice room {MARK}", "expectation": INVARIANCE}])
    scored = score_cases(pair, model).iloc[0]
    assert scored["verdict"] == UNDEFINED and np.isnan(scored["score"])
    assert scored["output"] == f"pos|{UNDEFINED}"
    # the stage's per-topic rates: n and the rate over decided verdicts, undefined apart
    suite = cases.assign(tree="hotel.csv")
    rates = topic_rates(suite, silent.assign(model_id="silent"), 200, 0)
    assert rates["undefined"].sum() == hole.sum()
    assert rates["n"].sum() == (~hole).sum()
    for row in rates.itertuples():
        part = silent[(silent["topic"] == row.topic) & (silent["verdict"] != UNDEFINED)]
        assert row.n == len(part) and row.fail == (part["verdict"] == "fail").sum()


def test_debug_evaluate_gives_unanswered_sentences_undefined(vader):
    texts = ["A wonderful film", f"A dreadful film {MARK}", "A dull film"]
    suite = pd.DataFrame({"case_id": [f"{k:016x}" for k in range(3)], "set": "sst",
                          "topic": "SST-2", "text": texts,
                          "expectation": ["should output pos", "should output neg",
                                          "should output neg"]})
    rows = evaluate(suite, SilentVader(share=0), batch_size=8)
    assert rows["verdict"].tolist()[1] == UNDEFINED and np.isnan(rows["score"].iloc[1])
    assert rows["output"].tolist()[1] == UNDEFINED
    assert rows["verdict"].iloc[[0, 2]].isin(["pass", "fail"]).all()


def test_suggestions_oracle_and_review_form_keep_undefined_out_of_the_tree(hotel):
    tree = read_tree(hotel)
    model = SilentVader(share=0)
    texts = ["The room was spotless", f"The room smelled {MARK}", "The bed was awful"]
    ranked = rank_suggestions(pd.DataFrame({"input": texts, "prompt_id": "p",
                                            "generator": "g", "seed": 1}),
                              tree, "/Rooms", [model])
    assert ranked["input"].iloc[-1] == texts[1]  # no score: listed last
    assert np.isnan(ranked["score"].iloc[-1]) and ranked["output"].iloc[-1] == UNDEFINED
    assert ranked["score"].iloc[:2].notna().all()
    assert f"| {texts[1]} | {UNDEFINED} | {UNDEFINED} |" in review_markdown(
        ranked, "/Rooms", 1, "silent")
    # the oracle abstains where its reference model gives no label, even at confidence 0
    assert ModelOracle(model, 0.0).expect("/Rooms", texts)[1] == "<abstain>"
    form = review_input(texts)(fail=[texts[1], texts[2]], passing=[texts[0]])
    grown, counts = apply_review(tree, ranked, form, "/Rooms", "ada", 1, "silent")
    assert counts[UNDEFINED] == 1 and counts["written"] == 2
    assert texts[1] not in set(grown.frame["input"])
    off = review_input(texts)(off_topic=[texts[1]])
    assert UNDEFINED not in apply_review(tree, ranked, off, "/Rooms", "ada", 1, "silent")[1]


def test_review_app_shows_undefined_and_refuses_to_file_it_as_right_or_wrong(hotel):
    model = SilentVader(share=0.3)
    session = ReviewSession(hotel, [model], lambda: None, ReviewSettings(
        reviewer="ada", binary_labels=HOTEL,
        prompt_settings=PromptSettings(prompt_diversity=False)))
    view = session.view("")
    tests = session.tree.tests
    for folder in view["folders"]:
        under = tests[tests["topic"].str.startswith(folder["path"])]
        assert folder["undefined"] == sum(model.silent(t) for t in under["input"])
    assert sum(f["undefined"] for f in view["folders"]) > 0
    rooms = session.view("/Rooms")["tests"]
    shown = [m for t in rooms for m in t["models"] if m["output"] == UNDEFINED]
    assert shown and all(m["score"] is None and m["verdict"] == UNDEFINED for m in shown)
    preview = session.preview("/Rooms", f"Dusty carpets {MARK}")
    assert preview[0]["output"] == UNDEFINED and preview[0]["score"] is None
    json.dumps(preview, allow_nan=False)  # the page's JSON: no NaN
    with pytest.raises(LingtestError, match="no label"):
        session.add_test("/Rooms", f"Dusty carpets {MARK}", "fail")
    rid = session.add_test("/Rooms", f"Dusty carpets {MARK}", "off_topic")
    assert session.tree.frame.at[rid, "label"] == "off_topic"


def test_an_oracle_round_rejects_and_counts_what_the_model_left_undefined(hotel):
    from test_adaptive_generators import CompletionsServer
    from test_adaptive_review import hotel_rule, round_script

    from lingtest.tasks.adaptive.generators import HTTPGenerator, SamplingSettings
    from lingtest.tasks.adaptive.review import RuleOracle, run_round
    from lingtest.tasks.models.llm import LLMSettings

    smoke = "Room smelled like smoke"
    model = SilentVader(share=0, model_id="vader", texts=(smoke,))
    with CompletionsServer(script=round_script) as server:
        generator = HTTPGenerator("gpt-test", server.url, sampling=SamplingSettings(),
                                  settings=LLMSettings(retries=0, timeout_s=5.0))
        result = run_round(read_tree(hotel), "/Rooms", generator,
                           RuleOracle("hotel-rule", hotel_rule), [model], round_no=1, seed=7,
                           prompts=2, completions=3,
                           settings=PromptSettings(prompt_diversity=False), binary_labels=HOTEL)
    # VADER itself accepts 3 with 1 failure (smoke): here smoke is undefined and rejected
    assert result.counts["undefined"] == 1
    assert (result.counts["accepted"], result.counts["failures"]) == (2, 0)
    review = result.suggestions.set_index("input")
    assert review.at[smoke, "vader verdict"] == UNDEFINED
    assert review.at[smoke, "review"] == "rejected"
    scored = result.suggestions.dropna(subset=["vader verdict"])
    assert scored["input"].iloc[-1] == smoke  # no score: ranked after every scored one
    assert smoke not in set(result.tree.frame.loc[result.tree.frame["labeler"]
                                                  == "oracle:hotel-rule", "input"])
