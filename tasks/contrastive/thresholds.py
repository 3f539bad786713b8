"""Adaptive thresholds (COSTELLO Algorithm 2) from nearest-neighbour distances of words.

Each dictionary word is embedded alone; a word's nearest-neighbour (NN) distance is its
distance to the closest *other* word. The spread of those distances says how far apart the
model puts distinct meanings, so θ is taken from them: their minimum, μ − 2σ, μ − σ (all
clamped at 0), or θ = 0.

Computation: rows are processed in blocks of ``block_size`` against the whole dictionary
(block × |V| at a time), never the full |V| × |V| matrix.

- ``l2``: ‖x‖² + ‖y‖² − 2x·y from one float32 matrix product per block, clamped at 0;
- ``cos``: dot products of L2-normalised rows (zero rows stay zero: distance 1);
- ``l1``: ``scipy.spatial.distance.cdist(..., "cityblock")`` per block (no BLAS form exists).

The float32 products only *choose* each word's neighbour; the distance to it is then
recomputed exactly in float64 (``pair_distances``), so the expansion's cancellation error
(largest exactly where NN distances are small) never reaches θ.

Self-matches are excluded by index, not by distance 0. Words the model cannot tell apart
(cliché / cliche under an accent-stripping tokenizer; Cliche / cliche under a lower-casing
one) would be neighbours at distance 0 and make the ``min`` threshold 0, so the dictionaries
are deduplicated by the model's normal form first (``distinct_forms``).

Differences from the reference code (lenijwp/COSTELLO, ``Testing.py``): its μ − kσ uses
``sqrt(σ)`` of ``scipy.stats.norm.fit`` (whose scale already is σ), and its ``l2``
thresholds come from *squared* distances; ``rule="paper"`` reproduces both
(``threshold``; the caller squares the L2 distances, ``rule_distances``), the default
``corrected`` uses σ and plain Euclidean distances. Its dictionary is the whole tokenizer
vocabulary including special tokens and sub-word pieces — here whole-word tokens
(``Encoder.vocabulary``), the words of the seed dataset, or a user's word list
(``read_dictionary``, the reference code's ``--tokendict``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from scipy.spatial.distance import cdist

from lingtest.tasks.contrastive.distances import check_metric, pair_distances
from lingtest.tasks.core.errors import InputFormatError, LingtestError

KINDS = ("zero", "min", "mu-2sigma", "mu-sigma")
RULES = ("corrected", "paper")
_WORD_EDGES = re.compile(r"^[^\w']+|[^\w']+$")  # keep apostrophes: clitics ('s, n't) drop


def needs_dictionaries(kinds: Iterable[str]) -> bool:
    """Whether any θ of ``kinds`` comes from nearest-neighbour distances: θ = 0 needs no
    dictionary, so with ``thresholds: [zero]`` none is embedded or searched."""
    return any(kind != "zero" for kind in kinds)


def nearest_neighbours(embeddings: np.ndarray, metric: str,
                       block_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(index, distance) of each row's nearest other row, computed block by block.

    Peak extra memory is about ``block_size × |V|`` float32 (float64 for l1) plus one
    float32 copy of the embeddings; ties go to the lowest index.
    """
    check_metric(metric)
    x = np.asarray(embeddings)
    if x.ndim != 2 or x.shape[0] < 2:
        raise LingtestError(f"nearest neighbours need at least two embeddings in a (rows, dim) "
                            f"matrix (got shape {x.shape})")
    if block_size < 1:
        raise LingtestError(f"block_size must be >= 1 (got {block_size})")
    n = x.shape[0]
    nearest = np.empty(n, dtype=np.int64)
    distance = np.empty(n, dtype=np.float64)
    if metric == "l1":
        work = np.ascontiguousarray(x, dtype=np.float64)  # cdist would copy it per block
    else:
        work = np.array(x, dtype=np.float32, order="C")  # a copy: normalised in place for cos
        if metric == "cos":
            norms = np.linalg.norm(work, axis=1, keepdims=True)
            work /= np.where(norms > 0, norms, 1.0)  # zero rows stay zero: similarity 0
        else:
            squares = np.einsum("ij,ij->i", work, work)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        rows = np.arange(start, stop)
        if metric == "l1":
            block = cdist(work[start:stop], work, "cityblock")
        elif metric == "cos":
            block = work[start:stop] @ work.T
            np.negative(block, out=block)  # minimise −similarity, i.e. the distance
        else:
            block = work[start:stop] @ work.T
            block *= -2.0
            block += squares[None, :]
            block += squares[start:stop, None]
            np.maximum(block, 0.0, out=block)
        block[rows - start, rows] = np.inf  # self by index: duplicates still count
        chosen = block.argmin(axis=1)
        nearest[start:stop] = chosen
        distance[start:stop] = pair_distances(x[start:stop], x[chosen], metric)  # exact
    return nearest, distance


