"""COSTELLO test generation: contrastive relations → triples, and COSTELLO's JSON suites.

A triple (s, s⁺, s⁻) expects the embedding of s⁺ to stay closer to s than that of s⁻.

Table ``suite`` (one row per triple):

===========  =====  ==========================================================================
column       dtype  meaning
===========  =====  ==========================================================================
case_id      str    ``case_id("contrastive", [seed, positive, negative], expectation)``
method       str    ``contrastive``
relation     str    ``CR1``..``CR4`` (generated, or COSTELLO's names in an imported JSON suite)
                    or another imported relation name (``costello_json.py``)
seed_id      str    SST ``sentence_id`` / contrast ``pair_id`` / MRPC ``pair_id``; imported:
                    ``<file's relation name>:<index>``
seed         str    s; for CR4 ``"sentence1 [SEP] sentence2"`` (COSTELLO's pair format)
positive     str    s⁺, the text that must stay closer
negative     str    s⁻
expectation  str    ``"<relation>: d(s,s+) < d(s,s-)"``
label        str    the seed's label when known: SST ``label3`` (neg/neutral/pos), contrast
                    ``original_label`` (Positive/Negative), MRPC ``label`` as text ("1"); an
                    imported 4th element as text; else null
provenance   str    JSON: source table (or imported file and its sha256), seed id, the
                    operators with their edits (position, original, replacement), parameters
===========  =====  ==========================================================================

Relations, as COSTELLO's generators build them:

- CR1 (SST ``sst_split``): s⁺ synonym, s⁻ antonym of the SAME word, both sentiment-guided;
  one triple per qualifying word (``cr1_triples: word``, COSTELLO's ``SenWordFuzz``) or one
  per seed (``seed``, a word drawn with the generator).
- CR2 (SST): s⁺ gender swap (pronouns, gendered nouns, first names of PERSON entities: the
  SST Docs keep spaCy's NER when CR2 runs), s⁻ sentiment-guided synonym substitution over
  the whole text, each polar word replaced with probability ``synonym_probability``
  (COSTELLO's ``crossProperty ["swapGender", "sentiSynonymSubstitution"]``).
- CR3 (contrast sets ``contrast_split``): s⁺ synonym substitution over the whole review
  (adjectives, verbs, nouns, adverbs, each with probability ``synonym_probability``, as
  COSTELLO's ``synon_contr`` from NL-Augmenter's SynonymSubstitution), s⁻ its contrast
  (inverted) review. ``synonym_scope: word`` makes CR2/CR3 change one drawn word instead.
- CR4 (MRPC ``mrpc_split`` paraphrases, label 1): an ADJ/VERB lemma present in both sentences
  is replaced everywhere by one synonym (s⁺) or one antonym (s⁻); no sentiment guidance.

Determinism: each relation has its own NumPy generator seeded with ``[seed, relation index]``;
it permutes the seed pool (the first ``max_seeds`` seeds of that order that yield a triple are
kept), picks the mutated word among the candidates and draws the whole-text substitutions. The substitute at the chosen word is
WordNet's best-ranked one that passes the checks (most frequent sense first). Rows come out by
relation, then in the source table's order; duplicate case_ids keep their first row.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.contrastive.params import RELATIONS, ContrastiveParams
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.nlp import NO_PARSE
from lingtest.tasks.models.nlp import pipe as nlp_pipe
from lingtest.tasks.text import lexicon_lookup as lex
from lingtest.tasks.text.mutations import (Mutant, antonyms, first_per_position, gender_swap, invert,
                                  replace_lemma, slots, synonyms)
from lingtest.tasks.text.rewrite import synonym_rewrite

METHOD = "contrastive"
SEP = " [SEP] "
COLUMNS = ["case_id", "method", "relation", "seed_id", "seed", "positive", "negative",
           "expectation", "label", "provenance"]
RELATION_INFO: dict[str, tuple[str, str, int]] = {
    "CR1": ("synonym vs antonym of the same word (sentiment-guided)", "sst", 1417),
    "CR2": ("gender swap vs sentiment-guided synonym", "sst", 681),
    "CR3": ("synonym vs semantic inversion", "contrast_pairs", 588),
    "CR4": ("synonym vs antonym of a word in both sentences of a paraphrase", "mrpc", 408),
}
BATCH_SIZE = 64
# Tags, POS and lemmas are what the operators read; NER only marks names for CR2's swaps.



def expectation(relation: str) -> str:
    """The expectation every triple of ``relation`` states."""
    return f"{relation}: d(s,s+) < d(s,s-)"


def _row(relation: str, seed_id: str, texts: tuple[str, str, str], label: Any,
         provenance: str) -> dict[str, Any]:
    expect = expectation(relation)
    return {"case_id": case_id(METHOD, list(texts), expect), "method": METHOD,
            "relation": relation, "seed_id": seed_id, "seed": texts[0], "positive": texts[1],
            "negative": texts[2], "expectation": expect,
            "label": None if label is None or pd.isna(label) else str(label),
            "provenance": provenance}


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.drop_duplicates("case_id").reset_index(drop=True)


class _Context:
    """Look-up tables, parsed Docs and parameters shared by the relation builders."""

    def __init__(self, tables: dict[str, pd.DataFrame], nlp: Any, wn: Any,
                 params: ContrastiveParams, seed: int):
        self.tables, self.nlp, self.wn, self.params, self.seed = tables, nlp, wn, params, seed
        self.docs: dict[str, Any] = {}
        self._polarity: dict[str, str] | None = None
        self._gender: tuple[dict[str, str], dict[str, str]] | None = None

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.tables:
            raise LingtestError(f"test generation needs the `{name}` table "
                                f"(data/processed/{name}.parquet; run `lingtest run data`)")
        return self.tables[name]

    @property
    def polarity(self) -> dict[str, str]:
        if self._polarity is None:
            self._polarity = lex.polarity_lookup(self.table("word_polarity"))
        return self._polarity

    @property
    def gender(self) -> tuple[dict[str, str], dict[str, str]]:
        if self._gender is None:
            self._gender = (lex.pair_swaps(self.table("gender_pairs")),
                            lex.name_swaps(self.table("names")))
        return self._gender

    def parse(self, texts: list[str], ner: bool = False) -> None:
        """Parse the texts not seen yet, in batches, without the parser (and NER unless asked)."""
        todo = list(dict.fromkeys(t for t in texts if t not in self.docs))
        skip = tuple(p for p in NO_PARSE if not (ner and p == "ner"))
        for text, doc in zip(todo, nlp_pipe(self.nlp, todo, skip, batch_size=BATCH_SIZE)):
            self.docs[text] = doc

    def provenance(self, relation: str, source: str, seed_id: str, positive: Any,
                   negative: Any) -> str:
        p = self.params
        return provenance_json(
            generator="lingtest.contrastive.suite", relation=relation, source=source,
            seed_id=seed_id, positive=positive, negative=negative,
            parameters={"seed": self.seed, "max_seeds": p.max_seeds, "sst_split": p.sst_split,
                        "cr1_triples": p.cr1_triples, "synonym_scope": p.synonym_scope,
                        "synonym_probability": p.synonym_probability,
                        "contrast_split": p.contrast_split, "mrpc_split": p.mrpc_split,
                        "polarity_min_strength": lex.CLEAR_STRENGTH},
            spacy={"name": self.nlp.meta.get("name"), "version": self.nlp.meta.get("version")})


Builder = Callable[[_Context, pd.Series, np.random.Generator], list[dict[str, Any]]]


def _seeds(ctx: _Context, frame: pd.DataFrame, texts: Callable[[pd.Series], list[str]],
           rng: np.random.Generator, ner: bool) -> Iterator[tuple[int, pd.Series]]:
    """Seed rows in the generator's permuted order, parsed chunk by chunk as needed."""
    order = rng.permutation(len(frame))
    chunk = BATCH_SIZE * 4
    for start in range(0, len(order), chunk):
        rows = [frame.iloc[int(i)] for i in order[start:start + chunk]]
        ctx.parse([t for row in rows for t in texts(row)], ner=ner)
        for i, row in zip(order[start:start + chunk], rows):
            yield int(i), row


