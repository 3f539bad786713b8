"""WordNet from an explicit nltk_data folder (the pipeline's ``data/raw/nltk_data``).

``nltk.corpus.wordnet`` is one process-wide object bound to whatever folder NLTK finds
first; the pipeline instead names its folder, so a test (or a second workspace) gets the
WordNet it imported. The reader is built once per folder and cached (loading the index
takes about 2 s).
"""
from __future__ import annotations

import functools
from pathlib import Path

import nltk
from nltk.corpus.reader import CorpusReader, WordNetCorpusReader
from nltk.corpus.util import LazyCorpusLoader

from lingtest.tasks.core.errors import LingtestError

# Universal / spaCy coarse tags → WordNet parts of speech.
_POS = {"n": "n", "noun": "n", "propn": "n", "v": "v", "verb": "v", "aux": "v",
        "a": "a", "adj": "a", "s": "a", "r": "r", "adv": "r"}


@functools.lru_cache(maxsize=None)
def _load(folder: Path) -> WordNetCorpusReader:
    zip_path = folder / "corpora" / "wordnet.zip"
    if not zip_path.is_file() and not (folder / "corpora" / "wordnet").is_dir():
        raise LingtestError(f"WordNet is missing: {zip_path} does not exist "
                            "(run `lingtest run data` to import it)")
    if str(folder) not in nltk.data.path:
        nltk.data.path.insert(0, str(folder))
    root = nltk.data.find(
        "corpora/wordnet.zip/wordnet/" if zip_path.is_file() else "corpora/wordnet",
        paths=[str(folder)])
    # Same construction as nltk.corpus.wordnet; OMW is only touched by multilingual calls.
    omw = LazyCorpusLoader("omw-1.4", CorpusReader, r".*/wn-data-.*\.tab", encoding="utf8")
    return WordNetCorpusReader(root, omw)


def wordnet(nltk_data: str | Path) -> WordNetCorpusReader:
    """NLTK's WordNet reader over ``nltk_data/corpora/wordnet.zip``, cached per folder.

    Also prepends ``nltk_data`` to ``nltk.data.path`` so that NLTK helpers that look
    resources up by name find the same files. Raises LingtestError when the zip is absent.
    """
    return _load(Path(nltk_data).expanduser().resolve())


def synonyms(word: str, pos: str, nltk_data: str | Path) -> list[str]:
    """WordNet synonyms of ``word`` for ``pos`` (``n``/``v``/``a``/``r`` or NOUN/VERB/ADJ/ADV).

    Lemma names of every synset of the word with that part of speech (adjective
    satellites included), most frequent sense first, without the word itself, multi-word
    lemmas with spaces; an unknown part of speech yields no synonyms.
    """
    wn_pos = _POS.get(pos.lower())
    if wn_pos is None:
        return []
    found: dict[str, None] = {}
    for synset in wordnet(nltk_data).synsets(word, pos=wn_pos):
        for lemma in synset.lemma_names():
            name = lemma.replace("_", " ")
            if name.lower() != word.lower():
                found.setdefault(name, None)
    return list(found)
