"""Tables of the consistency result database (KomMKonLLM); the API is in ``store.py``.

Dedupe: a *query* is one distinct prompt per question (UNIQUE question, prompt_sha256), so a
prompt that two covering-array rows produce (coinciding synonyms) is sent once per model;
``query_rows`` keeps every row's mapping to its query, so reports still see all rows.
Resume: a response with ``error IS NULL`` answers its query for its model (partial UNIQUE
index); failed calls are kept for the record but leave the query pending.
"""
from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

PARSED = ("true", "false", "undefined")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One pipeline invocation; responses point to the run that obtained them."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(32), default="running")
    params: Mapped[dict] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(Integer)
    git_commit: Mapped[str] = mapped_column(String(64))
    lingtest_version: Mapped[str] = mapped_column(String(64))


class Model(Base):
    """A backend model under one parameter set: other parameters, other answers, other key."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("model_id", "params_sha256", name="uq_models_id_params"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[str] = mapped_column(String(512))
    params_sha256: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict] = mapped_column(JSON)


class Question(Base):
    """An original yes/no question; ``question_id`` is the caller's content hash."""

    __tablename__ = "questions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    question_id: Mapped[str] = mapped_column(String(128), unique=True)
    source: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)
    expected: Mapped[bool] = mapped_column(Boolean)
    passage: Mapped[str | None] = mapped_column(Text)


class Query(Base):
    """A distinct prompt derived from a question: the unit sent to a model."""

    __tablename__ = "queries"
    __table_args__ = (
        UniqueConstraint("question_id", "prompt_sha256", name="uq_queries_question_prompt"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    derived_text: Mapped[str] = mapped_column(Text)
    prompt: Mapped[str] = mapped_column(Text)
    prompt_sha256: Mapped[str] = mapped_column(String(64))


class QueryRow(Base):
    """Covering-array row -> query; several rows may share one query (same prompt)."""

    __tablename__ = "query_rows"
    __table_args__ = (UniqueConstraint("query_id", "array_row", name="uq_query_rows_query_row"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"))
    array_row: Mapped[int] = mapped_column(Integer)
    row_values: Mapped[list] = mapped_column(JSON)


class Response(Base):
    """One call of a model on a query: either ``raw_text`` (answered) or ``error`` (failed)."""

    __tablename__ = "responses"
    __table_args__ = (
        CheckConstraint("(raw_text IS NULL) <> (error IS NULL)", name="ck_responses_text_xor_error"),
        Index("uq_responses_answered", "query_id", "model_id", unique=True,
              sqlite_where=text("error IS NULL"), postgresql_where=text("error IS NULL")),
        Index("ix_responses_model_query", "model_id", "query_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    query_id: Mapped[int] = mapped_column(ForeignKey("queries.id", ondelete="CASCADE"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    raw_text: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    latency_s: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ClassifierAnswer(Base):
    """An LLM's answer to one classification prompt (``lingtest.tasks.models.llm_classifier``): the
    reply (text and any token log-probabilities, as JSON) or a local LM's label scores.
    Only answers are kept; a failed call leaves the prompt to be asked again."""

    __tablename__ = "classifier_answers"
    __table_args__ = (UniqueConstraint("model_id", "prompt_sha256",
                                       name="uq_classifier_answers_model_prompt"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    prompt_sha256: Mapped[str] = mapped_column(String(64))
    prompt: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Verdict(Base):
    """The oracle's reading of a response; a new oracle version judges everything again."""

    __tablename__ = "verdicts"
    __table_args__ = (
        UniqueConstraint("response_id", "oracle_version", name="uq_verdicts_response_oracle"),
        CheckConstraint(f"parsed IN {PARSED!r}", name="ck_verdicts_parsed"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    response_id: Mapped[int] = mapped_column(ForeignKey("responses.id", ondelete="CASCADE"))
    oracle_version: Mapped[str] = mapped_column(String(64))
    parsed: Mapped[str] = mapped_column(String(16))
    correct: Mapped[bool] = mapped_column(Boolean)
    judged_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
