"""S²LCT expansion of seed cases (ALiCT Algorithm 1, steps 4–6): parse → masks → fill.

Each seed case's text is tagged by spaCy and parsed into a PTB-style tree (the induced PCFG,
or benepar); Algorithm 1 (``masks.masked_sentences``) proposes up to k masked sentences from
the reference CFG, sampled with a generator seeded by (run seed, case id), so a case's
expansions do not depend on which other cases run; ``fill.expand`` fills and validates them.

A case without a transformation *is* its SST seed (LC1, LC2): its expansions must still meet
the capability's search rule with the seed's label, or the expected label would no longer
follow. Cases made by a template keep their expected label by construction of the template.

Template protection: a case made by a template keeps the template's own words (its literal
text and its phrase choices) fixed; only the seed and filler sentences may take masks
(``open_spans``; ALiCT's ``Validate.is_conform_to_template`` plays this part). A negated
seed keeps the negation it received. Each mask must also sit at a word boundary of the
case's exact text, and the expansion is that text with the word inserted (``masks.Surface``).

Expansion rows follow the seed cases' columns (``search.CASE_COLUMNS``) with ``kind``
``expansion`` and ``parent_case_id`` naming the seed case; the expected label is the seed's.
"""
from __future__ import annotations

import json
import re
import string
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from lingtest.tasks.capabilities.fill import FillModel, TagLexicon, expand
from lingtest.tasks.capabilities.grammar import Grammar, parse_benepar
from lingtest.tasks.capabilities.masks import PTB_TAGS, SKIP_SYMBOLS, Cfg, Surface, masked_sentences
from lingtest.tasks.capabilities.search import CASE_COLUMNS, METHOD, WordPolarity, _ptb
from lingtest.tasks.capabilities.specs import CapabilitySpec
from lingtest.tasks.capabilities.validation import spec_still_matches
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.data.treebank import Node
from lingtest.tasks.models.nlp import pipe as nlp_pipe

GENERATOR = "lingtest.capabilities.expansion"
SUITE_COLUMNS = CASE_COLUMNS + ["parent_case_id"]
STATS_COLUMNS = ["capability", "cases", "parse_fallbacks", "masked", "proposed", "valid",
                 "kept", "rejected_pos", "rejected_polarity", "rejected_rule",
                 "rejected_agreement", "rejected_structure", "rejected_budget",
                 "rejected_confidence",
                 "rejected_context", "rejected_duplicate",
                 "unaligned"]
# Tags whose single word modifies what is there (an adjective, adverb, number, determiner
# or possessive): inserted alone they keep the sentence whole far more often than nouns,
# verbs, pronouns, prepositions or conjunctions, which need words around them.
MODIFIER_TAGS = ("JJ", "JJR", "JJS", "RB", "RBR", "RBS", "CD", "DT", "PRP$")
DEFAULT_SETTINGS = {"mask_sampling": "alict", "top_productions": 5,
                    "min_logprob_per_word": -9.0, "min_right_context_logprob": -6.0,
                    "max_inserted_words": 1, "pos_check": "in_context",
                    "insert_tags": list(MODIFIER_TAGS)}
POS_CHECKS = ("in_context", "exact")


def open_spans(text: str, provenance: str | dict) -> list[tuple[int, int]]:
    """Character spans of ``text`` that may take masks: the seed and filler slots of the
    case's template; for a negation, all but the inserted negation; no template: all.
    A text the template does not reproduce gets no open span (nothing is expanded)."""
    prov = json.loads(provenance) if isinstance(provenance, str) else provenance
    template, choices = prov.get("template"), prov.get("choices") or {}
    if template is None:
        return [(0, len(text))]
    if template == "negation":
        fixed = []
        for chosen in choices.values():
            phrase = r"\s*".join(re.escape(part) for part in _ptb(chosen))
            found = re.search(phrase, text, flags=re.IGNORECASE)
            if found:
                fixed.append(found.span())
        out, at = [], 0
        for start, end in sorted(fixed):
            if start > at:
                out.append((at, start))
            at = max(at, end)
        return out + ([(at, len(text))] if at < len(text) else [])
    pattern, slots = "", []
    for literal, name, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal)
        if name is None:
            continue
        if name in choices:
            pattern += re.escape(choices[name])
        else:
            pattern += "(.+)"
            slots.append(name)
    found = re.fullmatch(pattern, text, flags=re.DOTALL)
    if found is None:
        return []
    return [found.span(i + 1) for i in range(len(slots))]


def case_rng(seed: int, case: str) -> np.random.Generator:
    """A generator for one case: the same case draws the same masks in any company."""
    return np.random.default_rng([seed, zlib.crc32(case.encode("utf-8"))])


