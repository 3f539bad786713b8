"""Per stage, the model work ``lingtest plan`` counts (``ESTIMATORS``): the passes and
tokens each stage's own code would run, from its effective parameters and the data
stage's tables (``flows/plan_counting.py``'s ``Counting``), exact where the tables or a
suite built earlier tell, else a bound or an estimate (``flows/run_estimate.py``)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from lingtest.flows.model_sizes import HUB_ARCHITECTURE, UNCASED_BERT_VOCABULARY
from lingtest.flows.plan_counting import NO_WEIGHTS, Counting, MissingInputs, Work, padded_tokens

CHAT_TOKENS = 30  # a chat template's system prompt and role markers around a prompt
SAMPLE_TOKENS = 32  # AdaTest suggestions: new tokens per completion (generators.py)
SUGGESTION_PROMPT_TOKENS = 160  # AdaTest prompt: a handful of example tests and the topic
# Triples' distinct texts per seed of each relation's pool, in the default run's suite
# (2026-11-29: CR1 4,902 texts from 2,210 SST test sentences, CR2 1,227 / 2,210, CR3 1,764
# / 588 contrast pairs, CR4 552 / 279 MRPC validation paraphrases) and triples per pool seed:
# the estimate for a relation no suite of the same settings was built for.
DEFAULT_YIELD = {"CR1": (4902 / 2210, 1833 / 2210), "CR2": (1227 / 2210, 409 / 2210),
                 "CR3": (1764 / 588, 588 / 588), "CR4": (552 / 279, 184 / 279)}
RELATION_SETTINGS = {"CR1": ("sst_split", "cr1_triples"),
                     "CR2": ("sst_split", "synonym_scope", "synonym_probability"),
                     "CR3": ("contrast_split", "synonym_scope", "synonym_probability"),
                     "CR4": ("mrpc_split",)}
# S²LCT masked sentences per seed with no max_masks_per_seed, measured on the default run's
# 510 seeds (its induced PCFG, 2026-11-29): 31.8 with one inserted word of the default tags,
# 58.9 with two of any tag (ALiCT's), 20.8 of them with two masks.
UNCAPPED_MASKS = {1: (31.8, 0.0), 2: (58.9, 20.8)}
CAPABILITY_SUITE_KEYS = ("specs_dir", "capabilities", "seeds_per_lc", "word_sentiment",
                         "parser", "pcfg_heldout", "max_masks_per_seed", "max_inserted_words",
                         "insert_tags", "pos_check", "fill_model", "fill_candidates",
                         "max_expansions_per_seed", "trials", "mask_sampling",
                         "top_productions", "min_logprob_per_word",
                         "min_right_context_logprob")
CONSISTENCY_SUITE_KEYS = ("questions", "n_questions", "max_values", "ipm", "strength",
                          "generator", "import_dir", "prompt_prefix", "prompt_suffix",
                          "prompt_join")
DEBUG_SUITE_KEYS = ("topics", "checklist_examples", "seed_tests", "ood_split", "eval_max",
                    "conditions", "tree", "tree_topics")


# --------------------------------------------------------------------------- stages

def _data(count: Counting) -> list[Work]:
    return []


def _train_sentiment(count: Counting) -> list[Work]:
    from lingtest.tasks.data.sst import sst2_split
    from lingtest.tasks.training.sentiment import BASE_MODEL, MAX_LENGTH

    t, seed = count.params.capabilities.train_sentiment, count.params.seed
    sst = count.table("sst")
    train, test = sst2_split(sst, "train"), sst2_split(sst, "test")
    n_train = min(len(train), t.max_train or len(train))
    n_test = min(len(test), t.max_test or len(test))
    lengths = count.lengths(train["text"], MAX_LENGTH)
    steps = t.epochs * math.ceil(n_train / t.batch_size)
    tokens = padded_tokens(lengths, t.batch_size, steps, seed)
    model = str(BASE_MODEL)
    return [count.training("train-sentiment", model, "fine-tune on SST-2 train", steps,
                           tokens, "exact", f"{t.epochs} epoch(s) × ⌈{n_train} / "
                           f"{t.batch_size}⌉ padded batches (tokens simulated)"),
            count.forward("train-sentiment", model, "score SST-2 test",
                          count.lengths(test["text"], MAX_LENGTH)[:n_test], "exact",
                          f"{n_test} test sentences")]


@dataclass
class SuiteTexts:
    """The triples' texts a contrastive run embeds: known ones, and estimated counts."""

    frame: pd.DataFrame         # the known triples (seed, positive, negative)
    seeds: list[str]
    estimated: int = 0          # texts estimated beyond ``texts``
    estimated_tokens: int = 0
    triples: int = 0
    bound: str = "exact"
    basis: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)


