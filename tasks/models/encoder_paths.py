"""Optional faster forward passes of lingtest's encoders and classifiers: bf16 autocast
(``runtime.encoder_precision``) and ONNX Runtime (``runtime.encoder_backend``).

Why a path is a parameter and not a detail: each one rounds differently, so its vectors and
probabilities differ from fp32 torch in the last bits (bf16 by ~1e-4 in cosine). The exact-length
passes (``encoders.exact_length_passes``) still make a text's output independent of its company
*within* one path, so the byte-identity guarantee holds per path, not across paths: a
non-default path is part of the embedding store key (``Encoder.cache_key``) and of every
model's ``parameters()`` / ``cache_token()``, and a vector of one path is never served to another.

ONNX: the torch module (transformer + pooling for an encoder, the logits for a classifier) is
exported once with ``torch.onnx.export`` (the TorchScript exporter, ``dynamo=False``: the default
torch.export-based one needs ``onnxscript``), batch and sequence axes dynamic, and cached as
``$LINGTEST_CACHE/onnx/<model slug>-<key>.onnx`` (key: weights revision, export flavour, torch and
onnx versions, opset), written atomically with a sha256 beside it; a damaged file is exported again.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import logging
import os
import re
import warnings
from pathlib import Path
from typing import ContextManager

import numpy as np
import torch

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import atomic_path, sha256_file

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16")
BACKENDS = ("torch", "onnx")
DEFAULT_PRECISION, DEFAULT_BACKEND = "fp32", "torch"
ONNX_FORMAT = 1  # bump when the exported graphs change (wrappers, axes, exporter options)
OPSET = 17
INSTALL_HINT = "pip install 'lingtest[onnx]'"
TRACE_TEXT = "an example sentence to trace ."  # two copies: an unpadded batch of 2


def check_path(precision: str | None, backend: str | None) -> tuple[str, str]:
    """The (precision, backend) pair with defaults filled in, or one error naming the key."""
    precision = precision or DEFAULT_PRECISION
    backend = backend or DEFAULT_BACKEND
    if precision not in PRECISIONS:
        raise LingtestError(f"runtime.encoder_precision `{precision}`: expected one of "
                            f"{', '.join(PRECISIONS)} (default {DEFAULT_PRECISION})")
    if backend not in BACKENDS:
        raise LingtestError(f"runtime.encoder_backend `{backend}`: expected one of "
                            f"{', '.join(BACKENDS)} (default {DEFAULT_BACKEND})")
    if precision == "bf16" and backend == "onnx":
        raise LingtestError("runtime.encoder_precision bf16 with runtime.encoder_backend onnx: "
                            "the ONNX graph runs in fp32 only; fix: set one of them back to its "
                            "default (fp32 / torch)")
    return precision, backend


def require_path(precision: str | None, backend: str | None,
                 device: torch.device) -> tuple[str, str]:
    """``check_path``, then what the path needs on ``device``: bf16 kernels, or onnxruntime
    (and CUDA's provider on a GPU). One error before any model loads or stage runs."""
    precision, backend = check_path(precision, backend)
    if precision == "bf16":
        require_bf16(device)
    if backend == "onnx":
        onnx_providers(device)
    return precision, backend


def path_fields(precision: str, backend: str) -> dict[str, str]:
    """The non-default parts of a path, for ``parameters()`` (empty for fp32 torch, so the
    default path's records and cache keys stay as they were)."""
    out = {}
    if precision != DEFAULT_PRECISION:
        out["precision"] = precision
    if backend != DEFAULT_BACKEND:
        out["backend"] = backend
    return out


def path_suffix(precision: str, backend: str) -> str:
    """``|precision=bf16`` / ``|backend=onnx`` for a store key; empty for the default path."""
    return "".join(f"|{k}={v}" for k, v in path_fields(precision, backend).items())


def path_label(precision: str, backend: str) -> str:
    """How a report names the path: "" for fp32 torch, else e.g. "bf16 autocast"."""
    if precision == "bf16":
        return "bf16 autocast"
    return "ONNX Runtime" if backend == "onnx" else ""


# --------------------------------------------------------------------------- bf16

def bf16_supported(device: torch.device) -> bool:
    """cuda: the GPU computes in bf16; cpu: oneDNN has bf16 kernels (AVX512BW/AVX512-BF16/AMX,
    or Arm bf16). Without them CPU autocast falls back to emulation, slower than fp32."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def native_bf16_cpu() -> bool:
    """The CPU has bf16 dot-product instructions (AVX512-BF16 or AMX-BF16, from
    /proc/cpuinfo). With AVX512BW alone oneDNN runs bf16 but converts on every op: measured
    here ×0.34 the speed of fp32 (benchmarks/bench_encoder_paths.py)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8").split()
    except OSError:
        return True  # not Linux: nothing to go on, no warning
    return "avx512_bf16" in flags or "amx_bf16" in flags


def require_bf16(device: torch.device) -> None:
    if device.type == "cpu" and bf16_supported(device) and not native_bf16_cpu():
        log.warning("runtime.encoder_precision bf16: this CPU has no bf16 instructions "
                    "(AVX512-BF16, AMX); bf16 runs emulated, slower than fp32 (measured ×0.34 "
                    "on an AVX512BW CPU), with other last bits: fp32 is the faster choice here")
    if not bf16_supported(device):
        raise LingtestError(f"runtime.encoder_precision bf16: this {device.type} device has no "
                            f"bf16 support (CPU: needs AVX512BW, AVX512-BF16 or AMX; GPU: "
                            f"Ampere or later); fix: set runtime.encoder_precision: fp32")


def autocast(device: torch.device, precision: str) -> ContextManager:
    """bf16 autocast on the model's device (cuda autocast on a GPU); fp32: no context."""
    if precision == DEFAULT_PRECISION:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


# --------------------------------------------------------------------------- ONNX

def onnxruntime():
    """The onnxruntime module, or the one error saying how to install it."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise LingtestError(f"runtime.encoder_backend onnx needs onnxruntime, which is not "
                            f"installed ({exc}); fix: {INSTALL_HINT}, or set "
                            f"runtime.encoder_backend: torch") from None
    return ort


def onnx_providers(device: torch.device) -> list[str]:
    """CPU: the CPU provider. cuda: CUDA first (CPU for the ops it lacks), or an error.
    Either way onnxruntime must be importable (the error says how to install it)."""
    ort = onnxruntime()
    if device.type != "cuda":
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise LingtestError(f"runtime.encoder_backend onnx on cuda: onnxruntime offers only "
                            f"{', '.join(available)}; fix: pip install onnxruntime-gpu (in place "
                            f"of onnxruntime), or set runtime.device: cpu")
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def onnx_root() -> Path:
    """``$LINGTEST_CACHE/onnx`` (default ``~/.cache/lingtest/onnx``), as GGUF copies."""
    base = os.environ.get("LINGTEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lingtest")
    return Path(base).expanduser() / "onnx"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def weights_token(module: torch.nn.Module) -> str:
    """A revision for weights without one: the sha256 of the parameters (names, bytes)."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return "state@sha256:" + digest.hexdigest()[:16]


def onnx_file(model_id: str, revision: str, flavour: str) -> Path:
    """The cached graph of (model, revision, flavour) for this torch / onnx / opset."""
    key = hashlib.sha256(f"{ONNX_FORMAT}|{model_id}|{revision}|{flavour}|opset={OPSET}|"
                         f"torch={torch.__version__}|onnx={_version('onnx')}"
                         .encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id.replace("/", "__"))[-80:]
    return onnx_root() / f"{slug}-{key}.onnx"


def _intact(path: Path) -> bool:
    sums = path.with_name(path.name + ".sha256")
    return (path.is_file() and sums.is_file()
            and sums.read_text(encoding="utf-8").strip() == sha256_file(path))


def export_onnx(module: torch.nn.Module, example: dict[str, torch.Tensor], output: str,
                path: Path) -> None:
    """``module(*example.values())`` → ``path``, batch and sequence axes dynamic; the graph is
    written to a temporary file and renamed, then its sha256 beside it."""
    names = list(example)
    axes = {**{n: {0: "batch", 1: "sequence"} for n in names}, output: {0: "batch"}}
    with atomic_path(path) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and trace notes
        torch.onnx.export(module, tuple(example.values()), str(tmp), dynamo=False,
                          input_names=names, output_names=[output], dynamic_axes=axes,
                          opset_version=OPSET)
        digest = sha256_file(tmp)
    with atomic_path(path.with_name(path.name + ".sha256")) as tmp:
        tmp.write_text(digest + "\n", encoding="utf-8")


class OnnxRunner:
    """One exported module run by onnxruntime: ``runner(inputs)`` → float32 numpy.

    ``build()`` makes the module to export (called only on a cache miss); ``example`` gives the
    input names, in the order the module takes them. Intra-op threads: torch's count when the
    session is made (``runtime.threads``, set by ``lingtest.tasks.core.runtime.set_threads``)."""

    def __init__(self, path: Path, build, example: dict[str, torch.Tensor], output: str,
                 device: torch.device):
        self.path, self.names, self.output = path, list(example), output
        ort = onnxruntime()
        providers = onnx_providers(device)
        self._ensure(build, example)
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own Fail / InvalidProtobuf types
            raise LingtestError(f"{path}: onnxruntime cannot load the exported graph ({exc}); "
                                f"fix: delete it to export again, or set "
                                f"runtime.encoder_backend: torch") from exc

    def _ensure(self, build, example: dict[str, torch.Tensor]) -> None:
        """Export unless an intact file is there; one exporter per file at a time."""
        if _intact(self.path):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if _intact(self.path):  # another process finished it meanwhile
                return
            if self.path.exists():
                log.warning("%s is damaged or incomplete: exporting it again", self.path)
            export_onnx(build(), example, self.output, self.path)
            log.info("exported %s", self.path)

    def __call__(self, inputs: dict[str, torch.Tensor]) -> np.ndarray:
        feed = {n: inputs[n].cpu().numpy() for n in self.names}
        return np.asarray(self.session.run([self.output], feed)[0], dtype=np.float32)


class LazyOnnx:
    """A model's ONNX runner, made at its first pass and again when its revision changes (a
    model fine-tuned in place gets a new revision, hence a new graph)."""

    def __init__(self):
        self._made: tuple[str, OnnxRunner] | None = None
        self._anonymous: str | None = None  # weights_token of weights without a revision

    def runner(self, model_id: str, revision: str | None, model: torch.nn.Module,
               tokenizer, output: str, device: torch.device, flavour: str,
               graph) -> OnnxRunner:
        """``graph(names)`` builds the module to export, traced on one fixed example (so the
        cached graph never depends on which texts came first; batch and sequence stay
        dynamic)."""
        if revision is None:  # hashed once: such weights are not fine-tuned in place
            self._anonymous = self._anonymous or weights_token(model)
            revision = self._anonymous
        if self._made is None or self._made[0] != revision:
            example = tokenizer([TRACE_TEXT] * 2, truncation=True, return_tensors="pt")
            names = list(example)
            example = {k: v.to(device) for k, v in example.items()}
            path = onnx_file(model_id, revision, f"{flavour}|{','.join(names)}")
            self._made = (revision, OnnxRunner(path, lambda: graph(names).eval(), example,
                                               output, device))
        return self._made[1]


class LogitsGraph(torch.nn.Module):
    """A classifier's logits from positional inputs (in ``names`` order): what the ONNX path
    exports for a classifier."""

    def __init__(self, model: torch.nn.Module, names: list[str], hf_logits: bool):
        super().__init__()
        self.model, self.names, self.hf_logits = model, names, hf_logits

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        out = self.model(**dict(zip(self.names, tensors)))
        return out.logits if self.hf_logits else out
