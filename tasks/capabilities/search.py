"""S²LCT seed search and template transformations: SST sentences → seed cases per capability.

Steps (the paper's steps 1–2):

1. :func:`tag_sst` tags every SST sentence once (spaCy on the SST tokens themselves, so
   positions line up; parser, NER and lemmatizer off). All capabilities share that table.
2. :func:`search_seeds` keeps the sentences that meet any of a spec's search rules, with word
   polarity from :func:`load_word_polarity` (``lexicon``: the ``word_polarity`` table, by
   lowercased word; ``sentiwordnet``: nltk's SentiWordNet reader, by word and POS).
3. :func:`sample_seeds` draws up to ``n`` seeds (only sentences whose label the spec's seed
   slot accepts; the others are fillers) with the given NumPy generator.
4. :func:`apply_transform` turns seeds into test cases: unchanged (expecting their SST
   label), through a negation, or through templates whose filler slots take other matches and
   whose phrase slots take one of their choices, all drawn from the same generator.

A sentence embedded in a template loses its final . ! ? ; or : and its first letter is
lowercased unless the token is a proper noun (spaCy PROPN), "I" or an all-caps word.

Seed cases (one row per test case; the case contract, tasks/core/schema.py):

=============  =====  =======================================================================
case_id        str    ``case_id("capabilities", [text], expectation)``
method         str    ``capability``
capability     str    the spec id (``LC1`` …)
seed_id        str    SST sentence ids, the seed first then the fillers, joined with ``+``
text           str    the test sentence
expectation    str    acceptable labels in the order neg, neutral, pos, joined with ``|``
label_source   str    ``sst`` (the seed's label, no transform) or ``spec`` (its ``expected``)
provenance     str    JSON: generator, spec, spec_file, rule (the seed's rule index), template
                      (or negation), choices, sources (slot → id), seed_label, parameters
kind           str    ``seed`` (expansions of later stages use ``expansion``)
=============  =====  =======================================================================
"""
from __future__ import annotations

import functools
import string
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from lingtest.tasks.capabilities.specs import (LABELS, SEED_SLOT, CapabilitySpec, SearchRule, Template,
                                      Transform)
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.data.sst import detokenize
from lingtest.tasks.models.nlp import pipe as nlp_pipe

METHOD = "capabilities"  # the contract's method: the stage's name
GENERATOR = "lingtest.capabilities.search"
CASE_COLUMNS = ["case_id", "method", "capability", "seed_id", "text", "expectation",
                "label_source", "provenance", "kind"]
MATCH_COLUMNS = ["sentence_id", "split", "text", "tokens", "pos", "label", "rule", "is_seed"]
FINAL_PUNCT = frozenset({".", "!", "?"})
EMBED_STRIP = frozenset({".", "!", "?", ";", ":", "..."})
SWN_NEUTRAL_BAND = 0.1  # |mean(pos − neg)| over a word's synsets below this: neutral
_SWN_POS = {"ADJ": "a", "NOUN": "n", "PROPN": "n", "VERB": "v", "AUX": "v", "ADV": "r"}


# --------------------------------------------------------------------------- tagging

def tag_sst(sst: pd.DataFrame, nlp: Any, batch_size: int = 256) -> pd.DataFrame:
    """``sst`` rows (sentence_id, tokens, text, label3) with spaCy's ``pos`` and ``tag`` lists.

    Tagging the SST tokens (unescaped) rather than the text keeps one tag per SST token.
    """
    from spacy.tokens import Doc

    tokens = [list(t) for t in sst["tokens"]]
    docs = (Doc(nlp.vocab, words=[detokenize([tok]) or tok for tok in toks]) for toks in tokens)
    pos, tag = [], []
    for doc in nlp_pipe(nlp, docs, batch_size=batch_size):
        pos.append([t.pos_ for t in doc])
        tag.append([t.tag_ for t in doc])
    split = sst["split"] if "split" in sst else pd.Series([""] * len(sst), index=sst.index)
    return pd.DataFrame({"sentence_id": sst["sentence_id"].to_numpy(), "split": split.to_numpy(),
                         "tokens": tokens, "text": sst["text"].to_numpy(),
                         "label": sst["label3"].to_numpy(), "pos": pos, "tag": tag})


# --------------------------------------------------------------------------- word polarity

# ``polarity(word, pos)`` → ``neg`` / ``neutral`` / ``pos``, or None when the word is unknown.
WordPolarity = Callable[[str, str], "str | None"]


class LexiconPolarity:
    """Polarity from the ``word_polarity`` table (SST single words + Hu & Liu), POS-blind."""

    name = "lexicon"

    def __init__(self, table: pd.DataFrame):
        missing = {"word", "polarity"} - set(table.columns)
        if missing:
            raise LingtestError(f"word_polarity table lacks column(s) {sorted(missing)} "
                                "(rebuild it with `lingtest run data`)")
        self._map = dict(zip(table["word"].str.lower(), table["polarity"]))

    def __call__(self, word: str, pos: str) -> str | None:
        return self._map.get(word.lower())