def contrastive_suite(count: Counting, c, seed: int) -> SuiteTexts:
    """The suite's texts: an imported suite's; per relation, the built suite's when it was
    built with the same settings, else its pool's size × the relation's yield (the built
    suite's, else ``DEFAULT_YIELD``)."""
    from lingtest.tasks.contrastive.suite import _pool

    out = SuiteTexts(pd.DataFrame(columns=["seed", "positive", "negative"]), [])
    if c.suite:
        from lingtest.tasks.contrastive import costello_json

        path = Path(c.suite) if Path(c.suite).is_absolute() else count.workspace.root / c.suite
        suite = costello_json.select_imported(costello_json.read_costello_suite(path),
                                              c.relations, c.max_seeds, seed, path)
        return _known(out, suite, f"the imported suite {path.name}")
    built = count.interim("contrastive", "suite.parquet")
    tables = {}
    for relation in c.relations:
        rows = built[built["relation"] == relation] if built is not None else None
        recorded = _recorded_settings(rows)
        wanted = {key: getattr(c, key) for key in ("max_seeds", *RELATION_SETTINGS[relation])}
        if rows is not None and len(rows) and recorded is not None and \
                recorded.get("seed") == seed and \
                all(recorded.get(k) == v for k, v in wanted.items()):
            _known(out, rows, f"{relation}: the built suite (same settings)")
            continue
        if not tables:
            tables = {name: count.table(name) for name in ("sst", "contrast_pairs", "mrpc")}
        pool, texts_of = _pool(SimpleNamespace(table=tables.__getitem__, params=c), relation)
        if rows is not None and len(rows) and recorded is not None:
            old = _pool(SimpleNamespace(table=tables.__getitem__, params=SimpleNamespace(
                **{**c.model_dump(), **{k: recorded.get(k, getattr(c, k))
                                        for k in RELATION_SETTINGS[relation]}})), relation)[0]
            distinct = len(set(rows["seed"]) | set(rows["positive"]) | set(rows["negative"]))
            per_text, per_triple = distinct / max(len(old), 1), len(rows) / max(len(old), 1)
            source = "the built suite's yield"
        else:
            per_text, per_triple = DEFAULT_YIELD[relation]
            source = "the default run's yield"
        seeds = len(pool) if c.max_seeds is None else min(len(pool), c.max_seeds)
        n_texts, n_triples = round(per_text * seeds), round(per_triple * seeds)
        sample = [t for _, row in pool.head(200).iterrows() for t in texts_of(row)]
        joined = " [SEP] ".join if relation == "CR4" else None
        if joined:
            sample = [joined(texts_of(row)) for _, row in pool.head(200).iterrows()]
        mean = float(np.mean(count.lengths(sample, c.max_length or 512))) if sample else 0.0
        out.estimated += n_texts
        out.estimated_tokens += round(mean * n_texts)
        out.triples += n_triples
        out.seeds += [t for _, row in pool.iterrows() for t in texts_of(row)]
        out.kinds.add("paraphrase" if relation == "CR4" else "sentiment")
        out.bound = "estimate"
        out.basis.append(f"{relation}: {seeds} pool seeds × {per_text:.2f} texts ({source})")
    return out


def _recorded_settings(rows: pd.DataFrame | None) -> dict | None:
    if rows is None or not len(rows):
        return None
    facts = json.loads(rows["provenance"].iloc[0])
    return facts.get("parameters")


def _known(out: SuiteTexts, rows: pd.DataFrame, basis: str) -> SuiteTexts:
    from lingtest.tasks.contrastive.classifier_tasks import needed_kinds

    out.frame = pd.concat([out.frame, rows[["seed", "positive", "negative"]]],
                          ignore_index=True)
    out.seeds += list(rows["seed"].drop_duplicates())
    out.triples += len(rows)
    out.kinds |= set(needed_kinds(rows))
    out.basis.append(basis)
    return out


