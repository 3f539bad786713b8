"""The ``adaptive`` stage (AdaTest): the tracked test trees re-scored on every model under
test, per-topic failure rates, the cross-model table and the diff against the last run."""
from __future__ import annotations

from flows.method import method_flow
from tasks.adaptive.method import Adaptive

adaptive_flow = method_flow(Adaptive)
