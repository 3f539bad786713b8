"""The ``consistency`` stage (KomMKonLLM): questions → IPMs → covering arrays → derived
prompts → result database → one ``run-unit`` task per LLM (pending prompts answered in
batches) → oracle → per-model and per-question summaries, Table 4, bar charts, results.csv
and DVC metrics. Composition only: the shared method flow over ``ConsistencyMethod``
(``tasks/consistency/method.py``)."""
from __future__ import annotations

from flows.method import method_flow
from tasks.consistency.method import ConsistencyMethod

consistency_flow = method_flow(ConsistencyMethod)