def _vocabulary(count: Counting, model: str, c, seed: int):
    """(the model's vocab dictionary when its tokenizer is here, else None; its size or
    bound; how known; the model's normal forms of words, as ``Encoder.normal_forms``, by
    which ``embedding_tasks._to_embed`` deduplicates every dictionary, or None)."""
    from lingtest.tasks.contrastive.thresholds import cap_words, distinct_forms
    from lingtest.tasks.models.encoders import _st_settings, whole_words
    from lingtest.tasks.models.registry import transformers_classes

    size = count.size(model)
    if size is None:
        return None, 0, "unknown", None
    if size.tokenizer:
        (auto_tokenizer,) = transformers_classes("AutoTokenizer")
        tokenizer = auto_tokenizer.from_pretrained(size.tokenizer)
        words = cap_words(whole_words(tokenizer), c.dictionary_max_words, seed)
        row = count.rows[model]
        lowercase = _st_settings(Path(row.path))[1] if row.path else False
        normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)

        def forms(ws: list[str]) -> list[str]:
            cased = [w.lower() if lowercase else w for w in ws]
            return [normalizer.normalize_str(w) for w in cased] if normalizer else cased

        return distinct_forms(words, forms(words)), 0, "exact", forms
    if HUB_ARCHITECTURE.get(model) in UNCASED_BERT_VOCABULARY:  # MiniLM's tokenizer has it
        n = len(whole_words(count.tokenizer))
        return (None, min(n, c.dictionary_max_words or n), "bert-base-uncased's whole words",
                None)
    return (None, min(size.vocab, c.dictionary_max_words or size.vocab),
            "at most its vocabulary", None)


def _max_length(count: Counting, model: str, c) -> int:
    """The tokens a text keeps: ``contrastive.max_length``, else the model's own (a
    sentence-transformers model's max_seq_length), at most 512, as ``load_encoder``."""
    from lingtest.tasks.models.encoders import DEFAULT_MAX_LENGTH, _st_settings

    row = count.rows.get(model)
    own = _st_settings(Path(row.path))[0] if row is not None and row.path else None
    return c.max_length or own or DEFAULT_MAX_LENGTH


@dataclass
class EmbeddingInputs:
    """What every encoder of a contrastive run embeds besides its vocabulary."""

    suite: SuiteTexts
    data: dict
    texts: list[str]
    dataset: list[str]
    user: list[str]


def embedding_inputs(count: Counting, c, seed: int) -> EmbeddingInputs:
    """The triples' texts, the downstream classifiers' data and the extra dictionaries
    (``ContrastiveMethod._embedding_inputs``), once per plan and setting."""
    from lingtest.tasks.contrastive import classifier_tasks, thresholds, validation

    def make() -> EmbeddingInputs:
        suite = contrastive_suite(count, c, seed)
        tables = {name: count.table(name) for name in ("sst", "mrpc")}
        data = classifier_tasks.classifier_data(tables, c, seed, tuple(
            k for k in ("sentiment", "paraphrase") if k in suite.kinds))
        texts = validation.needed_texts(suite.frame, data, [], c.paraphrase_features)
        needs = thresholds.needs_dictionaries(c.thresholds)
        dataset = thresholds.dictionary_from_dataset(dict.fromkeys(suite.seeds)) \
            if needs else []
        user = thresholds.read_dictionary(count.workspace.root / c.dictionary_file) \
            if needs and c.dictionary_file else []
        return EmbeddingInputs(suite, data, texts, dataset, user)

    return count.memo(("contrastive inputs", c.model_dump_json(), seed), make)


