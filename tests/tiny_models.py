"""Tiny language models made in a test: no seq2seq model ships in a package, and the packaged
SmolLM2 seldom answers in JSON, so the LLM backends' stop rule is tested on models taught
(a few hundred optimiser steps on one fixed answer) to answer in JSON and then talk on."""
from __future__ import annotations

from pathlib import Path


def minilm_tokenizer():
    """The packaged MiniLM's WordPiece tokenizer (on disk, offline)."""
    from transformers import AutoTokenizer

    from lingtest.tasks.models.registry import resolve

    return AutoTokenizer.from_pretrained(resolve("sentence-transformers/all-MiniLM-L6-v2",
                                                 "encoder").path)


def fit_and_save(model, tokenizer, inputs: dict, folder: Path, steps: int = 120) -> Path:
    """``steps`` of Adam (lr 0.01) on ``model(**inputs).loss``, one thread (tiny matrices run
    several times faster so), then model and tokenizer saved to ``folder``."""
    import torch

    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            loss = model(**inputs).loss
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
