"""Expansion quality (S²LCT steps 5–6): how many kept expansions an offline check flags.

Seed cases: the built-in specs ``--lcs`` (default LC1, LC3, LC9), ``--seeds`` seeds each
(default 6), searched and transformed as the pipeline does (``search.seed_cases``, run seed
0), parsed by the offline PCFG (``induce_pcfg`` on the PTB sample), filled by SmolLM2-135M
with the tag lexicon, ``--masks`` masked sentences per seed, ``--k`` candidates per mask and
at most ``--keep`` expansions per seed. Both sides run in the same process on the same cases:

- baseline (the earlier pipeline): masks sampled ∝ reference count over all candidates
  (``mask_sampling=count``), no template protection, re-detokenised text, word pieces
  allowed, no negator list, no agreement check, no confidence floor (``strict=False``);
- ours (``expansion.expand_capability``, the pipeline's code): ALiCT's top-5 productions per
  seed production then uniform sampling, template words protected, the seed's exact text
  kept, whole words only, negators refused, agreement checked, the floor of
  ``--floor`` nats per inserted word relative to the seed's own log-probability.

The offline grammaticality check flags an expansion when any of these holds:
``lm``: SmolLM2's mean per-token log-probability of the expansion is more than
``--lm-drop`` nats below the seed's (the floor uses the same model on the *total* per
inserted word, so this part is not independent of ours); ``surface``: the text outside the
inserted words differs from the seed's text; ``template``: a mask sits between two words of
the capability's template. The flagged share is printed per side with the reason counts, a
seeded sample of expansions of each side is written to ``--sample-out`` for reading.
Run: ``.venv/bin/python benchmarks/bench_expansion_quality.py`` (about 3–5 min on 2 cores).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lingtest.tasks.capabilities import expansion, search  # noqa: E402
from lingtest.tasks.capabilities.fill import expand, load_fill_model, tag_lexicon  # noqa: E402
from lingtest.tasks.capabilities.validation import spec_still_matches  # noqa: E402
from lingtest.tasks.capabilities.grammar import gold_tags_words, induce_pcfg  # noqa: E402
from lingtest.tasks.capabilities.masks import Surface, masked_sentences, reference_cfg  # noqa: E402
from lingtest.tasks.capabilities.specs import load_specs  # noqa: E402
from lingtest.tasks.core.paths import PACKAGE_ROOT  # noqa: E402
from lingtest.tasks.models.nlp import load_spacy  # noqa: E402

SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"
SPECS = PACKAGE_ROOT / "tasks" / "capabilities" / "specs"


def baseline(spec, cases, trees, cfg, model, nlp, polarity, tags, args) -> list[dict]:
    """The earlier selection path, kept here as the benchmark's baseline."""
    rows = []
    for case, (tree, _) in zip(cases.itertuples(index=False), trees):
        masked = masked_sentences(tree, cfg, args.masks,
                                  expansion.case_rng(0, case.case_id), sampling="count")
        if not masked:
            continue
        rule = (spec_still_matches(spec, case.expectation, polarity)
                if spec.transform is None else None)
        found = expand(masked, model, nlp, polarity, args.k, args.keep, rule, tags=tags,
                       strict=False)
        surface = Surface.of(case.text, tree, expansion.open_spans(case.text, case.provenance))
        for exp in found:
            gaps = [p - i for i, p in enumerate(
                i for i, t in enumerate(exp.masked_text.split(" ")) if t == "{MASK}")]
            inside = surface is not None and any(not _open_template(surface, g) for g in gaps)
            rows.append({"seed": case.text, "text": exp.text, "words": exp.words,
                         "template": inside})
    return rows


def _open_template(surface: Surface, gap: int) -> bool:
    n = len(surface.fixed)
    left = surface.fixed[gap - 1] if gap > 0 else True
    right = surface.fixed[gap] if gap < n else True
    return not (left and right)


def ours(spec, cases, trees, cfg, model, nlp, polarity, tags, args) -> list[dict]:
    settings = {"max_masks_per_seed": args.masks, "fill_candidates": args.k,
                "max_expansions_per_seed": args.keep, "min_logprob_per_word": args.floor}
    frame, _ = expansion.expand_capability(spec, cases, trees, cfg, model, SMOLLM, nlp,
                                           polarity, settings, 0, tags)
    seeds = dict(zip(cases["case_id"], cases["text"]))
    return [{"seed": seeds[json.loads(r.provenance)["parent_case_id"]], "text": r.text,
             "words": tuple(json.loads(r.provenance)["words"]), "template": False}
            for r in frame.itertuples(index=False)]


