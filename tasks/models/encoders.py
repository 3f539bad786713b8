"""Sentence encoders on plain transformers, with the pooling each model prescribes.

One code path serves packaged sentence-transformers models (their own Pooling / Normalize
config: MiniLM is mean pooling + L2 normalisation) and plain hub encoders such as
``bert-base-uncased`` (COSTELLO's rule: the pooler output when the model has a pooler, else
the [CLS] hidden state), so contrastive testing compares models as the paper did and each
embedding records how it was pooled.

Every forward pass holds texts of one exact token count and nothing else (``exact_length_passes``):
no padding, and each pass of a given length has the same shape, so a text's vector does not
depend on the texts it is embedded with, their order or what was embedded before. Padding moves
mean-pooled vectors by ~1e-7, and so does the batch's row count: MKL's GEMM rounds differently
for 1, 2-15 and >=16 rows and, at 2 threads, splits the 1536-wide sum between the threads for
some row counts only. Passes of at least ``pass_tokens`` tokens (``runtime.pass_tokens``, 256 by
default) stay clear of those row counts: measured, the vectors are the same at 1 and 2 threads;
at 64 or 128 they are not (a classifier's also differ from 256's at 1 thread: its head's row
count changes; benchmarks/README.md), so a non-default floor is part of the store key. The price is the fill-up copies, up to
one pass per distinct length in a call: small calls are slower the higher the floor.

The same passes run on one of three paths (``lingtest.tasks.models.encoder_paths``): fp32 torch (the
default), bf16 autocast or ONNX Runtime. Each rounds differently, so byte-identity holds within
a path and a non-default path is part of the store key too.
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models import encoder_paths as paths
from lingtest.tasks.models.pooling import POOLING_MODES, parse_pooling
from lingtest.tasks.models.registry import (
    PLAIN_HF_POOLING, Resolution, hub_offline, is_pooler_weight, loaded_revision,
    pooling_from_files, resolve, transformer_dir, transformers_classes,
)

log = logging.getLogger(__name__)
DEFAULT_MAX_LENGTH = 512  # COSTELLO truncates at 512 tokens
PASS_TOKENS = 256  # default floor of tokens per forward pass (runtime.pass_tokens)


def pass_rows(length: int, pass_tokens: int = PASS_TOKENS) -> int:
    """Texts per forward pass for texts of ``length`` tokens: the fewest that hold
    ``pass_tokens`` tokens; a function of the length alone, so every pass of that length has
    the same shape."""
    if pass_tokens < 1:
        raise LingtestError(f"pass_tokens must be >= 1 (got {pass_tokens}); fix: "
                            f"runtime.pass_tokens, default {PASS_TOKENS}")
    return -(-pass_tokens // max(length, 1))


def exact_length_passes(tokenizer, texts: Sequence[str], max_length: int,
                        pass_tokens: int = PASS_TOKENS
                        ) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Model inputs without padding: ``texts`` grouped by their exact token count (the
    tokenizer's own, truncated at ``max_length``), longest first, ``pass_rows`` texts per pass;
    the last pass of a length is filled up with copies of its last text. Yields (positions in
    ``texts`` of the real rows, inputs); the real rows come first, copies after them."""
    if isinstance(texts, str):
        raise LingtestError("expected a list of texts, not one string")
    pass_rows(1, pass_tokens)  # a bad floor is an error even with no texts
    if len(texts) == 0:
        return
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length)
    by_length: dict[int, list[int]] = defaultdict(list)
    for position, ids in enumerate(encoded["input_ids"]):
        by_length[len(ids)].append(position)
    for length in sorted(by_length, reverse=True):
        positions, rows = by_length[length], pass_rows(length, pass_tokens)
        for start in range(0, len(positions), rows):
            real = positions[start:start + rows]
            filled = real + [real[-1]] * (rows - len(real))
            yield real, {key: torch.tensor([values[i] for i in filled])
                         for key, values in encoded.items()}


def pick_device(device: str = "auto") -> torch.device:
    """cuda when asked for (auto/cuda) and present, else cpu."""
    if device not in ("auto", "cuda", "cpu"):
        raise LingtestError(f"device `{device}`: expected auto, cuda or cpu")
    if device in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda")
    if device == "cuda":
        log.warning("device cuda requested but CUDA is not available; using cpu")
    return torch.device("cpu")


