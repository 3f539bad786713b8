"""Stop a generated answer once its JSON value is complete, so no output cap cuts it.

The consistency prompt asks for a JSON Boolean; a model that wraps it in an object
(``{"answer": true, "reason": "…"}``) needs more than a small token budget, and a cap that
cuts the object leaves an unreadable answer (the guide sets no cap). Local generation
therefore runs under a generous cap and stops each row as soon as its answer is complete:

- the first ``{`` or ``[`` opens the value; it is complete when brackets balance again
  (brackets inside JSON strings, escapes included, do not count);
- when a Markdown fence (```) opened before the value, the answer is complete at the fence
  that closes it, so a fenced answer keeps its closing fence.

Text that opens no JSON value (``Yes, it is.``) runs to the end-of-sequence token or the cap,
unless it is caught in a repetition loop (``looping``): greedy decoding that has repeated the
same span three times (whitespace aside, so a JSON object nesting itself deeper counts) does
not leave it, and a loop that ran on to the cap took half the consistency stage's time.
"""
from __future__ import annotations

import torch

from lingtest.tasks.models.registry import transformers_classes

# imported under the lock models load under: a lazy import beside a loading thread races
StoppingCriteria, StoppingCriteriaList = transformers_classes("StoppingCriteria",
                                                              "StoppingCriteriaList")

_OPEN, _CLOSE = "{[", "}]"


def json_end(text: str) -> int | None:
    """The index just past the answer's complete JSON value (and its closing fence, when a
    fence opened before it), or None while it is incomplete or none has started."""
    start = next((i for i, ch in enumerate(text) if ch in _OPEN), None)
    if start is None:
        return None
    depth, quoted, escaped = 0, False, False
    for index in range(start, len(text)):
        ch = text[index]
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                end = index + 1
                if "```" not in text[:start]:
                    return end
                fence = text.find("```", end)
                return None if fence < 0 else fence + 3
    return None


LOOP_CHARS = 80  # the span (whitespace collapsed) whose repeats make a loop …
LOOP_REPEATS = 3  # … and how often the answer must hold it


def looping(text: str) -> bool:
    """Whether the answer ends in a repetition loop: its last ``LOOP_CHARS`` characters
    (whitespace collapsed) occur ``LOOP_REPEATS`` times in it, without overlap."""
    flat = " ".join(text.split())
    return (len(flat) >= LOOP_CHARS * LOOP_REPEATS
            and flat.count(flat[-LOOP_CHARS:]) >= LOOP_REPEATS)


class JSONAnswerStop(StoppingCriteria):
    """Per row: done once the new tokens hold a complete JSON answer (``json_end``) or
    repeat themselves (``looping``): a loop does not close its JSON, the cap only wastes
    time."""

    def __init__(self, tokenizer, prompt_width: int):
        self.tokenizer = tokenizer
        self.width = prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.width:], skip_special_tokens=True)
        return torch.tensor([json_end(text) is not None or looping(text) for text in texts],
                            device=input_ids.device, dtype=torch.bool)
