"""Online fetchers: the canonical sources of each raw asset, written in the mirror's layout.

Used only when the mirror lacks an asset. Each fetcher writes into a staging folder and
raises on any failure; the caller reports it with the asset's name.
"""
from __future__ import annotations

import io as _io
import json
import zipfile
from pathlib import Path
from typing import Callable

SST_URL = "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip"
CONTRAST_URL = "https://raw.githubusercontent.com/allenai/contrast-sets/main/IMDb/data"
KOMMKONLLM_URL = ("https://raw.githubusercontent.com/KomMKonLLM/KomMKonLLM/main/example/"
                  "public_questions.jsonl")
CHECKLIST_URL = "https://github.com/marcotcr/checklist (checklist/data, release_suites)"


def _get(url: str, timeout: float) -> bytes:
    import httpx

    response = httpx.get(url, timeout=timeout, follow_redirects=True)
    response.raise_for_status()
    return response.content


def _write(stage: Path, rel: str, data: bytes) -> None:
    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
    (stage / rel).write_bytes(data)


def fetch_sst(stage: Path, timeout: float) -> None:
    archive = zipfile.ZipFile(_io.BytesIO(_get(SST_URL, timeout)))
    for split in ("train", "dev", "test"):
        _write(stage, f"sst/trees/{split}.txt", archive.read(f"trees/{split}.txt"))


def _hf_parquet(repo: str, filename: str, timeout: float):
    """A data set file from the Hugging Face hub (one request, no retry loop)."""
    import os

    import pandas as pd

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/datasets/{repo}/resolve/main/{filename}"
    return pd.read_parquet(_io.BytesIO(_get(url, timeout)))


def fetch_mrpc(stage: Path, timeout: float) -> None:
    for split in ("train", "validation", "test"):
        df = _hf_parquet("nyu-mll/glue", f"mrpc/{split}-00000-of-00001.parquet", timeout)
        obj = {str(i): [f"{r.sentence1} [SEP] {r.sentence2}", int(r.label)]
               for i, r in enumerate(df.itertuples())}
        _write(stage, f"mrpc/mrpc_{split}.json", json.dumps(obj, indent=4).encode())


def fetch_boolq(stage: Path, timeout: float) -> None:
    df = _hf_parquet("google/boolq", "data/validation-00000-of-00001.parquet", timeout)
    rows = [{"question": r.question, "answer": bool(r.answer), "passage": r.passage}
            for r in df.itertuples()]
    _write(stage, "boolq/validation.json", json.dumps(rows, indent=2).encode())


def fetch_kommkonllm(stage: Path, timeout: float) -> None:
    _write(stage, "kommkonllm/public_questions.jsonl", _get(KOMMKONLLM_URL, timeout))


def fetch_contrast_sets(stage: Path, timeout: float) -> None:
    for split in ("dev", "test"):
        for kind in ("original", "contrast"):
            name = f"{split}_{kind}.tsv"
            _write(stage, f"contrast_sets/imdb/{name}", _get(f"{CONTRAST_URL}/{name}", timeout))


def nltk_fetcher(package: str) -> Callable[[Path, float], None]:
    def fetch_nltk(stage: Path, timeout: float) -> None:
        import nltk

        target = stage / "nltk_data"
        if not nltk.download(package, download_dir=str(target), quiet=True, raise_on_error=True):
            raise RuntimeError(f"nltk.download({package!r}) failed")
        if not (target / "corpora" / f"{package}.zip").is_file():
            raise RuntimeError(f"nltk.download({package!r}) wrote no corpora/{package}.zip")
    return fetch_nltk