def contrastive_work(count: Counting, stage: str, models: list[str], c, seed: int,
                     distances: list[str] | None = None, original: bool = False) -> list[Work]:
    """Per encoder: the texts it embeds (triples, classifier data, dictionaries, as
    ``embedding_tasks.embed``), its nearest-neighbour searches and its classifier banks.
    ``original``: a model whose vectors and searches the contrastive stage left in its
    store and task cache (only its banks train again)."""
    from lingtest.tasks.contrastive import thresholds

    inputs = embedding_inputs(count, c, seed)
    suite, needs = inputs.suite, thresholds.needs_dictionaries(c.thresholds)
    work = []
    for model in models:
        vocab, vocab_count, vocab_known, forms = count.memo(
            ("vocab", model, c.dictionary_max_words, seed),
            lambda: _vocabulary(count, model, c, seed)) if needs else ([], 0, "exact", None)
        size = count.size(model)
        dim = size.hidden if size else None
        if not original:
            words = {"vocab": vocab or [], "dataset": inputs.dataset, "user": inputs.user}
            if forms is not None:
                words = {name: thresholds.distinct_forms(ws, forms(ws))
                         for name, ws in words.items()}
            everything = list(dict.fromkeys([*inputs.texts,
                                             *(w for ws in words.values() for w in ws)]))
            lengths = count.lengths(everything, _max_length(count, model, c))
            if suite.estimated:
                lengths += [round(suite.estimated_tokens / suite.estimated)] * suite.estimated
            if vocab is None:
                lengths += [3] * vocab_count  # a word: 1-2 pieces and the 2 special tokens
            bound = ("estimate" if suite.bound == "estimate" else
                     "exact" if vocab is not None else "at most")
            work.append(count.forward(
                stage, model, "embed texts", lengths, bound,
                f"{len(lengths)} distinct texts: triples ({'; '.join(suite.basis)}), "
                f"classifier data, dictionaries (vocab: {vocab_known})"))
            n_vocab = len(vocab) if vocab is not None else vocab_count
            sizes = {"vocab": n_vocab, "dataset": len(words["dataset"]),
                     "user": len(words["user"])}
            for metric in distances or c.distances:
                for name, n in sizes.items():
                    if needs and n >= 2 and (name != "dataset" or metric == "l2"):
                        work.append(count.search(stage, model, metric, name, n, dim,
                                                 "at most" if name == "vocab" and vocab is None
                                                 else "exact"))
        for kind, split in inputs.data.items():
            in_dim = None if dim is None else dim * (
                4 if kind == "paraphrase" and c.paraphrase_features == "pair" else 1)
            work.append(count.banks(stage, model, kind, len(split["train_y"]),
                                    c.classifier_epochs, c.n_classifiers, in_dim, "exact"))
    return work


def _contrastive(count: Counting) -> list[Work]:
    params = count.params
    c = params.contrastive
    models = list(c.encoders or params.models.encoders)
    return contrastive_work(count, "contrastive", models, c, params.seed)


def _repair(count: Counting) -> list[Work]:
    """Per repaired model (``repair/stage.py``): the fine-tuning steps, the violation counts
    that pick the epoch, and the re-tests through the contrastive method."""
    from lingtest.tasks.repair.params import REPAIR_ALL

    params = count.params
    p, c = params.repair, params.contrastive
    tested = list(c.encoders or params.models.encoders)
    chosen = tested[:1] if p.models is None else tested if p.models == [REPAIR_ALL] \
        else list(p.models)
    suite = embedding_inputs(count, c, params.seed).suite
    triple_texts = [t for _, row in suite.frame.iterrows()
                    for t in (row["seed"], row["positive"], row["negative"])]
    lengths = count.lengths(triple_texts, c.max_length or 512)
    if suite.estimated:
        lengths += [round(suite.estimated_tokens / suite.estimated)] * suite.estimated
    train = round(suite.triples * (1 - p.heldout - p.validation))
    per_epoch = math.ceil(train / p.batch_triples)
    if p.max_steps_per_epoch is not None:
        per_epoch = min(per_epoch, p.max_steps_per_epoch)
    steps = p.epochs * per_epoch
    selected = round(suite.triples * (p.validation if p.selection == "validation"
                                      else 1 - p.heldout - p.validation))
    if p.selection_max_triples is not None:
        selected = min(selected, p.selection_max_triples)
    # violated and benign micro-batches of random triples, each padded to its longest text
    step_tokens = 2 * padded_tokens(lengths, 3 * p.batch_triples, steps, params.seed)
    # the chosen triples' texts in suite order, padded batches of 64, before and each epoch
    per_text = in_order_padded(lengths, 64) / max(len(lengths), 1)
    counted = 3 * selected * (p.epochs + 1)
    retest = c.model_copy(update={
        "classifier_max_train": p.classifier_max_train or c.classifier_max_train,
        "classifier_max_test": p.classifier_max_test or c.classifier_max_test})
    bound = "at most" if suite.bound == "exact" else "estimate"
    work = []
    for model in chosen:
        work.append(count.training(
            "repair", model, "fine-tune on violated and benign triples", steps, step_tokens,
            bound, f"{p.epochs} epochs × ≤ {per_epoch} micro-batches of {p.batch_triples} "
            f"violated + {p.batch_triples} benign triples (of ≤ {train} training triples)"))
        item = count.forward("repair", model, "count violated triples after each epoch",
                             [round(per_text)] * counted, bound,
                             f"({p.epochs} + 1) × {selected} triples × 3 texts, padded "
                             "batches of 64", exact_passes=False)
        work.append(item)
        for item in contrastive_work(count, "repair", [model], retest, params.seed,
                                     [p.distance]):
            item.what = f"re-test the repaired model: {item.what}"
            work.append(item)
        if (retest.classifier_max_train, retest.classifier_max_test) != (
                c.classifier_max_train, c.classifier_max_test):
            for item in contrastive_work(count, "repair", [model], retest, params.seed,
                                         [p.distance], original=True):
                item.what = f"re-test the original model: {item.what}"
                work.append(item)
    return work


