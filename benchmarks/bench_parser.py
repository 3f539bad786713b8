"""The vectorised CKY parser against nltk's ViterbiParser, on the same PCFG and sentences.

Grammar: ``induce_pcfg`` on the PTB sample minus the last 200 trees (the defaults of the
capabilities stage). Sentences: ``--sentences`` (default 30) SST test sentences of
``--min-tags``..``--max-tags`` (8–20) spaCy tokens, sampled with seed 0 and tagged by
en_core_web_sm.

- ours: ``Grammar.parse`` on all of them, best of ``--repeats`` rounds;
- baseline: ``nltk.ViterbiParser`` on the same grammar turned into an ``nltk.PCFG`` over tags
  (every binarised rule with its probability, plus TAG → 'TAG' with probability 1). It takes
  seconds to minutes per sentence, so it parses the sentences shortest first until
  ``--nltk-budget`` seconds are spent; ours is timed again on exactly that subset for the ratio.

Agreement: on every sentence both parsed, the Viterbi log-probabilities are compared (the
trees may differ only on exact ties) and the trees are compared after un-binarising nltk's.
Throughput on ``--bulk`` SST sentences of any length is printed too (fallbacks included).
Run: ``.venv/bin/python benchmarks/bench_parser.py`` (about 5–6 min with the default budget).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lingtest.tasks.capabilities.grammar import (SPACY_TAG_MAP, Grammar, _debinarise,  # noqa: E402
                                        induce_pcfg, split_heldout)
from lingtest.tasks.core.paths import PACKAGE_ROOT  # noqa: E402
from lingtest.tasks.data.treebank import Node, to_string  # noqa: E402


def nltk_parser(grammar: Grammar):
    """nltk's ViterbiParser over the very rules (and probabilities) our parser uses."""
    from nltk import ViterbiParser
    from nltk.grammar import PCFG, Nonterminal, ProbabilisticProduction

    prods = [ProbabilisticProduction(Nonterminal(a), [Nonterminal(x) for x in rhs], prob=p)
             for a, rhs, p in grammar.productions()]
    prods += [ProbabilisticProduction(Nonterminal(t), [t], prob=1.0) for t in grammar.tags]
    return ViterbiParser(PCFG(Nonterminal("ROOT"), prods), max_time=None)


def from_nltk(tree, words: list[str], pos: list[int]) -> Node:
    """nltk tree over tags → Node with the words back (``pos``: next word index, shared)."""
    kids = []
    for child in tree:
        if isinstance(child, str):
            kids.append(words[pos[0]])
            pos[0] += 1
        else:
            kids.append(from_nltk(child, words, pos))
    return Node(str(tree.label()), kids)


def sentences(n: int, lo: int, hi: int, grammar: Grammar, seed: int = 0) -> list[tuple]:
    """(tags, words) of n SST test sentences with lo..hi tokens that the PCFG parses fully."""
    from lingtest.tasks.models.nlp import load_spacy

    nlp = load_spacy("en_core_web_sm")
    sst = pd.read_parquet(PACKAGE_ROOT / "data" / "processed" / "sst.parquet")
    texts = sst[sst["split"] == "test"]["text"].sample(frac=1.0, random_state=seed)
    out = []
    for doc in nlp.pipe(texts, batch_size=64):
        tags, words = [t.tag_ for t in doc], [t.text for t in doc]
        if lo <= len(tags) <= hi and not grammar.parse(tags, words).fallback:
            out.append((tags, words))
            if len(out) == n:
                return out
    return out


