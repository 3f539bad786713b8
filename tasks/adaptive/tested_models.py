"""The models AdaTest tests, behind the two interfaces its scorers know.

AdaTest scores a tree with one of three scorers (``adaptivetesting/_scorer.py``):
``ClassifierScorer`` (a model returning probabilities over its own outputs),
``GeneratorScorer`` (a text generator whose outputs a label model judges) and ``RawScorer``
(a model returning a failure score in [0, 1] per input). lingtest keeps two kinds:

- **classifier** (``kind = "classifier"``): ``labels`` and
  ``predict_with_probabilities(texts) -> (answers, probabilities over labels)``. Sentiment
  models (``vader``, ``lingtest/minilm-sst2``, hub and folder classifiers, ``python:`` /
  ``predictions:`` models whose labels read as sentiment, or mapped by ``models.label_map``)
  answer neg / neutral / pos; any other ``python:`` classifier (``labels`` attribute,
  ``classes_`` or ``id2label``) or Hugging Face classifier (``config.id2label``) answers its
  own labels, e.g. a topic classifier's ``rooms`` / ``staff`` / ``location``.
- **raw** (``kind = "raw"``): ``outputs_and_scores(texts) -> (outputs, failure scores)``:
  AdaTest's raw-score tests. Either a ``python:`` object with ``score(texts)`` (RawScorer:
  the output shown is the score), or a generation model — any LLM spec — with a scoring
  function named in its spec, ``#scorer=``: a ``python:`` callable
  ``score(inputs, outputs) -> [0, 1]`` or a classifier spec whose probability of
  ``fail_label`` for the generated text is the score (``…#scorer=lingtest/minilm-sst2&
  fail_label=neg``: a continuation the classifier reads as negative fails). The generator
  decodes greedily, ``max_new_tokens`` 24, so a test's output is reproducible.

A raw test's expectation is ``should score below 0.5`` (``cases.SCORE_BELOW``): AdaTest
counts a raw score above one half as a failure.

A sentiment model may answer ``undefined`` for a text (an LLM classifier that named no
label), its probability row NaN; a classifier scorer's undefined reading of a generated text
is a NaN score. Both reach ``scoring`` as they are, which gives the test an ``undefined``
verdict (score NaN), never a pass or a fail.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.label_maps import LABELS3
from lingtest.tasks.models.llm_classifier import is_local_lm
from lingtest.tasks.models.model_spec import ModelRef, parse_model

GENERATED_TOKENS = 24


class SentimentClassifier:
    """A sentiment model (``lingtest.tasks.models.sentiment``) as an AdaTest classifier over
    neg / neutral / pos (a binary model: CheckList's neutral band). An ``undefined`` answer
    and its NaN probabilities are passed on unchanged (``scoring`` judges them)."""

    kind = "classifier"
    labels = LABELS3

    def __init__(self, model):
        self.model, self.model_id, self.revision = model, model.model_id, model.revision

    def predict_with_probabilities(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        return self.model.predict_with_probabilities3(texts)

    def parameters(self) -> dict:
        return self.model.parameters()


class OwnLabelClassifier:
    """A ``python:`` classifier over its own labels: the answer is the most probable label."""

    kind = "classifier"

    def __init__(self, user, labels: list[str]):
        from lingtest.tasks.models.user_code import protocol_method

        self.user, self.labels = user, tuple(labels)
        self.model_id, self.revision = user.ref.name, user.revision
        self._predict = protocol_method(user, "predict_proba")

    def predict_with_probabilities(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        from lingtest.tasks.models.own_classifiers import check_probabilities

        texts = list(texts)
        if not texts:
            return [], np.empty((0, len(self.labels)))
        who = f"model `{self.model_id}` ({self.user.ref.bare}): predict_proba"
        try:
            raw = self._predict(texts)
        except Exception as exc:
            raise self.user.fail(f"predict_proba raised {type(exc).__name__}: {exc}") from exc
        probs = check_probabilities(raw, texts, len(self.labels), who)
        return [self.labels[i] for i in probs.argmax(1)], probs

    def parameters(self) -> dict:
        return {"model_id": self.model_id, "revision": self.revision, "kind": "classifier",
                "labels": "/".join(self.labels), "spec": self.user.ref.bare}


class HubLabelClassifier:
    """A Hugging Face sequence classifier (hub id or folder) over its own labels
    (``config.id2label``, e.g. a topic classifier's), answering its most probable label."""

    kind = "classifier"
    BATCH = 32

    def __init__(self, ref: ModelRef, offline: bool):
        from lingtest.tasks.models.registry import (hub_offline, loaded_revision, resolve,
                                           transformers_classes)

        auto_model, auto_tokenizer = transformers_classes(
            "AutoModelForSequenceClassification", "AutoTokenizer")
        res = resolve(ref.target, "classifier", offline=offline).require()
        try:
            with hub_offline(offline):
                self.tokenizer = auto_tokenizer.from_pretrained(res.path,
                                                                local_files_only=offline)
                self.model = auto_model.from_pretrained(res.path,
                                                        local_files_only=offline).eval()
        except (OSError, ValueError) as exc:
            raise LingtestError(f"model `{ref.name}` ({res.source}, {res.path}) failed to "
                                f"load: {exc}") from exc
        id2label = self.model.config.id2label
        self.labels = tuple(str(id2label[i]) for i in sorted(id2label, key=int))
        self.model_id, self.spec = ref.name, ref.bare
        self.revision = loaded_revision(res, self.model.config)

    def predict_with_probabilities(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        import torch

        texts = list(texts)
        rows = []
        for start in range(0, len(texts), self.BATCH):
            batch = self.tokenizer(texts[start:start + self.BATCH], padding=True,
                                   truncation=True, max_length=512, return_tensors="pt")
            with torch.no_grad():
                rows.append(torch.softmax(self.model(**batch).logits.float(), -1).numpy())
        probs = np.vstack(rows) if rows else np.empty((0, len(self.labels)))
        return [self.labels[i] for i in probs.argmax(1)], probs.astype(np.float64)

    def parameters(self) -> dict:
        return {"model_id": self.model_id, "revision": self.revision, "kind": "classifier",
                "labels": "/".join(self.labels), "spec": self.spec}


def hub_labels(ref: ModelRef, offline: bool) -> list[str] | None:
    """A hub or folder classifier's own labels from its config (no weights loaded); None
    when they cannot be read here (the sentiment loader then says why)."""
    from lingtest.tasks.models.registry import hub_offline, resolve, transformers_classes

    (auto_config,) = transformers_classes("AutoConfig")
    try:
        res = resolve(ref.target, "classifier", offline=offline).require()
        with hub_offline(offline):
            id2label = auto_config.from_pretrained(res.path,
                                                   local_files_only=offline).id2label
    except (LingtestError, OSError, ValueError):
        return None
    return [str(id2label[i]) for i in sorted(id2label, key=int)]


def check_scores(values: object, n: int, who: str, undefined: bool = False) -> np.ndarray:
    """A user's failure scores as floats in [0, 1], one per text, or one error naming the rule.
    ``undefined``: NaN is let through (a classifier scorer that gave a text no label)."""
    try:
        scores = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise LingtestError(f"{who}: returned {type(values).__name__}, not numbers ({exc})"
                            ) from None
    if scores.shape != (n,):
        raise LingtestError(f"{who}: returned {scores.size} scores for {n} texts; one per text")
    bad = ((np.isinf(scores) if undefined else ~np.isfinite(scores))
           | (scores < 0) | (scores > 1))
    if bad.any():
        raise LingtestError(f"{who}: score {scores[int(np.argmax(bad))]!r} is not in [0, 1]; "
                            "return a failure score between 0 (fine) and 1 (fails)")
    return scores


class RawScoreModel:
    """AdaTest's ``RawScorer``: a ``python:`` object whose ``score(texts)`` is the failure
    score; the output shown is the score rounded to 6 places, as AdaTest writes it."""

    kind = "raw"
    labels: tuple[str, ...] = ()

    def __init__(self, user):
        from lingtest.tasks.models.user_code import protocol_method

        self.user, self.model_id, self.revision = user, user.ref.name, user.revision
        self._score = protocol_method(user, "score")

    def outputs_and_scores(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        if not texts:
            return [], np.empty(0)
        try:
            raw = self._score(list(texts))
        except Exception as exc:
            raise self.user.fail(f"score raised {type(exc).__name__}: {exc}") from exc
        scores = check_scores(raw, len(texts), f"model `{self.model_id}`: score")
        return [str(round(float(s), 6)) for s in scores], scores

    def parameters(self) -> dict:
        return {"model_id": self.model_id, "revision": self.revision, "kind": "raw",
                "spec": self.user.ref.bare}


class ScoredGenerator:
    """A generation model under test with a scoring function (see the module docstring)."""

    kind = "raw"
    labels: tuple[str, ...] = ()

    def __init__(self, ref: ModelRef, llm, score: Callable[[list[str], list[str]], object],
                 scorer: str, scorer_revision: str, undefined: bool = False):
        self.ref, self.llm, self._score = ref, llm, score
        self.model_id = ref.name
        self.scorer = scorer
        self.undefined = undefined  # a classifier scorer: NaN where it gave no label
        lm = llm.parameters()
        self.revision = f"{lm.get('revision', lm.get('spec', ref.bare))}+{scorer_revision}"

    def outputs_and_scores(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        if not texts:
            return [], np.empty(0)
        answers = self.llm.answer(list(texts))
        failed = [(t, a.error) for t, a in zip(texts, answers) if a.text is None]
        if failed:
            raise LingtestError(f"model `{self.model_id}`: no output for {failed[0][0]!r} "
                                f"({failed[0][1]}); {len(failed)} of {len(texts)} failed")
        outputs = [a.text.strip() for a in answers]
        scores = check_scores(self._score(list(texts), outputs), len(texts),
                              f"model `{self.model_id}`: scorer {self.scorer}", self.undefined)
        return outputs, scores

    def parameters(self) -> dict:
        return {"model_id": self.model_id, "revision": self.revision, "kind": "raw",
                "spec": self.ref.bare, "scorer": self.scorer,
                "max_new_tokens": GENERATED_TOKENS, "decoding": "greedy"}


def _classifier_scorer(spec: str, fail_label: str, load_sentiment: Callable) -> tuple[
        Callable, str]:
    model = load_sentiment(spec)
    if fail_label not in LABELS3:
        raise LingtestError(f"model spec option fail_label={fail_label!r}: the scorer "
                            f"{spec} answers {'/'.join(LABELS3)}; name one of them")
    column = LABELS3.index(fail_label)

    def score(_inputs: list[str], outputs: list[str]) -> np.ndarray:
        return model.predict_with_probabilities3(outputs)[1][:, column]

    return score, str(model.revision)


def _python_scorer(ref: ModelRef, root: Path | None) -> tuple[Callable, str]:
    from lingtest.tasks.models.user_code import load_user_object, protocol_method

    user = load_user_object(ref, root)
    fn = protocol_method(user, "score")

    def score(inputs: list[str], outputs: list[str]) -> object:
        try:
            return fn(inputs, outputs)
        except Exception as exc:
            raise user.fail(f"score(inputs, outputs) raised {type(exc).__name__}: {exc}"
                            ) from exc

    return score, user.revision


def load_tested_model(spec: str, load_sentiment: Callable[[str], object],
                      root: Path | None = None, offline: bool = True,
                      names: dict[str, str] | None = None,
                      label_maps: dict[str, dict[str, str]] | None = None):
    """The model a spec names, as a classifier or a raw-score model (module docstring).
    ``load_sentiment(spec)`` loads a sentiment classifier with the run's settings."""
    ref = parse_model(spec, "model", names, root)
    scorer = ref.options.get("scorer")
    if "fail_label" in ref.options and not scorer:
        raise LingtestError(f"model `{spec}`: fail_label applies with a #scorer= only")
    if scorer:
        from lingtest.tasks.models.llm import LLMSettings, load_llm

        bare = ref.bare
        python = parse_model(scorer, "scorer", names, root).form == "python"
        if python:
            score, revision = _python_scorer(parse_model(scorer, "scorer", names, root), root)
        else:
            score, revision = _classifier_scorer(scorer, ref.options.get("fail_label", "neg"),
                                                 load_sentiment)
        llm = load_llm(bare, LLMSettings(max_new_tokens=GENERATED_TOKENS, offline=offline),
                       root, names)
        return ScoredGenerator(ref, llm, score, scorer, revision, undefined=not python)
    if ref.form == "python":
        from lingtest.tasks.models.label_maps import sentiment_labels
        from lingtest.tasks.models.own_classifiers import declared_labels
        from lingtest.tasks.models.user_code import load_user_object

        user = load_user_object(ref, root)
        if callable(getattr(user.obj, "score", None)) and not callable(
                getattr(user.obj, "predict_proba", None)):
            return RawScoreModel(user)
        label_map = (label_maps or {}).get(ref.name) or (label_maps or {}).get(ref.bare)
        own = declared_labels(user, label_map)
        try:
            if own:
                sentiment_labels(own, label_map, ref.name)
        except LingtestError:
            if label_map:
                raise
            return OwnLabelClassifier(user, own)
    elif ref.form in ("hub", "folder") and not is_local_lm(ref):  # an LM: prompted
        from lingtest.tasks.models.label_maps import sentiment_labels
        from lingtest.tasks.models.sentiment import MINILM_CONFIG

        label_map = (label_maps or {}).get(ref.name) or (label_maps or {}).get(ref.bare)
        own = None if (Path(ref.target) / MINILM_CONFIG).is_file() else \
            hub_labels(ref, offline)
        if own and not label_map:
            try:
                sentiment_labels(own, None, ref.name)
            except LingtestError:
                return HubLabelClassifier(ref, offline)
    return SentimentClassifier(load_sentiment(spec))


def as_tested(model):
    """``model`` as a tested model: a sentiment model is wrapped, a tested one kept."""
    return model if hasattr(model, "kind") else SentimentClassifier(model)