def parse_texts(texts: Sequence[str], nlp: Any, grammar: Grammar | None,
                parser: str = "pcfg") -> list[tuple[Node, bool]]:
    """(tree, is_fallback) per text: spaCy's tokens and PTB tags, parsed by ``parser``."""
    docs = [[t for t in doc if not t.is_space] for doc in nlp_pipe(nlp, texts)]
    if parser == "benepar":
        trees = parse_benepar([([t.text for t in d], [t.tag_ for t in d]) for d in docs])
        return [(tree, False) for tree in trees]
    if grammar is None:
        raise ValueError("parser=pcfg needs the induced grammar")
    out = []
    for doc in docs:
        parsed = grammar.parse([t.tag_ for t in doc], [t.text for t in doc])
        out.append((parsed.tree, parsed.fallback))
    return out


def expand_capability(spec: CapabilitySpec, cases: pd.DataFrame, trees: list[tuple[Node, bool]],
                      cfg: Cfg, fill_model: FillModel, fill_model_id: str, nlp: Any,
                      polarity: WordPolarity, settings: dict[str, Any], seed: int,
                      tags: TagLexicon | None = None) -> tuple[pd.DataFrame, dict[str, int]]:
    """The expansions of one capability's seed cases and the capability's fill statistics.

    ``settings``: max_masks_per_seed, fill_candidates, max_expansions_per_seed and the
    optional mask_sampling, top_productions, min_logprob_per_word, min_right_context_logprob
    (``DEFAULT_SETTINGS``);
    all are written into each expansion's provenance.
    """
    settings = {**DEFAULT_SETTINGS, **settings}
    if settings["pos_check"] not in POS_CHECKS:
        raise LingtestError(f"capabilities.pos_check must be one of {', '.join(POS_CHECKS)} "
                            f"(got {settings['pos_check']!r})")
    memo: dict = {}  # the vocabulary each masked tag may take, for all of this LC's seeds
    allowed = None if settings["insert_tags"] is None else frozenset(settings["insert_tags"])
    skip = SKIP_SYMBOLS if allowed is None else SKIP_SYMBOLS | (PTB_TAGS - allowed)
    rows: list[dict[str, str]] = []
    stats = dict.fromkeys(STATS_COLUMNS[1:], 0)
    stats["cases"] = len(cases)
    for case, (tree, fallback) in zip(cases.itertuples(index=False), trees):
        stats["parse_fallbacks"] += int(fallback)
        surface = Surface.of(case.text, tree, open_spans(case.text, case.provenance))
        stats["unaligned"] += int(surface is None)
        if surface is None:
            continue  # the parse's words are not the case's text: no safe insertion point
        masked = masked_sentences(tree, cfg, settings["max_masks_per_seed"],
                                  case_rng(seed, case.case_id),
                                  sampling=settings["mask_sampling"],
                                  top_productions=settings["top_productions"], surface=surface,
                                  max_insertions=settings["max_inserted_words"],
                                  skip_symbols=skip)
        stats["masked"] += len(masked)
        if not masked:
            continue
        keeps_rule = (spec_still_matches(spec, case.expectation, polarity)
                      if spec.transform is None else None)
        found = expand(masked, fill_model, nlp, polarity, settings["fill_candidates"],
                       settings["max_expansions_per_seed"], keeps_rule, tags=tags,
                       min_logprob_per_word=settings["min_logprob_per_word"],
                       min_right_context_logprob=settings["min_right_context_logprob"],
                       cfg=cfg if settings["pos_check"] == "in_context" else None, memo=memo,
                       allowed=allowed)
        for key, value in found.report().items():
            stats[key] += value
        for rank, exp in enumerate(found):
            lhs, seed_rhs, ref_rhs = exp.production
            rows.append({
                "case_id": case_id(METHOD, [exp.text], case.expectation), "method": METHOD,
                "capability": spec.id, "seed_id": case.seed_id, "text": exp.text,
                "expectation": case.expectation, "label_source": case.label_source,
                "provenance": provenance_json(
                    generator=GENERATOR, spec=spec.id, parent_case_id=case.case_id,
                    production=f"{lhs} -> {' '.join(seed_rhs)} => {' '.join(ref_rhs)}",
                    masked=exp.masked_text, words=list(exp.words), symbols=list(exp.symbols),
                    score=round(exp.score, 6), rank=rank, proposals=exp.proposals,
                    fill_model=fill_model_id,
                    parse_fallback=fallback, parameters={"seed": seed, **settings}),
                "kind": "expansion", "parent_case_id": case.case_id})
    frame = pd.DataFrame(rows, columns=SUITE_COLUMNS)
    return frame.drop_duplicates("case_id").reset_index(drop=True), stats


def write_suite_jsonl(suite: pd.DataFrame, path) -> None:
    """The generated suite as JSONL test cases (the case contract, tasks/core/schema.py), provenance as an object."""
    from lingtest.tasks.core.io import write_text

    lines = []
    for row in suite[SUITE_COLUMNS].itertuples(index=False):
        record = row._asdict()
        record["expectation"] = record["expectation"].split("|")
        record["provenance"] = json.loads(record["provenance"])
        record["parent_case_id"] = record["parent_case_id"] or None
        lines.append(json.dumps(record, ensure_ascii=False, sort_keys=True))
    write_text(path, "\n".join(lines) + ("\n" if lines else ""))
