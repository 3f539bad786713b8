"""LLMs as the sentiment classifier under test: a served chat model with and without token
log-probabilities (a server written here, on 127.0.0.1), the packaged SmolLM2 as a local LM
scored by its next-token distribution, answers that name no label (``undefined``), the answer
store (a rerun asks nothing), and bad specs or options refused before a run."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm_classifier import (DEFAULT_TEMPLATE, DEFAULT_WORDS, LLMClassifier,
                                         label_masses, parse_label, prompting_for)
from lingtest.tasks.models.model_spec import parse_model
from lingtest.tasks.models.sentiment import load_sentiment_model
from tests.bad_input_harness import project  # noqa: F401 - a fixture
from tests.llm_servers import FakeLLMServer, Recorded, killed_mid_run

SMOLLM2 = "hf:HuggingFaceTB/SmolLM2-135M-Instruct"


def _position(chosen: str, options: dict[str, float]) -> dict[str, Any]:
    return {"token": chosen, "logprob": options[chosen],
            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in options.items()]}


class SentimentChat(FakeLLMServer):
    """Answers a classification prompt as a chat model would: "Positive" for love/great,
    "negative" for hate/worst, "I cannot say." for "???", else "neutral"; with token
    log-probabilities when asked and ``logprobs`` is on (the first token split in two, as
    BPE vocabularies split "Positive" into "Pos" + "itive")."""

    def __init__(self, logprobs: bool = True):
        super().__init__("openai")
        self.logprobs = logprobs

    def _reply(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.replied += 1
        text = body["messages"][-1]["content"].rsplit("Text:", 1)[-1].lower()
        if "???" in text:
            content, tokens = "I cannot say.", [_position("I", {"I": -0.2, "Neutral": -2.0})]
        elif "love" in text or "great" in text:
            content = "Positive"
            tokens = [_position("Pos", {"Pos": -0.2, "Neg": -2.0, "Ne": -3.0, " positive": -4.0}),
                      _position("itive", {"itive": -0.01, "ession": -5.0})]
        elif "hate" in text or "worst" in text:
            content = "negative"
            tokens = [_position("ne", {"ne": -0.1, "pos": -3.0}),
                      _position("gative", {"gative": -0.05, "utral": -3.0})]
        else:
            content, tokens = "neutral", [_position("neutral", {"neutral": -0.3,
                                                                "positive": -1.5})]
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}
        if self.logprobs and body.get("logprobs"):
            choice["logprobs"] = {"content": tokens}
        return {"id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                "choices": [choice]}

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any):
        if method == "GET" and path == "/v1/models":
            with self._lock:
                self.requests.append(Recorded(method, path, headers, body))
            return 200, {}, {"data": [{"id": "tiny-chat", "created": int(time.time()),
                                       "root": "/models/tiny-chat-q8"}]}
        return super().handle(method, path, headers, body)


TEXTS = ["I love this film.", "The worst service ever, I hate it.", "It opens at nine.",
         "??? what", "A great cast."]


def _chat(server: SentimentChat, root: Path, extra: str = "") -> LLMClassifier:
    model = load_sentiment_model(f"openai:tiny-chat@{server.url}{extra}", root=root)
    assert isinstance(model, LLMClassifier)
    return model


# ------------------------------------------------------------------ reading answers

def test_the_first_label_word_names_the_answer() -> None:
    assert parse_label("Positive.", DEFAULT_WORDS) == "pos"
    assert parse_label("The sentiment is negative, not positive.", DEFAULT_WORDS) == "neg"
    assert parse_label("**Neutral**", DEFAULT_WORDS) == "neutral"
    assert parse_label("non-positive", DEFAULT_WORDS) is None  # not the whole word
    assert parse_label("I cannot say.", DEFAULT_WORDS) is None
    assert parse_label("", DEFAULT_WORDS) is None


def test_label_mass_follows_the_greedy_tokens() -> None:
    """"Pos"+"itive" chosen: P(Pos) to pos, P(Neg) to neg, " positive" to pos, and "Ne"
    (negative or neutral) to nobody: it is not on the greedy path."""
    tokens = [_position("Pos", {"Pos": -0.2, "Neg": -2.0, "Ne": -3.0, " positive": -4.0}),
              _position("itive", {"itive": -0.01})]
    mass = label_masses(tokens, DEFAULT_WORDS)
    assert mass["pos"] == pytest.approx(math.exp(-0.2) + math.exp(-4.0))
    assert mass["neg"] == pytest.approx(math.exp(-2.0))
    assert mass["neutral"] == 0.0
    # "ne" chosen: ambiguous, so the next token decides, weighted by P("ne")
    tokens = [_position("ne", {"ne": -0.1, "pos": -3.0}),
              _position("gative", {"gative": -0.05, "utral": -3.0})]
    mass = label_masses(tokens, DEFAULT_WORDS)
    assert mass["neg"] == pytest.approx(math.exp(-0.15))
    assert mass["neutral"] == pytest.approx(math.exp(-3.1))
    assert mass["pos"] == pytest.approx(math.exp(-3.0))
    # a leading space token is passed over
    spaced = [_position(" ", {" ": -0.5}), _position("Neutral", {"Neutral": -0.1})]
    assert label_masses(spaced, DEFAULT_WORDS)["neutral"] == pytest.approx(math.exp(-0.6))


def test_after_a_lead_in_the_label_word_s_token_is_read() -> None:
    """"The sentiment is negative": the probabilities are read where "negative" begins,
    given the lead-in, not at "The" (which fits no label)."""
    from lingtest.tasks.models.llm_classifier import first_label, token_at

    tokens = [_position("The", {"The": -0.5, "Positive": -1.0}),
              _position(" sentiment", {" sentiment": -0.1}), _position(" is", {" is": -0.1}),
              _position(" negative", {" negative": -0.2, " positive": -2.0, " neutral": -3.0})]
    text = "The sentiment is negative"
    label, start = first_label(text, DEFAULT_WORDS)
    assert (label, start, token_at(tokens, start)) == ("neg", 17, 3)
    mass = label_masses(tokens[3:], DEFAULT_WORDS)
    assert mass == pytest.approx({"neg": math.exp(-0.2), "neutral": math.exp(-3.0),
                                  "pos": math.exp(-2.0)})
    assert token_at(tokens, 99) is None


# ------------------------------------------------------------------ served models

@pytest.mark.parametrize("logprobs", [True, False])
def test_a_served_chat_model_classifies_and_a_rerun_asks_nothing(tmp_path, logprobs) -> None:
    with SentimentChat(logprobs=logprobs) as server:
        model = _chat(server, tmp_path)
        labels, probs = model.predict_with_probabilities3(TEXTS)
        assert labels == ["pos", "neg", "neutral", "undefined", "pos"]
        assert np.isnan(probs[3]).all() and not np.isnan(np.delete(probs, 3, 0)).any()
        sent = len(server.generations())
        assert sent == len(TEXTS)
        assert server.generations()[0].body["logprobs"] is True  # asked for in auto mode
        if logprobs:  # the model's own scores: not one-hot
            assert 0.5 < probs[0, 2] < 1.0 and probs[0, 0] > 0
            assert model.tally.by_method == {"logprobs": 5}  # the undefined one too
        else:
            assert probs[0].tolist() == [0.0, 0.0, 1.0]
            assert model.tally.by_method == {"text": 5}
        assert model.tally.undefined == 1
        # the weights the server names, not `created` (vLLM stamps it per request)
        assert model.revision.endswith("model tiny-chat (/models/tiny-chat-q8)")
        again = _chat(server, tmp_path)
        labels2, probs2 = again.predict_with_probabilities3(TEXTS)
        assert len(server.generations()) == sent  # every answer came from the store
        assert labels2 == labels and np.array_equal(probs2, probs, equal_nan=True)
        assert again.tally.as_dict()["from the answer store"] == len(TEXTS)
    params = model.parameters()
    assert params["endpoint"] == server.url and params["template"] == "default"
    assert "undefined" in params["probabilities"]


def test_text_scoring_asks_for_no_logprobs_and_a_new_template_is_a_new_key(tmp_path) -> None:
    template = tmp_path / "prompt.txt"
    template.write_text("Label the review as good or bad.\nText: {text}")
    with SentimentChat() as server:
        _chat(server, tmp_path, "#scoring=text").predict(TEXTS[:2])
        assert "logprobs" not in server.generations()[0].body
        asked = len(server.generations())
        _chat(server, tmp_path, "#template=prompt.txt").predict(TEXTS[:2])
        assert len(server.generations()) == asked + 2  # another prompt: asked again
        assert server.generations()[-1].body["messages"][-1]["content"].startswith("Label")


def test_a_failed_call_is_undefined_now_and_asked_again_next_run(tmp_path) -> None:
    with SentimentChat() as server:
        server.fail_first, server.fail_status = 100, 400  # 400: no retry
        model = _chat(server, tmp_path)
        assert model.predict(TEXTS[:2]) == ["undefined", "undefined"]
        assert model.tally.failed == 2
        server.fail_first = 0
        assert _chat(server, tmp_path).predict(TEXTS[:2]) == ["pos", "neg"]


KILLED = """
import json, sys
from pathlib import Path
from lingtest.tasks.models.sentiment import load_sentiment_model
load_sentiment_model(sys.argv[1], root=Path(sys.argv[2])).predict(json.loads(sys.argv[3]))
"""


def test_a_killed_run_loses_no_answer_and_the_rerun_asks_only_the_rest(tmp_path) -> None:
    """kill -9 in the middle of a run: every answer that returned is in the store (each is
    committed as it returns), and the rerun asks exactly the prompts that are not."""
    import time

    from lingtest.tasks.consistency.store import open_store
    from lingtest.tasks.models.llm_classifier import ANSWERS_DB

    texts = [f"review {i}: I {'love' if i % 2 else 'hate'} it" for i in range(40)]
    with SentimentChat() as server:
        server.sleep_s = 0.2
        replied = killed_mid_run(KILLED, [f"openai:tiny-chat@{server.url}", str(tmp_path),
                                          json.dumps(texts)], lambda: server.replied, 10)
        with open_store(f"sqlite:///{tmp_path / ANSWERS_DB}") as store:
            stored = store.counts()["classifier_answers"]
        assert replied - 4 <= stored < len(texts)  # at most the 4 in flight unstored
        while server._in_flight:  # the killed run's requests, still being served
            time.sleep(0.02)
        before = len(server.generations())
        model = _chat(server, tmp_path)
        assert model.predict(texts) == ["pos" if i % 2 else "neg" for i in range(40)]
        assert len(server.generations()) - before == len(texts) - stored
        assert model.tally.stored == stored


@pytest.mark.parametrize("spec, options, needle", [
    ("openai:m@http://127.0.0.1:9/v1#scoring=next-token", {}, "needs a local LM"),
    (f"{SMOLLM2}#scoring=logprobs", {}, "applies to served models"),
    ("openai:m@http://127.0.0.1:9/v1#scoring=best", {}, "scoring='best'"),
    ("openai:m@http://127.0.0.1:9/v1#template=none.txt", {}, "template file none.txt does not"),
    ("openai:m@http://127.0.0.1:9/v1", {"m": {"labels": {"neg": ["bad"], "pos": ["Bad"]}}},
     "names two labels"),
])
def test_bad_prompting_is_one_clear_error(tmp_path, spec, options, needle) -> None:
    with pytest.raises(LingtestError, match=needle.replace("(", r"\(").replace("?", r"\?")):
        prompting_for(parse_model(spec), options, tmp_path)


# ------------------------------------------------------------------ a local LM

@pytest.mark.usefixtures("one_torch_thread")
def test_smollm2_is_scored_by_its_next_token_distribution(tmp_path) -> None:
    model = load_sentiment_model(SMOLLM2, root=tmp_path)
    assert isinstance(model, LLMClassifier) and model.labels == ("neg", "neutral", "pos")
    texts = ["I love this movie, it is wonderful.", "What a waste of time."]
    probs = model.predict_proba(texts)
    assert np.allclose(probs.sum(axis=1), 1) and (probs > 0).all()
    assert probs[0, 2] > probs[1, 2] and probs[1, 0] > probs[0, 0]  # it reads the text
    assert model.tally.by_method == {"next-token": 2} and model.tally.undefined == 0
    assert 0 < model.tally.as_dict()["mean label mass"] <= 1
    # each spelling read token by token, one forward pass per prefix ("Neutral" is two
    # tokens), gives the probabilities the one row per prompt gave
    lm = model._lm()
    spell = {w: lm.tokenizer(w, add_special_tokens=False)["input_ids"] for w in
             ("negative", "Negative", "neutral", "Neutral", "positive", "Positive")}
    for text, got in zip(texts, probs):
        head = lm._prompt_ids(DEFAULT_TEMPLATE.replace("{text}", text), True, None)
        logp = {word: sum(float(lm.next_logprobs([head + ids[:j]])[0, tok])
                          for j, tok in enumerate(ids)) for word, ids in spell.items()}
        per_label = np.array([np.logaddexp(logp[w], logp[w.capitalize()])
                              for w in ("negative", "neutral", "positive")])
        assert np.abs(np.exp(per_label - np.logaddexp.reduce(per_label)) - got).max() < 1e-5
    again = load_sentiment_model(SMOLLM2, root=tmp_path)
    assert np.array_equal(again.predict_proba(texts), probs)
    assert again.tally.asked == 0


SMALL = ["capabilities.capabilities=[LC2]", "capabilities.seeds_per_lc=2",
         "capabilities.max_masks_per_seed=2", "capabilities.fill_candidates=3",
         "capabilities.pcfg_heldout=10", "capabilities.checklist_max_examples=1",
         "capabilities.coverage_sizes=[4]", "capabilities.coverage_repeats=1",
         "capabilities.bootstrap=100", "adaptive.bootstrap=100", "runtime.threads=1"]


def few_tests_per_topic(tree: Path, out: Path, per_topic: int = 2) -> Path:
    """``tree`` with its topic markers and only its first ``per_topic`` tests of each topic:
    the same real tests, fewer of them for a slow model to score."""
    import pandas as pd

    frame = pd.read_csv(tree, index_col=0, dtype=str, keep_default_na=False)
    tests = frame[frame["label"] != "topic_marker"]
    keep = frame["label"].eq("topic_marker") | frame.index.isin(
        tests.groupby("topic").head(per_topic).index)
    frame[keep].to_csv(out)
    return out


@pytest.mark.slow
def test_smollm2_as_the_classifier_through_capabilities_and_adaptive(data_project, monkeypatch,
                                                                      capsys, tmp_path) -> None:
    """``lingtest test`` on the packaged SmolLM2, prompted: both methods' reports name the
    template, the label words and the probability rule; the result rows carry its own
    probabilities (not one-hot); a rerun asks the model nothing. A small budget: four
    CheckList tests, one example each, seeds from 600 SST sentences per split (in a copy of
    the project: ``fewer_rows``), and the hotel tree's first two tests of each topic."""
    import sys

    import pandas as pd

    from lingtest.flows import cli
    from tests.projects import fewer_rows, sibling_project

    shared, overrides = data_project
    workspace = sibling_project(shared, tmp_path / "project")
    fewer_rows(workspace)
    monkeypatch.setenv("LINGTEST_ROOT", str(workspace.root))
    monkeypatch.chdir(workspace.root)
    tree = few_tests_per_topic(
        workspace.root / "data" / "raw" / "adatest" / "imdb_hotel_conversion.csv",
        tmp_path / "imdb_hotel_conversion.csv")
    sets = [arg for s in [*overrides, *SMALL, f"adaptive.trees=[{tree}]"]
            for arg in ("--set", s)]
    argv = ["lingtest", "test", f"{SMOLLM2}#name=smol", "--methods", "capabilities,adaptive",
            *sets]

    def run() -> str:
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        output = capsys.readouterr()
        assert exit_.value.code == 0, output.err[-3000:]
        return output.err + output.out

    first = run()
    assert "smol is an LLM" in first and "capabilities: a sentiment classifier" in first
    run_dir = workspace.root / "runs" / "smol"
    rows = pd.read_parquet(run_dir / "interim" / "capabilities" / "results.parquet")
    assert set(rows["model_id"]) == {"smol"} and len(rows) > 0
    probs = rows[["p_neg", "p_neutral", "p_pos"]].to_numpy()
    assert np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert ((probs > 0) & (probs < 1)).all()  # the LM's own scores, not parsed labels
    assert rows["verdict"].isin(["pass", "fail"]).all()  # a local LM is never undefined
    for stage in ("capabilities", "adaptive"):
        line = json.loads((run_dir / "reports" / stage / "provenance.json").read_text())[
            "LLM classifier smol"]
        assert line.startswith("local LM on ctranslate2 4.8.5 float32; template default "
                               "(sha256 ")  # models.lm_engine: auto, the default
        assert "label words neg: negative; neutral: neutral; pos: positive" in line
        assert "probabilities: next-token distribution" in line and "0 undefined" in line
    print(line)
    assert (run_dir / "reports" / "adaptive-vs-baseline" /
            "smol-adaptive-side-by-side.csv").is_file()
    second = run()
    for stage in ("capabilities", "adaptive"):
        line = json.loads((run_dir / "reports" / stage / "provenance.json").read_text())[
            "LLM classifier smol"]
        assert "answers: 0 asked now" in line, line  # every answer from the store


# Last in the file: the CLI under capsys leaves Prefect's console handler on the closed
# capture stream, and a flow run outside the CLI after it (the session's data_project,
# built on first use) fails to log ("I/O operation on closed file").
def test_lingtest_test_refuses_a_bad_llm_classifier_before_the_run(project, monkeypatch,
                                                                   capsys) -> None:
    from tests.bad_input_harness import assert_one_clear_error

    assert_one_clear_error(["test", "openai:m@http://127.0.0.1:9/v1#template=missing.txt",
                            "--methods", "capabilities"], {}, "template file missing.txt",
                           project, monkeypatch, capsys)
