"""The ``adaptive-debug`` stage (AdaTest's debugging loop): fine-tune the classifier on a
tree's topic tests (and, for comparison, on CheckList data) per training seed, re-test it on
CheckList topics, SST-2 validation and the IMDb contrast sets, and report fixed / broken."""
from __future__ import annotations

from flows.method import method_flow
from tasks.adaptive.debug import DebuggingLoop

adaptive_debug_flow = method_flow(DebuggingLoop)