def pool(hidden: torch.Tensor, mask: torch.Tensor, mode: str,
         pooler_output: torch.Tensor | None = None) -> torch.Tensor:
    """Pool token states (batch, seq, dim) under the attention mask, as sentence-transformers
    does for the same mode (right padding assumed)."""
    maskf = mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "pooler":
        if pooler_output is None:
            raise LingtestError("pooling `pooler`: this model has no pooler layer; use cls")
        return pooler_output
    if mode in ("mean", "mean_sqrt_len"):
        summed = (hidden * maskf).sum(1)
        counts = maskf.sum(1).clamp(min=1e-9)
        return summed / (counts if mode == "mean" else counts.sqrt())
    if mode == "max":
        return hidden.masked_fill(maskf == 0, -1e9).max(1).values
    if mode == "lasttoken":
        last = mask.sum(1).long() - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if mode == "weightedmean":
        weights = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype)
        weights = weights.view(1, -1, 1) * maskf
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    raise LingtestError(f"pooling mode `{mode}` unknown; expected one of {', '.join(POOLING_MODES)}")


class Encoder:
    """A loaded encoder: ``encode`` gives float32 sentence embeddings, one row per input."""

    exact_length = True  # passes of one exact token count (other encoders: any_encoder)
    cls_for_pooler = False  # [CLS] taken for want of pooler weights (COSTELLO's code: pooler)
    vocabulary_source = "tokenizer"
    ref = None  # the model spec it was loaded from (any_encoder.load_any_encoder sets it)

    def __init__(self, resolution: Resolution, model, tokenizer, device: torch.device,
                 pooling: str, max_length: int, lowercase: bool = False,
                 max_length_set: bool = False, pass_tokens: int = PASS_TOKENS,
                 precision: str | None = None, backend: str | None = None):
        self.resolution = resolution
        self.model_id = resolution.model_id
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.pooling = pooling
        self._mode, self._normalize = parse_pooling(pooling)
        self.max_length = max_length
        self.max_length_set = max_length_set  # asked for, not the model's own
        self.lowercase = lowercase
        pass_rows(1, pass_tokens)  # refuse a bad floor at load, not at the first call
        self.pass_tokens = pass_tokens
        self.revision = loaded_revision(resolution, model.config)  # hub: the commit loaded
        self.dim = int(model.config.hidden_size)
        self.precision, self.backend = paths.require_path(precision, backend, device)
        self._onnx = paths.LazyOnnx()

    def encode(self, sentences: list[str], batch_size: int = 32) -> np.ndarray:
        """Embeddings (len(sentences), dim) float32, in input order; no gradients. Passes of
        one exact token count, at least ``pass_tokens`` tokens each (``exact_length_passes``):
        a text's vector is the same alone, in any company and in any order. ``batch_size`` is
        the sentence-transformers signature's; it is checked but does not shape the passes."""
        if batch_size < 1:
            raise LingtestError(f"batch_size must be >= 1 (got {batch_size})")
        if isinstance(sentences, str):
            raise LingtestError("encode() takes a list of sentences, not one string")
        out = np.empty((len(sentences), self.dim), dtype=np.float32)
        texts = [s.lower() for s in sentences] if self.lowercase else list(sentences)
        with torch.inference_mode():
            for positions, inputs in exact_length_passes(self.tokenizer, texts,
                                                         self.max_length, self.pass_tokens):
                if self.backend == "onnx":
                    runner = self._onnx.runner(
                        self.model_id, self.revision, self.model, self.tokenizer, "embedding",
                        self.device, f"encoder|{self.pooling}",
                        lambda names: PooledEncoder(self.model, names, self._mode,
                                                    self._normalize))
                    out[positions] = runner(inputs)[:len(positions)]
                    continue
                inputs = {k: v.to(self.device) for k, v in inputs.items()}
                with paths.autocast(self.device, self.precision):
                    output = self.model(**inputs)
                hidden, pooler = output.last_hidden_state, getattr(output, "pooler_output", None)
                if self.precision != "fp32":  # pool in fp32, as the default path does
                    hidden = hidden.float()
                    pooler = None if pooler is None else pooler.float()
                pooled = pool(hidden, inputs["attention_mask"], self._mode, pooler)
                if self._normalize:
                    pooled = torch.nn.functional.normalize(pooled.float(), p=2, dim=1)
                out[positions] = pooled[:len(positions)].float().cpu().numpy()
        return out

    def token_counts(self, sentences: Sequence[str]) -> list[int]:
        """Tokens each text gets (special tokens included, truncated at ``max_length``): the
        length its exact-length pass is chosen by."""
        if len(sentences) == 0:
            return []
        texts = [s.lower() for s in sentences] if self.lowercase else list(sentences)
        ids = self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        return [len(i) for i in ids]

    def vocabulary(self, ascii_only: bool = True) -> list[str]:
        """Whole-word entries of the tokenizer vocabulary, in id order: no special or
        [unusedN] tokens, no continuation pieces (WordPiece '##x'; for byte-level BPE and
        SentencePiece only word-initial 'Ġx' / '▁x'), letters only. COSTELLO's dictionary."""
        return whole_words(self.tokenizer, ascii_only)

    @property
    def cache_key(self) -> str:
        """What, besides model and revision, decides a text's vector: the pooling, the
        truncation length when it was set by the caller rather than taken from the model, and
        a floor of tokens per pass other than the default and a non-default path (bf16, ONNX):
        both change the last bits."""
        return (self.pooling + (f"|max_length={self.max_length}" if self.max_length_set else "")
                + (f"|pass_tokens={self.pass_tokens}" if self.pass_tokens != PASS_TOKENS else "")
                + paths.path_suffix(self.precision, self.backend))

    def normal_forms(self, words: list[str]) -> list[str]:
        """Each word as the model sees it before tokenising: lower-cased when the model
        lower-cases, then the tokenizer's normaliser (e.g. BERT's accent stripping:
        cliché → cliche). Words with one normal form get the same vector."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        normalizer = getattr(backend, "normalizer", None)
        forms = [w.lower() if self.lowercase else w for w in words]
        return [normalizer.normalize_str(w) for w in forms] if normalizer is not None else forms

    def parameters(self) -> dict[str, object]:
        """What produced these embeddings, for result rows and reports."""
        return {"model_id": self.model_id, "revision": self.revision,
                "source": self.resolution.source, "pooling": self.pooling,
                "max_length": self.max_length, "dim": self.dim, "dtype": str(self.model.dtype),
                "device": str(self.device), **paths.path_fields(self.precision, self.backend)}

    def cache_token(self) -> dict[str, object]:
        """What a cached task's result depends on in this encoder (``lingtest.tasks.core.caching``):
        ``parameters()`` and the store key, never the loaded weights' bytes."""
        return {**self.parameters(), "cache_key": self.cache_key}

    def __repr__(self) -> str:
        return (f"Encoder({self.model_id!r}, revision={self.revision!r}, pooling={self.pooling!r},"
                f" dim={self.dim}, device={self.device})")