def require_sentiwordnet(nltk_data: str | Path) -> Path:
    """SentiWordNet's corpus folder under ``nltk_data``, or the error naming its download:
    a check made before any model loads (``checks.check_assets``)."""
    folder = Path(nltk_data).expanduser().resolve()
    corpus = folder / "corpora" / "sentiwordnet"
    if not corpus.is_dir() and not corpus.with_suffix(".zip").is_file():
        raise LingtestError(
            f"SentiWordNet is missing: {corpus} does not exist (word_sentiment: "
            f"sentiwordnet); fix: python -m nltk.downloader -d {folder} sentiwordnet, "
            "or set capabilities.word_sentiment: lexicon")
    return corpus


class SentiWordNetPolarity:
    """SentiWordNet through nltk: mean (pos − neg) score over the word's synsets of its POS."""

    name = "sentiwordnet"

    def __init__(self, nltk_data: str | Path):
        import nltk
        from nltk.corpus.reader import SentiWordNetCorpusReader

        from lingtest.tasks.text.wordnet import wordnet

        folder = Path(nltk_data).expanduser().resolve()
        corpus = require_sentiwordnet(folder)
        self._wordnet = wordnet(folder)  # also puts the folder first on nltk.data.path
        root = nltk.data.find("corpora/sentiwordnet", paths=[str(folder)])
        try:
            self._reader = SentiWordNetCorpusReader(root, r"SentiWordNet.*\.txt")
        except ValueError as exc:
            raise LingtestError(f"{corpus}: not a SentiWordNet corpus ({exc}); fix: download it "
                                "again with nltk.downloader") from None
        self._cached = functools.lru_cache(maxsize=None)(self._lookup)

    def __call__(self, word: str, pos: str) -> str | None:
        return self._cached(word.lower(), pos)

    def _lookup(self, word: str, pos: str) -> str | None:
        wn_pos = _SWN_POS.get(pos)
        if wn_pos is None:
            return None
        scores = []
        for synset in self._wordnet.synsets(word, pos=wn_pos):
            # the reader's own table by (pos, offset), as its ``senti_synset`` looks a synset
            # up, without that method's detour through nltk's process-wide WordNet (a second
            # load of WordNet beside ``self._wordnet``)
            senti = self._reader._db.get(("a" if synset.pos() == "s" else synset.pos(),
                                          synset.offset()))
            if senti is not None:
                scores.append(senti[0] - senti[1])
        if not scores:
            return None
        mean = float(np.mean(scores))
        return "neutral" if abs(mean) < SWN_NEUTRAL_BAND else ("pos" if mean > 0 else "neg")


def load_word_polarity(kind: str, table: pd.DataFrame | None = None,
                       nltk_data: str | Path | None = None) -> WordPolarity:
    """The polarity source named by ``capabilities.word_sentiment``."""
    if kind == "lexicon" and table is not None:
        return LexiconPolarity(table)
    if kind == "sentiwordnet" and nltk_data is not None:
        return SentiWordNetPolarity(nltk_data)
    if kind in ("lexicon", "sentiwordnet"):
        raise LingtestError(f"word_sentiment: {kind} needs the "
                            f"{'word_polarity table' if kind == 'lexicon' else 'nltk_data folder'}")
    raise LingtestError(f"capabilities.word_sentiment: unknown source {kind!r}; "
                        "use lexicon or sentiwordnet")


# --------------------------------------------------------------------------- search

def sentence_length(tokens: list[str]) -> int:
    """Tokens, not counting a final . ! or ? (ALiCT does not count the final full stop)."""
    return len(tokens) - (1 if tokens and tokens[-1] in FINAL_PUNCT else 0)


@dataclass(frozen=True)
class _Words:
    polarity: frozenset[str] | None
    pos: frozenset[str] | None
    words: frozenset[str] | None

    def __call__(self, word: str, pos: str, polarity: str | None) -> bool:
        return ((self.polarity is None or polarity in self.polarity)
                and (self.pos is None or pos in self.pos)
                and (self.words is None or word.lower() in self.words))