def _synonym_mutant(ctx: _Context, doc: Any, rng: np.random.Generator) -> Mutant | None:
    """s⁺ of CR3 / s⁻ of CR2: sentiment-guided synonyms over the text, or at one drawn word."""
    p = ctx.params
    if p.synonym_scope == "text":
        return synonym_rewrite(doc, ctx.wn, rng, p.synonym_probability, ctx.polarity)
    syn = first_per_position(synonyms(doc, ctx.wn, ctx.polarity))
    if not syn:
        return None
    positions = sorted(syn)
    return syn[positions[int(rng.integers(len(positions)))]]


def _cr1(ctx: _Context, row: pd.Series, rng: np.random.Generator) -> list[dict[str, Any]]:
    doc = ctx.docs[row["text"]]
    syn = first_per_position(synonyms(doc, ctx.wn, ctx.polarity))
    ant = first_per_position(antonyms(doc, ctx.wn, ctx.polarity, positions=syn))
    both = sorted(set(syn) & set(ant))
    if not both:
        return []
    if ctx.params.cr1_triples == "seed":
        both = [both[int(rng.integers(len(both)))]]
    return [_row("CR1", row["sentence_id"], (row["text"], syn[i].text, ant[i].text),
                 row["label3"], ctx.provenance("CR1", "sst", row["sentence_id"],
                                               syn[i].as_dict(), ant[i].as_dict()))
            for i in both]