class PooledEncoder(torch.nn.Module):
    """Model, pooling and any L2 normalisation as one module: what the ONNX path exports.
    Inputs are positional, in the tokenizer's order (``names``); passes are unpadded."""

    def __init__(self, model, names: list[str], mode: str, normalize: bool):
        super().__init__()
        self.model, self.names, self.mode, self.normalize = model, names, mode, normalize

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        inputs = dict(zip(self.names, tensors))
        output = self.model(**inputs)
        pooled = pool(output.last_hidden_state, inputs["attention_mask"], self.mode,
                      getattr(output, "pooler_output", None))
        return torch.nn.functional.normalize(pooled, p=2, dim=1) if self.normalize else pooled


def whole_words(tokenizer, ascii_only: bool = True) -> list[str]:
    """Whole-word tokens of a tokenizer's vocabulary (see ``Encoder.vocabulary``)."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    special = set(tokenizer.all_special_tokens)
    tokens = [t for t, _ in vocab if t not in special]
    marker = next((m for m in ("Ġ", "▁") if sum(t.startswith(m) for t in tokens) > 1000), None)
    words, seen = [], set()
    for token in tokens:
        if marker is not None:
            if not token.startswith(marker):
                continue
            token = token[len(marker):]
        elif token.startswith("##"):
            continue
        if not token.isalpha() or (ascii_only and not token.isascii()) or token in seen:
            continue
        seen.add(token)
        words.append(token)
    return words


def _st_settings(folder: Path) -> tuple[int | None, bool]:
    """max_seq_length and do_lower_case of a sentence-transformers model folder."""
    cfg = folder / "sentence_bert_config.json"
    if not cfg.is_file():
        return None, False
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LingtestError(f"{cfg}: not valid JSON ({exc})")
    return data.get("max_seq_length"), bool(data.get("do_lower_case", False))


def load_encoder(model_id: str, offline: bool = True, device: str = "auto",
                 pooling: str | None = None, max_length: int | None = None,
                 pass_tokens: int | None = None, precision: str | None = None,
                 backend: str | None = None) -> Encoder:
    """Resolve and load an encoder; ``pooling`` (e.g. ``pooler``, ``cls``, ``mean+norm``) and
    ``max_length`` (tokens kept; COSTELLO's code: 512) override the model's own settings
    (recorded either way); ``pass_tokens`` is the floor of tokens per forward pass (None:
    ``PASS_TOKENS``); ``precision`` / ``backend`` pick the path (``runtime.encoder_precision``,
    ``runtime.encoder_backend``; None: fp32 torch).

    Raises LingtestError when the id is missing offline (with the fix) or fails to load.
    """
    AutoModel, AutoTokenizer = transformers_classes("AutoModel", "AutoTokenizer")

    paths.check_path(precision, backend)  # a bad value fails before any loading
    res = resolve(model_id, "encoder", offline=offline).require()
    dev = pick_device(device)
    # hub: fetch the small sentence-transformers files first, so an ST model keeps its pooling
    folder = Path(res.path) if res.source != "hub" else _hub_st_folder(res.model_id)
    source, subfolder = res.model_id, ""
    if folder is not None and res.source != "hub":
        source = str(transformer_dir(folder))
    elif folder is not None:  # an old ST repo keeps the HF files in e.g. 0_Transformer/
        relative = transformer_dir(folder).relative_to(folder)
        subfolder = "" if relative == Path(".") else relative.as_posix()
    try:
        with hub_offline(offline):
            tokenizer = AutoTokenizer.from_pretrained(source, subfolder=subfolder,
                                                      local_files_only=offline)
            # weights the checkpoint lacks (a RoBERTa pooler) are drawn from one seed, so
            # every load of a revision is the same model even where they are used
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model, loading = AutoModel.from_pretrained(
                    source, subfolder=subfolder, local_files_only=offline,
                    output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise LingtestError(f"model `{res.model_id}` ({res.source}, {source}) failed to load: "
                            f"{exc}") from exc
    model.eval().to(dev)
    if pooling is not None:
        parse_pooling(pooling)  # a clear error before any embedding
    chosen = pooling or (pooling_from_files(folder) if folder is not None else PLAIN_HF_POOLING)
    no_pooler_weights = False
    if chosen == PLAIN_HF_POOLING:  # COSTELLO: the pooler when the checkpoint trained one
        chosen = "pooler" if getattr(model, "pooler", None) is not None else "cls"
        if chosen == "pooler" and untrained_pooler(loading):
            log.info("%s: its checkpoint has no pooler weights: [CLS] pooling (the paper's "
                     "code pools through a random pooler; contrastive.pooling: pooler does, "
                     "seeded)", res.model_id)
            chosen, no_pooler_weights = "cls", True
    st_max, lowercase = _st_settings(folder) if folder is not None else (None, False)
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else None
    own = st_max or min(limit or DEFAULT_MAX_LENGTH, DEFAULT_MAX_LENGTH)
    positions = getattr(model.config, "max_position_embeddings", None)
    if max_length is not None and positions is not None and max_length > positions:
        raise LingtestError(f"max_length {max_length} exceeds `{res.model_id}`'s "
                            f"{positions} positions; fix: set contrastive.max_length <= "
                            f"{positions} or null (the model's own {own})")
    encoder = Encoder(res, model, tokenizer, dev, chosen, int(max_length or own), lowercase,
                      max_length_set=max_length is not None,
                      pass_tokens=PASS_TOKENS if pass_tokens is None else pass_tokens,
                      precision=precision, backend=backend)
    encoder.cls_for_pooler = no_pooler_weights
    return encoder


def untrained_pooler(loading: dict) -> bool:
    """Whether ``from_pretrained``'s loading info says the pooler was not in the checkpoint
    (RoBERTa checkpoints have none: transformers initialises one at random)."""
    return any(map(is_pooler_weight, loading.get("missing_keys", ())))


def _hub_st_folder(model_id: str) -> Path | None:
    """Online: download a hub model's sentence-transformers files (modules.json, pooling and
    sentence_bert configs) and return their snapshot folder; None for a plain HF model."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        modules = Path(hf_hub_download(model_id, "modules.json"))
    except EntryNotFoundError:
        return None
    except Exception as exc:  # network, auth, unknown repo: one clear message
        raise LingtestError(f"model `{model_id}`: cannot reach the Hugging Face hub ({exc}); "
                            f"fix: check network access and HF_TOKEN, or set models.offline: "
                            f"true with a packaged or cached model") from exc
    for module in json.loads(modules.read_text(encoding="utf-8")):
        if module.get("type", "").endswith("Pooling"):
            hf_hub_download(model_id, f"{module.get('path', '')}/config.json".lstrip("/"))
    try:
        hf_hub_download(model_id, "sentence_bert_config.json")
    except EntryNotFoundError:
        pass
    return modules.parent
