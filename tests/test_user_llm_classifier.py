"""A ``python:`` LLM (an object with ``generate``, as ``lingtest.test`` writes a
``transformers`` text-generation pipeline) tested as a sentiment classifier: prompted like
any LLM, its answer's label word read (probability 1), each answer stored, and the pre-run
check naming it an LLM classifier without calling it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from lingtest.tasks.core.errors import LingtestError

MODULE = '''
CALLS = []


class KeywordLLM:
    """Answers "negative" when a prompt's text holds "bad", "no idea" for "meh", else
    "Positive." (a lead-in and a capital, as a chat model writes)."""

    def generate(self, prompts, max_new_tokens=64, temperature=0.0):
        CALLS.append(len(prompts))
        text = [p.rsplit("Text:", 1)[-1] for p in prompts]
        return ["negative" if "bad" in t else "no idea" if "meh" in t else "Positive."
                for t in text]
'''


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    (tmp_path / "keyword_llm.py").write_text(MODULE, encoding="utf-8")
    return tmp_path


def test_a_python_llm_is_prompted_and_its_label_word_read(project: Path) -> None:
    from lingtest.tasks.models.llm_classifier import LLMClassifier, answer_counts
    from lingtest.tasks.models.sentiment import load_sentiment_model

    spec = "python:keyword_llm.py:KeywordLLM#name=keywords"
    model = load_sentiment_model(spec, root=project)
    assert isinstance(model, LLMClassifier) and model.model_id == "keywords"
    texts = ["a bad film", "a fine film", "meh"]
    probs = model.predict_proba(texts)
    labels = list(model.labels)
    assert probs[0].tolist() == [float(label == "neg") for label in labels]
    assert probs[1].tolist() == [float(label == "pos") for label in labels]
    assert np.isnan(probs[2]).all()  # no label word: undefined, not a guess
    calls = model._served().user.module.CALLS
    assert sum(calls) == 3

    again = load_sentiment_model(spec, root=project)  # a rerun: every answer from the store
    assert np.array_equal(again.predict_proba(texts), probs, equal_nan=True)
    about = answer_counts(again)["llm_answers"]
    assert about["tally"]["asked now"] == 0 and about["tally"]["from the answer store"] == 3
    assert about["about"]["probabilities"] == ("parsed answer (probability 1); no label "
                                              "named: undefined")
    assert about["about"]["code"].startswith("python:keyword_llm.py:KeywordLLM @ ")
    stored = model._answers_store().classifier_answers(
        model._model_key, [model.prompting.prompt("a bad film")])
    assert [json.loads(v) for v in stored.values()] == [{"text": "negative"}]


def test_the_pre_run_check_names_it_without_calling_it(project: Path) -> None:
    from lingtest.tasks.models.checks import check_classifier
    from lingtest.tasks.models.model_spec import parse_model

    ref = parse_model("python:keyword_llm.py:KeywordLLM", "capabilities.models", None, project)
    row = check_classifier(ref, True, project)
    assert row["kind"] == "classifier (LLM, default template)" and row["source"] == "python"
    assert row["revision"]
    loaded = [m for name, m in sys.modules.items() if "keyword_llm" in name]
    assert all(m.CALLS == [] for m in loaded)


def test_scoring_other_than_text_is_refused_for_a_python_llm(project: Path) -> None:
    from lingtest.tasks.models.sentiment import load_sentiment_model

    with pytest.raises(LingtestError, match="scoring=logprobs, but a python: LLM returns "
                                            "text only; fix: scoring=text"):
        load_sentiment_model("python:keyword_llm.py:KeywordLLM#scoring=logprobs",
                             root=project)