def _cr2(ctx: _Context, row: pd.Series, rng: np.random.Generator) -> list[dict[str, Any]]:
    doc = ctx.docs[row["text"]]
    swapped = gender_swap(doc, *ctx.gender)
    if swapped is None:
        return []
    minus = _synonym_mutant(ctx, doc, rng)
    if minus is None:
        return []
    return [_row("CR2", row["sentence_id"], (row["text"], swapped.text, minus.text),
                 row["label3"], ctx.provenance("CR2", "sst", row["sentence_id"],
                                               swapped.as_dict(), minus.as_dict()))]


def _cr3(ctx: _Context, row: pd.Series, rng: np.random.Generator) -> list[dict[str, Any]]:
    doc = ctx.docs[row["original"]]
    p = ctx.params
    if p.synonym_scope == "text":  # NL-Augmenter's substitution: not sentiment-guided
        plus = synonym_rewrite(doc, ctx.wn, rng, p.synonym_probability)
    else:
        plus = _synonym_mutant(ctx, doc, rng)
    if plus is None:
        return []
    minus = invert(row["original"], {row["original"]: row["contrast"]})
    inverted = {"operator": minus.operator, "contrast_label": row["contrast_label"]}
    return [_row("CR3", row["pair_id"], (row["original"], plus.text, minus.text),
                 row["original_label"], ctx.provenance("CR3", "contrast_pairs", row["pair_id"],
                                                       plus.as_dict(), inverted))]


def _pair_mutants(ctx: _Context, docs: tuple[Any, Any], lemma: str, pos: str,
                  kind: str) -> tuple[Mutant, Mutant] | None:
    """The best-ranked substitute that both sentences can take, applied to both."""
    lookup = lex.synonym_lemmas if kind == "synonym" else lex.antonym_lemmas
    for substitute in lookup(ctx.wn, lemma, pos):
        first = replace_lemma(docs[0], ctx.wn, lemma, pos, substitute, kind)
        second = replace_lemma(docs[1], ctx.wn, lemma, pos, substitute, kind)
        if first is not None and second is not None:
            return first, second
    return None


def _cr4(ctx: _Context, row: pd.Series, rng: np.random.Generator) -> list[dict[str, Any]]:
    docs = (ctx.docs[row["sentence1"]], ctx.docs[row["sentence2"]])
    second = {(s.lemma, s.pos) for s in slots(docs[1], ctx.wn)}
    shared = [k for k in dict.fromkeys((s.lemma, s.pos) for s in slots(docs[0], ctx.wn))
              if k in second]
    candidates = []
    for lemma, pos in shared:
        syn = _pair_mutants(ctx, docs, lemma, pos, "synonym")
        ant = _pair_mutants(ctx, docs, lemma, pos, "antonym") if syn else None
        if syn and ant:
            candidates.append((syn, ant))
    if not candidates:
        return []
    syn, ant = candidates[int(rng.integers(len(candidates)))]
    texts = (row["sentence1"] + SEP + row["sentence2"], syn[0].text + SEP + syn[1].text,
             ant[0].text + SEP + ant[1].text)
    return [_row("CR4", row["pair_id"], texts, row["label"],
                 ctx.provenance("CR4", "mrpc", row["pair_id"],
                                [m.as_dict() for m in syn], [m.as_dict() for m in ant]))]


