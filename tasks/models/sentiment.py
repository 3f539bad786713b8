"""Sentiment models under test (S²LCT), behind one interface whatever their label set.

S²LCT and the CheckList suite label cases neg / neutral / pos, while most classifiers are
binary. CheckList's rule makes them comparable: a binary model predicts ``neutral`` when
P(pos) lies inside a band ([1/3, 2/3] by default, bounds inclusive). Three kinds of model:

- ``vader``: the VADER lexicon/rule model (3-way from its ``compound`` score);
- ``lingtest/minilm-sst2``: MiniLM fine-tuned on SST-2 by ``lingtest run train-sentiment``
  (the offline substitute for the paper's SST-2 BERT/RoBERTa/DistilBERT);
- any Hugging Face text-classification checkpoint (id or folder), e.g.
  ``textattack/bert-base-uncased-SST-2``, resolved through the model registry.
"""
from __future__ import annotations

import importlib.metadata
import json
import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.label_maps import LABELS2, LABELS3, aggregate, sentiment_labels

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

DEFAULT_BAND = (1 / 3, 2 / 3)
UNDEFINED = "undefined"  # the label of a text the model gave no answer for (lingtest.tasks.core.schema)
MINILM_SST2_ID = "lingtest/minilm-sst2"
MINILM_SST2_DIR = Path("data") / "models" / "minilm-sst2"  # relative to the project root
MINILM_CONFIG = "lingtest_classifier.json"   # marks a folder as a MeanPoolClassifier
HEAD_FILE = "head.safetensors"
VADER_THRESHOLD = 0.05  # VADER's README: compound >= 0.05 positive, <= -0.05 negative


def check_band(band: tuple[float, float]) -> tuple[float, float]:
    """The band as floats, or an error naming the parameter when it is not 0 <= low <= high <= 1."""
    low, high = (float(b) for b in band)
    if not 0.0 <= low <= high <= 1.0:
        raise LingtestError(f"capabilities.neutral_band {band}: expected 0 <= low <= high <= 1")
    return low, high


def three_way(p_pos: float, band: tuple[float, float] = DEFAULT_BAND) -> str:
    """CheckList's reading of a binary model: neutral when low <= P(pos) <= high."""
    low, high = check_band(band)
    if p_pos > high:
        return "pos"
    if p_pos < low:
        return "neg"
    return "neutral"


class SentimentModel(ABC):
    """A model under test: probabilities over its own ``labels``, predictions in LABELS3."""

    model_id: str
    revision: str | None
    labels: tuple[str, ...]
    # A text's output depends on that text alone (no padding, no batch effects), so a caller
    # may hand over all its texts in one call (``checklist_run._predict`` does).
    per_text = True
    spec: str | None = None  # the spec it was loaded from, when its name is another
    label_map: dict[str, str] | None = None

    def __init__(self, model_id: str, revision: str | None, labels: tuple[str, ...],
                 neutral_band: tuple[float, float] = DEFAULT_BAND):
        if labels not in (LABELS2, LABELS3):
            raise LingtestError(f"model `{model_id}`: labels {labels}; expected {LABELS2} "
                                f"or {LABELS3}")
        self.model_id, self.revision, self.labels = model_id, revision, labels
        self.neutral_band = check_band(neutral_band)

    @abstractmethod
    def predict_proba(self, texts: list[str]) -> np.ndarray:
        """(len(texts), len(labels)) float array, rows summing to 1, columns in ``labels``."""

    def predict(self, texts: list[str]) -> list[str]:
        """One of neg / neutral / pos per text (binary models: CheckList's neutral band)."""
        return self._labels(self.predict_proba(texts))

    def _labels(self, probs: np.ndarray) -> list[str]:
        """Each row's label; a NaN row (a model that gave no answer, e.g. an LLM's reply
        naming no label) is ``undefined``, never the label NaN would compare into."""
        if self.labels == LABELS2:
            labels = [three_way(float(p), self.neutral_band) if p == p else UNDEFINED
                      for p in probs[:, 1]]
        else:
            labels = [self.labels[i] for i in np.nan_to_num(probs, nan=0.0).argmax(axis=1)]
        return [UNDEFINED if np.isnan(row).any() else label for row, label in zip(probs, labels)]

    def probabilities3(self, texts: list[str]) -> np.ndarray:
        """(n, 3) columns neg / neutral / pos for CheckList's DIR/INV checks. A binary model
        gets [P(neg), 0, P(pos)], as CheckList's own sentiment tutorial pads binary models."""
        return self._pad3(self.predict_proba(texts))

    def _pad3(self, probs: np.ndarray) -> np.ndarray:
        if self.labels == LABELS3:
            return probs
        return np.column_stack([probs[:, 0], np.zeros(len(probs)), probs[:, 1]])

    def predict_with_probabilities3(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        """``predict`` and ``probabilities3`` from one pass over the model. The labels are
        ``predict``'s (neutral band, VADER's compound), never the argmax of the padded
        probabilities: that argmax cannot be neutral for a binary model."""
        probs = self.predict_proba(texts)
        return self._labels(probs), self._pad3(probs)

    def parameters(self) -> dict[str, object]:
        """What produced the predictions, for result rows and reports."""
        out = {"model_id": self.model_id, "revision": self.revision,
               "labels": "/".join(self.labels), "kind": type(self).__name__,
               "neutral_band": list(self.neutral_band) if self.labels == LABELS2 else None}
        if self.spec is not None:  # a user's model: where it came from (never for defaults)
            out["spec"] = self.spec
        if self.label_map:
            out["label_map"] = self.label_map
        return out

    def cache_token(self) -> dict[str, object]:
        """What a cached task's result depends on in this model (``lingtest.tasks.core.caching``):
        id, resolved revision, labels and neutral band, never the loaded weights' bytes."""
        return self.parameters()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_id!r}, revision={self.revision!r})"


