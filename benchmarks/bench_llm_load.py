"""Packaged LLM load time: the GGUF as transformers reads it (parsed three times: config,
tokenizer, weights; the baseline), the GGUF parsed once (``causal_lm._gguf_parsed_once``, how
a first load converts) and the safetensors copy the first load writes
(``lingtest.tasks.models.causal_lm.converted_dir``); SmolLM2 by default, ``--model google/gemma-3-270m``
for the Gemma 3 GGUF (assembled once first).

Each side loads in a fresh process (the process-wide instance cache would otherwise answer),
with a temporary ``LINGTEST_CACHE``; rounds alternate (GGUF ×3, GGUF ×1, copy, ...), the copy
written once before the first round; best round per side. The last line checks that all
loads give the same weights and the same greedy answer to one prompt.

Run: ``.venv/bin/python benchmarks/bench_llm_load.py [--rounds 3] [--model ID]``; also
prints each side's peak resident memory (the process's ``ru_maxrss`` once loaded).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SIDES = {"gguf-thrice": "GGUF, parsed 3 times by transformers (baseline)",
         "gguf": "GGUF, parsed once", "copy": "safetensors copy"}

ONE_LOAD = """
import contextlib, hashlib, json, resource, sys, time, torch
from lingtest.tasks.models import causal_lm
from lingtest.tasks.models.registry import resolve
res = resolve(sys.argv[1], "causal_lm").require()
use_copy = sys.argv[2] == "copy"
copy = causal_lm.converted_dir(res)
if not use_copy:
    causal_lm.converted_dir = lambda res: None  # the GGUF path, as before the copy existed
if sys.argv[2] == "gguf-thrice":
    causal_lm._gguf_parsed_once = contextlib.nullcontext  # transformers' own three parses
began = time.perf_counter()
lm = causal_lm._load(res, torch.device("cpu"), True)
seconds = time.perf_counter() - began
peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # before the check below
weights = hashlib.sha256(b"".join(t.numpy().tobytes() for t in lm.model.state_dict().values()))
ids = lm.tokenizer("Is Paris in France? Answer:", return_tensors="pt")
answer = lm.tokenizer.decode(lm.model.generate(**ids, max_new_tokens=8, do_sample=False)[0])
print(json.dumps({"seconds": seconds, "weights": weights.hexdigest()[:16], "answer": answer,
                  "copy_exists": (copy / "model.safetensors").is_file(),
                  "peak_gb": peak_gb}))
"""


def load_once(model: str, side: str, env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", ONE_LOAD, model, side], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=MODEL, help="a packaged GGUF model id")
    args = parser.parse_args()
    env = dict(os.environ, LINGTEST_CACHE=tempfile.mkdtemp(prefix="bench-llm-load-"),
               HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    load_once(args.model, "copy", env)  # writes the copy (a GGUF load)
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for side in SIDES:
            got = load_once(args.model, side, env)
            if side not in best or got["seconds"] < best[side]["seconds"]:
                best[side] = got
    print(f"{args.model}; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, best of {args.rounds} alternating rounds")
    print("| side | seconds | × vs GGUF | peak RSS GB |\n|---|---:|---:|---:|")
    base = best["gguf-thrice"]["seconds"]
    for side, label in SIDES.items():
        print(f"| {label} | {best[side]['seconds']:.2f} | ×{base / best[side]['seconds']:.1f} | "
              f"{best[side]['peak_gb']:.2f} |")
    print(f"same weights: {len({got['weights'] for got in best.values()}) == 1}; "
          f"same greedy answer: {len({got['answer'] for got in best.values()}) == 1}")


if __name__ == "__main__":
    main()
