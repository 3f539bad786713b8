"""Classifiers lingtest does not load itself: Python code (``python:``) and scores computed
elsewhere (``predictions:``), behind the same ``SentimentModel`` interface as VADER and the
torch classifiers, so every method that tests a sentiment classifier tests them too.

Whatever a user's code returns is checked before it is used: the shape (a row per text, a
column per label), finite probabilities in [0, 1] whose rows sum to 1. A failure is one
error naming the model, the rule broken and the first text concerned — never a NaN verdict.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.core.errors import LingtestError
from tasks.models.label_maps import aggregate, sentiment_labels
from tasks.models.model_spec import ModelRef
from tasks.models.sentiment import DEFAULT_BAND, SentimentModel, _check_texts
from tasks.models.user_code import UserObject, load_user_object, protocol_method

SUM_TOLERANCE = 1e-3  # rows must sum to 1 within this (float32 softmax rounds to ~1e-7)
PROBE_LIMIT = 2000    # texts tried one by one to name the first that makes user code raise


def declared_labels(user: UserObject, label_map: dict[str, str] | None) -> list[str] | None:
    """The model's own labels, in column order: the object's ``labels`` attribute,
    scikit-learn's ``classes_``, a Hugging Face-style ``id2label``, its module's ``labels``
    (a plain function's), else the label map's keys in order."""
    for holder, attribute in ((user.obj, "labels"), (user.obj, "classes_"),
                              (user.obj, "id2label"), (user.module, "labels")):
        value = getattr(holder, attribute, None)
        if isinstance(value, dict):
            return [str(value[k]) for k in sorted(value, key=int)]
        if value is not None and not callable(value) and not isinstance(value, str):
            return [str(v) for v in list(value)]
    return [str(k) for k in label_map] if label_map else None


def check_probabilities(probs: object, texts: list[str], n_labels: int, who: str) -> np.ndarray:
    """``probs`` as a float64 (len(texts) × n_labels) array, or one error naming the rule
    broken and the first text concerned."""
    try:
        array = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LingtestError(f"{who}: returned {type(probs).__name__}, not an array of "
                            f"probabilities ({exc})") from None
    if array.shape != (len(texts), n_labels):
        raise LingtestError(f"{who}: returned shape {array.shape} for {len(texts)} texts; "
                            f"expected ({len(texts)}, {n_labels}): a row per text, a column "
                            f"per label")
    bad = ~np.isfinite(array).all(axis=1)
    rule = "NaN or infinite probabilities"
    if not bad.any():
        bad = ((array < -SUM_TOLERANCE) | (array > 1 + SUM_TOLERANCE)).any(axis=1) | (
            np.abs(array.sum(axis=1) - 1) > SUM_TOLERANCE)
        rule = "probabilities outside [0, 1] or a row not summing to 1 (softmax scores first)"
    if bad.any():
        row = int(np.argmax(bad))
        raise LingtestError(f"{who}: {rule} for {int(bad.sum())} of {len(texts)} texts, first "
                            f"{texts[row]!r}: {array[row].tolist()}")
    return array


class PythonClassifier(SentimentModel):
    """A ``python:`` classifier: ``predict_proba(texts) -> (n × k)`` or a function returning
    it, over its own labels (``declared_labels``), read through the label map if any.

    Its output is assumed to depend on each text alone (``per_text``), as a predict function
    handed to CheckList is; its revision is its module file's hash (``user_code``)."""

    def __init__(self, user: UserObject, label_map: dict[str, str] | None = None,
                 neutral_band: tuple[float, float] = DEFAULT_BAND):
        ref = user.ref
        own = declared_labels(user, label_map)
        if not own:
            raise user.fail("declares no labels; fix: give it a `labels` attribute in column "
                            "order (e.g. labels = ['negative', 'positive']) or map them in "
                            "models.label_map")
        labels, self.groups = sentiment_labels(own, label_map, ref.name)
        super().__init__(ref.name, user.revision, labels, neutral_band)
        self.spec, self.user, self.own_labels = ref.bare, user, own
        self.label_map = dict(label_map) if label_map else None
        self._predict = protocol_method(user, "predict_proba")

    def _call(self, texts: list[str]) -> object:
        try:
            return self._predict(texts)
        except Exception as exc:  # the user's code: find the first text that fails alone
            for text in texts[:PROBE_LIMIT]:
                try:
                    self._predict([text])
                except Exception as single:
                    raise self.user.fail(f"predict_proba raised {type(single).__name__}: "
                                         f"{single} on the text {text!r}") from single
            raise self.user.fail(f"predict_proba raised {type(exc).__name__}: {exc} on a call "
                                 f"of {len(texts)} texts (each alone passes)") from exc

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.empty((0, len(self.labels)))
        who = f"model `{self.model_id}` ({self.spec}): predict_proba"
        probs = check_probabilities(self._call(texts), texts, len(self.own_labels), who)
        return aggregate(probs, self.groups)

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "file": self.user.file,
                "own_labels": "/".join(self.own_labels)}


def load_python_classifier(ref: ModelRef, root: Path | None,
                           label_map: dict[str, str] | None,
                           neutral_band: tuple[float, float] = DEFAULT_BAND) -> PythonClassifier:
    return PythonClassifier(load_user_object(ref, root), label_map, neutral_band)
