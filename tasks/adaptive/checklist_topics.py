"""Which CheckList tests the debugging experiment can fix: MFT tests (one expected label per
example) with examples labelled negative or positive, the labels a binary classifier learns.
Kept apart so that pre-run validation can check ``adaptive.debug.topics`` cheaply."""
from __future__ import annotations

import pandas as pd

LEARNABLE = {0: "neg", 2: "pos"}  # CheckList labels a binary classifier can be taught
MFT = "label == labels[i]"


def learnable_topics(checklist: pd.DataFrame) -> list[str]:
    """CheckList MFT tests with at least one example a binary model can be taught."""
    mft = checklist[checklist["expectation"].eq(MFT) & checklist["label"].isin(list(LEARNABLE))]
    return sorted(mft["test"].unique())
