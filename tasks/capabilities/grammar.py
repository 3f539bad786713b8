"""The offline constituency parser of S²LCT: a PCFG induced from the Penn Treebank sample.

Why: benepar's ``benepar_en3`` (the paper's parser) is a download no package carries. Offline,
seeds are parsed by a PCFG over POS tags (spaCy's ``token.tag_``) with the words put back as
leaves, so trees are PTB-style and their productions compare with the reference CFG.

Induction: ROOT above every tree; phrasal labels annotated with their parent (``vertical=2``:
NP^S vs NP^VP), tags not; right factoring with horizontal Markovisation (``horizontal=2``:
NP → DT JJ NN NN ⇒ NP → DT NP|<JJ-NN>, NP|<JJ-NN> → JJ NP|<NN-NN>, NP|<NN-NN> → NN NN);
unary rules kept. Maximum-likelihood probabilities, unsmoothed (Markovisation generalises;
a sentence without a complete parse still gets a tree). Lexical rules are tag → word; the
tags are given, so ``Parse.log_prob`` is the log-probability of the tree over the tags.

Parsing: Viterbi CKY vectorised with numpy (see ``Grammar._cky``), unary chains from a
precomputed max-plus closure; the best tree is un-binarised (X|<...> spliced, ^parent and
ROOT dropped). Odd input never crashes: an unknown tag (after ``SPACY_TAG_MAP``) or more than
``MAX_TAGS`` tags gives a flat ``(FRAG (tag word) ...)``, no complete parse gives ``(FRAG
piece ...)`` over chart constituents covering the sentence; both are flagged.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.data.treebank import Child, Node, parse_one

ROOT = "ROOT"
FALLBACK_LABEL = "FRAG"
FORMAT_VERSION = 1
MAX_TAGS = 80  # longest sentence parsed (SST's longest has 56 tokens); the chart is O(n²)
# spaCy (OntoNotes) tags absent from the PTB sample → the PTB tag parsed in their place
SPACY_TAG_MAP = {"HYPH": ":", "NFP": ":", "_SP": ":", "ADD": "NN", "XX": "NN", "AFX": "JJ"}
EVALB_PUNCT = frozenset({",", ":", "``", "''", "."})  # evalb's COLLINS.prm deletes these


@dataclass
class Parse:
    """A parser's answer: the tree, its log-probability and whether it is a fallback."""

    tree: Node
    log_prob: float  # log P(tree over the tags); nan for a fallback tree
    fallback: bool = False
    reason: str = ""


def as_node(tree: Node | str) -> Node:
    """Accept a Node or a one-line bracketed string."""
    return parse_one(tree, "<tree>", 1) if isinstance(tree, str) else tree


def is_preterminal(node: Child) -> bool:
    return isinstance(node, Node) and len(node.children) == 1 and isinstance(node.children[0], str)


def gold_tags_words(tree: Node | str) -> tuple[list[str], list[str]]:
    """The (tags, words) of a tree's preterminals: what its sentence is parsed from."""
    pre: list[Node] = []
    stack: list[Child] = [as_node(tree)]
    while stack:
        node = stack.pop()
        if is_preterminal(node):
            pre.append(node)  # type: ignore[arg-type]
        elif isinstance(node, Node):
            stack.extend(reversed(node.children))
    return [p.label for p in pre], [str(p.children[0]) for p in pre]


def _binarise(node: Node, parent: str, h: int, v: int, out: Counter) -> str:
    """Count the binarised productions under ``node``; return the symbol that names it."""
    if is_preterminal(node):
        return node.label
    if any(isinstance(c, str) for c in node.children):
        raise ValueError(f"words mixed with constituents under {node.label}")
    sym = label = f"{node.label}^{parent}" if v >= 2 else node.label
    rest = [_binarise(c, node.label, h, v, out) for c in node.children]  # type: ignore[arg-type]
    while len(rest) > 2:
        nxt = f"{node.label}|<{'-'.join(rest[1:1 + h])}>"
        out[(sym, (rest[0], nxt))] += 1
        sym, rest = nxt, rest[1:]
    out[(sym, tuple(rest))] += 1
    return label


