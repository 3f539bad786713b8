"""The optional encoder paths (runtime.encoder_precision bf16, runtime.encoder_backend onnx) on
the real packaged MiniLM and the fine-tuned MiniLM-SST2 classifier: close to fp32 torch, kept
apart from it in every store and cache key, and one clear error for each bad set-up."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from lingtest.tasks.capabilities import model_tasks
from lingtest.tasks.contrastive import validation
from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts
from lingtest.tasks.core.caching import ContentInputs
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT
from lingtest.tasks.models import encoder_paths as paths
from lingtest.tasks.models.encoders import load_encoder
from lingtest.tasks.models.sentiment import MINILM_SST2_ID, load_sentiment_model

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
# bf16 where this CPU has bf16 kernels (AVX512BW and up); elsewhere its refusal is tested
BF16 = paths.bf16_supported(torch.device("cpu"))
PATHS = {"fp32": ("fp32", "torch"), **({"bf16": ("bf16", "torch")} if BF16 else {}),
         "onnx": ("fp32", "onnx")}


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def encoders() -> dict:
    return {name: load_encoder(MINILM, offline=True, device="cpu", precision=p, backend=b)
            for name, (p, b) in PATHS.items()}


def sst_test_sentences(mirror: Path) -> list[str]:
    """The SST test split's sentences, read straight off the mirror's trees (the leaves of each
    line): the SST table's reader builds every phrase and is too slow for this file."""
    lines = (mirror / "sst" / "trees" / "test.txt").read_text(encoding="utf-8").splitlines()
    return [" ".join(re.findall(r"\(\d ([^()\s]+)\)", line)) for line in lines if line]


@pytest.fixture(scope="module")
def sentences(mirror) -> list[str]:
    """30 real SST sentences of assorted lengths."""
    return sst_test_sentences(mirror)[::70][:30]


@pytest.fixture(scope="module")
def vectors(encoders, sentences) -> dict:
    return {name: enc.encode(sentences) for name, enc in encoders.items()}


def min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def test_bf16_vectors_are_close_to_fp32_but_not_the_same(vectors):
    if not BF16:  # this CPU: the path is refused with the fix
        with pytest.raises(LingtestError, match=r"fix: set runtime\.encoder_precision: fp32"):
            load_encoder(MINILM, offline=True, device="cpu", precision="bf16")
        return
    assert vectors["bf16"].dtype == np.float32
    assert min_cosine(vectors["bf16"], vectors["fp32"]) >= 0.999
    assert not np.array_equal(vectors["bf16"], vectors["fp32"])


def test_onnx_vectors_match_fp32_and_are_company_proof(encoders, vectors, sentences):
    assert min_cosine(vectors["onnx"], vectors["fp32"]) >= 0.99999
    onnx = encoders["onnx"]
    alone = np.concatenate([onnx.encode([t]) for t in sentences[:5]])
    assert np.array_equal(alone, vectors["onnx"][:5])  # the exact-length scheme holds
    assert np.array_equal(onnx.encode(sentences[::-1])[::-1], vectors["onnx"])


def test_the_store_keeps_the_paths_apart(tmp_path, encoders, vectors, sentences):
    stores = {name: EmbeddingStore.for_encoder(tmp_path, enc) for name, enc in encoders.items()}
    assert stores["onnx"].pooling == "mean+norm|backend=onnx"
    assert stores.get("bf16", stores["onnx"]).pooling.endswith(("|precision=bf16", "=onnx"))
    assert len({s.path for s in stores.values()}) == len(PATHS)
    for name, enc in encoders.items():  # same texts, one entry per path
        assert np.array_equal(embed_texts(enc, sentences, stores[name]), vectors[name])
    for name, store in stores.items():
        assert len(EmbeddingStore.for_encoder(tmp_path, encoders[name])) == len(sentences)
    with pytest.raises(LingtestError, match="does not match the store"):
        embed_texts(encoders["onnx"], sentences, stores["fp32"])  # no cross-read


