"""S²LCT's reference CFG and mask identification (Algorithm 1 of the paper).

Why: S²LCT expands a seed sentence along the syntax that real English uses. The reference
CFG is the set of productions lhs → rhs of the Penn Treebank sample (``ptb_trees``: function
tags and traces already stripped), with their counts; lexical productions (tag → word) are
left out. For each production lhs → seed_rhs of a seed's tree, every reference production
lhs → ref_rhs whose rhs contains seed_rhs as an order-preserving sub-sequence (and is
longer) yields the seed with the extra symbols inserted as ``{MASK}`` tokens where they
fall: seed (FRAG (CC Or) (NP (DT both)) (. .)) with NP → DT NNS gives "Or both {MASK} ."
(masked symbol NNS), which the fill-in step turns into "Or both sides ." when the proposed
word is tagged NNS in context.

Choices (the paper leaves them open):

- Where seed_rhs embeds in ref_rhs in several ways (seed NP → DT NN in NP → DT NN NN), each
  embedding is its own candidate ("the {MASK} movie" and "the movie {MASK}"); candidates
  with the same tokens and masked symbols are kept once.
- At most ``max_insertions`` symbols are inserted per production (default 2, as ALiCT's
  released ``CFGExpander.py``: reference rules shorter than the seed rule + COMP_LENGTH 3).
- Only POS tags are inserted by default (``phrasal=False``): the fill-in step proposes one
  word per mask and can validate it only by its POS, so a reference rule that would insert
  a phrase (PP, ADJP, SBAR ...) is skipped. With ``phrasal=True`` a phrasal symbol becomes a
  single ``{MASK}`` with the phrase label recorded as its symbol.
- Punctuation and symbol tags (``SKIP_SYMBOLS``) are never inserted: a filled-in comma or
  bracket adds no word for a capability test to exercise.
- Sampling: at most k candidates per seed, without replacement, each with probability
  proportional to the reference count of its production (frequent English syntax first),
  from a numpy Generator seeded from the run's seed, so the sample is deterministic.
- ``Masked.text`` joins the tokens with spaces; detokenising is the fill-in step's business.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from tasks.capabilities.grammar import as_node, is_preterminal
from tasks.core.errors import LingtestError
from tasks.data.treebank import Node, leaves

MASK = "{MASK}"
PTB_TAGS = frozenset("""CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR
RBS RP SYM TO UH VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB # $ . , : `` '' -LRB- -RRB-""".split())
SKIP_SYMBOLS = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "#", "$", "SYM", "LS"})
MAX_EMBEDDINGS = 50  # per (seed rule, reference rule) pair; reached only by very long rules

Cfg = dict[str, Counter]


@dataclass(frozen=True)
class Masked:
    """A seed with masks inserted by one reference production."""

    tokens: tuple[str, ...]
    mask_positions: tuple[int, ...]  # indices into tokens
    mask_symbols: tuple[str, ...]  # the symbol (POS tag, or phrase label) each mask stands for
    production: tuple[str, tuple[str, ...], tuple[str, ...]]  # (lhs, seed_rhs, ref_rhs)
    ref_count: int  # how often ref_rhs expands lhs in the treebank
    span: tuple[int, int]  # seed tokens covered by the expanded constituent

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    def fill(self, words: Sequence[str]) -> list[str]:
        """The tokens with one word per mask, in mask order."""
        if len(words) != len(self.mask_positions):
            raise LingtestError(f"{len(self.mask_positions)} mask(s) need as many words "
                                f"(got {len(words)}) for: {self.text}")
        out = list(self.tokens)
        for pos, word in zip(self.mask_positions, words):
            out[pos] = word
        return out


def reference_cfg(trees: Iterable[Node | str]) -> Cfg:
    """lhs → Counter of rhs tuples over every non-lexical production of ``trees``."""
    cfg: Cfg = {}
    for tree in trees:
        stack = [as_node(tree)]
        while stack:
            node = stack.pop()
            if is_preterminal(node):
                continue
            kids = [c for c in node.children if isinstance(c, Node)]
            if len(kids) != len(node.children):
                continue  # words beside constituents: not a CFG production
            cfg.setdefault(node.label, Counter())[tuple(c.label for c in kids)] += 1
            stack.extend(kids)
    return cfg