def _debinarise(node: Node) -> Node:
    """Splice out ``X|<...>`` nodes and drop ``^parent`` marks."""
    kids: list[Child] = []
    for child in node.children:
        if isinstance(child, str):
            kids.append(child)
        else:
            done = _debinarise(child)
            kids.extend(done.children if "|<" in child.label else [done])
    return Node(node.label.split("^", 1)[0], kids)


class Grammar:
    """A binarised PCFG over POS tags with a vectorised Viterbi CKY parser."""

    def __init__(self, counts: Counter, horizontal: int, vertical: int, n_trees: int):
        self.counts, self.horizontal, self.vertical = counts, horizontal, vertical
        self.n_trees, total = n_trees, Counter()
        for (lhs, _), c in counts.items():
            total[lhs] += c
        rhs_syms = {s for (_, rhs) in counts for s in rhs}
        self.symbols = sorted(set(total) | rhs_syms)
        self.index = {s: i for i, s in enumerate(self.symbols)}
        self.tags = sorted(rhs_syms - set(total))
        self.tag_set = frozenset(self.tags)
        if ROOT not in self.index:
            raise LingtestError("the PCFG has no ROOT rule: induce it from at least one tree")
        self.root = self.index[ROOT]
        ix = self.index
        lp = self.log_prob = {key: math.log(c / total[key[0]]) for key, c in counts.items()}
        b = np.array(sorted((ix[a], ix[r[0]], ix[r[1]], lp[(a, r)])
                            for (a, r) in counts if len(r) == 2), dtype=np.float64).reshape(-1, 4)
        self.b_parent, self.b_left, self.b_right = (b[:, j].astype(np.int64) for j in range(3))
        self.b_logp = b[:, 3]
        self._closure([(ix[a], ix[r[0]], lp[(a, r)]) for (a, r) in counts if len(r) == 1])
        self.piece_ok = np.array(["|<" not in s and s != ROOT for s in self.symbols])

    def _closure(self, unary: list[tuple[int, int, float]]) -> None:
        """Best unary chain A ⇒* B over the symbols in unary rules (Floyd–Warshall, max-plus)."""
        self.u_syms = np.array(sorted({a for a, b, _ in unary} | {b for a, b, _ in unary}), np.int64)
        pos = self.u_pos = {int(s): i for i, s in enumerate(self.u_syms)}
        u = np.full((len(pos), len(pos)), -np.inf)
        np.fill_diagonal(u, 0.0)
        for a, b, lp in unary:
            u[pos[a], pos[b]] = max(u[pos[a], pos[b]], lp)
        via = np.full(u.shape, -1, dtype=np.int64)
        for k in range(len(pos)):
            cand = u[:, k:k + 1] + u[k:k + 1, :]
            better = cand > u + 1e-12  # strict: no zero-gain detours, so chains stay finite
            u = np.where(better, cand, u)
            via[better] = k
        self.u_close, self.u_via = u, via

    def _chain(self, a: int, b: int) -> list[int]:
        """Symbols of the best unary chain from ``a`` down to ``b``, both included."""
        def walk(i: int, j: int) -> list[int]:
            k = self.u_via[i, j]
            return [i, j] if k < 0 else walk(i, k)[:-1] + walk(k, j)

        return [a] if a == b else [int(self.u_syms[i]) for i in walk(self.u_pos[a], self.u_pos[b])]

    def _unary(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Apply the unary closure to (symbols × spans) scores; return scores and chain ends."""
        child = np.broadcast_to(np.arange(scores.shape[0])[:, None], scores.shape).copy()
        sub = scores[self.u_syms]
        live = np.flatnonzero(np.isfinite(sub).any(axis=1))  # chain ends present in some span
        if len(live) == 0:
            return scores, child
        cand = self.u_close[:, live, None] + sub[live][None, :, :]  # (m, live, spans)
        arg = cand.argmax(axis=1)
        best = np.take_along_axis(cand, arg[:, None, :], axis=1)[:, 0, :]
        out = scores.copy()
        out[self.u_syms] = np.maximum(best, sub)  # ties go to the identity: no needless chain
        child[self.u_syms] = np.where(best > sub, self.u_syms[live][arg], self.u_syms[:, None])
        return out, child

    def _cky(self, ids: np.ndarray) -> dict[str, list[np.ndarray]]:
        """Viterbi chart; entry ``[L]`` is a (symbols × spans) array over spans of length L.

        Scores live twice, by start (``by_start[sym, i, L]``) and by end (``by_end[sym, i + L,
        L]``), so for span length L the left children of all splits k and all spans are one
        gather ``by_start[B, :s, 1:L]`` and the right children ``by_end[C, L:, L-1:0:-1]``.
        """
        n, n_sym = len(ids), len(self.symbols)
        by_start = np.full((n_sym, n + 1, n + 1), -np.inf)
        by_end = np.full((n_sym, n + 1, n + 1), -np.inf)
        alive = np.zeros((n + 1, n_sym), dtype=bool)
        child: list[np.ndarray] = [np.empty(0)] * (n + 1)
        rule, split = list(child), list(child)
        live = np.empty(0, dtype=np.int64)
        for length in range(1, n + 1):
            s = n - length + 1
            binary = np.full((n_sym, s), -np.inf)
            rule[length] = np.zeros((n_sym, s), dtype=np.int32)
            split[length] = np.zeros((n_sym, s), dtype=np.int16)
            if length == 1:
                binary[ids, np.arange(n)] = 0.0
            else:  # rules whose two children occur in some span of the right lengths
                live = np.flatnonzero((alive[1:length][:, self.b_left]
                                       & alive[length - 1:0:-1][:, self.b_right]).any(axis=0))
            if length > 1 and len(live):
                cand = (by_start[self.b_left[live], :s, 1:length]
                        + by_end[self.b_right[live], length:, length - 1:0:-1])
                k_best = cand.argmax(axis=2)
                best = np.take_along_axis(cand, k_best[:, :, None], axis=2)[:, :, 0]
                best += self.b_logp[live, None]
                parents = self.b_parent[live]
                starts = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1]])
                seg = np.maximum.reduceat(best, starts, axis=0)  # best rule score per parent
                seg_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(live)]))
                hit = np.where(best == seg[seg_of], np.arange(len(live))[:, None], len(live))
                arg = np.minimum(np.minimum.reduceat(hit, starts, axis=0), len(live) - 1)
                binary[parents[starts]] = seg
                rule[length][parents[starts]] = live[arg]
                split[length][parents[starts]] = np.take_along_axis(k_best, arg, axis=0) + 1
            score, child[length] = self._unary(binary)
            by_start[:, :s, length] = score
            by_end[:, length:, length] = score
            alive[length] = np.isfinite(score).any(axis=1)
        scores = [by_start[:, :n - length + 1, length] for length in range(n + 1)]
        return {"score": scores, "child": child, "rule": rule, "split": split}

    def _build(self, chart: dict, length: int, i: int, sym: int,
               tags: Sequence[str], words: Sequence[str]) -> Node:
        """The (still binarised) subtree of ``sym`` over the span of ``length`` from ``i``."""
        end = int(chart["child"][length][sym, i])
        if length == 1:
            core = Node(tags[i], [words[i]])
        else:
            r, k = int(chart["rule"][length][end, i]), int(chart["split"][length][end, i])
            core = Node(self.symbols[end], [
                self._build(chart, k, i, int(self.b_left[r]), tags, words),
                self._build(chart, length - k, i + k, int(self.b_right[r]), tags, words)])
        for s in reversed(self._chain(sym, end)[:-1]):
            core = Node(self.symbols[s], [core])
        return core

    def _pieces(self, chart: dict, tags: Sequence[str], words: Sequence[str]) -> list[Node]:
        """Chart constituents covering the sentence, longest first from the left (a tag always
        covers its own word), each with its best non-intermediate symbol."""
        out, i, n = [], 0, len(tags)
        while i < n:
            for length in range(n - i, 0, -1):
                col = np.where(self.piece_ok, chart["score"][length][:, i], -np.inf)
                if np.isfinite(col.max()):
                    out.append(self._build(chart, length, i, int(col.argmax()), tags, words))
                    i += length
                    break
        return out

    def parse(self, tags: Sequence[str], words: Sequence[str], max_tags: int = MAX_TAGS) -> Parse:
        """Best tree for the tags with ``words`` as leaves; odd input gets a flagged fallback.

        The chart holds 2 × symbols × (n+1)² floats (140 MB at n = 80), hence ``max_tags``."""
        tags, words = list(tags), list(words)
        if len(tags) != len(words) or not tags:
            raise LingtestError(f"parse needs one POS tag per word and at least one word "
                                f"(got {len(tags)} tags, {len(words)} words)")
        mapped = [SPACY_TAG_MAP.get(t, t) for t in tags]
        unknown = sorted({t for t in mapped if t not in self.tag_set})
        flat = Node(FALLBACK_LABEL, [Node(t, [w]) for t, w in zip(tags, words)])
        if unknown or len(tags) > max_tags:
            why = f"unknown POS tag(s): {unknown}" if unknown else f"longer than {max_tags} tags"
            return Parse(flat, math.nan, True, why)
        chart, n = self._cky(np.array([self.index[t] for t in mapped])), len(tags)
        top = float(chart["score"][n][self.root, 0])
        if not np.isfinite(top):
            pieces = [_debinarise(p) for p in self._pieces(chart, tags, words)]
            return Parse(Node(FALLBACK_LABEL, pieces), math.nan, True,
                         f"no complete parse: {FALLBACK_LABEL} over {len(pieces)} constituents")
        tree = _debinarise(self._build(chart, n, 0, self.root, tags, words))
        return Parse(tree.children[0], top)  # type: ignore[arg-type]  # ROOT → X, always unary

    def parse_doc(self, doc: Any) -> Parse:
        """Parse a spaCy Doc (or Span) with its PTB tags, skipping whitespace tokens."""
        toks = [t for t in doc if not t.is_space]
        return self.parse([t.tag_ for t in toks], [t.text for t in toks])

    def productions(self) -> list[tuple[str, tuple[str, ...], float]]:
        """(lhs, rhs, probability) of every binarised rule: the grammar the parser uses."""
        return [(lhs, rhs, math.exp(lp)) for (lhs, rhs), lp in sorted(self.log_prob.items())]

    def describe(self) -> dict[str, int]:
        return {"trees": self.n_trees, "symbols": len(self.symbols), "tags": len(self.tags),
                "binary_rules": len(self.b_parent), "unary_symbols": len(self.u_syms),
                "horizontal": self.horizontal, "vertical": self.vertical}

    def save(self, path: str | Path) -> None:
        """Write the rule counts as JSON (readable; the arrays are rebuilt on load in < 1 s)."""
        rules = [[lhs, list(rhs), c] for (lhs, rhs), c in sorted(self.counts.items())]
        Path(path).write_text(json.dumps({"format": FORMAT_VERSION, "horizontal": self.horizontal,
                                          "vertical": self.vertical, "n_trees": self.n_trees,
                                          "rules": rules}), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Grammar":
        try:
            state = json.loads(Path(path).read_text(encoding="utf-8"))
            if state.get("format") != FORMAT_VERSION:
                raise ValueError(f"format {state.get('format')} != {FORMAT_VERSION}")
            counts = Counter({(lhs, tuple(rhs)): int(c) for lhs, rhs, c in state["rules"]})
            return cls(counts, state["horizontal"], state["vertical"], state["n_trees"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LingtestError(f"{path}: not a lingtest PCFG ({exc}); fix: delete it so the "
                                f"capabilities stage induces the grammar again") from exc


def induce_pcfg(trees: Iterable[Node | str], horizontal: int = 2, vertical: int = 2) -> Grammar:
    """Count the binarised productions of ``trees`` (see module docstring) into a Grammar."""
    if horizontal < 1 or vertical not in (1, 2):
        raise LingtestError(f"PCFG needs horizontal >= 1 and vertical 1 or 2 "
                            f"(got {horizontal}, {vertical})")
    counts: Counter = Counter()
    n = 0
    for tree in trees:
        local: Counter = Counter()
        try:
            local[(ROOT, (_binarise(as_node(tree), ROOT, horizontal, vertical, local),))] += 1
        except ValueError:
            continue  # a malformed tree (words beside constituents) teaches nothing
        counts.update(local)
        n += 1
    return Grammar(counts, horizontal, vertical, n)


def split_heldout(trees: Sequence[str], heldout: int) -> tuple[list[str], list[str]]:
    """Training trees and the last ``heldout`` trees (kept out for bracket F1)."""
    if heldout >= len(trees):
        raise LingtestError(f"capabilities.pcfg_heldout={heldout} leaves no training tree "
                            f"(the treebank has {len(trees)}); lower it")
    return list(trees[:len(trees) - heldout]), list(trees[len(trees) - heldout:])


def brackets(tree: Node, keep: Sequence[bool]) -> Counter:
    """Labelled spans (label, start, end) of phrasal nodes, counted over the kept tokens."""
    before = np.r_[0, np.cumsum(keep)]  # kept tokens before each position
    out: Counter = Counter()

    def walk(node: Node, start: int) -> int:
        if is_preterminal(node):
            return start + 1
        end = start
        for child in node.children:
            end = walk(child, end) if isinstance(child, Node) else end + 1
        if before[end] > before[start] and node.label != ROOT:
            out[(node.label.split("^", 1)[0], int(before[start]), int(before[end]))] += 1
        return end

    walk(tree, 0)
    return out


def bracket_f1(gold_trees: Sequence[Node | str],
               predicted_trees: Sequence[Node | str]) -> dict[str, float]:
    """Labelled bracketing P/R/F1, evalb-style (preterminals and , : `` '' . not counted).

    Punctuation is read from the gold tags and deleted from both trees; a constituent over
    punctuation only is dropped; the root counts; repeated (label, span) pairs (unary chains
    of one label) count as often as they occur.
    """
    if len(gold_trees) != len(predicted_trees):
        raise LingtestError(f"bracket_f1 needs as many predicted trees as gold trees "
                            f"({len(predicted_trees)} != {len(gold_trees)})")
    matched = n_gold = n_pred = exact = 0
    for g, p in zip(gold_trees, predicted_trees):
        g, p = as_node(g), as_node(p)
        gold_tags = gold_tags_words(g)[0]
        if len(gold_tags) != len(gold_tags_words(p)[0]):
            raise LingtestError("bracket_f1: a predicted tree has another number of words than "
                                "its gold tree; parse the gold tree's own words")
        keep = [t not in EVALB_PUNCT for t in gold_tags]
        gb, pb = brackets(g, keep), brackets(p, keep)
        matched += sum((gb & pb).values())
        n_gold, n_pred = n_gold + sum(gb.values()), n_pred + sum(pb.values())
        exact += gb == pb
    precision = matched / n_pred if n_pred else 0.0
    recall = matched / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "matched": matched,
            "gold": n_gold, "predicted": n_pred, "sentences": len(gold_trees),
            "exact_match": exact / len(gold_trees) if gold_trees else 0.0}


def _benepar_fix(model: str) -> str:
    return (f"python -c \"import benepar; benepar.download('{model}')\", or set "
            f"capabilities.parser=pcfg")


def require_benepar(model: str = "benepar_en3") -> None:
    """benepar and its model are installed, or the error naming the download: checked before
    the stage loads a model (``CapabilitiesMethod.check_inputs``), not after the tagging."""
    try:
        from benepar.integrations.downloader import locate_model
    except ImportError as exc:
        raise LingtestError(f"capabilities.parser=benepar needs the benepar package; "
                            f"fix: pip install benepar && {_benepar_fix(model)}") from exc
    try:
        locate_model(model)
    except LookupError as exc:
        raise LingtestError(f"capabilities.parser=benepar: the model `{model}` is not "
                            f"installed; fix: {_benepar_fix(model)}") from exc


def parse_benepar(sentences: Sequence[tuple[Sequence[str], Sequence[str]]],
                  model: str = "benepar_en3") -> list[Node]:
    """Parse (words, tags) sentences with benepar, as the paper did (``parser: benepar``)."""
    require_benepar(model)
    import benepar

    try:
        with _benepar_special_tokens():
            parser = benepar.Parser(model)
    except LookupError as exc:
        raise LingtestError(f"capabilities.parser=benepar: the model `{model}` is not "
                            f"installed; fix: {_benepar_fix(model)}") from exc
    inputs = [benepar.InputSentence(words=list(w), tags=list(t)) for w, t in sentences]
    return [_from_nltk(tree) for tree in parser.parse_sents(inputs)]


def benepar_model_note(model: str = "benepar_en3") -> str:
    """benepar's model with the sha256 of its weights: its download names no version."""
    from benepar.integrations.downloader import locate_model

    from lingtest.tasks.models.registry import weights_sha16

    weights = Path(locate_model(model)) / "benepar_model.bin"
    return f"benepar {model}" + (f" @ sha256:{weights_sha16(weights)}" if weights.is_file()
                                 else "")


def _special_tokens_around(tokenizer: Any, ids: list[int], pair: list[int] | None = None
                           ) -> list[int]:
    """``ids`` framed by the special tokens ``tokenizer`` adds to one sequence, read off its
    own encoding of a word with and without them (what transformers 4's
    ``build_inputs_with_special_tokens`` returned: T5 ``ids + [</s>]``, BERT ``[CLS] ids
    [SEP]``)."""
    if pair is not None:
        raise NotImplementedError("benepar frames single sequences only")
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    framed = tokenizer("a")["input_ids"]
    start = next(i for i in range(len(framed) - len(bare) + 1)
                 if framed[i:i + len(bare)] == bare)
    return framed[:start] + list(ids) + framed[start + len(bare):]


@contextmanager
def _benepar_special_tokens() -> Iterator[None]:
    """benepar 0.2.0 finds where a model's start and stop tokens sit by calling
    ``tokenizer.build_inputs_with_special_tokens([-100])`` once, as it builds its
    ``Retokenizer`` (benepar/retokenization.py:113); transformers 5 removed that method from
    its tokenizers, so every benepar model failed to load. While a parser is built, the
    tokenizer class gets it back (``_special_tokens_around``), and loses it afterwards; with
    a transformers that still has it, nothing is changed. Under the lock models load under
    (``registry.one_load``): the parser loads its T5 with transformers too."""
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    from lingtest.tasks.models.registry import one_load

    with one_load():
        if hasattr(TokenizersBackend, "build_inputs_with_special_tokens"):
            yield
            return
        TokenizersBackend.build_inputs_with_special_tokens = _special_tokens_around
        try:
            yield
        finally:
            del TokenizersBackend.build_inputs_with_special_tokens


def _from_nltk(tree: Any) -> Node:
    """nltk.Tree → Node, without benepar's TOP wrapper."""
    node = Node(tree.label(), [c if isinstance(c, str) else _from_nltk(c) for c in tree])
    if node.label in ("TOP", "") and len(node.children) == 1 and isinstance(node.children[0], Node):
        return node.children[0]
    return node
