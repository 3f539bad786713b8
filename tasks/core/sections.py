"""What the parameters are: one pydantic section per concern (data, models, runtime) and per
stage (contrastive, train-sentiment, capabilities, consistency, adaptive, repair), each
refusing unknown keys. ``tasks.core.config`` assembles them into ``Params`` and reads
``params.yaml``, profiles and ``--set`` overrides into it."""
from __future__ import annotations

import os
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      ValidationInfo, field_serializer, field_validator, model_serializer, model_validator)

from tasks.core.secrets import redact_fields

ASSET_NAMES = (
    "sst", "mrpc", "boolq", "kommkonllm", "contrast_sets", "treebank", "wordnet",
    "opinion_lexicon", "names", "movie_reviews", "checklist", "adatest",
)


def _ordered_band(band: tuple[float, float]) -> tuple[float, float]:
    """An inverted band would silently make every prediction polar."""
    if not 0.0 <= band[0] <= band[1] <= 1.0:
        raise ValueError("expected [low, high] with 0 <= low <= high <= 1, e.g. [0.3333, 0.6667]")
    return band


Band = Annotated[tuple[float, float], AfterValidator(_ordered_band)]  # P(pos) band of "neutral"


def _expand_user(path: str) -> str:
    """``~/x`` as the home folder's x: the one place a path parameter's ``~`` is expanded,
    so every reader, check and flow gets the same path (relative paths stay relative: they
    start at the project root)."""
    return os.path.expanduser(path) if path.startswith("~") else path


UserPath = Annotated[str, AfterValidator(_expand_user)]  # a file or folder a user names


def _bool_for_number(annotation: object, value: object) -> bool:
    """Whether ``value`` holds a true/false where ``annotation`` wants a number (pydantic's
    lax mode would read ``seed: true`` as 1), in lists and tuples too."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _bool_for_number(args[0], value)
    if annotation in (int, float):
        return isinstance(value, bool)
    if origin in (Union, UnionType):
        return bool not in args and any(_bool_for_number(a, value) for a in args)
    if origin in (list, tuple) and isinstance(value, (list, tuple)) and args:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return any(_bool_for_number(a, v) for a, v in zip(args, value))
        return any(_bool_for_number(args[0], v) for v in value)
    return False


class Section(BaseModel):
    """Base of every parameter section: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: object, info: ValidationInfo) -> object:
        """``--set seed=true`` is refused, not run as seed 1."""
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _bool_for_number(field.annotation, value):
            raise ValueError("expected a number, got true/false")
        return value

    @model_serializer(mode="wrap")
    def _masked(self, handler):
        """Dumps (provenance, ``lingtest params``, Prefect's flow-run parameters) mask secrets;
        the attributes keep the real values (tasks/core/secrets.py)."""
        return redact_fields(handler(self))


