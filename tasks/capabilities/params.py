"""S²LCT's parameter section (``capabilities`` in params.yaml)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from lingtest.tasks.core.sections import Band, Section, UserPath
from lingtest.tasks.training.params import TrainSentimentParams


# Penn Treebank word tags: what S²LCT may insert (punctuation and symbols never are).
INSERTABLE_TAGS = frozenset("""CC CD DT EX FW IN JJ JJR JJS MD NN NNS NNP NNPS PDT POS PRP PRP$
RB RBR RBS RP TO UH VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB""".split())


class CapabilitiesParams(Section):
    """S²LCT: specifications, seed search, parsing, expansion, models under test (Method 1)."""

    uses_encoders = True

    specs_dir: UserPath | None = Field(
        None, description="folder of capability specification files (YAML); null: built-in")
    capabilities: list[str] | None = Field(None, min_length=1,
                                           description="LC ids to run; null: every spec")
    seeds_per_lc: int = Field(50, ge=1, description="seeds sampled per capability")
    word_sentiment: Literal["lexicon", "sentiwordnet"] = Field(
        "lexicon", description="word polarity: SST + Hu & Liu lexicon, or SentiWordNet")
    parser: Literal["pcfg", "benepar"] = Field(
        "pcfg", description="constituency parser: pcfg (induced from the PTB sample, offline) "
                            "| benepar (benepar_en3, online)")
    pcfg_heldout: int = Field(200, ge=0, description="treebank sentences held out for bracket F1")
    max_masks_per_seed: int | None = Field(
        32, ge=1, description="k: masked sentences sampled per seed; null: all of them "
        "(ALiCT's num_cfg_exp_elem = -1)")
    max_inserted_words: int = Field(
        1, ge=1, le=3, description="words one reference production may insert (ALiCT's "
        "CFGExpander allows 2; more inserted words read worse)")
    insert_tags: list[str] | None = Field(
        ["JJ", "JJR", "JJS", "RB", "RBR", "RBS", "CD", "DT", "PRP$"], min_length=1,
        description="PTB tags a single inserted word may carry: modifiers by default (nouns, "
        "verbs, pronouns, prepositions and conjunctions inserted alone mostly break the "
        "sentence); null: every tag (ALiCT)")
    pos_check: Literal["in_context", "exact"] = Field(
        "in_context", description="in_context: a fill tagged otherwise in its sentence stands "
        "when its tag makes another reference production; exact: the tag must equal the "
        "masked one (ALiCT)")
    fill_model: str = Field("HuggingFaceTB/SmolLM2-135M-Instruct",
                            description="masked LM (fill-mask) or causal LM proposing words")
    fill_candidates: int = Field(6, ge=1, description="candidates proposed per mask")
    max_expansions_per_seed: int | None = Field(
        20, ge=1, description="most expansions kept per seed (best scores first); null: all "
        "(ALiCT)")
    pass_to_fail_count: Literal["distinct", "alict"] = Field(
        "distinct", description="Table 3's #pass→fail: distinct failing expansions of passed "
        "seeds (the paper's text) | alict (Result.py: duplicates counted)")
    trials: int = Field(
        1, ge=1, le=10, description="seed samplings (trial t samples with seed + t); Table 3 "
        "reads trial 0, the ase22 layout the median over all (S²LCT's ASE'22 paper: 3)")
    table_layouts: list[Literal["alict", "ase22"]] = Field(
        ["alict"], min_length=1, description="Table 3 layouts published per model: alict "
        "(ALiCT's Table 3) | ase22 (median over trials, one failure rate over seeds and "
        "expansions)")
    mask_sampling: Literal["alict", "count"] = Field(
        "alict", description="alict: top_productions reference rules per seed production, then "
        "uniform (ALiCT); count: ∝ reference count over all candidates (earlier behaviour)")
    top_productions: int = Field(5, ge=1, description="ALiCT's NUM_TOPK reference rules kept "
                                 "per seed production (mask_sampling: alict)")
    min_logprob_per_word: float | None = Field(
        -9.0, le=0, description="confidence floor: (log P(expansion) − log P(seed)) per "
        "inserted word, causal fill models only; null: no floor")
    min_right_context_logprob: float | None = Field(
        -6.0, le=0, description="right-context check: the most (nats) the words after the last "
        "insertion may lose against the same words in the seed, causal fill models only; "
        "null: no check")
    neutral_band: Band = Field(
        (1 / 3, 2 / 3), description="a binary model predicts neutral when P(pos) is inside")
    models: list[str] = Field(
        default_factory=lambda: ["lingtest/minilm-sst2", "vader"], min_length=1,
        description="sentiment models under test")
    bootstrap: int = Field(1000, ge=100, description="resamples of the 95% failure-rate CIs")
    checklist_max_examples: int | None = Field(
        200, ge=1, description="CheckList examples per test (seeded sample); null: all")
    coverage_sizes: list[int] = Field(
        default_factory=lambda: [50, 100, 200, 400, 800], min_length=1,
        description="equal suite sizes of the coverage curve (capped at the smaller suite)")
    coverage_repeats: int = Field(3, ge=1, description="random samples averaged per size")
    coverage_max_train: int | None = Field(
        None, ge=1, description="SST-2 training sentences that set the activation bounds")
    batch_size: int = Field(
        64, ge=1, description="CheckList texts per call for a model outside "
        "lingtest.tasks.models.sentiment; lingtest's own (vader, classifiers) take every text in one "
        "call, the classifiers running exact-length passes of >= runtime.pass_tokens tokens")
    train_sentiment: TrainSentimentParams = Field(default_factory=TrainSentimentParams)

    @field_validator("coverage_sizes")
    @classmethod
    def _positive_sizes(cls, sizes: list[int]) -> list[int]:
        if any(size < 1 for size in sizes):
            raise ValueError("every suite size must be >= 1")
        return sizes

    @field_validator("insert_tags")
    @classmethod
    def _known_tags(cls, tags: list[str] | None) -> list[str] | None:
        unknown = [t for t in tags or () if t not in INSERTABLE_TAGS]
        if unknown:
            raise ValueError(f"not insertable PTB tags: {unknown}; use word tags such as JJ, "
                             f"RB, NN, VBZ (punctuation is never inserted)")
        return tags