def _compile(rule: SearchRule) -> Callable[[list[str], list[str], str, WordPolarity], bool]:
    """A predicate for one rule; cheap checks first, polarity only when a constraint needs it."""
    def words(constraints) -> list[_Words]:
        return [_Words(None if c.polarity is None else frozenset(c.polarity),
                       None if c.pos is None else frozenset(c.pos),
                       None if c.words is None else frozenset(w.lower() for w in c.words))
                for c in constraints]

    required, excluded = words(rule.require_words), words(rule.exclude_words)
    start = [frozenset(w.lower() for w in alternatives) for alternatives in rule.starts_with]
    not_next = frozenset(w.lower() for w in rule.not_followed_by)
    labels = frozenset(rule.label)

    def matches(tokens: list[str], pos: list[str], label: str, polarity: WordPolarity) -> bool:
        if label not in labels:
            return False
        if rule.max_length is not None and sentence_length(tokens) >= rule.max_length:
            return False
        if start and (len(tokens) < len(start)
                      or any(tokens[i].lower() not in alts for i, alts in enumerate(start))
                      or (len(tokens) > len(start) and tokens[len(start)].lower() in not_next)):
            return False
        if not (required or excluded):
            return True
        polar = [polarity(w, p) for w, p in zip(tokens, pos)]
        triples = list(zip(tokens, pos, polar))
        return (all(any(c(*t) for t in triples) for c in required)
                and not any(c(*t) for c in excluded for t in triples))

    return matches


def search_seeds(spec: CapabilitySpec, tagged: pd.DataFrame,
                 polarity: WordPolarity) -> pd.DataFrame:
    """Every tagged sentence meeting one of the spec's rules (``rule``: the first it meets).

    ``is_seed`` marks the matches whose label the spec's seed slot accepts; the other matches
    only fill template slots (LC7's neutral middles).
    """
    rules = [_compile(rule) for rule in spec.search]
    seed_labels = set(spec.seed_labels())
    rows = []
    for row in tagged.itertuples(index=False):
        tokens, pos = list(row.tokens), list(row.pos)
        for index, matches in enumerate(rules):
            if matches(tokens, pos, row.label, polarity):
                rows.append((row.sentence_id, row.split, row.text, tokens, pos, row.label,
                             index, row.label in seed_labels))
                break
    return pd.DataFrame(rows, columns=MATCH_COLUMNS)