class DataParams(Section):
    mirror: UserPath | None = Field(
        None, description="folder of raw assets; null: $LINGTEST_MIRROR, else ../shared/mirror")
    online: bool = Field(True, description="fetch what the mirror lacks from the canonical sources")
    timeout_s: float = Field(20.0, gt=0, description="network timeout per online fetch")
    assets: list[Literal[ASSET_NAMES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(ASSET_NAMES), min_length=1,
        description="raw assets the data stage imports")


class ModelsParams(Section):
    offline: bool = Field(True, description="resolve ids to models that PyPI packages carry")
    encoders: list[str] = Field(
        default_factory=lambda: ["sentence-transformers/all-MiniLM-L6-v2"], min_length=1,
        description="sentence encoders the stages use by default (the contrastive stage's "
                    "models under test, the S²LCT coverage model)")
    causal_lm: str = Field("HuggingFaceTB/SmolLM2-135M-Instruct",
                           description="the local LM behind next-word proposals and answers")
    spacy: str = Field("en_core_web_sm", description="spaCy pipeline for tagging and parsing")
    names: dict[str, str] = Field(
        default_factory=dict, description="display names by model spec (e.g. {\"python:"
        "my/lex.py:score\": lexicon}); a spec's own #name= wins; default: a hub or built-in "
        "id as written, else the folder's, file's or attribute's name")
    label_map: dict[str, dict[Annotated[str, BeforeValidator(str)],
                              Literal["neg", "neutral", "pos"]]] = Field(
        default_factory=dict, description="per classifier (its display name or spec): its own "
        "labels onto neg / neutral / pos, e.g. {stars: {1 star: neg, 3 stars: neutral, "
        "5 stars: pos, ...}}; labels mapped to one target have their probabilities summed")


class AlertRule(Section):
    """One regression alert: a metric of a metrics file against a bound, or the cases that
    passed in the previous run and fail now (``schema.compare_results``'s ``broken``)."""

    metric: str | None = Field(None, description="FILE:KEY, e.g. "
                               "reports/contrastive/metrics.json:minilm.CR1.N_V")
    cases: Literal["broken"] | None = None
    above: float | None = None
    below: float | None = None

    @model_validator(mode="after")
    def _one_measure_one_bound(self) -> "AlertRule":
        if (self.metric is None) == (self.cases is None):
            raise ValueError("give either metric: FILE:KEY or cases: broken, e.g. "
                             "{metric: 'reports/contrastive/metrics.json:minilm.CR1.N_V', "
                             "above: 10} or {cases: broken, above: 0}")
        if (self.above is None) == (self.below is None):
            raise ValueError("give one bound, above: X or below: X")
        if self.cases is not None and self.above is None:
            raise ValueError("cases: broken takes above: N (alert when more than N cases broke)")
        if self.metric is not None:
            path, _, key = self.metric.partition(":")
            if not key or not path.endswith((".json", ".yaml", ".yml")):
                raise ValueError(f"metric {self.metric!r}: expected FILE:KEY with a .json or "
                                 ".yaml file, e.g. reports/contrastive/metrics.json:minilm.CR1.N_V")
            if path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"metric {self.metric!r}: give the file relative to the "
                                 "project root, inside it")
        return self


class RuntimeParams(Section):
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where models run; auto: cuda when torch sees a GPU, else cpu")
    threads: int = Field(1, ge=1, description="torch intra-op threads")
    pass_tokens: int = Field(
        256, ge=1, description="floor of tokens per forward pass of lingtest's encoders and "
        "classifiers (texts of one exact token count per pass): 256 gives the same bytes at 1 "
        "and 2 threads; 64 or 128 make small calls up to ~3× faster but change the last bits "
        "and let 1 and 2 threads differ (benchmarks/README.md)")
    encoder_precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="arithmetic of lingtest's encoders and classifiers: fp32, or bf16 "
        "autocast (pays only with AVX512-BF16/AMX or a GPU: ×0.34 of fp32 on this AVX512BW "
        "CPU; cosine >= 0.99988, other last bits and store entries; benchmarks/README.md)")
    encoder_backend: Literal["torch", "onnx"] = Field(
        "torch", description="their forward passes: torch, or ONNX Runtime (here ×0.95 encoder, "
        "×1.23 classifier; same N_V and verdicts, other last bits; pip install "
        "'lingtest[onnx]'; graphs exported once into $LINGTEST_CACHE/onnx)")
    task_runner: Literal["threads", "dask", "auto"] = Field(
        "threads", description="threads; dask (a local cluster of max_workers processes, or "
        "dask_address); auto: dask for the stages whose work pays in processes "
        "(flows.PROCESS_STAGES: contrastive, capabilities, consistency), threads for the rest")
    max_workers: int = Field(2, ge=1, description="concurrent Prefect tasks")
    shards: int = Field(1, ge=1, description="tasks each model's cases are split into, so a "
                        "task runner can spread one model's work (results do not change)")
    dask_address: str | None = Field(None, description="dask scheduler; null: a local cluster")
    result_storage: UserPath | None = Field(
        None, description="task results, cache records and cache locks: a folder (relative to "
        "the project root) or an fsspec URL every worker reaches; null: .prefect/storage")

    notify_url: str | None = Field(
        None, description="webhook that hears of a failed or crashed run and of a regression "
        "alert (Slack-compatible JSON {\"text\": ...}); `lingtest serve --notify` overrides "
        "it; masked to its host in every dump (the path often holds the token)")
    alerts: list[AlertRule] = Field(
        default_factory=list, description="regression alerts checked after each run: "
        "{metric: FILE:KEY, above|below: X} on a metrics file, or {cases: broken, above: N} "
        "(more than N cases passed in the previous run and fail now)")

    @field_validator("dask_address")
    @classmethod
    def _scheduler(cls, address: str | None) -> str | None:
        from urllib.parse import urlsplit

        if address is None:
            return None
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in ("tcp", "tls", "ws", "wss", "ucx") or not parts.hostname \
                or port is None or parts.path not in ("", "/"):
            raise ValueError("expected a Dask scheduler address, e.g. tcp://10.0.0.5:8786 "
                             "(what `dask scheduler` prints); null: a local cluster")
        return address

    @field_validator("notify_url")
    @classmethod
    def _webhook(cls, url: str | None) -> str | None:
        from urllib.parse import urlsplit

        if url is not None and (urlsplit(url).scheme not in ("http", "https")
                                or not urlsplit(url).hostname):
            raise ValueError("expected an http(s):// webhook URL, e.g. "
                             "https://hooks.slack.com/services/...; null: no notifications")
        return url

    @field_serializer("notify_url")
    def _mask_webhook(self, url: str | None) -> str | None:
        from tasks.core.alerts import mask_url

        return mask_url(url)

    def encoder_path(self) -> dict[str, str]:
        """``precision`` / ``backend`` keywords for the encoder and classifier loaders."""
        return {"precision": self.encoder_precision, "backend": self.encoder_backend}

    @model_validator(mode="after")
    def _one_faster_path(self) -> "RuntimeParams":
        if self.encoder_precision == "bf16" and self.encoder_backend == "onnx":
            raise ValueError("encoder_precision bf16 with encoder_backend onnx: the ONNX graph "
                             "runs in fp32; set one of them back to its default (fp32 / torch)")
        return self


