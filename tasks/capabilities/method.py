"""S²LCT (capability testing of sentiment classifiers) as a ``Method``: the ``capabilities``
stage's suite (specs → seeds → PCFG parse → Algorithm 1 masks → fill), its per-model runs and
its report (Table 3 per model, the CheckList comparison, coverage, Figure 4).

Units: ``cases`` per model and shard (``run_suite`` on the shard's cases), one ``checklist``
unit per model (the released CheckList suite) and, per model with hidden states, a ``bounds``
unit (the neurons' training bounds, a cached task) and a ``coverage`` unit (BoundCov /
SActCov). ``checklist`` and ``bounds`` read no S²LCT case: on Dask they run while the suite
is built (``early_units``). Each unit loads its own model instance: coverage hooks the
network's layers, which must not see another unit's forward passes. Result rows follow the
case/result contract (``tasks/core/schema.py``): ``output`` is the predicted 3-way label,
``score`` the probability the model gave the expected label(s) (``model_tasks.run_suite``).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from lingtest.tasks.capabilities import checklist_run, expansion, model_tasks, report, suite_tasks
from lingtest.tasks.capabilities.plugin import TABLES
from lingtest.tasks.capabilities.coverage_report import (coverage_data, coverage_lengths,
                                                plot_coverage_curve)
from lingtest.tasks.capabilities.checks import check_assets
from lingtest.tasks.capabilities.search import load_word_polarity
from lingtest.tasks.capabilities.specs import BUILTIN_SPECS, CapabilitySpec, load_specs
from lingtest.tasks.data.sst import sst2_split
from lingtest.tasks.core import io
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Method, Unit, UnitResult
from lingtest.tasks.core.publish import Figure, Report, provenance, slug
from lingtest.tasks.core.schema import Contract
from lingtest.tasks.models.llm_classifier import answer_counts, llm_provenance
from lingtest.tasks.models.model_spec import ModelRef, model_line, refs_by_name
from lingtest.tasks.models.sentiment import SentimentModel, builtin_substitutes, load_configured

FIGURE4 = "capabilities-figure4-coverage"  # the folder of Figure 4: <model>.png and its data
RULES_BEYOND_PAPER = (
    "Validation rules beyond the paper (which checks the fill's POS and its neutrality only): "
    "LC1/LC2 expansions must still meet the capability's search rule (rejected_rule); no "
    "inserted word may break a/an or determiner–noun agreement or dangle (rejected_agreement), "
    "repeat a neighbour, modify a proper name or title, open a prepositional phrase at the "
    "sentence start, take the next verb's subject, stand as a preposition without its "
    "object or come before an ellipsis (rejected_structure); the fill must be about as "
    "probable as the seed per inserted word (rejected_confidence; a fill whose word alone "
    "is 3 nats below that floor is refused unscored) and leave the words after "
    "it about as probable as in the seed (rejected_context); duplicates of a text already "
    "proposed are dropped (rejected_duplicate). A fill tagged otherwise in context than the "
    "masked tag is kept when the tag it got makes another reference production "
    "(pos_check: in_context); pos_check: exact rejects it as ALiCT does.")
COVERAGE_NOTES = (
    "Why the comparison can come out reversed against the paper's Figure 4 (S²LCT above "
    "CheckList): ALiCT's NeuronBoundaryCoverage collapses each layer's training bounds to one "
    "number shared by all its neurons after a few sentences of unequal length, so its "
    "published direction is not evidence; here each neuron keeps its own min/max over the "
    "SST-2 training sentences. CheckList's templates are also varied on purpose (names, "
    "places, numbers, many templates per test), while S²LCT's texts are SST movie-review "
    "sentences like the training set, whose activations stay inside the training bounds "
    "more often; see capabilities-lengths for the texts' lengths, which move coverage too.")
ASE22_NOTES = (
    "The layout of S²LCT's ASE'22 paper: each trial samples the seeds anew (trial t with run "
    "seed + t; capabilities.trials, the paper's 3) and expands them; test_cases counts seeds "
    "and expansions together and fail_% is one rate over all of them; each column is the "
    "median over the trials, fail_% min/max its range. A seed drawn by two trials is "
    "expanded once and counted in both.")
NEUTRAL_NOTES = (
    "A binary model predicts neutral when P(pos) falls inside capabilities.neutral_band; a "
    "capability that expects pos or neg then counts the seed as failed. Read a high "
    "failing_neutral_% as uncertainty in the band, not a confident wrong label.")


def suite_notes(funnel: pd.DataFrame, c) -> str:
    """The funnel's reading: parse fallbacks, rules beyond the paper, volume vs the paper."""
    cases, fallbacks = int(funnel["cases"].sum()), int(funnel["parse_fallbacks"].sum())
    per_seed = funnel["kept"].sum() / cases if cases else float("nan")
    return " ".join([
        f"{fallbacks} of {cases} seeds needed a parse fallback: the parser found no "
        "complete parse, so the seed's tree is a flat FRAG over the largest constituents it "
        "did parse; masks then come only from those constituents' productions.",
        RULES_BEYOND_PAPER,
        f"Expansions per seed: {per_seed:.2f} over all capabilities (cap "
        f"max_expansions_per_seed = {c.max_expansions_per_seed}; ALiCT's published results "
        f"have about {report.PAPER_EXPANSIONS_PER_SEED})."])