def seed_productions(tree: Node) -> list[tuple[str, tuple[str, ...], list[tuple[int, int]]]]:
    """(lhs, rhs, token span of each child) of each phrasal node, in pre-order.

    Preterminals (tag → word) are lexical, and a node with words beside constituents is no
    CFG production: neither is returned, though their words still count for the spans.
    """
    out: list[tuple[str, tuple[str, ...], list[tuple[int, int]]]] = []

    def walk(node: Node, start: int) -> int:
        if is_preterminal(node):
            return start + 1
        entry = len(out)
        spans, end = [], start
        for child in node.children:
            new_end = end + 1 if isinstance(child, str) else walk(child, end)
            spans.append((end, new_end))
            end = new_end
        if all(isinstance(c, Node) for c in node.children):
            out.insert(entry, (node.label, tuple(c.label for c in node.children), spans))
        return end

    walk(tree, 0)
    return out


def embeddings(seed_rhs: Sequence[str], ref_rhs: Sequence[str],
               limit: int = MAX_EMBEDDINGS) -> list[tuple[int, ...]]:
    """Positions in ``ref_rhs`` where ``seed_rhs`` occurs as an order-preserving sub-sequence."""
    out: list[tuple[int, ...]] = []

    def extend(i: int, j: int, acc: tuple[int, ...]) -> None:
        if len(out) >= limit:
            return
        if i == len(seed_rhs):
            out.append(acc)
            return
        for p in range(j, len(ref_rhs) - (len(seed_rhs) - i) + 1):
            if ref_rhs[p] == seed_rhs[i]:
                extend(i + 1, p + 1, acc + (p,))

    extend(0, 0, ())
    return out


def is_subsequence(seed_rhs: Sequence[str], ref_rhs: Sequence[str]) -> bool:
    return bool(embeddings(seed_rhs, ref_rhs, limit=1))


def _insert(words: Sequence[str], spans: Sequence[tuple[int, int]], node_span: tuple[int, int],
            ref_rhs: Sequence[str], embedded: tuple[int, ...]) -> tuple[list[str], list[int], list[str]]:
    """Words with masks for the ref symbols outside ``embedded``; mask positions and symbols."""
    gaps: dict[int, list[str]] = {}
    seed_i = 0
    for p, sym in enumerate(ref_rhs):
        if seed_i < len(embedded) and embedded[seed_i] == p:
            seed_i += 1
            continue
        at = spans[seed_i - 1][1] if seed_i > 0 else node_span[0]  # after the last seed child
        gaps.setdefault(at, []).append(sym)
    tokens: list[str] = []
    positions: list[int] = []
    symbols: list[str] = []
    for t in range(len(words) + 1):
        for sym in gaps.get(t, []):
            positions.append(len(tokens))
            symbols.append(sym)
            tokens.append(MASK)
        if t < len(words):
            tokens.append(words[t])
    return tokens, positions, symbols


def mask_candidates(seed_tree: Node | str, cfg: Cfg, max_insertions: int | None = 2,
                    phrasal: bool = False,
                    skip_symbols: frozenset[str] = SKIP_SYMBOLS) -> list[Masked]:
    """Every masked sentence Algorithm 1 finds for the seed (see module docstring)."""
    tree = as_node(seed_tree)
    words = leaves(tree)
    out: list[Masked] = []
    seen: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
    for lhs, seed_rhs, spans in seed_productions(tree):
        node_span = (spans[0][0], spans[-1][1])
        refs = sorted(cfg.get(lhs, Counter()).items(), key=lambda kv: (-kv[1], kv[0]))
        for ref_rhs, count in refs:
            extra = len(ref_rhs) - len(seed_rhs)
            if extra <= 0 or (max_insertions is not None and extra > max_insertions):
                continue
            inserted = Counter(ref_rhs) - Counter(seed_rhs)  # the same for every embedding
            if any(s in skip_symbols or (not phrasal and s not in PTB_TAGS) for s in inserted):
                continue
            for embedded in embeddings(seed_rhs, ref_rhs):
                tokens, positions, symbols = _insert(words, spans, node_span, ref_rhs, embedded)
                key = (tuple(tokens), tuple(symbols))
                if key in seen:
                    continue
                seen.add(key)
                out.append(Masked(tuple(tokens), tuple(positions), tuple(symbols),
                                  (lhs, tuple(seed_rhs), tuple(ref_rhs)), int(count), node_span))
    return out


def masked_sentences(seed_tree: Node | str, cfg: Cfg, k: int, rng: np.random.Generator,
                     **options) -> list[Masked]:
    """At most ``k`` candidates, sampled without replacement ∝ their production's count."""
    if k < 1:
        raise LingtestError(f"capabilities.max_masks_per_seed must be >= 1 (got {k})")
    found = mask_candidates(seed_tree, cfg, **options)
    if len(found) <= k:
        return found
    weights = np.array([m.ref_count for m in found], dtype=np.float64)
    picked = rng.choice(len(found), size=k, replace=False, p=weights / weights.sum())
    return [found[i] for i in picked]