def _check_texts(texts: list[str]) -> list[str]:
    if isinstance(texts, str):
        raise LingtestError("sentiment models take a list of texts, not one string")
    return list(texts)


# --------------------------------------------------------------------------- VADER

class VaderModel(SentimentModel):
    """VADER. ``predict`` uses the compound score with the usual ±0.05 thresholds;
    ``predict_proba`` is VADER's neg / neu / pos proportions (the shares of the text's
    sentiment intensity, summing to 1), so its argmax is usually `neutral` and can differ from
    ``predict``: the proportions serve the DIR/INV checks (how P(pos) moves), not labelling."""

    def __init__(self, neutral_band: tuple[float, float] = DEFAULT_BAND):
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        version = importlib.metadata.version("vaderSentiment")
        super().__init__("vader", f"vaderSentiment=={version}", LABELS3, neutral_band)
        self.analyzer = SentimentIntensityAnalyzer()

    def scores(self, texts: list[str]) -> list[dict[str, float]]:
        return [self.analyzer.polarity_scores(t) for t in _check_texts(texts)]

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        return self._proportions(self.scores(texts))

    @staticmethod
    def _proportions(scores: list[dict[str, float]]) -> np.ndarray:
        rows = np.array([[s["neg"], s["neu"], s["pos"]] for s in scores],
                        dtype=np.float64).reshape(-1, 3)
        totals = rows.sum(axis=1, keepdims=True)
        rows[totals[:, 0] == 0] = (0.0, 1.0, 0.0)  # empty / no tokens: all neutral
        return rows / rows.sum(axis=1, keepdims=True)

    def predict(self, texts: list[str]) -> list[str]:
        return self.predict_with_probabilities3(texts)[0]

    def predict_with_probabilities3(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        """Labels from the compound score (±0.05), probabilities from the proportions."""
        scores = self.scores(texts)
        labels = [compound_label(s["compound"]) for s in scores]
        return labels, self._proportions(scores)


def compound_label(compound: float) -> str:
    """VADER's documented reading: pos at compound >= 0.05, neg at <= -0.05, else neutral."""
    if compound >= VADER_THRESHOLD:
        return "pos"
    return "neg" if compound <= -VADER_THRESHOLD else "neutral"


# --------------------------------------------------------------------------- torch models

def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of the token states under the attention mask (MiniLM's own pooling)."""
    maskf = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * maskf).sum(1) / maskf.sum(1).clamp(min=1e-9)


def build_classifier(encoder: torch.nn.Module, n_labels: int = 2,
                     dropout: float = 0.1) -> torch.nn.Module:
    """MiniLM + mean pooling + dropout + a linear head; an ``nn.Module`` returning logits."""
    import torch

    class MeanPoolClassifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder
            self.dropout = torch.nn.Dropout(dropout)
            self.head = torch.nn.Linear(int(encoder.config.hidden_size), n_labels)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    **extra: torch.Tensor) -> torch.Tensor:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  **extra).last_hidden_state
            return self.head(self.dropout(mean_pool(hidden, attention_mask)))

    return MeanPoolClassifier()