def sample_seeds(matches: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Up to ``n`` of the ``is_seed`` matches, drawn without replacement, in table order."""
    candidates = matches[matches["is_seed"]]
    k = min(n, len(candidates))
    picked = np.sort(rng.choice(len(candidates), size=k, replace=False)) if k else []
    return candidates.iloc[picked].reset_index(drop=True)


def spec_rng(seed: int, spec_id: str) -> np.random.Generator:
    """One generator per (run seed, capability): adding a spec leaves the others' draws alone."""
    return np.random.default_rng([seed, zlib.crc32(spec_id.encode("utf-8"))])


# --------------------------------------------------------------------------- transforms

def embed(tokens: list[str], pos: list[str]) -> str:
    """A sentence as a clause inside a template: no final punctuation, lowercase first word."""
    end = len(tokens)
    while end > 1 and tokens[end - 1] in EMBED_STRIP:
        end -= 1
    words = list(tokens[:end])
    first = words[0]
    if pos[0] != "PROPN" and first != "I" and not (first.isupper() and len(first) > 1):
        words[0] = first[:1].lower() + first[1:]
    return detokenize(words)


def _ptb(phrase: str) -> list[str]:
    """Phrase → PTB tokens (``isn't`` → ``is n't``) so detokenize glues it as SST text."""
    return [part for word in phrase.split()
            for part in ((word[:-3], word[-3:]) if word.lower().endswith("n't") and len(word) > 3
                         else (word,))]


def negate(tokens: list[str], replace: dict[str, list[str]],
           rng: np.random.Generator) -> tuple[str, str, str] | None:
    """Replace the first token listed in ``replace`` by one of its negated forms.

    Returns (text, replaced word, replacement), or None when no such token occurs.
    """
    index = next((i for i, t in enumerate(tokens) if t.lower() in replace), None)
    if index is None:
        return None
    alternatives = replace[tokens[index].lower()]
    chosen = alternatives[int(rng.integers(len(alternatives)))]
    new = _ptb(chosen)
    if tokens[index][:1].isupper():
        new[0] = new[0][:1].upper() + new[0][1:]
    return detokenize(tokens[:index] + new + tokens[index + 1:]), tokens[index], chosen


def render(template: str, values: dict[str, str]) -> str:
    """Fill ``{name}`` slots (``{{``/``}}`` are literal braces)."""
    out = []
    for literal, name, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is not None:
            out.append(values[name])
    return "".join(out)


def _fill(template: Template, seed: Any, by_label: dict[str, pd.DataFrame],
          rng: np.random.Generator) -> tuple[str, dict[str, str], dict[str, str]] | None:
    """Draw the fillers and choices of one template for one seed; None if a filler is lacking."""
    values = {SEED_SLOT: embed(list(seed.tokens), list(seed.pos))}
    sources, used = {SEED_SLOT: seed.sentence_id}, {seed.sentence_id}
    for slot in sorted(template.fillers):
        frames = [by_label[label] for label in template.fillers[slot] if label in by_label]
        pool = pd.concat(frames) if frames else None
        pool = None if pool is None else pool[~pool["sentence_id"].isin(used)]
        if pool is None or not len(pool):
            return None
        filler = pool.iloc[int(rng.integers(len(pool)))]
        values[slot] = embed(list(filler["tokens"]), list(filler["pos"]))
        sources[slot] = filler["sentence_id"]
        used.add(filler["sentence_id"])
    chosen = {}
    for slot in sorted(template.choices):
        alternatives = template.choices[slot]
        chosen[slot] = values[slot] = alternatives[int(rng.integers(len(alternatives)))]
    return render(template.template, values), sources, chosen


def _case(spec: CapabilitySpec, text: str, expected: tuple[str, ...], source: str,
          sources: dict[str, str], **provenance: Any) -> dict[str, str]:
    labels = "|".join(label for label in LABELS if label in expected)
    ids = [sources[SEED_SLOT]] + [sources[k] for k in sorted(sources) if k != SEED_SLOT]
    return {"case_id": case_id(METHOD, [text], labels), "method": METHOD, "capability": spec.id,
            "seed_id": "+".join(ids), "text": text, "expectation": labels, "label_source": source,
            "provenance": provenance_json(generator=GENERATOR, spec=spec.id,
                                          spec_file=spec.path, sources=sources, **provenance),
            "kind": "seed"}


def _variant(transform: Transform, seed: Any, by_label: dict[str, pd.DataFrame],
             rng: np.random.Generator) -> tuple[str, tuple[str, ...], dict, str, dict] | None:
    """One test sentence from a seed: (text, expected, sources, template, choices) or None."""
    negation = transform.negation
    if negation is not None:
        if negation.seed_label is not None and seed.label not in negation.seed_label:
            return None
        done = negate(list(seed.tokens), negation.replace, rng)
        return None if done is None else (done[0], negation.expected,
                                          {SEED_SLOT: seed.sentence_id}, "negation",
                                          {done[1]: done[2]})
    usable = [t for t in transform.templates if t.seed_label is None or seed.label in t.seed_label]
    while usable:  # a template whose fillers are lacking gives way to another one
        template = usable.pop(int(rng.integers(len(usable))))
        filled = _fill(template, seed, by_label, rng)
        if filled is not None:
            return filled[0], template.expected, filled[1], template.template, filled[2]
    return None


def apply_transform(spec: CapabilitySpec, seeds: pd.DataFrame, rng: np.random.Generator,
                    pool: pd.DataFrame | None = None,
                    parameters: dict[str, Any] | None = None) -> pd.DataFrame:
    """The seed cases of one capability (columns ``CASE_COLUMNS``), one or more per seed.

    ``pool``: matches that fillers are drawn from (default: the seeds themselves). A seed
    that no template or negation applies to yields no case; duplicate case ids are dropped.
    """
    pool = seeds if pool is None else pool
    by_label = {label: frame for label, frame in pool.groupby("label", sort=True)}
    cases: list[dict[str, str]] = []
    for seed in seeds.itertuples(index=False):
        common = {"rule": int(seed.rule), "seed_label": seed.label,
                  "parameters": parameters or {}}
        if spec.transform is None:
            cases.append(_case(spec, seed.text, (seed.label,), "sst",
                               {SEED_SLOT: seed.sentence_id}, template=None, **common))
            continue
        for _ in range(spec.transform.variants_per_seed):
            made = _variant(spec.transform, seed, by_label, rng)
            if made is None:
                break
            text, expected, sources, template, chosen = made
            cases.append(_case(spec, text, expected, "spec", sources, template=template,
                               choices=chosen, **common))
    frame = pd.DataFrame(cases, columns=CASE_COLUMNS)
    return frame.drop_duplicates("case_id").reset_index(drop=True)


def seed_cases(specs: list[CapabilitySpec], tagged: pd.DataFrame, polarity: WordPolarity,
               seeds_per_lc: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All capabilities' seed cases, and per capability: #matches, #seed candidates, #cases."""
    parameters = {"seed": seed, "seeds_per_lc": seeds_per_lc,
                  "word_sentiment": getattr(polarity, "name", type(polarity).__name__)}
    frames, counts = [], []
    for spec in specs:
        rng = spec_rng(seed, spec.id)
        matches = search_seeds(spec, tagged, polarity)
        seeds = sample_seeds(matches, seeds_per_lc, rng)
        cases = apply_transform(spec, seeds, rng, pool=matches, parameters=parameters)
        frames.append(cases)
        counts.append({"capability": spec.id, "matches": len(matches),
                       "seed_candidates": int(matches["is_seed"].sum()),
                       "seeds": len(seeds), "cases": len(cases)})
    return (pd.concat(frames, ignore_index=True) if frames else
            pd.DataFrame(columns=CASE_COLUMNS)), pd.DataFrame(counts)
