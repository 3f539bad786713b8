"""CTranslate2 behind the CausalLM surface: the real SmolLM2 gives transformers' greedy answers
and scores at float32, and its converted copy is made once and checked on open;
``models.lm_engine`` picks it (``auto`` says why), refuses what cannot run before any work, and
answers stored under one engine are another model key under the other (slow)."""
from __future__ import annotations

import importlib.util
import json

import pytest
from pydantic import ValidationError

pytest.importorskip("ctranslate2")

from lingtest.tasks.consistency.ipm import derive_prompt  # noqa: E402
from lingtest.tasks.models.causal_lm import CONVERTED_MARKER, load_causal_lm  # noqa: E402
from lingtest.tasks.models.llm_classifier import DEFAULT_TEMPLATE  # noqa: E402
from lingtest.tasks.models import lm_engines  # noqa: E402
from lingtest.tasks.models.lm_engines import CT2CausalLM, ct2_dir, planned_engine  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
SENTENCES = ["a gorgeous , witty , seductive movie .",
             "the plot is nothing but boilerplate clichés from start to finish ,",
             "it 's a bad sign when you 're rooting for the film to end ."]


@pytest.fixture(scope="module")
def pair():
    lm = load_causal_lm(SMOLLM, offline=True, device="cpu")
    return lm, CT2CausalLM(lm, "float32", threads=1)


@pytest.fixture(scope="module")
def questions(mirror) -> list[str]:
    rows = (mirror / "kommkonllm" / "public_questions.jsonl").read_text().splitlines()
    return [derive_prompt(json.loads(r)["question"], "", "? Return a JSON boolean.", "none")
            for r in rows[:5]]


def test_greedy_answers_are_transformers(pair, questions):
    lm, ct2 = pair
    for stop in (True, False):
        want = lm.generate_batch(questions, 24, batch_size=4, stop_after_json=stop)
        assert ct2.generate_batch(questions, 24, batch_size=4, stop_after_json=stop) == want


def test_scores_and_next_token_are_transformers(pair):
    lm, ct2 = pair
    assert abs(ct2.score(SENTENCES) - lm.score(SENTENCES)).max() < 1e-3
    for (o1, p1), (o2, p2) in zip(ct2.token_logprobs(SENTENCES), lm.token_logprobs(SENTENCES)):
        assert (o1 == o2).all() and abs(p1 - p2).max() < 1e-4
    rows = [lm._prompt_ids(DEFAULT_TEMPLATE.replace("{text}", s), True, None)
            for s in SENTENCES]
    assert (ct2.next_logprobs(rows) - lm.next_logprobs(rows)).abs().max() < 1e-3
    # a label word's second token read in the same row as its first (the LLM classifier)
    neutral = lm.tokenizer("Neutral", add_special_tokens=False)["input_ids"]
    assert len(neutral) == 2
    for engine in (lm, ct2):
        both = engine.last_logprobs([row + neutral[:1] for row in rows], 2)
        assert both.shape == (len(rows), 2, len(lm.tokenizer))
        assert (both[:, 0] - engine.next_logprobs(rows)).abs().max() < 1e-4
        assert (both[:, 1] - engine.next_logprobs([r + neutral[:1] for r in rows])
                ).abs().max() < 1e-4


def test_copy_is_made_once_and_checked_on_open(pair, caplog):
    lm, ct2 = pair
    folder = ct2_dir(lm, "float32")
    assert (folder / CONVERTED_MARKER).is_file() and ct2.parameters()["engine"].startswith(
        "ctranslate2 ")
    made = (folder / "model.bin").stat().st_mtime_ns
    CT2CausalLM(lm, "float32", threads=1)
    assert (folder / "model.bin").stat().st_mtime_ns == made  # opened, not converted again
    with (folder / "model.bin").open("r+b") as f:  # damage one weight's bytes
        f.seek(4096)
        f.write(b"\xff" * 64)
    again = CT2CausalLM(lm, "float32", threads=1)
    assert "converting again" in caplog.text
    assert abs(again.score(SENTENCES[:1]) - lm.score(SENTENCES[:1])).max() < 1e-3


def test_auto_runs_smollm2_on_the_engine_and_says_why(pair, questions):
    from lingtest.tasks.models.llm import LLMSettings, load_llm

    lm, _ = pair
    assert load_causal_lm(SMOLLM, True, "cpu") is lm  # transformers: the default
    chosen = load_causal_lm(SMOLLM, True, "cpu", "auto", "float32")
    assert isinstance(chosen, CT2CausalLM) and chosen.model is lm.model
    assert load_causal_lm(SMOLLM, True, "cpu", "auto", "float32") is chosen  # one per process
    facts = chosen.parameters()
    assert facts["engine_reason"] == "auto: CTranslate2 4.8.5 converts LlamaConfig"
    assert facts["dtype"] == "float32"
    local = load_llm(SMOLLM, LLMSettings(device="cpu", lm_engine="auto", max_new_tokens=24))
    assert local.lm is chosen and local.parameters()["backend"] == "ctranslate2"
    assert [a.text for a in local.answer(questions[:2])] == lm.generate_batch(
        questions[:2], 24, batch_size=8, stop_after_json=True)


def test_an_engine_that_cannot_run_is_refused_before_the_work(monkeypatch):
    from lingtest.tasks.core.sections import ModelsParams

    with pytest.raises(ValidationError, match="lm_precision int8 needs the CTranslate2 engine"):
        ModelsParams(lm_engine="transformers", lm_precision="int8")
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ctranslate2" else found(name, *a))
    with pytest.raises(ValidationError, match="not installed; fix: pip install 'lingtest"):
        ModelsParams(lm_engine="ctranslate2")
    assert ModelsParams(lm_engine="auto").lm_path() == {"lm_engine": "auto",
                                                        "lm_precision": "float32"}
    monkeypatch.setattr(lm_engines, "_installed", lambda: None)
    assert planned_engine("auto", "float32", "cpu") is None  # auto without it: transformers


def test_answers_under_another_engine_are_another_model_key():
    """The consistency identity (known before loading) and an LLM classifier's answer-store
    key name the engine; under transformers they are what they were before the engine."""
    from lingtest.tasks.consistency.answering import identity
    from lingtest.tasks.models.llm_classifier import load_llm_classifier
    from lingtest.tasks.models.model_spec import parse_model

    settings = {"max_new_tokens": 16, "temperature": 0.0, "seed": 0, "system": None,
                "timeout_s": 30.0, "retries": 0, "backoff_s": 0.0, "concurrency": 1,
                "offline": True, "device": "cpu", "batch_size": 8}
    prompts = {"prompt_prefix": "", "prompt_suffix": "?"}
    before = identity(SMOLLM, settings, prompts)  # no engine keys: the settings of old
    assert identity(SMOLLM, {**settings, "lm_engine": "transformers"}, prompts) == before
    auto = identity(SMOLLM, {**settings, "lm_engine": "auto"}, prompts)
    int8 = identity(SMOLLM, {**settings, "lm_engine": "auto", "lm_precision": "int8"}, prompts)
    assert len({before, auto, int8}) == 3
    assert planned_engine("auto", "int8", "cpu")["precision"] == "int8"

    ref = parse_model(SMOLLM, "model")
    keys = [load_llm_classifier(ref, ".", device="cpu", lm_engine=engine).identity()
            for engine in (("transformers", "float32"), ("auto", "float32"))]
    assert "engine" not in keys[0] and keys[1]["engine"]["engine"].startswith("ctranslate2 ")