class TorchClassifier(SentimentModel):
    """A torch classifier whose forward returns logits over its own labels; ``groups`` maps
    them onto ``labels`` (a column each, or summed columns under a label map).

    Texts go to the model in passes of one exact token count, at least ``pass_tokens``
    tokens each (``lingtest.tasks.models.encoders.exact_length_passes``): no padding, so a text's
    probabilities are the same alone, in any company and in any order. ``precision`` /
    ``backend``: bf16 autocast or ONNX Runtime instead of fp32 torch
    (``lingtest.tasks.models.encoder_paths``; the same holds within each path)."""

    def __init__(self, model_id: str, revision: str | None, labels: tuple[str, ...], model,
                 tokenizer, groups: list[list[int]], max_length: int = 128,
                 neutral_band: tuple[float, float] = DEFAULT_BAND, hf_logits: bool = False,
                 pass_tokens: int | None = None, precision: str | None = None,
                 backend: str | None = None):
        from lingtest.tasks.models import encoder_paths as paths
        from lingtest.tasks.models.encoders import PASS_TOKENS, pass_rows

        super().__init__(model_id, revision, labels, neutral_band)
        self.model, self.tokenizer = model.eval(), tokenizer
        self.groups, self.max_length = groups, max_length
        self.pass_tokens = PASS_TOKENS if pass_tokens is None else pass_tokens
        pass_rows(1, self.pass_tokens)  # refuse a bad floor at load
        self.hf_logits = hf_logits  # HF models return an output object with .logits
        self.precision, self.backend = paths.require_path(precision, backend, self.device)
        self._onnx = paths.LazyOnnx()

    @property
    def device(self) -> torch.device:
        import torch

        weight = next(self.model.parameters(), None)
        return torch.device("cpu") if weight is None else weight.device

    def parameters(self) -> dict[str, object]:
        """The base record plus a non-default path (``precision`` / ``backend``)."""
        from lingtest.tasks.models.encoder_paths import path_fields

        return {**super().parameters(), **path_fields(self.precision, self.backend)}

    def _logits(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """One pass's logits on this classifier's path."""
        import torch

        from lingtest.tasks.models import encoder_paths as paths

        if (self.precision, self.backend) == ("fp32", "torch"):
            logits = self.model(**inputs)
            return logits.logits if self.hf_logits else logits
        if self.backend == "onnx":  # fine-tuned in place: a new revision, a new graph
            runner = self._onnx.runner(
                self.model_id, self.revision, self.model, self.tokenizer, "logits", self.device,
                f"classifier|{type(self.model).__name__}|hf={self.hf_logits}",
                lambda names: paths.LogitsGraph(self.model, names, self.hf_logits))
            return torch.from_numpy(runner(inputs))
        with paths.autocast(self.device, self.precision):
            logits = self.model(**inputs)
        return logits.logits if self.hf_logits else logits

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        import torch

        from lingtest.tasks.models.encoders import exact_length_passes

        texts = _check_texts(texts)
        out = np.empty((len(texts), len(self.labels)), dtype=np.float64)
        with torch.inference_mode():
            for positions, inputs in exact_length_passes(self.tokenizer, texts,
                                                         self.max_length, self.pass_tokens):
                logits = self._logits(inputs)
                probs = torch.softmax(logits.float(), dim=-1)[:len(positions)]
                out[positions] = aggregate(probs.double().numpy(), self.groups)
        return out


def save_minilm_classifier(model: torch.nn.Module, tokenizer: object, folder: Path,
                           info: dict) -> None:
    """Encoder + tokenizer (HF format), head weights and the loader's settings into ``folder``."""
    from safetensors.torch import save_file

    model.encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_file({k: v.detach().contiguous() for k, v in model.head.state_dict().items()},
              str(folder / HEAD_FILE))
    (folder / MINILM_CONFIG).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n",
                                        encoding="utf-8")