def table3_notes(funnel: pd.DataFrame, count: str, trials: int = 1) -> str:
    """Table 3's reading: the pass→fail unit, and a warning when the volume is far below
    the paper's (the counts grow with the expansions; the rates do not)."""
    unit = ("#pass_to_fail (the paper's unit): failing expansions whose seed the model "
            "passed, each distinct expansion once" if count == "distinct" else
            "#pass_to_fail counted as ALiCT's Result.py counts (pass_to_fail_count: alict): "
            "each failing expansion of a passed seed m² times, m the proposals that gave its "
            "text (ALiCT keeps the duplicates)")
    notes = [unit + "; #pass_to_fail_seeds: the passed seeds with at least one failing "
             "expansion."]
    if trials > 1:
        notes.append(f"One run as ALiCT's Table 3: trial 0's seeds (of {trials}) and their "
                     "expansions; the capabilities-ase22 tables take the median over all trials.")
    cases = int(funnel["cases"].sum())
    per_seed = funnel["kept"].sum() / cases if cases else 0.0
    if per_seed < report.PAPER_EXPANSIONS_PER_SEED / 2:
        notes.append(f"Expansions per seed here: {per_seed:.2f}, against about "
                     f"{report.PAPER_EXPANSIONS_PER_SEED} in ALiCT's results: compare the "
                     "fail rates, not the #pass_to_fail counts, with the paper's.")
    return " ".join(notes)


def substitutes(params) -> str:
    """The paper's assets this run replaced, for every report's header."""
    c = params.capabilities
    named = []
    builtin = builtin_substitutes(c.models)
    if builtin:
        named.append(f"the paper's SST-2 BERT / RoBERTa / DistilBERT → {builtin}")
    if c.parser == "pcfg":
        named.append("benepar benepar_en3 → a PCFG induced from the Penn Treebank sample, "
                     "parsing spaCy's PTB tags (vectorised CKY)")
    if "bert" not in c.fill_model.lower():
        named.append(f"BERT fill-mask → {c.fill_model} proposing words from the left context, "
                     "re-scored on the whole sentence")
    if c.word_sentiment == "lexicon":
        named.append("SentiWordNet → word polarity from SST's single-word phrase labels and "
                     "the Hu & Liu opinion lexicon")
    return "Substitutes: " + "; ".join(named) + "." if named else ""


def parser_note(parser: str, pcfg: dict) -> str:
    """The parser used: the PCFG with its held-out bracket F1 when there is one; benepar with
    its model's weights (the PCFG, induced anyway, parsed nothing)."""
    if parser == "benepar":
        from lingtest.tasks.capabilities.grammar import benepar_model_note

        return benepar_model_note()
    bracket = pcfg.get("bracket")
    return parser + (f" (labelled-bracket F1 {bracket['f1']:.3f} on {bracket['sentences']} "
                     "held-out treebank trees)" if bracket else "")


