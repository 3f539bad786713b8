"""A classifier's own labels read as lingtest's sentiment labels (neg / neutral / pos).

Hub checkpoints name their labels in many ways (LABEL_0/1, NEGATIVE/POSITIVE, ...); a user's
model may say ``bad`` / ``good`` or five star ratings. Without a map, the names lingtest knows
are read directly; with ``models.label_map`` (per model) every own label is mapped onto neg /
neutral / pos and the probabilities of labels mapped to one target are summed (a 5-star
model's 1 and 2 stars are one ``neg``). The result is a column *group* per sentiment label:
``aggregate`` turns the model's probabilities into lingtest's.
"""
from __future__ import annotations

import numpy as np

from lingtest.tasks.core.errors import LingtestError

LABELS3 = ("neg", "neutral", "pos")
LABELS2 = ("neg", "pos")
KNOWN_NAMES = {"negative": "neg", "neg": "neg", "positive": "pos", "pos": "pos",
               "neutral": "neutral", "neu": "neutral"}


def _lookup(label_map: dict[str, str], label: str) -> str | None:
    """A label's target: the map's key as written, else case-insensitively."""
    if label in label_map:
        return label_map[label]
    folded = {str(k).strip().lower(): v for k, v in label_map.items()}
    return folded.get(label.strip().lower())


def sentiment_labels(own: list[str], label_map: dict[str, str] | None, model: str
                     ) -> tuple[tuple[str, ...], list[list[int]]]:
    """(LABELS2 or LABELS3, per label the own columns summed into it)."""
    own = [str(label) for label in own]
    if label_map:
        targets = [_lookup(label_map, label) for label in own]
        unmapped = [label for label, target in zip(own, targets) if target is None]
        if unmapped:
            raise LingtestError(
                f"models.label_map[{model!r}] does not map the model's labels "
                f"{unmapped} (its labels: {own}); fix: map every label onto neg, neutral or pos")
        bad = sorted({t for t in targets if t not in LABELS3})
        if bad:
            raise LingtestError(f"models.label_map[{model!r}]: targets {bad}; expected neg, "
                                f"neutral or pos")
        labels = LABELS3 if "neutral" in targets else LABELS2
        if not {"neg", "pos"} <= set(targets):
            raise LingtestError(f"models.label_map[{model!r}] maps no label onto "
                                f"{'neg' if 'neg' not in targets else 'pos'}; a sentiment "
                                f"model needs both neg and pos")
        return labels, [[i for i, t in enumerate(targets) if t == label] for label in labels]
    names = [label.strip().lower() for label in own]
    n = len(names)
    if all(name == f"label_{i}" for i, name in enumerate(names)) and n in (2, 3):
        # Generic names: textattack's SST-2 convention (0 negative, 1 positive); three labels
        # as cardiffnlp's sentiment models (0 negative, 1 neutral, 2 positive).
        return (LABELS2, [[0], [1]]) if n == 2 else (LABELS3, [[0], [1], [2]])
    mapped = {KNOWN_NAMES.get(name): i for i, name in enumerate(names)}
    for labels in (LABELS2, LABELS3):
        if len(mapped) == n and set(mapped) == set(labels):
            return labels, [[mapped[label]] for label in labels]
    raise LingtestError(
        f"model `{model}`: labels {own} are not a sentiment label set "
        f"(negative/positive[/neutral] or LABEL_0..2); fix: map every label in "
        f"models.label_map, e.g. --set 'models.label_map={{{model}: {{{suggested_map(own)}}}}}'")


def suggested_map(own: list[str]) -> str:
    """An ordinal guess for the error's example (a rating scale's lower half neg, its middle
    neutral, its upper half pos), in YAML flow style."""
    n = len(own)
    targets = ["neg" if 2 * i + 1 < n else "neutral" if 2 * i + 1 == n else "pos"
               for i in range(n)]
    return ", ".join(f"{label}: {target}" for label, target in zip(own, targets))


def is_permutation(groups: list[list[int]]) -> bool:
    return all(len(group) == 1 for group in groups)


def aggregate(probs: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """The model's probabilities (n × own labels) as lingtest's (n × len(groups)); a pure
    column selection when every group is one column, so no bit changes."""
    if is_permutation(groups):
        return probs[:, [group[0] for group in groups]]
    return np.column_stack([probs[:, group].sum(axis=1) for group in groups])