def load_minilm_classifier(folder: Path, model_id: str = MINILM_SST2_ID,
                           neutral_band: tuple[float, float] = DEFAULT_BAND,
                           pass_tokens: int | None = None, precision: str | None = None,
                           backend: str | None = None) -> TorchClassifier:
    """The classifier saved by ``save_minilm_classifier`` (fine-tuned by lingtest)."""
    from safetensors.torch import load_file

    from lingtest.tasks.models.registry import one_load, transformers_classes, weights_sha16

    AutoModel, AutoTokenizer = transformers_classes("AutoModel", "AutoTokenizer")

    info = json.loads((folder / MINILM_CONFIG).read_text(encoding="utf-8"))
    try:
        with one_load():  # as every load: transformers patches process-wide state meanwhile
            encoder = AutoModel.from_pretrained(folder, local_files_only=True)
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = build_classifier(encoder, len(info["labels"]))
        model.head.load_state_dict(load_file(str(folder / HEAD_FILE)))
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise LingtestError(f"{folder}: the fine-tuned classifier failed to load ({exc}); fix: "
                            f"lingtest run train-sentiment") from exc
    revision = (f"local@sha256:{weights_sha16(folder / 'model.safetensors')}"
                f"+{weights_sha16(folder / HEAD_FILE)}")
    return TorchClassifier(model_id, revision, tuple(info["labels"]), model, tokenizer,
                           [[i] for i in range(len(info["labels"]))], int(info["max_length"]),
                           neutral_band=neutral_band, pass_tokens=pass_tokens,
                           precision=precision, backend=backend)


def label_order(id2label: dict[int, str], model_id: str,
                label_map: dict[str, str] | None = None
                ) -> tuple[tuple[str, ...], list[list[int]]]:
    """A checkpoint's labels (LABEL_0/1[/2], NEGATIVE/POSITIVE, or any names through
    ``label_map``) as LABELS2/LABELS3: the label set and, per label, the logit columns
    whose probabilities it sums (``lingtest.tasks.models.label_maps``)."""
    own = [str(id2label[i]) for i in sorted(id2label, key=int)]
    return sentiment_labels(own, label_map, model_id)


def load_hf_classifier(model_id: str, offline: bool = True,
                       neutral_band: tuple[float, float] = DEFAULT_BAND,
                       pass_tokens: int | None = None, precision: str | None = None,
                       backend: str | None = None, name: str | None = None,
                       label_map: dict[str, str] | None = None) -> TorchClassifier:
    """A Hugging Face sequence-classification checkpoint via the registry (offline: packaged,
    cached or local only; a missing one is the registry's error with the fix), named
    ``name`` (default: its id) and read through ``label_map`` when given."""
    from lingtest.tasks.models.registry import (hub_offline, loaded_revision, resolve,
                                       transformers_classes)

    AutoModelForSequenceClassification, AutoTokenizer = transformers_classes(
        "AutoModelForSequenceClassification", "AutoTokenizer")

    res = resolve(model_id, "classifier", offline=offline).require()
    try:
        with hub_offline(offline):
            tokenizer = AutoTokenizer.from_pretrained(res.path, local_files_only=offline)
            model = AutoModelForSequenceClassification.from_pretrained(
                res.path, local_files_only=offline)
    except (OSError, ValueError) as exc:
        raise LingtestError(f"model `{res.model_id}` ({res.source}, {res.path}) failed to "
                            f"load: {exc}") from exc
    labels, groups = label_order(model.config.id2label, name or res.model_id, label_map)
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else 512
    revision = loaded_revision(res, model.config)
    classifier = TorchClassifier(name or res.model_id, revision, labels, model, tokenizer, groups,
                                 min(int(limit), 512), neutral_band=neutral_band, hf_logits=True,
                                 pass_tokens=pass_tokens, precision=precision, backend=backend)
    classifier.spec = model_id if name and name != model_id else None
    classifier.label_map = dict(label_map) if label_map else None
    return classifier