def _without(text: str, words) -> set[str]:
    """Lowercased texts left by deleting each inserted word (with one space) anywhere."""
    found = {text.lower()}
    for word in words:
        pattern = re.compile(rf"(?<!\w){re.escape(word.lower())}(?!\w)")
        found = {t[:m.start()].rstrip(" ") + (" " if m.start() and t[m.end():m.end() + 1] == " "
                                               else "") + t[m.end():].lstrip(" ")
                 if m.start() else t[m.end():].lstrip(" ")
                 for t in found for m in pattern.finditer(t)}
    return found


def flags(rows: list[dict], model, drop: float) -> Counter:
    """Reason counts of the offline check, and ``flagged`` (any reason) per side."""
    texts = sorted({r["seed"] for r in rows} | {r["text"] for r in rows})
    totals = dict(zip(texts, model.score(texts))) if texts else {}
    lengths = {t: len(model.tokenizer(t)["input_ids"]) + 1 for t in texts}
    out: Counter = Counter()
    for r in rows:
        mean = totals[r["text"]] / lengths[r["text"]]
        seed_mean = totals[r["seed"]] / lengths[r["seed"]]
        reasons = set()
        if mean < seed_mean - drop:
            reasons.add("lm")
        if r["seed"].lower() not in _without(r["text"], r["words"]):
            reasons.add("surface")
        if r["template"]:
            reasons.add("template")
        out.update(reasons)
        out["flagged"] += bool(reasons)
        r["flags"] = sorted(reasons)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processed", default=str(PACKAGE_ROOT / "data" / "processed"))
    ap.add_argument("--lcs", default="LC1,LC3,LC9")
    ap.add_argument("--seeds", type=int, default=6, help="seeds per capability")
    ap.add_argument("--masks", type=int, default=4)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--keep", type=int, default=5)
    ap.add_argument("--floor", type=float, default=-9.0)
    ap.add_argument("--lm-drop", type=float, default=0.5)
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--sample-out", default="/tmp/expansion_quality_sample.json")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    processed = Path(args.processed)
    nlp = load_spacy("en_core_web_sm")
    specs = load_specs(SPECS, args.lcs.split(","))
    sst = pd.read_parquet(processed / "sst.parquet")
    tagged = search.tag_sst(sst, nlp)
    polarity = search.load_word_polarity("lexicon", pd.read_parquet(processed /
                                                                    "word_polarity.parquet"))
    cases, _ = search.seed_cases(specs, tagged, polarity, args.seeds, 0)
    trees = pd.read_parquet(processed / "ptb_trees.parquet")["tree"].tolist()
    grammar, cfg = induce_pcfg(trees), reference_cfg(trees)
    tags = tag_lexicon([gold_tags_words(t)[::-1] for t in trees]
                       + list(zip(tagged["tokens"], tagged["tag"])))
    model = load_fill_model(SMOLLM, offline=True)
    sides = {"baseline (earlier pipeline)": baseline, "ours (pipeline)": ours}
    rows = {name: [] for name in sides}
    seconds = dict.fromkeys(sides, 0.0)
    for spec in specs:
        lc = cases[cases["capability"] == spec.id].reset_index(drop=True)
        parsed = expansion.parse_texts(lc["text"].tolist(), nlp, grammar)
        for name, side in sides.items():
            began = time.perf_counter()
            rows[name] += side(spec, lc, parsed, cfg, model, nlp, polarity, tags, args)
            seconds[name] += time.perf_counter() - began
    print(f"{len(cases)} seed cases of {args.lcs}; masks {args.masks}, k {args.k}, "
          f"keep {args.keep}, floor {args.floor}, lm-drop {args.lm_drop}")
    print(f"{'side':<30} {'seconds':>8} {'expansions':>10} {'flagged':>8} {'share':>6}  reasons")
    sample = {}
    for name in sides:
        found = flags(rows[name], model, args.lm_drop)
        n = len(rows[name])
        share = found["flagged"] / n if n else float("nan")
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(found.items()) if k != "flagged")
        print(f"{name:<30} {seconds[name]:8.1f} {n:10d} {found['flagged']:8d} {share:6.1%}  "
              f"{reasons}")
        pick = np.random.default_rng(0).permutation(n)[:args.sample]
        sample[name] = [{k: rows[name][i][k] for k in ("seed", "text", "flags")} for i in pick]
    Path(args.sample_out).write_text(json.dumps(sample, indent=1, ensure_ascii=False))
    print(f"samples: {args.sample_out}")


if __name__ == "__main__":
    main()