def nearest_neighbour_distances(embeddings: np.ndarray, metric: str,
                                block_size: int = 1024) -> np.ndarray:
    """Each row's distance (float64) to its nearest other row; see ``nearest_neighbours``."""
    return nearest_neighbours(embeddings, metric, block_size)[1]


def naive_nearest_neighbour_distances(embeddings: np.ndarray, metric: str) -> np.ndarray:
    """The same from the full |V| × |V| scipy ``cdist`` matrix: the reference for tests and
    benchmarks, only for dictionaries small enough to hold the matrix."""
    check_metric(metric)
    x = np.asarray(embeddings, dtype=np.float64)
    full = cdist(x, x, {"l1": "cityblock", "l2": "euclidean", "cos": "cosine"}[metric])
    if metric == "cos":  # scipy gives NaN for zero rows; ours is 1 there
        zero = np.linalg.norm(x, axis=1) == 0
        full[zero, :] = 1.0
        full[:, zero] = 1.0
    np.fill_diagonal(full, np.inf)
    return full.min(axis=1)


def rule_distances(nn_distances: np.ndarray, metric: str, rule: str) -> np.ndarray:
    """The NN distances a rule takes θ from: as they are, or (``paper``, L2) squared, as the
    reference code's ``EuclideanDistance`` returns them."""
    d = np.asarray(nn_distances, dtype=np.float64)
    return d ** 2 if rule == "paper" and metric == "l2" else d


def threshold(nn_distances: np.ndarray, kind: str, rule: str = "corrected") -> float:
    """θ from NN distances: ``zero``, ``min``, ``mu-2sigma`` or ``mu-sigma``, clamped at 0.

    ``corrected``: σ is the population standard deviation (ddof=0, what
    ``scipy.stats.norm.fit`` returns as its scale); ``paper``: μ − k·√σ, the reference code's.
    """
    if kind not in KINDS:
        raise LingtestError(f"threshold `{kind}` unknown; expected one of {', '.join(KINDS)}")
    if rule not in RULES:
        raise LingtestError(f"threshold rule `{rule}` unknown; expected one of {', '.join(RULES)}")
    if kind == "zero":
        return 0.0
    d = np.asarray(nn_distances, dtype=np.float64)
    if d.size == 0 or not np.isfinite(d).all():
        raise LingtestError(f"threshold `{kind}`: need finite nearest-neighbour distances "
                            f"(got {d.size} values)")
    if kind == "min":
        value = d.min()
    else:
        spread = np.sqrt(d.std()) if rule == "paper" else d.std()
        value = d.mean() - (2.0 if kind == "mu-2sigma" else 1.0) * spread
    return max(0.0, float(value))


def thresholds(nn_distances: np.ndarray, kinds: Iterable[str] = KINDS,
               rule: str = "corrected") -> dict[str, float]:
    """θ for each kind, from one set of NN distances."""
    return {kind: threshold(nn_distances, kind, rule) for kind in kinds}