def load_sentiment_model(model, neutral_band: tuple[float, float] = DEFAULT_BAND,
                         offline: bool = True, root: Path | None = None,
                         pass_tokens: int | None = None, precision: str | None = None,
                         backend: str | None = None,
                         label_maps: dict[str, dict[str, str]] | None = None,
                         names: dict[str, str] | None = None,
                         llm_classifier: dict | None = None, device: str = "auto",
                         seed: int = 0, http=None, lm_engine: str = "transformers",
                         lm_precision: str = "float32") -> SentimentModel:
    """Load a classifier under test from its spec (a string or a parsed ``ModelRef``):
    ``vader``, ``lingtest/minilm-sst2`` (from ``root/data/models/minilm-sst2``), a folder, a
    hub classifier id, ``python:...`` or ``predictions:...``; it answers to its display name.
    An LLM (served, or a local causal LM) is asked to classify each text
    (``lingtest.tasks.models.llm_classifier``; ``llm_classifier``: ``models.llm_classifier``, the
    run's ``device`` and ``seed``, ``http``: its HTTP settings, ``lm_engine`` /
    ``lm_precision``: a local LM's engine).
    ``label_maps`` (``models.label_map``) is looked up by name, then by spec. A torch
    classifier runs passes of at least ``pass_tokens`` tokens (None: 256) on the path
    ``precision`` / ``backend`` picks (None: fp32 torch; VADER and user code have one path)."""
    from lingtest.tasks.models.encoder_paths import check_path
    from lingtest.tasks.models.model_spec import ModelRef, parse_model

    check_path(precision, backend)
    ref = model if isinstance(model, ModelRef) else parse_model(model, "model", names, root)
    label_map = (label_maps or {}).get(ref.name) or (label_maps or {}).get(ref.bare)
    path = {"precision": precision, "backend": backend}
    from lingtest.tasks.models.llm_classifier import is_llm_classifier, load_llm_classifier

    if ref.form == "python" and not is_llm_classifier(ref, root):
        from lingtest.tasks.models.own_classifiers import load_python_classifier
        return load_python_classifier(ref, root, label_map, neutral_band)
    if ref.form == "predictions":
        from lingtest.tasks.models.own_classifiers import load_predictions_classifier
        return load_predictions_classifier(ref, root, label_map, neutral_band)
    if is_llm_classifier(ref, root):
        from lingtest.tasks.core.paths import find_project_root

        return load_llm_classifier(ref, root or find_project_root(), llm_classifier, offline,
                                   device, seed, neutral_band, label_map, http,
                                   (lm_engine, lm_precision))
    if ref.form not in ("builtin", "hub", "folder"):
        raise LingtestError(f"model `{ref.spec}` is a {ref.form}: model, not a sentiment "
                            f"classifier; classifiers: vader, lingtest/minilm-sst2, a hub id, "
                            f"a folder, python:MODULE:ATTR or predictions:PATH")
    if ref.target == "vader":
        loaded: SentimentModel = VaderModel(neutral_band)
    elif ref.target == MINILM_SST2_ID:
        from lingtest.tasks.core.paths import find_project_root

        folder = (root or find_project_root()) / MINILM_SST2_DIR
        if not (folder / MINILM_CONFIG).is_file():
            raise LingtestError(f"model `{MINILM_SST2_ID}` is missing: {folder} holds no "
                                f"fine-tuned classifier; fix: lingtest run train-sentiment")
        loaded = load_minilm_classifier(folder, MINILM_SST2_ID, neutral_band, pass_tokens, **path)
    elif (Path(ref.target) / MINILM_CONFIG).is_file():
        loaded = load_minilm_classifier(Path(ref.target), ref.name, neutral_band, pass_tokens,
                                        **path)
        loaded.spec = ref.bare
    else:
        return load_hf_classifier(ref.target, offline, neutral_band, pass_tokens, **path,
                                  name=ref.name, label_map=label_map)
    if label_map:
        raise LingtestError(f"models.label_map[{ref.name!r}]: {ref.name} already predicts "
                            f"{'/'.join(loaded.labels)}; a label map applies to hub, folder "
                            f"and python: classifiers")
    loaded.model_id = ref.name
    return loaded


def load_configured(model, params, root: Path, neutral_band: tuple[float, float]
                    ) -> SentimentModel:
    """``load_sentiment_model`` with a run's settings (``params``: offline, pass floor,
    encoder path, label maps, names), as every stage that tests classifiers loads them."""
    from lingtest.tasks.models.embedding_endpoints import endpoint_settings

    m, runtime = params.models, params.runtime
    return load_sentiment_model(model, tuple(neutral_band), m.offline, root, runtime.pass_tokens,
                                **runtime.encoder_path(), label_maps=m.label_map, names=m.names,
                                llm_classifier=m.llm_classifier, device=runtime.device,
                                seed=params.seed, http=endpoint_settings(params),
                                **m.lm_path())


BUILTIN_NOTES = {MINILM_SST2_ID: "MiniLM fine-tuned on SST-2 by the train-sentiment stage",
                 "vader": "the VADER lexicon and rules"}


def builtin_substitutes(specs: list[str]) -> str:
    """The built-in classifiers among ``specs`` that stand in for a paper's models, each with
    what it is ("" when the run tests only the user's own models: nothing was substituted)."""
    return " and ".join(f"{spec} ({BUILTIN_NOTES[spec]})" for spec in specs
                        if spec in BUILTIN_NOTES)
