"""KomMKonLLM's parameter section (``consistency`` in params.yaml)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from lingtest.tasks.core.sections import Section, UserPath


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
                            "has more t-tuples to cover than this before any is built "
                            "(generation time per tuple: benchmarks/README.md)")
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
    batch_size: int = Field(
        32, ge=1, description="prompts per local batch; a batch decodes as many steps as its "
        "longest answer (32 against 8: x1.46, the same answers; benchmarks/README.md)")
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
