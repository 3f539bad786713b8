"""Local LM engines against transformers (the baseline, float32), in one run, per task.

Same model (the packaged SmolLM2-135M-Instruct), same token ids, same threads:

- **generation**: the 27 KomMKonLLM questions as the consistency stage asks them (question +
  "? Return a JSON boolean.", chat template, greedy, ``--new-tokens``, batches of 8, the JSON
  and repetition stops); identical = same answer text;
- **scoring**: ``score`` (sum of token log-probs) of ``--sentences`` SST sentences (seed 0);
  identical = |Δ| of the sums within 1e-3, with the largest |Δ|;
- **next-token**: the LLM classifier's read of a label: log p(next token | chat prompt) with
  its default template over ``--prompts`` SST sentences, compared on the label words' first
  tokens (negative / neutral / positive, as written and capitalised); identical = same best
  label word, with the largest |Δ|.

Engines: CTranslate2 on a copy converted from the float32 de-quantised weights
(``lingtest.tasks.models.lm_engines``), at each ``--precisions``; llama.cpp (llama-cpp-python) on the
packaged GGUF itself, which is **Q4_1**: its weights are the ones transformers de-quantised,
but its matrix products run on the 4-bit blocks (activations quantised to 8 bits), so its
outputs are close to, not float-equal with, the float32 ones; it also runs one sequence at a
time (its Python API has no batched generation). tokens/s: generation counts the tokens each
side generated; scoring and next-token the tokens read. Best of ``--rounds``.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_lm_engine.py [--threads 2]``; needs
``data/processed/sst.parquet`` and the shared mirror's KomMKonLLM questions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
import pandas as pd
import torch

from lingtest.tasks.consistency.ipm import derive_prompt
from lingtest.tasks.models.causal_lm import json_answers
from lingtest.tasks.models.json_stop import json_end, looping
from lingtest.tasks.models.llm import DEFAULT_LOCAL_MODEL
from lingtest.tasks.models.llm_classifier import DEFAULT_TEMPLATE

QUESTIONS = ROOT.parent / "shared" / "mirror" / "kommkonllm" / "public_questions.jsonl"


def inputs(args) -> tuple[list[str], list[str], list[str]]:
    """Generation prompts, sentences to score, classifier prompts."""
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines()
                 if line.strip()]
    asked = [derive_prompt(q, "", "? Return a JSON boolean.", "none") for q in questions]
    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet")["text"]
    sst = sst.drop_duplicates().sample(args.sentences + args.prompts, random_state=0).tolist()
    classify = [DEFAULT_TEMPLATE.replace("{text}", t) for t in sst[args.sentences:]]
    return asked, sst[:args.sentences], classify


class Transformers:
    """The baseline: ``CausalLM`` itself."""

    name = "transformers"

    def __init__(self, lm):
        self.lm = lm

    def generate(self, prompts, new_tokens, batch):
        return self.lm.generate_batch(prompts, new_tokens, batch_size=batch,
                                      stop_after_json=True)

    def score(self, texts):
        return self.lm.score(texts)

    def next(self, rows):
        return self.lm.next_logprobs(rows).numpy()


class CTranslate2(Transformers):
    name = "ctranslate2"

    def __init__(self, lm, precision, threads):
        from lingtest.tasks.models.lm_engines import CT2CausalLM

        super().__init__(CT2CausalLM(lm, precision, threads))

    def next(self, rows):
        return self.lm.next_logprobs(rows).numpy()


class LlamaCpp:
    """llama.cpp on the packaged Q4_1 GGUF, one sequence at a time, greedy (temperature 0,
    no repetition penalty), the same token ids and the same JSON/repetition stops."""

    name = "llama.cpp"

    def __init__(self, lm, threads):
        from llama_cpp import Llama

        res = lm.resolution
        path = str(Path(res.path) / res.gguf_file)
        common = dict(model_path=path, n_ctx=2048, n_batch=512, n_threads=threads,
                      n_threads_batch=threads, verbose=False)
        self.llm = Llama(**common)
        self.all = Llama(logits_all=True, **common)  # every position's logits, for scoring
        self.lm = lm

    def generate(self, prompts, new_tokens, batch):
        lm, eos = self.lm, self.lm.tokenizer.eos_token_id
        texts, at_cap = [], []
        for prompt in prompts:
            new: list[int] = []
            for token in self.llm.generate(lm._prompt_ids(prompt, True, None), top_k=1,
                                           temp=0.0, repeat_penalty=1.0, reset=True):
                if token == eos:
                    break
                new.append(token)
                text = lm.tokenizer.decode(new, skip_special_tokens=True)
                if len(new) >= new_tokens or json_end(text) is not None or looping(text):
                    break
            texts.append(lm.tokenizer.decode(new, skip_special_tokens=True))
            at_cap.append(len(new) >= new_tokens)
        return [t.strip() for t in json_answers(lm.model_id, texts, at_cap, new_tokens)]

    def score(self, texts):
        out = []
        for text in texts:
            ids = self.lm._start + self.lm.tokenizer(text)["input_ids"]
            self.all.reset()
            self.all.eval(ids)
            logp = torch.log_softmax(torch.from_numpy(np.array(self.all.scores[:len(ids)]))
                                     .double(), dim=-1)
            out.append(float(logp[np.arange(len(ids) - 1), ids[1:]].sum()))
        return np.array(out)

    def next(self, rows):
        out = []
        for row in rows:
            self.llm.reset()
            self.llm.eval(row)
            logits = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1),
                                           shape=(self.llm.n_vocab(),))
            out.append(torch.log_softmax(torch.from_numpy(logits.copy()).double(), -1).numpy())
        return np.stack(out)


def timed(fn, rounds):
    best, out = float("inf"), None
    for _ in range(rounds):
        began = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - began)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--sentences", type=int, default=50)
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--precisions", nargs="+", default=["float32", "int8"])
    parser.add_argument("--no-llama", action="store_true", help="leave llama.cpp out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import ctranslate2

    from lingtest.tasks.models.causal_lm import load_causal_lm

    asked, sentences, classify = inputs(args)
    lm = load_causal_lm(DEFAULT_LOCAL_MODEL, offline=True, device="cpu")
    tok = lm.tokenizer
    spellings = [w for word in ("negative", "neutral", "positive") for w in (word, word.title())]
    label_ids = [tok(w, add_special_tokens=False)["input_ids"][0] for w in spellings]
    rows = [lm._prompt_ids(p, True, None) for p in classify]
    score_tokens = sum(len(tok(t)["input_ids"]) + len(lm._start) for t in sentences)
    next_tokens = sum(map(len, rows))

    engines = [(Transformers(lm), "float32")]
    engines += [(CTranslate2(lm, p, args.threads), p) for p in args.precisions]
    if not args.no_llama:
        engines.append((LlamaCpp(lm, args.threads), "Q4_1 (GGUF)"))
    for engine, _ in engines:  # warm-up: first calls allocate
        engine.generate(asked[:2], 4, 2)
        engine.score(sentences[:2])
        engine.next(rows[:2])

    results = {}
    for engine, precision in engines:
        gen_s, answers = timed(lambda: engine.generate(asked, args.new_tokens, args.batch),
                               args.rounds)
        score_s, scores = timed(lambda: engine.score(sentences), args.rounds)
        next_s, nexts = timed(lambda: engine.next(rows), args.rounds)
        made = sum(len(tok(a, add_special_tokens=False)["input_ids"]) for a in answers)
        results[(engine.name, precision)] = {
            "generation": (gen_s, made, answers), "scoring": (score_s, score_tokens, scores),
            "next-token": (next_s, next_tokens, nexts[:, label_ids])}

    base = results[("transformers", "float32")]
    print(f"SmolLM2-135M-Instruct, {platform.machine()} {platform.processor() or ''}, "
          f"{os.cpu_count()} cores, {args.threads} threads, torch {torch.__version__}, "
          f"ctranslate2 {ctranslate2.__version__}, best of {args.rounds}")
    print(f"generation: {len(asked)} KomMKonLLM prompts, {args.new_tokens} new tokens, batches "
          f"of {args.batch}; scoring: {len(sentences)} SST sentences ({score_tokens} tokens); "
          f"next-token: {len(rows)} classifier prompts ({next_tokens} tokens)\n")
    print("| task | engine | precision | seconds | tokens/s | × vs transformers | identical |"
          " max abs Δ |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for task in ("generation", "scoring", "next-token"):
        base_s, _, base_out = base[task]
        for (name, precision), found in results.items():
            seconds, tokens, out = found[task]
            if task == "generation":
                same, delta = sum(a == b for a, b in zip(out, base_out)), "—"
            elif task == "scoring":
                gap = np.abs(np.asarray(out) - base_out)
                same, delta = int((gap <= 1e-3).sum()), f"{gap.max():.1e}"
            else:
                same = int((out.argmax(1) == base_out.argmax(1)).sum())
                delta = f"{np.abs(out - base_out).max():.1e}"
            print(f"| {task} | {name} | {precision} | {seconds:.2f} | {tokens / seconds:,.0f} | "
                  f"×{base_s / seconds:.2f} | {same}/{len(out)} | {delta} |")
    differing = [(a, b) for a, b in zip(results[engines[-1][0].name, engines[-1][1]]
                                        ["generation"][2], base["generation"][2]) if a != b]
    for engine_answer, base_answer in differing[:3]:
        print(f"\n{engines[-1][0].name}: {engine_answer!r}\ntransformers: {base_answer!r}")


if __name__ == "__main__":
    main()
