"""The ``capabilities`` stage (S²LCT): specs → seeds → parse → masks → fill → models →
Table 3 per model, the CheckList comparison and the coverage curve (Figure 4).
Composition only: ``tasks.capabilities.method.CapabilitiesMethod`` computes."""
from __future__ import annotations

from flows.method import method_flow
from tasks.capabilities.method import CapabilitiesMethod

capabilities_flow = method_flow(CapabilitiesMethod)