def nearest_neighbour_summary(nn_distances: np.ndarray,
                              thetas: dict[str, float]) -> dict[str, float]:
    """One row of the thresholds table: mean, standard deviation (ddof=0, the σ of θ) and
    minimum of a dictionary's NN distances (as the rule takes them), beside its θ's."""
    d = np.asarray(nn_distances, dtype=np.float64)
    return {"nn_mean": float(np.mean(d)), "nn_std": float(np.std(d)), "nn_min": float(np.min(d)),
            **{f"θ {kind}": value for kind, value in thetas.items()}}


# --------------------------------------------------------------------- dictionaries

def dictionary_from_dataset(texts: Iterable[str]) -> list[str]:
    """The distinct lower-cased alphabetic words of the seed texts, sorted.

    Words are the whitespace-separated tokens with leading/trailing punctuation other than
    apostrophes stripped; a token that is still not all letters (``'s``, ``n't``, ``1990s``,
    ``well-made``) is dropped,
    as COSTELLO's mutation operators only substitute whole alphabetic words.
    """
    words: set[str] = set()
    for text in texts:
        for token in text.split():
            token = _WORD_EDGES.sub("", token).lower()
            if token.isalpha():
                words.add(token)
    return sorted(words)


def distinct_forms(words: Sequence[str], forms: Sequence[str]) -> list[str]:
    """The first word of each normal form (``forms[i]`` is ``words[i]`` as the model sees
    it, ``Encoder.normal_forms``): words the model maps to one vector count once."""
    if len(words) != len(forms):
        raise LingtestError(f"{len(words)} words but {len(forms)} normal forms")
    first: dict[str, str] = {}
    for word, form in zip(words, forms):
        first.setdefault(form, word)
    return list(first.values())


def read_dictionary(path: str | Path) -> list[str]:
    """A user's dictionary: a JSON list of words or object whose keys are the words (the
    reference code's ``--tokendict``), or a text file with one word per line (``#`` starts a
    comment). Distinct words in file order; at least two, else an InputFormatError."""
    path = Path(path)
    fix = ("a dictionary file is a JSON list of words (or an object keyed by word), or one "
           "word per line; set contrastive.dictionary_file to it or to null")
    from lingtest.tasks.core.io import parse_json, read_input_text

    text = read_input_text(path, fix)
    if path.suffix.lower() == ".json":
        data = parse_json(text, path, fix)
        if not isinstance(data, (list, dict)):
            raise InputFormatError(path, 1, f"the top level is a {type(data).__name__}", fix)
        for index, word in enumerate(data):
            if not isinstance(word, str) or len(word.split()) != 1:
                raise InputFormatError(path, None, f"entry {index} ({json.dumps(word)}) is "
                                       "not one word", fix)
        words = [w.strip() for w in data]
    else:
        words = []
        for number, line in enumerate(text.splitlines(), start=1):
            entry = line.split("#", 1)[0].strip()
            if not entry:
                continue
            if len(entry.split()) != 1:
                raise InputFormatError(path, number, f"{entry!r} is more than one word", fix)
            words.append(entry)
    words = list(dict.fromkeys(words))
    if len(words) < 2:
        raise InputFormatError(path, None, f"{len(words)} distinct word(s); a dictionary "
                               "needs at least two", fix)
    return words


def cap_words(words: Sequence[str], max_words: int | None, seed: int) -> list[str]:
    """At most ``max_words`` of ``words``, sampled with ``seed``, kept in their given order
    (so the same seed and cap give the same dictionary); all of them when ``max_words`` is
    None or not smaller."""
    words = list(dict.fromkeys(words))
    if max_words is None or len(words) <= max_words:
        return words
    if max_words < 2:
        raise LingtestError(f"dictionary_max_words must be >= 2 (got {max_words})")
    keep = np.sort(np.random.default_rng(seed).choice(len(words), max_words, replace=False))
    return [words[i] for i in keep]


def vocabulary_dictionary(encoder, max_words: int | None = None, seed: int = 0) -> list[str]:
    """The encoder's whole-word vocabulary (``encoder.vocabulary()``), optionally capped
    (``params.contrastive.dictionary_max_words``, sampled with the run's seed)."""
    return cap_words(encoder.vocabulary(), max_words, seed)
