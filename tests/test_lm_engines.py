"""CTranslate2 behind the CausalLM surface: the real SmolLM2 gives transformers' greedy answers
and scores at float32, and its converted copy is made once and checked on open (slow)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("ctranslate2")

from tasks.consistency.ipm import derive_prompt  # noqa: E402
from tasks.models.causal_lm import CONVERTED_MARKER, load_causal_lm  # noqa: E402
from tasks.models.llm_classifier import DEFAULT_TEMPLATE  # noqa: E402
from tasks.models.lm_engines import CT2CausalLM, ct2_dir  # noqa: E402

pytestmark = pytest.mark.slow
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