def fill_model_note(model_id: str, offline: bool) -> str:
    """The fill model, with the commit a hub model was read at (nothing pins it; a packaged
    model is pinned by its package's version in the environment lines)."""
    from lingtest.tasks.capabilities.fill import fill_kind
    from lingtest.tasks.models.registry import loaded_revision, resolve

    res = resolve(model_id, fill_kind(model_id), offline=offline)
    if res.source not in ("hub", "hub-cache"):
        return model_id
    return f"{model_id} @ {loaded_revision(res, None)}"


class CapabilitiesMethod(Method):
    """The ``capabilities`` stage (S²LCT): specs → seeds → parse → masks → fill → models →
    Table 3 per model, the CheckList comparison and the coverage curve (Figure 4)."""

    stage = "capabilities"
    contract = Contract(method="capabilities", group="capability", texts=("text",))

    def __init__(self, params, workspace):
        super().__init__(params, workspace)
        self.built: dict = {}  # build_suite's by-products for the report (counts, PCFG)
        self._hidden: dict[str, bool] | None = None

    # ------------------------------------------------------------------ inputs

    @property
    def files(self) -> dict[str, Path]:
        return {name: self.workspace.processed / f"{name}.parquet" for name in TABLES}

    def specs(self) -> list[CapabilitySpec]:
        c = self.params.capabilities
        return load_specs(self.workspace.root / c.specs_dir if c.specs_dir else BUILTIN_SPECS,
                          c.capabilities)

    def model_refs(self) -> dict[str, ModelRef]:
        """The models under test by display name (``capabilities.models`` parsed)."""
        return refs_by_name(self.params.capabilities.models, "capabilities.models",
                            self.params.models.names, self.workspace.root)

    def load_model(self, model_id: str) -> SentimentModel:
        """A fresh instance of one model under test (a unit's own), by display name; any
        other spec (``retest``'s new revision) is loaded as written."""
        return load_configured(self.model_refs().get(model_id, model_id), self.params,
                               self.workspace.root, self.params.capabilities.neutral_band)

    def check_inputs(self) -> None:
        absent = [str(f) for f in self.files.values() if not f.is_file()]
        if absent:
            raise LingtestError(f"missing processed tables {', '.join(absent)}: run "
                                "`lingtest run data` (or `dvc repro data`) first")
        self.specs()
        check_assets(self.params, self.workspace)
        self.hidden_states()  # loads every model once: a missing one fails before the suite

    def hidden_states(self) -> dict[str, bool]:
        """Which models under test have hidden states coverage can hook (loads each once)."""
        if self._hidden is None:
            self._hidden = {m: model_tasks.has_hidden_states(self.load_model(m))
                            for m in self.model_ids()}
        return self._hidden

    def model_ids(self) -> list[str]:
        return list(self.model_refs())

    # ------------------------------------------------------------------ suite

    def build_suite(self) -> pd.DataFrame:
        """Seeds and their expansions; writes ``pcfg.json`` (every run: the PCFG task writes
        nothing, so a cache hit cannot skip the file) and ``suite.jsonl``."""
        params, c, files = self.params, self.params.capabilities, self.files
        specs = self.specs()
        tagged = suite_tasks.tag_sentences(files["sst"], params.models.spacy,
                                           params.models.offline)
        polarity_path = files["word_polarity"] if c.word_sentiment == "lexicon" else None
        polarity = load_word_polarity(
            c.word_sentiment, pd.read_parquet(polarity_path) if polarity_path else None,
            self.workspace.nltk_data)
        seeds, seed_counts = suite_tasks.seed_cases(specs, tagged, polarity, c.seeds_per_lc,
                                           params.seed, c.trials)
        grammar_path = self.interim / "pcfg.json"
        pcfg = suite_tasks.induce_grammar(files["ptb_trees"], c.pcfg_heldout)
        with io.atomic_path(grammar_path) as tmp:
            pcfg["pcfg"].save(tmp)
        settings = {"max_masks_per_seed": c.max_masks_per_seed,
                    "fill_candidates": c.fill_candidates,
                    "max_expansions_per_seed": c.max_expansions_per_seed,
                    "word_sentiment": c.word_sentiment, "mask_sampling": c.mask_sampling,
                    "top_productions": c.top_productions,
                    "min_logprob_per_word": c.min_logprob_per_word,
                    "min_right_context_logprob": c.min_right_context_logprob,
                    "max_inserted_words": c.max_inserted_words, "pos_check": c.pos_check,
                    "insert_tags": c.insert_tags}
        # one call per capability: the flow spreads them over its worker processes, if any
        expansions = self.fan_out(suite_tasks.expand_capability, [
            (spec, seeds[seeds["capability"] == spec.id].reset_index(drop=True), grammar_path,
             polarity_path, polarity, files["ptb_trees"], tagged, settings, params.seed,
             c.fill_model, c.parser, params.models.spacy, params.models.offline)
            for spec in specs])
        expanded = [frame for frame, _ in expansions]
        fill_stats = [stats for _, stats in expansions]
        suite = pd.concat([seeds.assign(parent_case_id=""), *expanded], ignore_index=True)
        suite = suite.drop_duplicates("case_id").reset_index(drop=True)
        expansion.write_suite_jsonl(suite, self.interim / "suite.jsonl")
        self.built = {"specs": specs, "seed_counts": seed_counts, "fill_stats": fill_stats,
                      "pcfg": {k: v for k, v in pcfg.items() if k != "pcfg"}}
        return suite

    # ------------------------------------------------------------------ units

    def units(self, suite: pd.DataFrame) -> list[Unit]:
        """Per model: its shards of the cases, the CheckList suite, and coverage when the
        model has hidden states."""
        hidden = self.hidden_states()
        out = []
        for unit in super().units(suite):
            out.append(unit)
            if unit.shard == unit.shards - 1:
                out.append(Unit(unit.model_id, "checklist"))
                if hidden[unit.model_id]:
                    out += [Unit(unit.model_id, "bounds"), Unit(unit.model_id, "coverage")]
        return out

    def early_units(self) -> list[Unit]:
        """The units that read no S²LCT case: CheckList (the released suite) and the
        coverage bounds (SST-2 training text)."""
        hidden = self.hidden_states()
        return [unit for model_id in self.model_ids() for unit in (
            Unit(model_id, "checklist"), *([Unit(model_id, "bounds")] if hidden[model_id]
                                           else []))]

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        """The unit's part on a fresh model. The model's answers are a task cached by its
        revision (``model_tasks.answering``) inside the flow's ``run-unit`` task; ``retest``
        runs them as plain functions, with no Prefect run."""
        if unit.part not in ("cases", "checklist", "bounds", "coverage"):
            raise LingtestError(f"capabilities: unknown unit part `{unit.part}` "
                                "(cases, checklist, bounds or coverage)")
        model, c, seed = self.load_model(unit.model_id), self.params.capabilities, self.params.seed
        if unit.part == "cases":
            return UnitResult(unit, model_tasks.answering(model_tasks.run_suite, model)(
                model, unit.take(suite)),
                              extra=answer_counts(model))
        pass_tokens = self.params.runtime.pass_tokens
        if unit.part == "bounds":  # a cached task: the coverage unit reads its result
            model_tasks.neuron_bounds(model, self.coverage_train_texts(), pass_tokens)
            return UnitResult(unit)
        checklist = pd.read_parquet(self.files["checklist_suite"])
        if unit.part == "checklist":
            verdicts = model_tasks.answering(model_tasks.run_checklist, model)(
                model, checklist, c.checklist_max_examples, seed, c.batch_size)
            return UnitResult(unit, extra={"verdicts": verdicts, **answer_counts(model)})
        suites, pairs = self.coverage_texts(suite, checklist)
        train = self.coverage_train_texts()
        curve, by_lc, info = model_tasks.coverage_curve.fn(
            model, model_tasks.neuron_bounds(model, train, pass_tokens), suites, pairs,
            c.coverage_sizes, c.coverage_repeats, seed, pass_tokens)
        info = {**info, "train_sentences": len(train)}
        return UnitResult(unit, extra={"curve": curve, "by_lc": by_lc, "info": info})

    def coverage_texts(self, suite: pd.DataFrame, checklist: pd.DataFrame
                       ) -> tuple[dict[str, list[str]], dict]:
        """Both whole suites' distinct texts (CheckList's seeded sample, as run) and each
        capability's texts against its CheckList test at equal size (``coverage_pairs``)."""
        c, seed = self.params.capabilities, self.params.seed
        sampled = checklist_run.sample_suite(checklist, c.checklist_max_examples, seed)
        suites = {"S²LCT": list(dict.fromkeys(suite["text"])),
                  "CheckList": list(dict.fromkeys(t for ts in sampled["texts"] for t in ts))}
        lcs = [spec.id for spec in self.specs()]
        return suites, model_tasks.coverage_pairs(suite, checklist, lcs, seed)

    def texts_to_score(self, suite: pd.DataFrame) -> list[str]:
        """The suite's texts and the CheckList sample's (the ``checklist`` unit's); coverage
        needs hidden states, which a model scored elsewhere does not have."""
        checklist = pd.read_parquet(self.files["checklist_suite"])
        suites, _ = self.coverage_texts(suite, checklist)
        return list(dict.fromkeys([*suites["S²LCT"], *suites["CheckList"]]))

    def coverage_train_texts(self) -> list[str]:
        """The SST-2 training sentences that set the neuron bounds (seeded sample if capped)."""
        c = self.params.capabilities
        train = sst2_split(pd.read_parquet(self.files["sst"]), "train")
        if c.coverage_max_train and c.coverage_max_train < len(train):
            train = train.sample(n=c.coverage_max_train, random_state=self.params.seed)
        return train["text"].tolist()

    def collect(self, suite: pd.DataFrame, runs: list[UnitResult]) -> pd.DataFrame:
        """The cases' rows in model order, then suite order, whatever the sharding
        (``Method.collect``); writes the CheckList verdicts (``checklist_verdicts.parquet``,
        outside the contract)."""
        results = super().collect(suite, runs)
        verdicts = [run.extra["verdicts"] for run in runs if "verdicts" in run.extra]
        if verdicts:
            io.write_parquet(self.interim / "checklist_verdicts.parquet",
                             pd.concat(verdicts, ignore_index=True))
        return results

    # ------------------------------------------------------------------ report

    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        params, c = self.params, self.params.capabilities
        built = self.built
        specs, pcfg = built["specs"], built["pcfg"]
        lcs = [s.id for s in specs]
        verdicts = pd.concat([r.extra["verdicts"] for r in runs if "verdicts" in r.extra],
                             ignore_index=True)
        coverage = [r.extra for r in runs if "curve" in r.extra]
        models = [model_line(ref, results) for ref in self.model_refs().values()]
        multiplicity = report.alict_multiplicity(suite)
        membership = report.trial_membership(suite)
        trial0 = report.in_trial(results, membership, 0)  # ALiCT's Table 3: one run
        tables = {m: report.table3(trial0[trial0["model_id"] == m], lcs, c.bootstrap,
                                   params.seed, c.pass_to_fail_count, multiplicity)
                  for m in self.model_ids()}
        funnel = report.funnel(built["fill_stats"])
        curve = pd.concat([x["curve"] for x in coverage], ignore_index=True) if coverage else None
        out = Report(self.stage, metrics=report.headline_metrics(tables, suite, pcfg, curve),
                     substitutes=substitutes(params), provenance=provenance(
                         params, self.workspace, "capabilities", inputs=self.files.values(),
                         models=models, **{"fill model": fill_model_note(
                                               c.fill_model, params.models.offline),
                                           "parser": parser_note(c.parser, pcfg)},
                         **llm_provenance([r.extra for r in runs])))
        titles = pd.DataFrame({"capability": lcs, "title": [s.capability for s in specs]})
        out.add("capabilities-suite", titles.merge(built["seed_counts"], on="capability").merge(
            funnel.drop(columns="cases"), on="capability"),  # cases = seed_counts' cases
            "S²LCT suite: SST matches, seeds and the expansion funnel per capability "
            "(proposals → rejections per validation rule → kept, expansions per seed)",
            notes=suite_notes(funnel, c))
        if "alict" in c.table_layouts:
            out.add_per_model("capabilities-table3", tables,
                              "S²LCT Table 3 for {model}: failures per capability (95% "
                              "bootstrap intervals; the paper's seed fail % for its models "
                              "beside)", notes=report.noted(table3_notes(
                                  funnel, c.pass_to_fail_count, c.trials), trial0["verdict"]))
        if "ase22" in c.table_layouts:
            out.add_per_model("capabilities-ase22", {
                model_id: report.ase22_table(results[results["model_id"] == model_id], lcs,
                                             membership, c.trials) for model_id in tables},
                f"S²LCT's ASE'22 layout for {{model}}: median over {c.trials} seed "
                "sampling(s) of the test cases, one failure rate over seeds and "
                "expansions, and #pass_to_fail",
                notes=report.noted(ASE22_NOTES, results["verdict"]))
        out.add("capabilities-neutral-share", report.neutral_share(results, lcs),
                "Seeds predicted neutral per model and capability, and the share of the "
                "failing seeds that were", notes=report.noted(NEUTRAL_NOTES, results["verdict"]))
        out.add("capabilities-checklist", report.checklist_table(verdicts),
                "CheckList sentiment suite (released tests, seeded sample per test): "
                "failure rate % per test and model", notes=report.noted("", verdicts["verdict"]))
        out.add("capabilities-examples", report.examples(suite, results, params.seed),
                f"{report.EXAMPLES} expansions drawn at random (seeded) from the whole suite, "
                "one per distinct text, each beside its seed, with each model's prediction")
        out.add("capabilities-pcfg", pd.DataFrame([{**pcfg["grammar"], **{
            f"bracket_{k}": round(v, 4) if isinstance(v, float) else v
            for k, v in pcfg["bracket"].items()}}]),
            "Induced PCFG: size and labelled-bracket scores on held-out treebank trees",
            substitutes=False)
        checklist = pd.read_parquet(self.files["checklist_suite"])
        out.add("capabilities-lengths", coverage_lengths(*self.coverage_texts(suite, checklist)),
                "Text length (whitespace tokens) of both suites, and of each capability and "
                "its CheckList test (ALiCT's map) as compared for coverage")
        if not coverage:
            return out
        info = {f"coverage {x['curve']['model_id'].iloc[0]} {k}": v
                for x in coverage for k, v in x["info"].items()}
        out.add("capabilities-coverage", curve.round(6),
                "BoundCov / SActCov of every model with hidden states on equal-size random "
                "samples of both suites (the paper's Figure 4)", provenance=info,
                notes=COVERAGE_NOTES)
        out.add("capabilities-coverage-by-lc",
                pd.concat([x["by_lc"] for x in coverage], ignore_index=True).round(6),
                "BoundCov / SActCov of each capability against its CheckList MFT test "
                "(ALiCT's LC→test map), both sampled to the same size", provenance=info)
        for model_id, part in curve.groupby("model_id", sort=False):
            out.figures[f"{FIGURE4}/{slug(model_id)}.png"] = Figure(
                lambda path, part=part, model_id=model_id: plot_coverage_curve(
                    part, path, f"{model_id}: coverage against suite size"),
                coverage_data(part))
        return out

    def summary(self, suite: pd.DataFrame, results: pd.DataFrame,
                runs: list[UnitResult]) -> dict:
        from prefect.runtime import flow_run

        return {**super().summary(suite, results, runs),
                "seeds": int((suite["kind"] == "seed").sum()),
                "expansions": int((suite["kind"] == "expansion").sum()),
                "flow_run_id": str(flow_run.id)}