def in_order_padded(lengths: list[int], batch: int) -> int:
    """Tokens padded batches of ``batch`` consecutive texts run."""
    return sum(len(part) * max(part) for part in
               (lengths[i:i + batch] for i in range(0, len(lengths), batch)))


def _capabilities(count: Counting) -> list[Work]:
    from lingtest.tasks.capabilities.checklist_run import sample_suite
    from lingtest.tasks.capabilities.fill import CONTEXT_TOKENS, SCORED_PER_KEPT, fill_kind
    from lingtest.tasks.capabilities.report import PAPER_EXPANSIONS_PER_SEED
    from lingtest.tasks.capabilities.specs import BUILTIN_SPECS, load_specs
    from lingtest.tasks.data.sst import sst2_split

    params, root = count.params, count.workspace.root
    c, seed = params.capabilities, params.seed
    k, w, keep = c.fill_candidates, c.max_inserted_words, c.max_expansions_per_seed
    specs = load_specs(root / c.specs_dir if c.specs_dir else BUILTIN_SPECS, c.capabilities)
    sst = count.table("sst")
    seed_tokens = round(float(np.mean(count.lengths(sst["text"]))))
    recorded = count.recorded("capabilities", "capabilities")
    built = count.interim("capabilities", "suite.parquet")
    funnel = _funnel(count)
    same = (recorded is not None and built is not None and funnel is not None
            and recorded.get("seed") == seed
            and all(recorded.get(key) == value for key, value in c.model_dump(
                mode="json", include=set(CAPABILITY_SUITE_KEYS)).items()))
    two_share = UNCAPPED_MASKS[2][1] / UNCAPPED_MASKS[2][0] if w > 1 else 0.0
    if same:
        suite_texts = list(dict.fromkeys(built["text"]))
        suite_lengths = count.lengths(suite_texts)
        seeds, masked = int(funnel["cases"].sum()), int(funnel["masked"].sum())
        proposed, valid = int(funnel["proposed"].sum()), int(funnel["valid"].sum())
        suite_bound, fill_bound = "exact", "exact"
        suite_basis = f"the built suite (same settings): {len(suite_texts)} distinct texts"
    else:
        seeds = len(specs) * c.seeds_per_lc * c.trials
        per_seed = c.max_masks_per_seed or UNCAPPED_MASKS[min(w, 2)][0]
        masked = round(seeds * per_seed)
        proposed = valid = masked * k
        kept = keep if keep is not None else PAPER_EXPANSIONS_PER_SEED
        suite_lengths = [seed_tokens + w] * (seeds * (1 + kept))
        suite_bound = "at most" if keep is not None else "estimate"
        fill_bound = "at most" if c.max_masks_per_seed is not None else "estimate"
        suite_basis = (f"≤ {len(specs)} capabilities × {c.seeds_per_lc} seeds × {c.trials} "
                       f"trial(s), each with " + (f"≤ {keep} expansions" if keep is not None
                                                  else f"about {kept} expansions (ALiCT's "
                                                  "published results)"))
    fill = c.fill_model
    if fill_kind(fill) == "causal_lm" and w == 1:
        scored = min(valid, seeds * SCORED_PER_KEPT * keep) if keep is not None else valid
        lengths = [seed_tokens] * seeds + [CONTEXT_TOKENS + 2] * scored
        basis = (f"one pass per seed ({seeds}) proposes every fill; {scored} valid fills "
                 f"scored on the seed's cached pass (≤ {CONTEXT_TOKENS} tokens after the gap)")
    else:
        second = round(masked * two_share) * k * (w - 1)
        rescored = valid if fill_kind(fill) == "causal_lm" else 0
        lengths = [seed_tokens + w] * (masked + second + rescored)
        basis = (f"{masked} masked sentences"
                 + ("" if c.max_masks_per_seed is not None or same else
                    f" ({UNCAPPED_MASKS[min(w, 2)][0]} per seed with no cap, measured on the "
                    "default run's seeds)")
                 + f", one pass each, and {second} for the second word (k = {k} per mask)"
                 + (f"; {rescored} fills re-scored" if rescored else ""))
    work = [count.forward("capabilities", fill, "propose fills (fill model)", lengths,
                          fill_bound, basis, lm=True, exact_passes=False, unit="passes")]
    checklist = count.table("checklist_suite")
    sampled = sample_suite(checklist, c.checklist_max_examples, seed)
    checklist_texts = list(dict.fromkeys(t for ts in sampled["texts"] for t in ts))
    checklist_lengths = count.lengths(checklist_texts)
    train = sst2_split(sst, "train")
    n_train = min(len(train), c.coverage_max_train or len(train))
    train_lengths = count.lengths(train["text"])[:n_train]
    smallest = min(len(suite_lengths), len(checklist_lengths))
    drawn = sum(min(size, smallest) for size in {*c.coverage_sizes, smallest}
                if size <= smallest) * c.coverage_repeats
    sampled_lengths = suite_lengths + checklist_lengths[:min(drawn, len(checklist_lengths))] \
        + [seed_tokens] * len(suite_lengths)
    for row in (r for r in count.rows.values() if r.key == "capabilities.models"):
        model = row.model
        work.append(count.forward("capabilities", model, "classify the S²LCT suite",
                                  suite_lengths, suite_bound, suite_basis))
        work.append(count.forward("capabilities", model, "classify the CheckList sample",
                                  checklist_lengths, "exact",
                                  f"{len(checklist_texts)} distinct texts "
                                  f"(≤ {c.checklist_max_examples or 'all'} per test)"))
        if model in NO_WEIGHTS or row.parameters is None:
            continue  # coverage hooks hidden states
        work.append(count.forward("capabilities", model, "coverage: neuron bounds",
                                  train_lengths, "exact", f"{n_train} SST-2 training sentences"))
        work.append(count.forward("capabilities", model, "coverage: sampled suites",
                                  sampled_lengths, "at most",
                                  f"the S²LCT suite, ≤ {drawn} CheckList texts of the samples "
                                  "and as many CheckList texts as the capabilities' pairs take"))
    return work


