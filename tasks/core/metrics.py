"""One shape for every stage's DVC metrics (``reports/<stage>/metrics.json``), so
``dvc metrics show`` / ``dvc exp show`` read the same columns for every stage:

    {"setting": "<short string>", "<model>": {"<metric>": number, ...}, ..., "all": {...}}

Each model's metrics are flat (nested names joined with dots: ``CR2.P_A``) and numbers only;
a missing number is left out, not null. Numbers that belong to no model (table sizes, case
counts) go under the pseudo-model ``all``. Anything else (definitions, versions, revisions)
belongs in the stage's ``provenance.json``: ``publish`` checks every metrics dict with
``check_metrics_shape`` and fails on the first value that breaks the shape.
"""
from __future__ import annotations

import math
from numbers import Real

from lingtest.tasks.core.errors import LingtestError

FILE = "metrics.json"  # inside reports/<stage>/
SETTING = "setting"
ALL = "all"            # the pseudo-model of stage-wide numbers
SETTING_CHARS = 80     # a column of `dvc exp show`, not a paragraph


def flat(values: dict, prefix: str = "") -> dict[str, float | int]:
    """``values`` with nested dicts joined into dotted names; None, NaN and numpy scalars
    made JSON-ready (None and NaN dropped, numpy scalars as Python numbers)."""
    out: dict[str, float | int] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat(value, f"{name}."))
            continue
        if hasattr(value, "item") and not isinstance(value, (list, tuple)):
            value = value.item()  # numpy scalar
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        out[name] = value
    return out


def stage_metrics(setting: str, models: dict[str, dict], stage_wide: dict | None = None
                  ) -> dict:
    """The one shape: ``setting``, each model's flattened numbers, then ``all``'s (models
    left with no number are dropped)."""
    out: dict = {SETTING: setting}
    for model, values in models.items():
        numbers = flat(values)
        if numbers:
            out[str(model)] = numbers
    if stage_wide:
        out[ALL] = flat(stage_wide)
    return check_metrics_shape(out, "stage_metrics")


def verdict_metrics(verdicts) -> dict[str, float | int]:
    """A model's ``fail_%`` over its decided (pass/fail) verdicts, and ``undefined`` (answers
    that named no label) only when there are any, so a model that always answers keeps the
    metric keys it had (``dvc metrics diff`` shows no new column for it)."""
    from lingtest.tasks.core.schema import DECIDED, UNDEFINED

    verdicts = [str(v) for v in verdicts]
    judged = [v for v in verdicts if v in DECIDED]
    undefined = verdicts.count(UNDEFINED)
    out: dict[str, float | int] = {}
    if judged:
        out["fail_%"] = float(100 * (sum(v == "fail" for v in judged) / len(judged)))
    if undefined:
        out["undefined"] = undefined
    return out


def check_metrics_shape(metrics: dict, where: str) -> dict:
    """``metrics`` when it has the one shape, else one ``LingtestError`` naming ``where``
    and the offending key (a stage that writes a string or a flag fails here, loudly)."""
    def fail(what: str) -> None:
        raise LingtestError(f"{where}: {what}; a stage's metrics are "
                            f"{{'{SETTING}': str, <model or '{ALL}'>: {{<metric>: number}}}} "
                            "(non-numeric facts belong in provenance)")

    if not isinstance(metrics, dict):
        fail(f"metrics are a {type(metrics).__name__}, not a dict")
    setting = metrics.get(SETTING)
    if not isinstance(setting, str) or not setting.strip() or len(setting) > SETTING_CHARS:
        fail(f"'{SETTING}' must be a non-empty string of at most {SETTING_CHARS} characters, "
             f"not {setting!r}")
    for model, values in metrics.items():
        if model == SETTING:
            continue
        if not isinstance(model, str) or not model.strip():
            fail(f"model key {model!r} is no name")
        if not isinstance(values, dict) or not values:
            fail(f"{model!r} holds {values!r}, not a dict of metric → number")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, Real):
                fail(f"{model}.{name} is {value!r} ({type(value).__name__}), not a number")
            if not math.isfinite(value):
                fail(f"{model}.{name} is {value!r}: leave a missing number out")
    return metrics


def lookup(tree: object, dotted: str) -> object | None:
    """The value at ``dotted`` in nested dicts whose keys may hold dots themselves (a model
    ``Qwen2.5-0.5B``, a metric ``CR2.P_A``): at each level the longest key that matches."""
    if dotted == "":
        return tree
    if not isinstance(tree, dict):
        return None
    for key in sorted((k for k in tree if isinstance(k, str)), key=len, reverse=True):
        if dotted == key:
            return tree[key]
        if dotted.startswith(f"{key}."):
            found = lookup(tree[key], dotted[len(key) + 1:])
            if found is not None:
                return found
    return None
