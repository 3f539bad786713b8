"""Alerts: a failed or crashed run, or a regression the user defines, posts to a webhook.

Delivery is Prefect's ``CustomWebhookNotificationBlock`` (Slack-compatible ``{"text": ...}``),
called from flow-run state hooks (``on_failure`` / ``on_crashed``) in the run's own process,
not from a server automation: a manual ``lingtest run`` usually reports to a temporary server
that is gone before an automation could act, and the hooks behave the same with or without
``lingtest ui``. The URL (its path often holds the token) is masked to its host in every log
line and dump.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import pandas as pd

    from lingtest.tasks.core.sections import AlertRule

NOTIFY_ENV = "LINGTEST_NOTIFY_URL"  # `lingtest serve --notify`: not a flow parameter (UI-visible)
RESULT_KEYS = ("case_id", "model_id", "distance", "dictionary", "rule", "threshold_kind")


def mask_url(url: str | None) -> str | None:
    """``https://hooks.example.com/***``: scheme and host only (user, path and query hidden)."""
    from urllib.parse import urlsplit

    if not url:
        return url
    parts = urlsplit(url)
    if not parts.hostname:
        return "***"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/***"


def webhook_problem(url: str) -> str | None:
    """What makes ``url`` no webhook (said without echoing it: its path is its token)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    return None if ok else ("expected an http(s):// webhook URL, e.g. "
                            "https://hooks.slack.com/services/...")


def webhook(params_url: str | None) -> str | None:
    """The URL to notify: ``serve --notify`` (through the environment) over ``runtime.notify_url``."""
    return os.environ.get(NOTIFY_ENV) or params_url


def send(url: str | None, text: str, logger: logging.Logger | None = None) -> bool:
    """Post ``{"text": text}``; a webhook that fails is logged (masked), never fails the run."""
    if not url:
        return False
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    logger = logger or logging.getLogger("lingtest")
    block = CustomWebhookNotificationBlock(name="lingtest", url=url,
                                           json_data={"text": "{{body}}"})
    try:
        block.notify(text, _sync=True)
    except Exception as error:  # noqa: BLE001 - an alert must not turn a run's state
        message = str(error).replace(url, mask_url(url) or "")
        logger.warning("alert to %s failed: %s", mask_url(url), message[:300])
        return False
    logger.info("alert sent to %s", mask_url(url))
    return True


_WRAPPERS = re.compile(r"^(?:Flow run encountered an exception: )?"
                       r"(?:RuntimeError: dvc (?:exp run|repro)\b[^\n]*? failed \(\d+\): )?"
                       r"(?:lingtest: error: )?")  # the alert itself starts "lingtest:"


def error_line(text: str | None) -> str:
    """What went wrong, in one line: the last line naming an error, and before it the stage's
    own when DVC's "failed to reproduce" wraps it (each cut to 500 characters, marked …)."""
    lines = [_WRAPPERS.sub("", line.strip()) or line.strip()
             for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return "(no message)"
    named = [line for line in lines if re.search(r"error|exception|failed|not found", line, re.I)]
    if not named:
        return _cut(lines[0])
    wrapper = [line for line in named if "failed to reproduce" in line]
    cause = [line for line in named if "failed to reproduce" not in line]
    if wrapper and cause:
        return f"{_cut(cause[-1])} ({_cut(wrapper[-1])})"
    return _cut(named[-1])


def _cut(line: str, limit: int = 500) -> str:
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _ui_link(flow_run) -> str | None:
    """The run's page on a ``lingtest ui`` / configured server; none for a temporary server."""
    if not os.environ.get("PREFECT_API_URL"):
        return None
    from prefect.utilities.urls import url_for

    try:
        return url_for(flow_run)
    except Exception:  # noqa: BLE001 - a link is a courtesy
        return None


def failure_text(what: str, flow_run, state) -> str:
    """One Slack line: what, the run, its state, the error line and the UI link."""
    link = _ui_link(flow_run)
    return (f"lingtest: {what} run {flow_run.name} {state.name}: {error_line(state.message)}"
            + (f" — {link}" if link else ""))


def failure_hook(what: str, url: str | None) -> Callable:
    """An ``on_failure`` / ``on_crashed`` hook posting ``failure_text`` to ``url``."""
    def hook(flow, flow_run, state) -> None:
        from lingtest.tasks.core.run_lock import INSIDE_REPRO

        if os.environ.get(INSIDE_REPRO):  # a stage under a scheduled rerun: that one alerts
            return
        send(webhook(url), failure_text(what, flow_run, state))
    return hook


def with_failure_alerts(flow, what: str, url: str | None):
    """``flow`` with the failure hooks added when a webhook is configured."""
    if not webhook(url):
        return flow
    hook = failure_hook(what, url)
    return flow.with_options(on_failure=[*flow.on_failure_hooks, hook],
                             on_crashed=[*flow.on_crashed_hooks, hook])


# --------------------------------------------------------------------------- regressions

def read_metric(root: Path, metric: str) -> float | None:
    """The number at ``FILE:KEY`` (dotted key into JSON/YAML; a model or metric name may
    hold dots itself: ``Qwen2.5-0.5B.CR2.P_A``), or None when absent."""
    from lingtest.tasks.core.errors import LingtestError
    from lingtest.tasks.core.io import parse_yaml, read_input_text
    from lingtest.tasks.core.metrics import lookup

    path, _, key = metric.partition(":")
    try:  # a pipe or a device in its place is no metrics file either (never read)
        node = lookup(parse_yaml(read_input_text(root / path), root / path), key)
    except LingtestError:
        return None
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def snapshot_results(rules: list["AlertRule"], root: Path,
                     stages: list[str]) -> dict[str, "pd.DataFrame"]:
    """Each stage's per-case results (``data/interim/<stage>/results.parquet``) as they are
    now, the previous run for a ``cases: broken`` rule (none read without such a rule)."""
    import pandas as pd

    found = {}
    if not any(rule.cases for rule in rules):
        return found
    for stage in stages:
        path = root / "data" / "interim" / stage / "results.parquet"
        if path.is_file():
            found[stage] = pd.read_parquet(path)
    return found


def broken_cases(before: dict[str, "pd.DataFrame"], root: Path) -> dict[str, int]:
    """Per stage: cases that passed in ``before`` and do not pass now."""
    import pandas as pd

    from lingtest.tasks.core.schema import change_counts, compare_results

    counts = {}
    for stage, old in before.items():
        path = root / "data" / "interim" / stage / "results.parquet"
        if not path.is_file():
            continue
        new = pd.read_parquet(path)
        keys = [k for k in RESULT_KEYS if k in old.columns and k in new.columns]
        counts[stage] = change_counts(compare_results(old, new, keys))["broken"]
    return counts


def regressions(rules: list["AlertRule"], root: Path,
                before: dict[str, "pd.DataFrame"]) -> list[str]:
    """One line per rule that fires (a metric it cannot read fires too: a silent rule would
    look like good news)."""
    fired = []
    broken = None
    for rule in rules:
        if rule.metric is not None:
            value = read_metric(root, rule.metric)
            if value is None:
                fired.append(f"{rule.metric}: no number there (check runtime.alerts)")
            elif rule.above is not None and value > rule.above:
                fired.append(f"{rule.metric} = {value:g}, above {rule.above:g}")
            elif rule.below is not None and value < rule.below:
                fired.append(f"{rule.metric} = {value:g}, below {rule.below:g}")
        else:
            broken = broken_cases(before, root) if broken is None else broken
            for stage, count in broken.items():
                if count > rule.above:
                    fired.append(f"{stage}: {count} case(s) passed in the previous run and "
                                 f"fail now (more than {rule.above:g})")
    return fired


def metrics_files(root: Path) -> set[str]:
    """The metrics files ``dvc.yaml`` declares, top-level or in a stage (what an alert's
    FILE may name)."""
    import yaml

    try:
        spec = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))
        stages = spec["stages"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return set()
    files = set()
    for entries in [spec.get("metrics")] + [stage.get("metrics") for stage in stages.values()]:
        for entry in entries or []:
            files.update(entry if isinstance(entry, dict) else [entry])
    return files


def check_rules(rules: list["AlertRule"], root: Path) -> None:
    """Before anything runs: each metric rule names a file the pipeline writes (or that
    exists), and a key present when the file exists."""
    from lingtest.tasks.core.errors import LingtestError

    if os.environ.get(NOTIFY_ENV) and webhook_problem(os.environ[NOTIFY_ENV]):
        raise LingtestError(f"{NOTIFY_ENV} (serve --notify): "
                            f"{webhook_problem(os.environ[NOTIFY_ENV])}; or unset it")
    declared = metrics_files(root)
    for index, rule in enumerate(rules):
        if rule.metric is None:
            continue
        path, _, key = rule.metric.partition(":")
        where = f"runtime.alerts[{index}].metric {rule.metric!r}"
        if path not in declared and not (root / path).is_file():
            raise LingtestError(f"{where}: {path} is neither a metrics file of dvc.yaml nor an "
                                f"existing file; metrics files: {', '.join(sorted(declared))}")
        if (root / path).is_file() and read_metric(root, rule.metric) is None:
            raise LingtestError(f"{where}: {path} has no number at {key}")