def _funnel(count: Counting) -> pd.DataFrame | None:
    path = count.workspace.reports / "capabilities" / "capabilities-suite.csv"
    return pd.read_csv(path) if path.is_file() else None


def _consistency(count: Counting) -> list[Work]:
    from lingtest.tasks.models.llm import parse_llm

    params = count.params
    c, root = params.consistency, count.workspace.root
    recorded = count.recorded("consistency", "consistency")
    queries = count.interim("consistency", "queries.parquet")
    same = (recorded is not None and queries is not None and recorded.get("seed") == params.seed
            and all(recorded.get(k) == getattr(c, k) for k in CONSISTENCY_SUITE_KEYS))
    if same:
        prompts, bound, basis = list(queries["prompt"]), "at most", "the built suite's prompts"
    else:
        count.table("questions")
        built, old = ((len(queries) / max(queries["question_id"].nunique(), 1),
                       (recorded or {}).get("max_values") or 3) if queries is not None
                      else (431 / 3, 3))  # the default run: 431 prompts of 3 questions
        per_question = built * ((c.max_values or old) / old) ** c.strength
        n = c.n_questions
        prompts = ["is this a question of a typical length in the question set ?"] * round(
            per_question * n)
        bound, basis = "estimate", (f"{n} questions × {per_question:.0f} covering-array rows "
                                    "(the built suite's rows per question, scaled by "
                                    "max_values^strength)")
    lengths = count.lengths(prompts)
    work = []
    for spec in c.llms:
        model = _model_of(count, spec, parse_llm(spec, "consistency.llms", params.models.names,
                                                 root).bare)
        tokens = sum(lengths) + len(prompts) * (CHAT_TOKENS + c.max_new_tokens)
        item = count.generation("consistency", model, "answer prompts",
                                len(prompts), tokens, bound,
                                f"{len(prompts)} prompts ({basis}), each ≤ {c.max_new_tokens} "
                                f"new tokens (an answer stops once its JSON is complete)")
        work.append(item)
    return work


