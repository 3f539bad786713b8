"""Model registry and backends: resolve ids to files, load encoders, causal LMs and spaCy.

Heavy libraries (torch, transformers, spaCy) are imported by the loaders, not here, so that
`lingtest models` and parameter checks stay fast.
"""
from lingtest.tasks.models.registry import (
    KINDS, KNOWN, Resolution, describe_models, known_ids, resolve,
)

__all__ = ["KINDS", "KNOWN", "Resolution", "describe_models", "known_ids", "resolve",
           "load_encoder", "load_causal_lm", "load_spacy"]


def __getattr__(name: str):
    """Lazy access to the loaders (each pulls in torch/transformers or spaCy)."""
    if name == "load_encoder":
        from lingtest.tasks.models.encoders import load_encoder
        return load_encoder
    if name == "load_causal_lm":
        from lingtest.tasks.models.causal_lm import load_causal_lm
        return load_causal_lm
    if name == "load_spacy":
        from lingtest.tasks.models.nlp import load_spacy
        return load_spacy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
