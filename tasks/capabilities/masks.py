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
- Sampling (``sampling="alict"``, the default, as ALiCT's ``CFGDiff.get_exp_syntax_probs``):
  per production of the seed, only the ``top_productions`` (ALiCT's NUM_TOPK = 5) most
  frequent reference productions that expand it; then at most k candidates per seed,
  uniformly without replacement. ``sampling="count"`` (the earlier behaviour) draws ∝ the
  reference count over all candidates, which lets the very frequent NP → DT ... rules
  (determiner insertions) dominate. Both use a numpy Generator seeded from the run's seed.
- ``Surface`` (optional): the seed's exact text, each word's character span and the words a
  capability template fixed. With it a mask may only open a gap at a word boundary (not
  inside "well-constructed" or "did|n't") next to at least one word that is not fixed (no
  "Do I {MASK} think that"), and the filled text is the seed's own text with the word
  inserted (no re-detokenisation).
- ``Masked.text`` joins the tokens with spaces; detokenising is the fill-in step's business.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from lingtest.tasks.capabilities.grammar import as_node, is_preterminal
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.capabilities.params import INSERTABLE_TAGS
from lingtest.tasks.data.treebank import Node, leaves

MASK = "{MASK}"
SKIP_SYMBOLS = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "#", "$", "SYM", "LS"})
PTB_TAGS = INSERTABLE_TAGS | SKIP_SYMBOLS
MAX_EMBEDDINGS = 50  # per (seed rule, reference rule) pair; reached only by very long rules
TOP_PRODUCTIONS = 5  # ALiCT's NUM_TOPK (CFGDiff.py): reference rules kept per seed production
SAMPLING = ("alict", "count")
ATTACH_LEFT = frozenset({".", ",", "!", "?", ";", ":", ")", "]", "}", "...", "%"})
ATTACH_RIGHT = frozenset({"(", "[", "{", "$", "#"})
PROPER = frozenset({"NNP", "NNPS"})

Cfg = dict[str, Counter]


@dataclass(frozen=True)
class Surface:
    """A seed's exact text, its words' character spans, which words a template fixed, and
    which keep their capital at the sentence start (proper nouns, "I", all-caps words)."""

    text: str
    spans: tuple[tuple[int, int], ...]
    fixed: tuple[bool, ...]
    keep_case: tuple[bool, ...]

    @classmethod
    def of(cls, text: str, tree: Node | str,
           open_spans: Sequence[tuple[int, int]] | None = None) -> "Surface | None":
        """Align the tree's words with ``text`` in order (None when a word is not found); a
        word is fixed unless it starts inside one of ``open_spans`` (None: all open)."""
        node = as_node(tree)
        words, tags = leaves(node), _tags(node)
        spans, at = [], 0
        for word in words:
            for form in dict.fromkeys((word, _UNESCAPE.get(word, word))):
                start = text.find(form, at)
                if start >= 0 and not text[at:start].strip():
                    break
            else:
                return None
            at = start + len(form)
            spans.append((start, at))
        opened = [(0, len(text))] if open_spans is None else list(open_spans)
        fixed = tuple(not any(a <= start < b for a, b in opened) for start, _ in spans)
        keep = tuple(t in PROPER or w == "I" or (w.isupper() and len(w) > 1)
                     for w, t in zip(words, tags))
        return cls(text, tuple(spans), fixed, keep)

    def open_gap(self, gap: int) -> bool:
        """Whether a word may be inserted before word ``gap`` (``len``: at the end)."""
        n = len(self.spans)
        left_fixed = self.fixed[gap - 1] if gap > 0 else True
        right_fixed = self.fixed[gap] if gap < n else True
        if left_fixed and right_fixed:
            return False  # inside the template's own words
        if gap in (0, n):
            return True
        between = self.text[self.spans[gap - 1][1]:self.spans[gap][0]]
        return (bool(between) and between.isspace()) or self._word(gap) in ATTACH_LEFT \
            or self._word(gap - 1) in ATTACH_RIGHT

    def _word(self, i: int) -> str:
        return self.text[self.spans[i][0]:self.spans[i][1]]

    def insert(self, gaps: Sequence[int], words: Sequence[str]) -> str:
        """The text with ``words[i]`` inserted before seed word ``gaps[i]``; the rest as is."""
        by_gap: dict[int, list[str]] = {}
        for gap, word in zip(gaps, words):
            by_gap.setdefault(gap, []).append(word)
        text, shift = self.text, 0
        for gap in sorted(by_gap):
            new = list(by_gap[gap])
            if gap == 0:
                start = self.spans[0][0] if self.spans else 0
                first = text[start + shift:start + shift + 1]
                if first.isupper():
                    new[0] = new[0][:1].upper() + new[0][1:]
                    if not self.keep_case[0]:
                        text = text[:start + shift] + first.lower() + text[start + shift + 1:]
                piece, at = " ".join(new) + " ", start
            elif gap < len(self.spans) and self._word(gap - 1) in ATTACH_RIGHT \
                    and self.spans[gap - 1][1] == self.spans[gap][0]:
                piece, at = " ".join(new) + " ", self.spans[gap][0]
            else:
                piece, at = " " + " ".join(new), self.spans[gap - 1][1]
            text = text[:at + shift] + piece + text[at + shift:]
            shift += len(piece)
        return text


_UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LCB-": "{", "-RCB-": "}", "``": '"', "''": '"'}


def _tags(tree: Node) -> list[str]:
    out: list[str] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if is_preterminal(node):
            out.append(node.label)
            continue
        stack.extend(c for c in reversed(node.children) if isinstance(c, Node))
    return out


@dataclass(frozen=True)
class Masked:
    """A seed with masks inserted by one reference production."""

    tokens: tuple[str, ...]
    mask_positions: tuple[int, ...]  # indices into tokens
    mask_symbols: tuple[str, ...]  # the symbol (POS tag, or phrase label) each mask stands for
    production: tuple[str, tuple[str, ...], tuple[str, ...]]  # (lhs, seed_rhs, ref_rhs)
    ref_count: int  # how often ref_rhs expands lhs in the treebank
    span: tuple[int, int]  # seed tokens covered by the expanded constituent
    surface: Surface | None = None  # the seed's exact text (None: re-detokenise the tokens)

    @property
    def text(self) -> str:
        return " ".join(self.tokens)

    @property
    def gaps(self) -> tuple[int, ...]:
        """Per mask, the index of the seed word it is inserted before."""
        return tuple(p - i for i, p in enumerate(self.mask_positions))

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
                    skip_symbols: frozenset[str] = SKIP_SYMBOLS,
                    surface: Surface | None = None) -> list[Masked]:
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
                masked = Masked(tuple(tokens), tuple(positions), tuple(symbols),
                                (lhs, tuple(seed_rhs), tuple(ref_rhs)), int(count), node_span,
                                surface)
                if surface is None or all(surface.open_gap(g) for g in masked.gaps):
                    out.append(masked)
    return out


def top_per_production(found: Sequence[Masked], top: int) -> list[Masked]:
    """The candidates whose reference rule is among the ``top`` most frequent ones expanding
    the same seed production (same lhs, seed rhs and span), as ALiCT keeps NUM_TOPK."""
    ranked: dict[tuple, list[tuple[int, tuple[str, ...]]]] = {}
    for m in found:
        key = (m.production[0], m.production[1], m.span)
        entry = (m.ref_count, m.production[2])
        if entry not in ranked.setdefault(key, []):
            ranked[key].append(entry)
    keep = {key: {rhs for _, rhs in sorted(v, key=lambda e: (-e[0], e[1]))[:top]}
            for key, v in ranked.items()}
    return [m for m in found if m.production[2] in keep[(m.production[0], m.production[1],
                                                           m.span)]]


def masked_sentences(seed_tree: Node | str, cfg: Cfg, k: int | None, rng: np.random.Generator,
                     sampling: str = "alict", top_productions: int = TOP_PRODUCTIONS,
                     **options) -> list[Masked]:
    """At most ``k`` candidates, sampled without replacement (see the module docstring);
    ``k=None``: every candidate (ALiCT's ``num_cfg_exp_elem = -1``)."""
    if k is not None and k < 1:
        raise LingtestError(f"capabilities.max_masks_per_seed must be >= 1 or null (got {k})")
    if sampling not in SAMPLING:
        raise LingtestError(f"capabilities.mask_sampling must be one of {', '.join(SAMPLING)} "
                            f"(got {sampling!r})")
    found = mask_candidates(seed_tree, cfg, **options)
    if sampling == "alict":
        found = top_per_production(found, top_productions)
    if k is None or len(found) <= k:
        return found
    weights = (np.array([m.ref_count for m in found], dtype=np.float64)
               if sampling == "count" else np.ones(len(found)))
    picked = rng.choice(len(found), size=k, replace=False, p=weights / weights.sum())
    return [found[i] for i in picked]
