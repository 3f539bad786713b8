"""Objects that already answer lingtest's protocols pass through as they are (a scikit-learn
classifier's ``predict_proba`` and ``classes_``, a SentenceTransformer's ``encode``, an object
with ``generate``); a ``transformers`` pipeline answers in its own shape, so it is wrapped:
a text-classification pipeline as a classifier over its model's labels, a text-generation
pipeline as an LLM (greedy unless the method asks for a temperature)."""
from __future__ import annotations

from typing import Any

import numpy as np

from lingtest.tasks.core.errors import LingtestError

CLASSIFIER_TASKS = ("text-classification", "sentiment-analysis")
GENERATION_TASKS = ("text-generation", "text2text-generation")


def adapt(obj: Any) -> Any:
    """``obj`` in a protocol lingtest calls: a transformers pipeline wrapped, else itself."""
    task = getattr(obj, "task", None)
    if not _is_transformers_pipeline(obj):
        return obj
    if task in CLASSIFIER_TASKS:
        return PipelineClassifier(obj)
    if task in GENERATION_TASKS:
        return PipelineLLM(obj)
    raise LingtestError(f"lingtest.test: a transformers `{task}` pipeline is no model lingtest "
                        f"tests; give a {' / '.join(CLASSIFIER_TASKS)} pipeline (a classifier), "
                        f"a {' / '.join(GENERATION_TASKS)} one (an LLM), or a "
                        "SentenceTransformer (an encoder)")


def _is_transformers_pipeline(obj: Any) -> bool:
    try:
        from transformers import Pipeline
    except ImportError:
        return False
    return isinstance(obj, Pipeline)


class PipelineClassifier:
    """A text-classification pipeline's scores for every label, in its model's label order
    (``labels``: ``id2label``), as ``predict_proba`` rows."""

    def __init__(self, pipeline: Any):
        self.pipeline = pipeline
        id2label = pipeline.model.config.id2label
        self.labels = [id2label[i] for i in sorted(id2label)]

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        answers = self.pipeline(list(texts), top_k=None, truncation=True)
        column = {label: i for i, label in enumerate(self.labels)}
        probs = np.zeros((len(texts), len(self.labels)))
        for row, scores in enumerate(answers):
            for score in scores:
                probs[row, column[score["label"]]] = score["score"]
        return probs


class PipelineLLM:
    """A text-generation pipeline's answer to each prompt (not the prompt itself): as the
    user's turn of a chat where its tokenizer has a chat template, as lingtest prompts a
    local LM (an instruct model given the bare prompt may answer nothing: SmolLM2 gives "")."""

    def __init__(self, pipeline: Any):
        self.pipeline = pipeline

    def generate(self, prompts: list[str], max_new_tokens: int = 64,
                 temperature: float = 0.0) -> list[str]:
        sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {
            "do_sample": False}
        seq2seq = self.pipeline.task == "text2text-generation"
        extra = {} if seq2seq else {"return_full_text": False}
        chat = not seq2seq and getattr(getattr(self.pipeline, "tokenizer", None),
                                       "chat_template", None)
        inputs = [[{"role": "user", "content": p}] for p in prompts] if chat else list(prompts)
        out = self.pipeline(inputs, max_new_tokens=max_new_tokens, **sampling, **extra)
        return [(answer[0] if isinstance(answer, list) else answer)["generated_text"]
                for answer in out]