def _pool(ctx: _Context, relation: str) -> tuple[pd.DataFrame, Callable[[pd.Series], list[str]]]:
    p = ctx.params
    if relation in ("CR1", "CR2"):
        sst = ctx.table("sst")
        return sst[sst["split"] == p.sst_split], lambda r: [r["text"]]
    if relation == "CR3":
        pairs = ctx.table("contrast_pairs")
        if p.contrast_split != "all":
            pairs = pairs[pairs["split"] == p.contrast_split]
        return pairs, lambda r: [r["original"]]
    mrpc = ctx.table("mrpc")
    return (mrpc[(mrpc["split"] == p.mrpc_split) & (mrpc["label"] == 1)],
            lambda r: [r["sentence1"], r["sentence2"]])


_BUILDERS: dict[str, Builder] = {"CR1": _cr1, "CR2": _cr2, "CR3": _cr3, "CR4": _cr4}


def generate_suite(tables: dict[str, pd.DataFrame], nlp: Any, wn: Any,
                   params: ContrastiveParams, seed: int) -> pd.DataFrame:
    """Triples for ``params.relations`` from the processed tables; same seed, same suite.

    ``tables`` needs ``sst``, ``word_polarity``, ``gender_pairs``, ``names``,
    ``contrast_pairs`` and ``mrpc`` as far as the chosen relations use them.
    """
    ctx = _Context(tables, nlp, wn, params, seed)
    sst_ner = "CR2" in params.relations  # CR1 and CR2 share the SST Docs
    frames = []
    for relation in params.relations:
        rng = np.random.default_rng([seed, RELATIONS.index(relation)])
        pool, texts = _pool(ctx, relation)
        found: list[tuple[int, list[dict[str, Any]]]] = []
        ner = sst_ner and relation in ("CR1", "CR2")
        for index, row in _seeds(ctx, pool, texts, rng, ner):
            if params.max_seeds is not None and len(found) >= params.max_seeds:
                break
            built = _BUILDERS[relation](ctx, row, rng)
            if built:
                found.append((index, built))
        frames.extend(r for _, rows in sorted(found, key=lambda pair: pair[0]) for r in rows)
    return _frame(frames)


def duplicate_triples(suite: pd.DataFrame) -> pd.Series:
    """Per relation: rows whose (seed, positive, negative) repeats an earlier row's."""
    repeated = suite.duplicated(["relation", "seed", "positive", "negative"])
    return repeated.groupby(suite["relation"], sort=False).sum().astype(int)


def imported_source(provenance: str) -> str | None:
    """Table 1's ``source`` of an imported triple: its file's name and sha256 prefix (None
    for a generated one)."""
    facts = json.loads(provenance)
    if "imported_from" not in facts:
        return None
    return f"{Path(facts['imported_from']).name} (sha256 {facts['sha256'][:12]})"


def table1(suite: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1: triples per relation beside the paper's counts; ``duplicates``:
    triples repeating an earlier one of the relation (counted in ``triples``, as the paper).
    ``source``: the seed table of a generated relation, the file (name and sha256 prefix)
    of an imported one."""
    counts = suite.groupby("relation", sort=False).size()
    imported = {relation: imported_source(provenance) for relation, provenance in
                suite.groupby("relation", sort=False)["provenance"].first().items()}
    repeats = duplicate_triples(suite)
    known = [r for r in RELATION_INFO if r in counts.index]
    rows = []
    for relation in known + [r for r in counts.index if r not in RELATION_INFO]:
        description, source, paper = RELATION_INFO.get(relation, (None, None, None))
        source = imported[relation] or source
        rows.append({"relation": relation, "description": description, "source": source,
                     "triples": int(counts[relation]), "duplicates": int(repeats[relation]),
                     "paper_triples": paper})
    return pd.DataFrame(rows, columns=["relation", "description", "source", "triples",
                                       "duplicates", "paper_triples"]
                        ).astype({"paper_triples": "Int64"})
