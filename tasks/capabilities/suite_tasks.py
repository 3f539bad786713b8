"""The ``capabilities`` stage's suite tasks (S²LCT), cached by content: tagging SST, inducing
the PCFG, searching each capability's seeds and expanding them with the fill model.

They are cached on what determines them — file contents, parameters, the code of the
modules that compute them — so a rerun after an unrelated change recomputes nothing, and a
new capability only expands itself."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE

from lingtest.tasks.capabilities import expansion, grammar, search
from lingtest.tasks.capabilities.fill import tag_lexicon
from lingtest.tasks.capabilities.masks import reference_cfg
from lingtest.tasks.capabilities.specs import CapabilitySpec
from lingtest.tasks.core.caching import model_id, task
from lingtest.tasks.core.cases import provenance_json
from lingtest.tasks.models.registry import resolve


SpacyModel = model_id("spacy", resolve=resolve)


FillModel = model_id("causal_lm", "masked_lm", resolve=resolve)  # keyed on its revision


@task(name="tag-sst")
def tag_sentences(sst_path: Path, spacy_model: SpacyModel, offline: bool) -> pd.DataFrame:
    """spaCy tags of every SST sentence, shared by all capabilities' searches."""
    from lingtest.tasks.models.nlp import load_spacy

    return search.tag_sst(pd.read_parquet(sst_path), load_spacy(spacy_model, offline=offline))


@task(name="induce-pcfg")
def induce_grammar(ptb_path: Path, heldout: int) -> dict:
    """The PCFG from the treebank's training part (``pcfg``: the flow saves it) and its
    bracket F1 on the held-out part (parsed from their gold tags, so the figure is the
    grammar's, not the tagger's). Writes nothing: a cache hit must not skip a file."""
    trees = pd.read_parquet(ptb_path)["tree"].tolist()
    train, held = grammar.split_heldout(trees, heldout)
    pcfg = grammar.induce_pcfg(train)
    predicted = [pcfg.parse(*grammar.gold_tags_words(t)).tree for t in held]
    scores = grammar.bracket_f1(held, predicted) if held else {}
    return {"pcfg": pcfg, "grammar": pcfg.describe(), "bracket": scores,
            "train_trees": len(train)}


@task(name="seed-cases", cache_policy=NO_CACHE)
def seed_cases(specs: list[CapabilitySpec], tagged: pd.DataFrame,
               polarity: search.WordPolarity, seeds_per_lc: int, seed: int,
               trials: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Search, sample and transform (seconds: not worth a cache entry), ``trials`` times:
    trial t samples with ``seed + t`` (trial 0 is the one-trial run's), each case held once;
    with more than one trial its provenance names the trials that drew it (``trials``).
    Counts: trial 0's, and the union's cases beside (``cases_all_trials``)."""
    seeds, counts = search.seed_cases(specs, tagged, polarity, seeds_per_lc, seed)
    if trials == 1:
        return seeds, counts
    drawn = pd.concat([seeds.assign(trial=0), *[
        search.seed_cases(specs, tagged, polarity, seeds_per_lc, seed + t)[0].assign(trial=t)
        for t in range(1, trials)]], ignore_index=True)
    member = drawn.groupby("case_id", sort=False)["trial"].agg(lambda t: sorted(set(t)))
    union = drawn.drop_duplicates("case_id").drop(columns="trial").reset_index(drop=True)
    union["provenance"] = [provenance_json(**{**json.loads(p), "trials": member[c]})
                           for c, p in zip(union["case_id"], union["provenance"])]
    counts["cases_all_trials"] = counts["capability"].map(union["capability"].value_counts()
                                                          ).fillna(0).astype(int)
    return union, counts


# ``polarity`` is a closure over ``polarity_path`` and ``settings["word_sentiment"]``, both keyed.
@task(name="expand", task_run_name="expand-{spec.id}", exclude=("polarity",))
def expand_capability(spec: CapabilitySpec, cases: pd.DataFrame, grammar_path: Path,
                      polarity_path: Path | None, polarity: search.WordPolarity,
                      treebank_path: Path, tagged: pd.DataFrame, settings: dict,
                      seed: int, fill_model_id: FillModel, parser: str,
                      spacy_model: SpacyModel, offline: bool) -> tuple[pd.DataFrame, dict]:
    """One capability's expansions (parse → Algorithm 1 masks → fill → validate)."""
    from lingtest.tasks.capabilities.fill import load_fill_model
    from lingtest.tasks.models.nlp import load_spacy

    nlp = load_spacy(spacy_model, offline=offline)
    pcfg = grammar.Grammar.load(grammar_path) if parser == "pcfg" else None
    trees = expansion.parse_texts(cases["text"].tolist(), nlp, pcfg, parser)
    treebank = pd.read_parquet(treebank_path)["tree"].tolist()
    cfg = reference_cfg(treebank)
    tags = tag_lexicon([grammar.gold_tags_words(t)[::-1] for t in treebank]
                       + list(zip(tagged["tokens"], tagged["tag"])))
    model = load_fill_model(fill_model_id, offline=offline)
    frame, stats = expansion.expand_capability(spec, cases, trees, cfg, model, fill_model_id,
                                               nlp, polarity, settings, seed, tags)
    get_run_logger().info("%s: %d seed cases → %d expansions (%d proposed, %d valid)",
                          spec.id, len(cases), len(frame), stats["proposed"], stats["valid"])
    return frame, {"capability": spec.id, **stats}
