"""The ``contrastive`` stage (COSTELLO): composition only. ``ContrastiveMethod``
(``tasks/contrastive/method.py``) on the shared flow (``flows/method.py``): suite → one
``run-unit`` task per model (embeddings, thresholds, downstream classifiers, ground truth,
verdicts) → Table 1, Table 2, Figure 6, thresholds, classifiers and the violation list."""
from __future__ import annotations

from flows.method import method_flow
from tasks.contrastive.method import ContrastiveMethod

contrastive_flow = method_flow(ContrastiveMethod)