def test_a_path_change_is_a_task_cache_miss(encoders, vectors):
    def key(task, **inputs):
        # a namespace, not a class attribute: a Prefect task reached through a class is bound
        # as a method (Task.__get__ marks its function), which broke every later call of it
        return ContentInputs().compute_key(SimpleNamespace(task=task), inputs, {})

    nn = {name: key(validation.nearest_neighbour_distances, vectors=v, metric="l2",
                    label="vocab", block_size=64) for name, v in vectors.items()}
    assert len(set(nn.values())) == len(PATHS)
    tokens = {name: key(model_tasks.run_suite, model=enc, suite=pd.DataFrame())
              for name, enc in encoders.items()}
    assert len(set(tokens.values())) == len(PATHS)
    assert "precision" not in encoders["fp32"].parameters()  # the default keys stay as they were


def test_a_damaged_onnx_file_is_exported_again(tmp_path, monkeypatch, sentences, vectors):
    monkeypatch.setenv("LINGTEST_CACHE", str(tmp_path))
    first = load_encoder(MINILM, offline=True, device="cpu", backend="onnx")
    before = first.encode(sentences[:4])
    files = list((tmp_path / "onnx").glob("*.onnx"))
    assert len(files) == 1 and files[0].with_name(files[0].name + ".sha256").is_file()
    assert np.array_equal(before, vectors["onnx"][:4])  # the cached graph is the same graph
    files[0].write_bytes(files[0].read_bytes()[: files[0].stat().st_size // 2])
    again = load_encoder(MINILM, offline=True, device="cpu", backend="onnx")
    assert np.array_equal(again.encode(sentences[:4]), before)
    assert paths._intact(files[0])


def test_missing_onnxruntime_is_one_clear_error(monkeypatch, tmp_path):
    from lingtest.flows.validation import check_encoder_path as _check_encoder_path

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime → ImportError
    with pytest.raises(LingtestError, match=r"pip install 'lingtest\[onnx\]'"):
        load_encoder(MINILM, offline=True, device="cpu", backend="onnx")
    (tmp_path / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    params = load_params(tmp_path, ["runtime.encoder_backend=onnx"])
    _check_encoder_path("data", params)  # a stage without encoders does not care
    with pytest.raises(LingtestError, match=r"runtime\.encoder_backend onnx.*lingtest\[onnx\]"):
        _check_encoder_path("contrastive", params)  # lingtest run fails before any output


def test_bf16_without_device_support_names_the_parameter(monkeypatch):
    monkeypatch.setattr(paths, "bf16_supported", lambda device: False)
    with pytest.raises(LingtestError, match=r"runtime\.encoder_precision.*fix: set "
                                            r"runtime\.encoder_precision: fp32"):
        load_encoder(MINILM, offline=True, device="cpu", precision="bf16")


def test_gpu_selection_on_cpu(monkeypatch):
    cuda = torch.device("cuda")
    assert paths.onnx_providers(torch.device("cpu")) == ["CPUExecutionProvider"]
    ort = paths.onnxruntime()
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    with pytest.raises(LingtestError, match="onnxruntime-gpu"):
        paths.onnx_providers(cuda)
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert paths.onnx_providers(cuda)[0] == "CUDAExecutionProvider"
    with pytest.warns(UserWarning):  # no GPU here: torch says it disables cuda autocast
        assert paths.autocast(cuda, "bf16").device == "cuda"


def test_config_refuses_unknown_values_naming_the_key(tmp_path):
    (tmp_path / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    params = load_params(tmp_path)
    assert params.runtime.encoder_path() == {"precision": "fp32", "backend": "torch"}
    for override, name in (("runtime.encoder_precision=fp16", "runtime.encoder_precision"),
                           ("runtime.encoder_backend=tensorrt", "runtime.encoder_backend")):
        with pytest.raises(LingtestError, match=name.replace(".", r"\.")):
            load_params(tmp_path, [override])
    with pytest.raises(LingtestError, match="encoder_precision bf16 with encoder_backend onnx"):
        load_params(tmp_path, ["runtime.encoder_precision=bf16",
                               "runtime.encoder_backend=onnx"])


@pytest.fixture(scope="module")
def classifier_root(tmp_path_factory, table) -> Path:
    """A project root holding a small ``lingtest/minilm-sst2`` (a clean checkout has none)."""
    from lingtest.tasks.models.sentiment import MINILM_SST2_DIR
    from lingtest.tasks.training.sentiment import train_minilm_sst2

    root = tmp_path_factory.mktemp("classifier")
    train_minilm_sst2(table("sst"), root / MINILM_SST2_DIR, seed=3, epochs=1, max_train=128,
                      max_test=16, threads=1)
    return root


def test_the_stage_path_reaches_the_loaders_and_the_provenance(tmp_path, classifier_root):
    from lingtest.tasks.capabilities.method import CapabilitiesMethod
    from lingtest.tasks.core.paths import Workspace
    from lingtest.tasks.core.publish import encoder_path_note
    from lingtest.tasks.repair.stage import load_tested_encoder

    (tmp_path / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    params = load_params(tmp_path, ["runtime.encoder_backend=onnx"])
    assert encoder_path_note(load_params(tmp_path)) == {}
    assert "encoder_backend=onnx" in encoder_path_note(params)["encoder path"]
    assert load_tested_encoder(params, MINILM).cache_key.endswith("|backend=onnx")
    model = CapabilitiesMethod(params, Workspace(classifier_root)).load_model(MINILM_SST2_ID)
    assert model.parameters()["backend"] == "onnx"


def test_sentiment_classifier_paths_stay_close(mirror, classifier_root, capsys):
    """A small MiniLM-SST2 on 200 real SST test sentences: probabilities within 0.02 (bf16)
    or 1e-4 (ONNX) of fp32's, and a label flips only where fp32's positive probability lies
    within that gap of a neutral-band edge (the flips are printed)."""
    texts = sst_test_sentences(mirror)[5::11][:200]
    models = {name: load_sentiment_model(MINILM_SST2_ID, root=classifier_root, precision=p,
                                         backend=b) for name, (p, b) in PATHS.items()}
    probs = {name: m.predict_proba(texts) for name, m in models.items()}
    labels = {name: m._labels(probs[name]) for name, m in models.items()}
    for name in [n for n in PATHS if n != "fp32"]:
        gap = float(np.abs(probs[name] - probs["fp32"]).max())
        flipped = [i for i, (a, b) in enumerate(zip(labels[name], labels["fp32"])) if a != b]
        with capsys.disabled():
            print(f"\n{name}: max |ΔP| {gap:.2e}, labels flipped {len(flipped)}/{len(texts)}")
        assert gap < (0.02 if name == "bf16" else 1e-4)
        edges = models["fp32"].neutral_band  # a flip crosses a band edge by at most the gap
        assert all(min(abs(probs["fp32"][i, 1] - e) for e in edges) <= gap for i in flipped)
        assert not np.array_equal(probs[name], probs["fp32"])
    assert models["onnx"].parameters()["backend"] == "onnx"


def test_emulated_bf16_is_allowed_with_a_warning(monkeypatch, caplog):
    """A CPU with bf16 kernels but no bf16 instructions (this machine: AVX512BW only, ×0.34)."""
    monkeypatch.setattr(paths, "bf16_supported", lambda device: True)
    monkeypatch.setattr(paths, "native_bf16_cpu", lambda: False)
    with caplog.at_level("WARNING", logger=paths.__name__):
        paths.require_bf16(torch.device("cpu"))
    assert "no bf16 instructions" in caplog.text and "fp32 is the faster choice" in caplog.text
    caplog.clear()
    monkeypatch.setattr(paths, "native_bf16_cpu", lambda: True)
    with caplog.at_level("WARNING", logger=paths.__name__):
        paths.require_bf16(torch.device("cpu"))
    assert caplog.text == ""