DISTANCES = ("l1", "l2", "cos")
THRESHOLDS = ("zero", "min", "mu-2sigma", "mu-sigma")
RELATIONS = ("CR1", "CR2", "CR3", "CR4")


def smallest_signed_rank_n(alpha: float) -> int:
    """Fewest classifiers at which COSTELLO's one-sided Wilcoxon signed-rank test can give
    p < ``alpha``: its smallest exact p-value, all n differences of one sign, is 0.5**n
    (5 for α = 0.05; scipy's ``wilcoxon`` agrees, tests/test_costello_options.py)."""
    n = 1
    while 0.5 ** n >= alpha:
        n += 1
    return n


class ContrastiveParams(Section):
    """COSTELLO: test generation, embedding, thresholds, ground truth (Jiang et al., FSE 2024)."""

    suite: UserPath | None = Field(
        None, description="a COSTELLO JSON suite to run instead of generating one")
    relations: list[Literal[RELATIONS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(RELATIONS), min_length=1,
        description="COSTELLO's contrastive relations to generate and test")
    sst_split: Literal["train", "dev", "test"] = Field(
        "test", description="SST split whose sentences seed CR1 and CR2")
    mrpc_split: Literal["train", "validation", "test"] = Field(
        "validation", description="MRPC split whose paraphrase pairs seed CR4")
    contrast_split: Literal["dev", "test", "all"] = Field(
        "all", description="IMDb contrast-set pairs that seed CR3")
    max_seeds: int | None = Field(None, ge=1, description="cap on seeds per relation; null: all")
    cr1_triples: Literal["word", "seed"] = Field(
        "word", description="CR1: one triple per qualifying word (paper) or one per seed")
    synonym_scope: Literal["text", "word"] = Field(
        "text", description="CR2 s⁻ / CR3 s⁺: synonyms over the whole text (paper) or one word")
    synonym_probability: float = Field(
        0.5, gt=0, le=1, description="chance each replaceable word is replaced (scope text)")
    encoders: list[str] | None = Field(None, min_length=1,
                                       description="models under test; null: models.encoders")
    batch_size: int = Field(
        32, ge=1, description="texts per encode call for an encoder that batches by count "
        "(sentence-transformers-like, through the Python API); lingtest's own encoders run "
        "passes of >= runtime.pass_tokens tokens instead")
    distances: list[Literal[DISTANCES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(DISTANCES), min_length=1,
        description="embedding distances a violation is measured with")
    thresholds: list[Literal[THRESHOLDS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(THRESHOLDS), min_length=1,
        description="margins θ a violation must exceed (zero, min, μ−2σ, μ−σ of the "
                    "positive pairs' distances)")
    dictionary_max_words: int | None = Field(
        None, ge=2, description="cap on the vocabulary dictionary (sampled with the seed)")
    dictionary_file: UserPath | None = Field(
        None, description="a user dictionary (JSON list or one word per line) for θ, beside "
        "the vocabulary and dataset ones")
    pooling: str | None = Field(
        None, description="pooling override (pooler, cls, mean, mean+norm, ...); null: the model's own")
    max_length: int | None = Field(
        None, ge=8, description="tokens kept per text; null: the model's own (paper: 512)")
    threshold_rule: Literal["corrected", "paper"] = Field(
        "corrected", description="θ rule: σ and plain L2 (corrected), or √σ and squared L2 (paper's code)")
    cosine: Literal["distance", "similarity"] = Field(
        "distance", description="cos: 1 − cos similarity, or the similarity (paper's code)")
    block_size: int = Field(1024, ge=16, description="rows per block of the nearest-neighbour search")
    n_classifiers: int = Field(14, ge=2, le=14,
                               description="downstream classifiers for the ground truth")
    classifier_epochs: int = Field(30, ge=1, description="an upper bound: each classifier "
                                   "keeps its best epoch on held-out rows")
    classifier_max_train: int | None = Field(
        None, ge=10, description="cap on training examples per downstream task (seeded sample)")
    classifier_max_test: int | None = Field(
        None, ge=10, description="cap on test examples per downstream task (seeded sample)")
    paraphrase_features: Literal["joint", "pair"] = Field(
        "joint", description='CR4 vectors (distances and classifiers): "s1 [SEP] s2" embedded '
        "whole (paper) or pair features [u, v, |u-v|, u*v]")
    alpha: float = Field(0.05, gt=0, lt=1, description="level of the one-sided Wilcoxon tests")

    @model_validator(mode="after")
    def _classifiers_can_reach_alpha(self) -> "ContrastiveParams":
        """Below the smallest bank the test can reject at, every P_A would be 0 and every
        P_B 100 whatever the model does: refused."""
        need = smallest_signed_rank_n(self.alpha)
        if self.n_classifiers < need:
            fix = (f"set contrastive.n_classifiers to {need} or more" if need <= 14 else
                   "raise contrastive.alpha (14 classifiers reach at best p = 0.5**14)")
            raise ValueError(
                f"contrastive.n_classifiers {self.n_classifiers}: a one-sided Wilcoxon test "
                f"over {self.n_classifiers} classifiers can never reach p < contrastive.alpha "
                f"{self.alpha} (its smallest p is 0.5**{self.n_classifiers} = "
                f"{0.5 ** self.n_classifiers:.4g}), so every P_A would be 0 and every P_B 100; "
                f"fix: {fix}")
        return self


class TrainSentimentParams(Section):
    """Fine-tuning the packaged MiniLM on SST-2 (the ``train-sentiment`` stage)."""

    epochs: int = Field(1, ge=1, description="1 epoch reaches ~87% SST-2 test accuracy")
    batch_size: int = Field(32, ge=1, description="sentences per training step")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate")
    max_train: int | None = Field(None, ge=1, description="seeded cap on training sentences")
    max_test: int | None = Field(None, ge=1, description="seeded cap on test sentences")


# Penn Treebank word tags: what S²LCT may insert (punctuation and symbols never are).
INSERTABLE_TAGS = frozenset("""CC CD DT EX FW IN JJ JJR JJS MD NN NNS NNP NNPS PDT POS PRP PRP$
RB RBR RBS RP TO UH VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB""".split())


class CapabilitiesParams(Section):
    """S²LCT: specifications, seed search, parsing, expansion, models under test (Method 1)."""

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
        "tasks.models.sentiment; lingtest's own (vader, classifiers) take every text in one "
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


GENERATORS = ("builtin", "pict", "acts", "cagen")


class ConsistencyParams(Section):
    """KomMKonLLM: questions, IPMs, covering arrays, LLMs, prompts, store (Method 4)."""

    questions: UserPath | None = Field(
        None, description="a JSONL file of BoolQ-style questions; null: the default set")
    n_questions: int = Field(
        3, ge=0, description="BoolQ validation questions (seeded sample) added to KomMKonLLM's")
    max_values: int = Field(3, ge=1, description="values per word: itself + WordNet synonyms "
                            "(the guide's 3)")
    ipm: Literal["guide", "lingtest"] = Field(
        "guide", description="guide: every token lower-cased, nouns/proper nouns/verbs/"
        "adjectives get WordNet synonyms (multi-word too); lingtest: inflected synonyms of "
        "common nouns, verbs, adjectives, adverbs in the token's casing")
    strength: int = Field(2, ge=1, description="t of the covering arrays")
    max_tuples: int = Field(500_000, ge=1, description="refuse a question whose covering array "
                            "has more t-tuples to cover (~30 µs each to generate) before any "
                            "is built")
    generator: Literal[GENERATORS] = Field(  # type: ignore[valid-type]
        "builtin", description="covering-array generator: builtin | pict | acts | cagen "
                               "(external binaries)")
    generator_binary: UserPath | None = Field(
        None, description="path of the external generator; null: look it up on PATH")
    llms: list[str] = Field(
        default_factory=lambda: ["HuggingFaceTB/SmolLM2-135M-Instruct"], min_length=1,
        description="LLM specs: a hub/packaged id or folder, hf:<id>, openai:MODEL@URL, "
        "openai-chat:MODEL@URL, ollama:MODEL@URL (#key_env=VAR, #name=...), "
        "python:file.py:ATTR")
    prompt_prefix: str = Field("", description="put before each derived question")
    prompt_suffix: str = Field("? Return a JSON boolean.", description="put after each derived "
                               "question (the guide's published prompts)")
    prompt_join: Literal["space", "none"] = Field(
        "none", description="none: prefix + question + suffix verbatim (the guide's runner)")
    max_new_tokens: int = Field(
        256, ge=1, description="output cap; local models stop at the JSON answer's closing "
        "brace, so a JSON answer is never cut")
    temperature: float = Field(0.0, ge=0, description="HTTP backends; the local one is greedy")
    timeout_s: float = Field(60.0, gt=0, description="per HTTP request")
    retries: int = Field(3, ge=0, description="extra attempts after a failed HTTP call")
    backoff_s: float = Field(1.0, ge=0, description="first retry delay (doubles)")
    concurrency: int = Field(4, ge=1, description="requests in flight to one endpoint (base "
                             "URL), across every process on this machine")
    batch_size: int = Field(8, ge=1, description="prompts per local forward pass")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; null: sqlite:///<root>/data/consistency/results.sqlite")
    bootstrap: int = Field(1000, ge=0, description="resamples of the 95% CIs (0: none)")
    oracle: Literal["guide", "lenient", "strict"] = Field(
        "guide", description="guide: the guide's first-word rule; lenient: JSON and "
        "explained answers too; strict: only a JSON Boolean is an answer")
    recall_definition: Literal["all_true", "answered"] = Field(
        "answered", description="answered: tp/(tp+fn) over answered questions (the guide's); "
        "all_true: an undefined answer counts as missed")
    consistency_definition: Literal["derived_rows", "per_question"] = Field(
        "per_question", description="per_question: share of all rows (original included) "
        "agreeing with the original, averaged over questions (the guide's)")
    zero_division: Literal["zero", "nan"] = Field(
        "zero", description="precision/recall/F1 with a zero denominator: 0 (the guide's) or "
        "NaN")
    min_answered_share: float = Field(
        0.5, ge=0, le=1, description="a model answering (true/false) a smaller share of the "
        "asked rows is flagged low_answered_share in the summary and metrics")
    import_dir: UserPath | None = Field(
        None, description="a folder of the guide's ca-N.csv + synonyms-N.txt (+ test_runs.csv "
        "or public_questions.jsonl): run exactly those derived questions")


DEBUG_TOPICS = ["Hard: Negation of positive with neutral stuff in the middle (should be negative)",
                "used to, but now", "my opinion is what matters"]


class DebugParams(Section):
    """AdaTest's debugging experiment (the ``adaptive-debug`` stage): per CheckList topic,
    AdaTest's test–fix–retest rounds from 5 seed tests vs CheckList data, re-tested on
    held-out tests of every topic (the paper's Table 1 and Figure 7)."""

    model: str = Field("lingtest/minilm-sst2", description="the fine-tuned classifier "
                       "(a lingtest classifier folder or id) training continues from")
    topics: list[str] = Field(
        default_factory=lambda: list(DEBUG_TOPICS), description="CheckList MFT tests to fix, "
        "in Figure 7's order (cumulative models train on the first k)")
    conditions: list[Literal["adatest", "checklist-data", "adatest-tree"]] = Field(
        ["adatest", "checklist-data"], min_length=1, description="adatest: the test–fix–retest "
        "loop from seed_tests seed tests; checklist-data: checklist_n examples of the topic; "
        "adatest-tree: the hotel tree's tests (not the paper's protocol)")
    seed_tests: int = Field(5, ge=1, description="tests of the topic the AdaTest tree starts "
                            "from (the paper's 5)")
    rounds: int = Field(4, ge=1, description="at most this many fix rounds per topic (the "
                        "paper's users ran 2.8–3.8)")
    prompts: int = Field(4, ge=1, description="prompts per round (AdaTest's 8)")
    completions: int = Field(6, ge=1, description="LM completions per prompt (AdaTest's 12)")
    oracle_k: int = Field(5, ge=1, description="the oracle labels like this many nearest "
                          "CheckList examples of the topic (abstains when they disagree)")
    oracle_similarity: float = Field(0.5, ge=0, le=1, description="below this mean cosine to "
                                     "those examples a suggestion is off topic")
    cumulative: bool = Field(True, description="also train on the first k topics (k = 2..K) "
                             "for Figure 7")
    tree: UserPath | None = Field(None, description="adatest-tree: AdaTest CSV tree trained on; "
                             "null: the first of adaptive.trees")
    tree_topics: list[str] = Field(default_factory=list, description="adatest-tree: tree "
                                   "topics (and their subtopics) trained on; empty: every topic")
    corrections: UserPath | None = Field("inputs/adatest-label-corrections.csv", description=(
        "adatest-tree: curated label corrections applied when the tree is read; null: none"))
    seeds: int = Field(1, ge=1, description="training seeds per condition (seed, seed+1, …)")
    epochs: int = Field(3, ge=1, description="fine-tuning epochs per training run")
    batch_size: int = Field(16, ge=1, description="sentences per training step")
    lr: float = Field(2e-5, gt=0, description="AdamW learning rate")
    mix_ratio: float = Field(1.0, ge=0, description="SST-2 training sentences per topic test")
    checklist_n: int = Field(50, ge=1, description="checklist-data: examples per topic")
    checklist_examples: int = Field(30, ge=1, description="held-out CheckList examples per "
                                    "test evaluated (seeded sample; never trained on)")
    threshold: float = Field(0.2, gt=0, lt=1, description="a topic fails at this error rate; "
                             "the loop stops when at most this share of suggestions fails")
    bootstrap: int = Field(5000, ge=100, description="paired resamples per topic change")
    fdr: float = Field(0.05, gt=0, lt=1, description="Benjamini–Hochberg level over topics")
    neutral_band: Band = Field(
        (1 / 3, 2 / 3), description="CheckList on a binary model: neutral inside the band")
    ood_split: Literal["dev", "test", "all"] = Field(
        "dev", description="IMDb contrast-set split evaluated out of domain")
    eval_max: int | None = Field(300, ge=1, description="seeded cap on SST-2 validation "
                                 "sentences and IMDb pairs evaluated; null: all")

    @field_validator("topics")
    @classmethod
    def _distinct_topics(cls, topics: list[str]) -> list[str]:
        repeated = sorted({t for t in topics if topics.count(t) > 1})
        if repeated:
            raise ValueError(f"topics {repeated} appear twice; name each CheckList test once")
        return topics


class AdaptiveParams(Section):
    """AdaTest: the ``adaptive`` stage re-scores the tracked trees."""

    trees: list[UserPath] = Field(
        ["data/raw/adatest/imdb_hotel_conversion.csv"], min_length=1,
        description="AdaTest CSV trees (relative to the project root) re-scored every run")
    binary_labels: tuple[str, str] | None = Field(
        ("neg", "pos"), description="a fail row of a binary tree expects the other class; "
        "null: 'should not output' its output")
    models: list[str] = Field(["lingtest/minilm-sst2", "vader"], min_length=1,
                              description="models under test; the first ranks suggestions")
    neutral_band: Band = Field(
        (0.5, 0.5), description="binary models: neutral inside; (0.5, 0.5) = AdaTest's argmax")
    bootstrap: int = Field(1000, ge=100, description="resamples of the 95% failure-rate CIs")
    debug: DebugParams = Field(default_factory=DebugParams)


REPAIR_ALL = "all"  # repair.models: [all] repairs every encoder the contrastive stage tested


class RepairParams(Section):
    """COSTELLO §5.4 repair: fine-tune each chosen encoder on its violated triples (triplet
    loss) mixed with benign ones (MSE to the original embeddings), then re-test it
    (Jiang et al., FSE 2024)."""

    models: list[str] | None = Field(
        None, min_length=1, description="encoders to repair, one after the other (Table 3 "
        "averages them); [all]: every encoder the contrastive stage tested; null: the first "
        "one it tested")
    distance: Literal[DISTANCES] = Field(  # type: ignore[valid-type]
        "l2", description="the setting whose violations are trained on (the paper's: L2)")
    threshold: Literal[THRESHOLDS] = Field(  # type: ignore[valid-type]
        "mu-2sigma", description="θ kind of that setting (the paper's: μ−2σ)")
    dictionary: Literal["vocab", "dataset", "user"] = Field(
        "vocab", description="the contrastive stage's dictionary whose violations are trained on")
    heldout: float = Field(0.2, ge=0, lt=1, description="share of seed sentences held out "
                           "(never trained on or used to pick the epoch); 0: the paper's")
    validation: float = Field(0.2, ge=0, lt=1, description="share of seed sentences that pick "
                              "the epoch (selection: validation)")
    selection: Literal["validation", "train"] = Field(
        "validation", description="epoch kept: fewest violated validation triples, or fewest "
        "violated training triples (the paper's)")
    count_rule: Literal["test", "code"] = Field(
        "test", description="a triple counts as violated when d⁺ − d⁻ > θ (the test's rule) "
        "or d⁺ − d⁻ > −θ (Fixing.py: triplet loss with margin θ above 0)")
    alpha: float = Field(0.5, ge=0, le=1, description="weight of the triplet loss; 1 − alpha: MSE")
    lr: float = Field(1e-2, gt=0, description="SGD learning rate (the paper's 1e-4 moves "
                      "MiniLM by one violation in 80 micro-batches)")
    weight_decay: float = Field(1e-6, ge=0, description="SGD weight decay")
    lr_step: int = Field(2, ge=1, description="StepLR: epochs per decay")
    lr_gamma: float = Field(0.2, gt=0, le=1, description="StepLR: factor per decay")
    epochs: int = Field(2, ge=1, description="the paper's 8; 2 keeps the stage under 10 min")
    batch_triples: int = Field(4, ge=1, description="buggy (and benign) triples per micro-batch")
    accumulation: int = Field(1, ge=1, description="micro-batches per optimiser step "
                              "(the paper's 8)")
    max_steps_per_epoch: int | None = Field(
        12, ge=1, description="cap on micro-batches per epoch (seeded sample of the cycled "
        "pairs); null: all (the larger set once, the smaller cycled)")
    selection_max_triples: int | None = Field(
        150, ge=1, description="seeded cap on the triples counted after each epoch to pick "
        "it; null: all")
    classifier_max_train: int | None = Field(
        1000, ge=1, description="re-test: seeded cap on each downstream task's training "
        "examples, the same rows for the original and the repaired model; null: "
        "contrastive.classifier_max_train")
    classifier_max_test: int | None = Field(
        500, ge=1, description="re-test: the same cap on test examples; null: "
        "contrastive.classifier_max_test")
    bootstrap: int = Field(1000, ge=100, description="resamples of the 95% intervals")

    @field_validator("models", mode="before")
    @classmethod
    def _one_id_is_a_list(cls, value: object) -> object:
        """``--set repair.models=all`` (or one id) arrives as a string."""
        return [value] if isinstance(value, str) else value

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, models: list[str] | None) -> list[str] | None:
        if models is None:
            return models
        twice = sorted({m for m in models if models.count(m) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed twice; name each encoder once")
        if REPAIR_ALL in models and len(models) > 1:
            raise ValueError(f"`{REPAIR_ALL}` already means every tested encoder; give "
                             f"[{REPAIR_ALL}] alone or list the ids")
        return models

    @model_validator(mode="after")
    def _splits_leave_training(self) -> "RepairParams":
        if self.heldout + self.validation >= 1:
            raise ValueError("heldout + validation must leave seeds to train on (sum < 1)")
        if self.selection == "validation" and self.validation == 0:
            raise ValueError("selection: validation needs validation > 0 (or selection: train)")
        return self
