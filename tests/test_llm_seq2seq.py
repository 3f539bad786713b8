"""The seq2seq (T5) LLM backend and the JSON stop rule.

No seq2seq model ships in a package, so the backend is tested on a tiny T5 made here:
random initialisation (seeded), the packaged MiniLM's WordPiece tokenizer, then a few
hundred optimiser steps that teach it to answer one JSON object followed by chatter —
the chatter is what the stop rule must cut. The loading code is the real one
(``AutoModelForSeq2SeqLM`` from a folder, through ``seq2seq:<folder>``).
"""
from __future__ import annotations

import json

import pytest
import torch

from lingtest.tasks.consistency.oracle import read_answer
from lingtest.tasks.models.json_stop import JSONAnswerStop, json_end, looping
from lingtest.tasks.models.llm import LLMSettings, check_llm, load_llm, parse_llm

TARGET = '{"answer": true} and some more words after it'


@pytest.mark.parametrize(("text", "end"), [
    ('{"answer": true} more', len('{"answer": true}')),
    ('Sure: {"a": {"b": [1, 2]}, "c": "}"} trailing', len('Sure: {"a": {"b": [1, 2]}, "c": "}"}')),
    ('{"a": "say \\"}\\" here"}x', len('{"a": "say \\"}\\" here"}')),
    ('```json\n{"answer": false}\n```\nDone', len('```json\n{"answer": false}\n```')),
    ('```json\n{"answer": false}\n', None),  # the fence is not closed yet
    ('{"answer": tr', None), ("Yes, it is.", None), ("[true]", 6),
])
def test_json_end(text, end) -> None:
    assert json_end(text) == end


# SmolLM2's answers in a consistency run: two loops (one a JSON object nesting itself with
# growing indentation) and answers that must run on.
DOLPHINS = ("The Miami Dolphins have a special place for their beloved mascot, the Miami "
            "Dolphin Dolphin. ")
NESTED = "".join(f'{"  " * i}"fate_json_key_json": {{\n' for i in range(12))


@pytest.mark.parametrize(("text", "loops"), [
    (DOLPHINS * 2, False), (DOLPHINS * 3, True), ("\n\n".join([DOLPHINS.strip()] * 4), True),
    (NESTED, True), ("no " * 30, False), ("no " * 90, True),
    ('{"answer": true, "reason": "' + " ".join(f"step {i} differs" for i in range(60)), False),
    ("```json\n" + '{"answer": false, "why": "' + "The passage says so. " * 2, False),
])
def test_looping_catches_repeats_not_long_answers(text, loops) -> None:
    assert looping(text) is loops


def test_stop_criterion_is_per_row() -> None:
    from tiny_models import minilm_tokenizer

    tok = minilm_tokenizer()
    rows = [tok.encode(t, add_special_tokens=False) for t in ("x {", "x { } y",
                                                             "x " + DOLPHINS * 3)]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    done = JSONAnswerStop(tok, 1)(ids, None)
    assert done.tolist() == [False, True, True]  # the third: a repetition loop


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    """A 1-layer T5 (d_model 32) that answers TARGET to every prompt, saved to a folder."""
    from tiny_models import fit_and_save, minilm_tokenizer
    from transformers import T5Config, T5ForConditionalGeneration

    tok = minilm_tokenizer()
    torch.manual_seed(0)
    config = T5Config(vocab_size=tok.vocab_size, d_model=32, d_ff=64, d_kv=16, num_layers=1,
                      num_decoder_layers=1, num_heads=2, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.sep_token_id, decoder_start_token_id=tok.pad_token_id)
    model = T5ForConditionalGeneration(config)
    prompts = ["is the sky blue? Return a JSON boolean.", "is water wet?", "hello"]
    batch = tok(prompts, return_tensors="pt", padding=True, return_token_type_ids=False)
    labels = tok([TARGET] * len(prompts), return_tensors="pt")["input_ids"][:, 1:].contiguous()  # no [CLS]
    return fit_and_save(model, tok, {**batch, "labels": labels},
                        tmp_path_factory.mktemp("tiny-t5"))


def test_seq2seq_backend_answers_and_stops_after_the_json(tiny_t5) -> None:
    spec = f"seq2seq:{tiny_t5}"
    ref = parse_llm(spec)
    assert ref.form == "seq2seq" and ref.name == tiny_t5.name
    row = check_llm(ref, offline=True, root=tiny_t5)
    assert row["kind"] == "seq2seq" and row["source"] == "local"
    assert row["revision"].startswith("local@sha256:")
    llm = load_llm(spec, LLMSettings(max_new_tokens=64, device="cpu", batch_size=2))
    prompts = ["is the sky blue? Return a JSON boolean.", "is water wet?", "hello"]
    answers = llm.answer(prompts)
    assert all(a.error is None for a in answers)
    texts = [a.text for a in answers]
    # BERT's tokenizer decodes with spaces around punctuation; the chatter after the
    # object is gone, the object itself complete
    assert texts[0] == '{ " answer " : true }', texts
    assert all(json.loads(text) == {" answer ": True} for text in texts)
    assert [read_answer(t, "lenient") for t in texts] == ["true"] * 3
    assert [a.text for a in llm.answer(prompts)] == texts  # greedy: the same again
    params = llm.parameters()
    assert params["backend"] == "transformers-seq2seq" and params["max_new_tokens"] == 64
    assert params["revision"] == row["revision"]
    # without the stop rule the same model keeps talking: the rule is what cuts it
    raw = llm.tokenizer(prompts[:1], return_tensors="pt")
    out = llm.model.generate(input_ids=raw["input_ids"], attention_mask=raw["attention_mask"],
                             max_new_tokens=64, do_sample=False)
    assert "more words" in llm.tokenizer.decode(out[0], skip_special_tokens=True)


def test_seq2seq_missing_folder_or_offline_hub_id_is_one_error(tmp_path) -> None:
    from lingtest.tasks.core.errors import LingtestError

    with pytest.raises(LingtestError, match="seq2seq"):
        check_llm(parse_llm("seq2seq:nobody/no-t5"), offline=True, root=tmp_path)