def _model_of(count: Counting, spec: str, bare: str) -> str:
    """The plan's id of a configured spec: the one its model row carries."""
    for row in count.rows.values():
        if row.model in (spec, bare):
            return row.model
    return bare


def _adaptive(count: Counting) -> list[Work]:
    from lingtest.tasks.adaptive.method import AdaptiveMethod

    method = AdaptiveMethod(count.params, count.workspace)
    absent = [str(p.relative_to(count.workspace.root)) if p.is_relative_to(count.workspace.root)
              else str(p) for p in method.tree_paths() if not p.is_file()]
    if absent:
        raise MissingInputs(absent)
    suite = method.build_suite()
    texts = [t for column in ("input", "input_b") if column in suite
             for t in suite[column] if t]
    lengths = count.lengths(texts)
    return [count.forward("adaptive", row.model, "score the trees' tests", lengths, "exact",
                          f"{len(texts)} test inputs of {len(method.tree_paths())} tree(s)")
            for row in count.rows.values() if row.key == "adaptive.models"]


def _adaptive_debug(count: Counting) -> list[Work]:
    from lingtest.tasks.adaptive.debug import ADATEST, CHECKLIST_DATA

    params = count.params
    d = params.adaptive.debug
    model = next((r.model for r in count.rows.values() if r.key == "adaptive.debug.model"),
                 d.model)
    generator = params.models.causal_lm
    recorded = count.recorded("adaptive-debug", "debug")
    built = count.interim("adaptive-debug", "suite.parquet")
    same = (recorded is not None and built is not None and recorded.get("seed") == params.seed
            and all(recorded.get(k) == v for k, v in d.model_dump(
                mode="json", include=set(DEBUG_SUITE_KEYS)).items()))
    if same:
        suite_lengths, bound = count.lengths(built["text"]), "exact"
    else:
        checklist = count.table("checklist_suite")
        n = checklist["test"].nunique() * d.checklist_examples + 3 * (d.eval_max or 1000)
        suite_lengths, bound = [18] * n, "at most"
    topics, seeds = len(d.topics), d.seeds
    variants = topics + (topics - 1 if d.cumulative else 0)
    models = 1 + len(d.conditions) * variants * seeds
    loop_tests = d.seed_tests + d.rounds * d.prompts * d.completions
    per_condition = {CHECKLIST_DATA: d.checklist_n, ADATEST: loop_tests}
    texts = 0
    for condition in d.conditions:
        per_topic = per_condition.get(condition, d.checklist_n)
        topic_counts = [per_topic] * topics
        if d.cumulative:
            topic_counts += [per_topic * k for k in range(2, topics + 1)]
        texts += sum(topic_counts) * seeds
    mixed = round(texts * (1 + d.mix_ratio))
    loop_train = round(topics * seeds * d.rounds * loop_tests * (1 + d.mix_ratio))
    steps = d.epochs * (math.ceil(mixed / d.batch_size) + math.ceil(loop_train / d.batch_size))
    sst_lengths = count.lengths(count.table("sst")["text"])
    work = [count.forward("adaptive-debug", model, "evaluate every model", suite_lengths
                          * models, bound, f"{models} models × {len(suite_lengths)} cases",
                          calls=models * len(suite_lengths)),
            count.training("adaptive-debug", model, "fine-tune each model", steps,
                           padded_tokens(sst_lengths, d.batch_size, steps, params.seed),
                           "at most", f"{d.epochs} epoch(s) over ≤ {mixed} topic and SST-2 "
                           f"texts, and ≤ {d.rounds} fixes per topic loop (tokens as SST "
                           "sentences')")]
    if ADATEST in d.conditions:
        samples = topics * seeds * d.rounds * d.prompts * d.completions
        work.append(count.generation(
            "adaptive-debug", _model_of(count, generator, generator), "suggest tests",
            samples, samples * (SUGGESTION_PROMPT_TOKENS + SAMPLE_TOKENS), "at most",
            f"{topics} topics × {seeds} seed(s) × ≤ {d.rounds} rounds × {d.prompts} prompts × "
            f"{d.completions} completions of ≤ {SAMPLE_TOKENS} tokens"))
    return work


ESTIMATORS = {"data": _data, "train-sentiment": _train_sentiment, "contrastive": _contrastive,
              "capabilities": _capabilities, "consistency": _consistency,
              "adaptive": _adaptive, "adaptive-debug": _adaptive_debug, "repair": _repair}

