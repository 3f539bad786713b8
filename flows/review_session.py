"""``lingtest review`` as a Prefect flow run, so review sessions show in the Prefect UI beside
the stages' runs with what each one filed.

The flow ``review-session`` starts when the app starts and completes when it stops (Ctrl-C,
SIGTERM). It runs in a thread of its own, so the web server never waits for Prefect: the
session only marks the recorder due after each saved change, and the flow publishes the
Markdown artifact ``review-<tree>`` (``record.session_changes``: counts and the filed rows
with verdict and provenance) at most once per ``every_s``, and once more as it ends. The run
is named ``<tree>-<reviewer>-<start time>`` and tagged ``review``, ``tree:<file>``,
``reviewer:<name>``. A Prefect API that cannot be reached costs one warning line; the app
works on.
"""
from __future__ import annotations

import contextvars
import threading
from datetime import datetime, timezone
from typing import Callable

from prefect import flow, get_run_logger, tags
from prefect.artifacts import create_markdown_artifact

from lingtest.tasks.adaptive.review_app.record import changes_markdown, session_changes
from lingtest.tasks.adaptive.review_app.session import ReviewSession
from lingtest.tasks.core.publish import slug

ARTIFACT_EVERY_S = 2.0  # at most one artifact version per this many seconds while changes come
STOP_WAIT_S = 60.0  # how long shutdown waits for the run to complete (a temporary server starts)


class SessionRecorder:
    """Records ``session`` as one ``review-session`` flow run (see the module docstring)."""

    def __init__(self, session: ReviewSession, every_s: float = ARTIFACT_EVERY_S,
                 warn: Callable[[str], None] = print):
        self.session, self.every_s, self.warn = session, every_s, warn
        self.start_tree = session.tree
        self.started = datetime.now(timezone.utc)
        self.tree_name = session.path.name
        self.key = "review-" + slug(session.path.stem)
        self.due, self.stopping, self.running = (threading.Event(), threading.Event(),
                                                 threading.Event())
        self.flow_run_id: str | None = None
        self.counts: dict[str, int] = {}
        self.versions = 0  # artifact versions published
        self.thread: threading.Thread | None = None
        session.listeners.append(lambda _tree: self.due.set())

    def start(self) -> "SessionRecorder":
        context = contextvars.copy_context()  # Prefect's settings (API URL) as set here
        self.thread = threading.Thread(target=context.run, args=(self._run,),
                                       name="review-session", daemon=True)
        self.thread.start()
        return self

    def stop(self, timeout: float = STOP_WAIT_S) -> bool:
        """End the run (Completed, after a last artifact); False if it did not end in time."""
        self.stopping.set()
        if self.thread is None:
            return True
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _run(self) -> None:
        s = self.session
        try:
            with tags("review", f"tree:{self.tree_name}", f"reviewer:{s.settings.reviewer}"):
                self.record(tree=self.tree_name, reviewer=s.settings.reviewer,
                            path=str(s.path), models=list(s.model_ids),
                            generators=list(s.generators),
                            started=self.started.strftime("%Y%m%d-%H%M%S"))
        except Exception as error:  # noqa: BLE001 - any Prefect failure: warn, keep serving
            first = (str(error).strip().splitlines() or [""])[0][:200]
            self.warn(f"lingtest review: this session is not recorded in Prefect "
                      f"({type(error).__name__}: {first}); the app works on")

    @flow(name="review-session", flow_run_name="{tree}-{reviewer}-{started}")
    def record(self, tree: str, reviewer: str, path: str, models: list[str],
               generators: list[str], started: str) -> dict[str, int]:
        """The session's flow run: publish the changes when due, until the app stops."""
        from prefect.runtime import flow_run

        self.flow_run_id = flow_run.get_id()
        logger = get_run_logger()
        logger.info("review of %s by %s; models %s; generators %s", path, reviewer,
                    ", ".join(models), ", ".join(generators))
        self.running.set()
        self._publish()
        while not self.stopping.is_set():
            if self.due.wait(0.25):
                self.due.clear()
                try:
                    self._publish()
                except Exception as error:  # noqa: BLE001 - the API hiccuped: next time
                    logger.warning("artifact not updated (%s); retried in %.0f s", error,
                                   self.every_s)
                    self.due.set()
                else:
                    logger.info("saved so far: %s", self._counts_line())
                self.stopping.wait(self.every_s)  # a burst of clicks: one version per every_s
        self.due.clear()
        self._publish()
        logger.info("review session ended: %s", self._counts_line())
        return self.counts

    def _counts_line(self) -> str:
        return ", ".join(f"{n} {name}" for name, n in self.counts.items())

    def _publish(self) -> None:
        s = self.session
        counts, rows = session_changes(self.start_tree, s.tree)
        facts = {"tree": str(s.path), "reviewer": s.settings.reviewer,
                 "started (UTC)": self.started.strftime("%Y-%m-%d %H:%M:%S"),
                 "models": ", ".join(s.model_ids), "driving model": s.driving.model_id,
                 "generators": ", ".join(s.generators)}
        create_markdown_artifact(
            changes_markdown(f"Review of {self.tree_name}", counts, rows, facts),
            key=self.key, description=f"lingtest review of {s.path} by {s.settings.reviewer}")
        self.counts = counts
        self.versions += 1
