"""Classifiers lingtest does not load itself: Python code (``python:``) and scores computed
elsewhere (``predictions:``), behind the same ``SentimentModel`` interface as VADER and the
torch classifiers, so every method that tests a sentiment classifier tests them too.

Whatever a user's code returns is checked before it is used: the shape (a row per text, a
column per label), finite probabilities in [0, 1] whose rows sum to 1. A failure is one
error naming the model, the rule broken and the first text concerned — never a NaN verdict.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.label_maps import aggregate, sentiment_labels
from lingtest.tasks.models.model_spec import ModelRef
from lingtest.tasks.models.sentiment import DEFAULT_BAND, SentimentModel, _check_texts
from lingtest.tasks.models.user_code import UserObject, load_user_object, protocol_method

if TYPE_CHECKING:
    import pandas as pd

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
    broken and the first text concerned. A row all NaN (empty cells in a predictions file)
    is the model giving that text no answer: an ``undefined`` verdict, never a label."""
    try:
        array = np.asarray(probs, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise LingtestError(f"{who}: returned {type(probs).__name__}, not an array of "
                            f"probabilities ({exc})") from None
    if array.shape != (len(texts), n_labels):
        raise LingtestError(f"{who}: returned shape {array.shape} for {len(texts)} texts; "
                            f"expected ({len(texts)}, {n_labels}): a row per text, a column "
                            f"per label")
    silent = np.isnan(array).all(axis=1)  # no answer for that text: an undefined verdict
    bad = ~np.isfinite(array).all(axis=1) & ~silent
    rule = "NaN or infinite probabilities"
    if not bad.any():
        bad = (((array < -SUM_TOLERANCE) | (array > 1 + SUM_TOLERANCE)).any(axis=1) | (
            np.abs(array.sum(axis=1) - 1) > SUM_TOLERANCE)) & ~silent
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


# --------------------------------------------------------------------------- predictions:

KEY_COLUMNS = ("text", "text_id")
FORMATS = (".csv", ".jsonl", ".parquet")


def text_id(text: str) -> str:
    """The id ``lingtest export-suite`` gives a text: a hash of the text alone, so a score
    file keyed by it finds its rows whatever stage or case asked about the text."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def predictions_file(ref: ModelRef, root: Path | None) -> Path:
    path = Path(ref.target).expanduser()
    path = path if path.is_absolute() or root is None else root / path
    if path.suffix.lower() not in FORMATS:
        raise LingtestError(f"model `{ref.bare}`: {path.name}: a predictions file is "
                            f"{', '.join(FORMATS)}")
    if not path.exists():
        raise LingtestError(f"model `{ref.bare}`: {path} does not exist; fix: lingtest "
                            f"export-suite <stage> writes the texts to score, then save one "
                            f"probability column per label beside text or text_id")
    return path


def read_predictions(ref: ModelRef, root: Path | None) -> tuple[pd.DataFrame, str, list[str]]:
    """(the scores indexed by text id, the file's revision, its label columns in order)."""
    import pandas as pd

    from lingtest.tasks.core.io import check_input_file, sha256_file

    path = check_input_file(predictions_file(ref, root), "lingtest export-suite writes the "
                            "texts to score; save their scores as a file")
    try:
        frame = {".csv": pd.read_csv, ".parquet": pd.read_parquet,
                 ".jsonl": lambda p: pd.read_json(p, lines=True)}[path.suffix.lower()](path)
    except (OSError, ValueError) as exc:
        raise LingtestError(f"model `{ref.bare}`: {path} cannot be read as "
                            f"{path.suffix.lower()[1:]} ({exc})") from None
    keys = [c for c in KEY_COLUMNS if c in frame.columns]
    if not keys:
        raise LingtestError(f"model `{ref.bare}`: {path} has no text or text_id column "
                            f"(columns: {list(frame.columns)}); fix: keep the column(s) "
                            f"lingtest export-suite wrote")
    labels = [str(c) for c in frame.columns if c not in KEY_COLUMNS]
    if len(labels) < 2:
        raise LingtestError(f"model `{ref.bare}`: {path}: expected one probability column per "
                            f"label (at least two), found {labels}")
    ids = frame["text_id"].astype(str) if "text_id" in frame.columns else \
        frame["text"].astype(str).map(text_id)
    frame = frame.assign(_id=ids.to_numpy())
    twice = frame["_id"].duplicated()
    if twice.any():
        first = frame.loc[twice, keys[0]].iloc[0]
        raise LingtestError(f"model `{ref.bare}`: {path}: {int(twice.sum())} texts scored "
                            f"twice, first {first!r}; keep one row per text")
    who = f"model `{ref.bare}`: {path}"
    texts = frame[keys[0]].astype(str).tolist()
    check_probabilities(frame[labels].to_numpy(), texts, len(labels), who)
    scores = frame.set_index("_id")[labels].astype("float64")
    return scores, f"predictions@sha256:{sha256_file(path)[:16]}", labels


class PredictionsClassifier(SentimentModel):
    """Scores computed elsewhere (``predictions:PATH``): the file's rows looked up by text,
    so every method reads exactly what the user's own pipeline produced."""

    def __init__(self, ref: ModelRef, root: Path | None, label_map: dict[str, str] | None,
                 neutral_band: tuple[float, float] = DEFAULT_BAND):
        self.scores, revision, self.own_labels = read_predictions(ref, root)
        labels, self.groups = sentiment_labels(self.own_labels, label_map, ref.name)
        super().__init__(ref.name, revision, labels, neutral_band)
        self.spec, self.label_map = ref.bare, dict(label_map) if label_map else None

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        texts = _check_texts(texts)
        ids = [text_id(t) for t in texts]
        missing = [t for t, i in zip(texts, ids) if i not in self.scores.index]
        if missing:
            shown = "; ".join(repr(t) for t in missing[:3])
            raise LingtestError(f"model `{self.model_id}` ({self.spec}): {len(missing)} of "
                                f"{len(texts)} texts have no score, first {shown}; fix: "
                                f"score every text lingtest export-suite wrote")
        return aggregate(self.scores.loc[ids].to_numpy(), self.groups)

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "own_labels": "/".join(self.own_labels)}


def load_predictions_classifier(ref: ModelRef, root: Path | None,
                                label_map: dict[str, str] | None,
                                neutral_band: tuple[float, float] = DEFAULT_BAND
                                ) -> PredictionsClassifier:
    return PredictionsClassifier(ref, root, label_map, neutral_band)


def check_predictions(ref: ModelRef, root: Path | None,
                      label_map: dict[str, str] | None) -> dict[str, str]:
    """The file read and its labels mapped, as at load (``lingtest.tasks.models.checks``)."""
    _, revision, labels = read_predictions(ref, root)
    sentiment_labels(labels, label_map, ref.name)
    return {"revision": revision, "path": str(predictions_file(ref, root))}
