"""The parameter sections every stage shares (data, models, runtime) and ``Section``, the base
of every section, which refuses unknown keys. Each method's own section is in its package
(``tasks/<method>/params.py``); the plug-in registry (``lingtest.flows.registry``) assembles them all
into ``Params``."""
from __future__ import annotations

import os
from types import UnionType
from typing import Annotated, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      ValidationInfo, field_serializer, field_validator, model_serializer, model_validator)

from lingtest.tasks.core.secrets import redact_fields

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

    # inf / nan are no timeout, delay or share: refused like any bad number
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
    # a stage reading this section runs lingtest's encoders or classifiers, so its reports
    # state a non-default runtime.encoder_precision / encoder_backend
    uses_encoders: ClassVar[bool] = False

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


class LLMClassifierParams(Section):
    """How one LLM is asked to classify a text (``lingtest.tasks.models.llm_classifier``)."""

    template: str | None = Field(
        None, description="the prompt, with {text} where the text goes; null: the sentiment "
        "default (docs/own-models.md)")
    template_file: UserPath | None = Field(
        None, description="a file holding the template (relative to the project root)")
    labels: dict[Literal["neg", "neutral", "pos"], list[str]] | None = Field(
        None, description="the words that name each label in an answer, e.g. {neg: [negative],"
        " pos: [positive]} (no neutral: a binary classifier); null: negative / neutral / "
        "positive")
    scoring: Literal["auto", "logprobs", "text", "next-token"] = Field(
        "auto", description="how label probabilities are obtained: auto (a local LM's next-"
        "token distribution; a server's token log-probabilities where it returns them, else "
        "the parsed answer); logprobs (refuse a server that returns none); text (the parsed "
        "answer, probability 1); next-token (local LMs)")

    @model_validator(mode="after")
    def _one_template(self) -> "LLMClassifierParams":
        if self.template is not None and self.template_file is not None:
            raise ValueError("give template or template_file, not both")
        if self.template is not None and self.template.count("{text}") != 1:
            raise ValueError("the template must hold {text} exactly once, where the text goes")
        if self.labels is not None and not {"neg", "pos"} <= set(self.labels):
            raise ValueError("labels must name at least neg and pos, e.g. {neg: [negative], "
                             "pos: [positive]}")
        if self.labels is not None and not all(self.labels.values()):
            raise ValueError("every label needs at least one word")
        return self


class ModelsParams(Section):
    offline: bool = Field(True, description="resolve ids to models that PyPI packages carry")
    encoders: list[str] = Field(
        default_factory=lambda: ["sentence-transformers/all-MiniLM-L6-v2"], min_length=1,
        description="sentence encoders the stages use by default (the contrastive stage's "
                    "models under test, the S²LCT coverage model)")
    causal_lm: str = Field("HuggingFaceTB/SmolLM2-135M-Instruct",
                           description="the local LM behind next-word proposals and answers")
    lm_engine: Literal["auto", "transformers", "ctranslate2"] = Field(
        "auto", description="what runs local LMs' answers, scores and label probabilities: "
        "auto (CTranslate2 where installed, on the CPU, for an architecture it converts; else "
        "transformers; provenance says which), transformers, or ctranslate2 (AdaTest's "
        "seeded sampling stays on transformers); docs/operations.md")
    lm_precision: Literal["float32", "int8", "int16"] = Field(
        "float32", description="the engine's arithmetic: float32 (transformers' answers), or "
        "int8 / int16 (faster, other answers; named in every report they affect)")
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
    llm_classifier: dict[str, LLMClassifierParams] = Field(
        default_factory=dict, description="per LLM tested as a sentiment classifier (its "
        "display name or spec): its prompt template and label words, e.g. {my-llm: "
        "{template_file: prompts/sentiment.txt, labels: {neg: [negative, bad], pos: "
        "[positive, good]}}}; unnamed LLMs use the defaults")

    def lm_path(self) -> dict[str, str]:
        """The local-LM engine settings, as ``load_causal_lm``'s callers take them."""
        return {"lm_engine": self.lm_engine, "lm_precision": self.lm_precision}

    @model_validator(mode="after")
    def _engine_installed(self) -> "ModelsParams":
        """An engine or precision that needs CTranslate2 is refused before any work."""
        import importlib.util

        if self.lm_engine == "transformers" and self.lm_precision != "float32":
            raise ValueError(f"lm_precision {self.lm_precision} needs the CTranslate2 engine; "
                             "fix: lm_engine: auto or ctranslate2, or lm_precision: float32")
        if (self.lm_engine == "ctranslate2" or self.lm_precision != "float32") and \
                importlib.util.find_spec("ctranslate2") is None:
            raise ValueError(f"lm_engine {self.lm_engine} / lm_precision {self.lm_precision} "
                             "need CTranslate2, which is not installed; fix: pip install "
                             "'lingtest[engines]', or lm_engine: auto, lm_precision: float32")
        return self


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
        "and 2 threads; 64 or 128 make small calls faster but change the last bits and let "
        "1 and 2 threads differ (speed: benchmarks/README.md)")
    encoder_precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="arithmetic of lingtest's encoders and classifiers: fp32, or bf16 "
        "autocast (pays only with AVX512-BF16/AMX or a GPU; other last bits and store "
        "entries; speed and agreement with fp32: benchmarks/README.md)")
    encoder_backend: Literal["torch", "onnx"] = Field(
        "torch", description="their forward passes: torch, or ONNX Runtime (other last bits; "
        "pip install 'lingtest[onnx]'; graphs exported once into $LINGTEST_CACHE/onnx; speed "
        "and agreement with torch: benchmarks/README.md)")
    task_runner: Literal["threads", "dask", "auto"] = Field(
        "threads", description="threads; dask (a local cluster of max_workers processes, or "
        "dask_address); auto: dask for the stages whose work pays in processes "
        "(the plug-ins' process stages: contrastive, capabilities, consistency), threads for the rest")
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
        from lingtest.tasks.core.alerts import webhook_problem

        if url is not None and webhook_problem(url):
            raise ValueError(f"{webhook_problem(url)}; null: no notifications")
        return url

    @field_serializer("notify_url")
    def _mask_webhook(self, url: str | None) -> str | None:
        from lingtest.tasks.core.alerts import mask_url

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