def best_time(grammar: Grammar, sents: list[tuple], repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for tags, words in sents:
            grammar.parse(tags, words)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=30)
    ap.add_argument("--min-tags", type=int, default=8)
    ap.add_argument("--max-tags", type=int, default=20)
    ap.add_argument("--nltk-budget", type=float, default=240.0, help="seconds for nltk in all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bulk", type=int, default=300)
    args = ap.parse_args()

    ptb = list(pd.read_parquet(PACKAGE_ROOT / "data" / "processed" / "ptb_trees.parquet")["tree"])
    start = time.perf_counter()
    grammar = induce_pcfg(split_heldout(ptb, 200)[0])
    print(f"grammar: {grammar.describe()} induced in {time.perf_counter() - start:.2f} s")
    sents = sentences(args.sentences, args.min_tags, args.max_tags, grammar)
    lengths = [len(t) for t, _ in sents]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}; numpy {np.__version__}")
    print(f"sentences: {len(sents)} SST test, {min(lengths)}–{max(lengths)} tags "
          f"(mean {np.mean(lengths):.1f})")

    ours_all = best_time(grammar, sents, args.repeats)
    print(f"ours, all {len(sents)}: {ours_all:.3f} s = {len(sents) / ours_all:.1f} sentences/s, "
          f"{1000 * ours_all / len(sents):.1f} ms/sentence")

    parser = nltk_parser(grammar)
    rows, spent = [], 0.0
    for tags, words in sorted(sents, key=lambda s: len(s[0])):
        if spent >= args.nltk_budget:
            break
        mapped = [SPACY_TAG_MAP.get(t, t) for t in tags]
        start = time.perf_counter()
        best = next(parser.parse(mapped), None)
        took = time.perf_counter() - start
        spent += took
        ours = grammar.parse(mapped, words)  # the tags nltk sees (same tree, same score)
        theirs = None if best is None else _debinarise(from_nltk(best, words, [0])).children[0]
        same_tree = theirs is not None and to_string(theirs) == to_string(ours.tree)
        rows.append({"tags": len(tags), "nltk_s": took, "ours_s": best_time(grammar, [(tags, words)], 3),
                     "nltk_logp": math.log(best.prob()) if best is not None else math.nan,
                     "ours_logp": ours.log_prob, "same_tree": same_tree})
        print(f"  {len(tags):2d} tags: nltk {took:7.2f} s, ours {rows[-1]['ours_s'] * 1000:6.1f} ms, "
              f"log p {rows[-1]['nltk_logp']:.6f} vs {ours.log_prob:.6f}, same tree {same_tree}")
    table = pd.DataFrame(rows)
    nltk_per, ours_per = table["nltk_s"].mean(), table["ours_s"].mean()
    agree = np.isclose(table["nltk_logp"], table["ours_logp"], rtol=0, atol=1e-9)
    print("\n| side | sentences | tags | seconds/sentence | sentences/s |\n|---|---:|---:|---:|---:|")
    print(f"| nltk ViterbiParser | {len(table)} | {table['tags'].min()}–{table['tags'].max()} "
          f"| {nltk_per:.2f} | {1 / nltk_per:.3f} |")
    print(f"| ours, same subset | {len(table)} | {table['tags'].min()}–{table['tags'].max()} "
          f"| {ours_per:.4f} | {1 / ours_per:.1f} |")
    print(f"| ours, all | {len(sents)} | {min(lengths)}–{max(lengths)} "
          f"| {ours_all / len(sents):.4f} | {len(sents) / ours_all:.1f} |")
    print(f"\nratio nltk / ours on the same subset: ×{nltk_per / ours_per:.0f}")
    print(f"same Viterbi log-probability: {agree.sum()}/{len(table)} "
          f"(max |Δ| {np.nanmax(np.abs(table['nltk_logp'] - table['ours_logp'])):.1e}); "
          f"same tree: {table['same_tree'].sum()}/{len(table)}")

    if args.bulk:
        from lingtest.tasks.models.nlp import load_spacy

        sst = pd.read_parquet(PACKAGE_ROOT / "data" / "processed" / "sst.parquet")
        docs = list(load_spacy("en_core_web_sm").pipe(
            sst["text"].sample(args.bulk, random_state=1), batch_size=64))
        start = time.perf_counter()
        results = [grammar.parse_doc(doc) for doc in docs]
        took = time.perf_counter() - start
        print(f"\nbulk: {len(docs)} SST sentences (mean {np.mean([len(d) for d in docs]):.1f} "
              f"tokens): {took:.1f} s = {len(docs) / took:.1f} sentences/s; "
              f"{sum(r.fallback for r in results)} fallbacks")


if __name__ == "__main__":
    main()
