"""The consistency result database: SQLite file by default, PostgreSQL by URL.

Everything crosses this API as plain Python values or pandas frames. Writes are idempotent
(INSERT ... ON CONFLICT DO NOTHING) and ``save_responses`` commits every batch, so a run that
is interrupted and started again asks ``pending`` for what is left and sends nothing twice.
See ``store_schema.py`` for the tables and why a prompt is sent once per model.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sqlalchemy import (
    Engine,
    Select,
    and_,
    case,
    create_engine,
    event,
    false,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError

from lingtest.tasks.consistency.store_schema import (
    PARSED,
    Base,
    ClassifierAnswer,
    Model,
    Query,
    QueryRow,
    Question,
    Response,
    Run,
    Verdict,
    utcnow,
)
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.secrets import MASK, redact_text, redact_url, redact_value

if TYPE_CHECKING:
    from typing_extensions import Self

BATCH = 500
URL_PARAM = "consistency.database_url"
URL_EXAMPLES = "e.g. sqlite:///data/consistency/results.sqlite or postgresql+psycopg://user:password@host:5432/lingtest"
QUESTION_COLUMNS = ("question_id", "source", "question", "answer", "passage")
QUERY_COLUMNS = ("question_id", "array_row", "row_values", "derived_text", "prompt")
RESULT_COLUMNS = (
    "model_id", "model_key", "question_id", "array_row", "derived_text", "prompt", "expected",
    "raw_text", "error", "parsed", "correct", "query_id", "response_id", "row_values",
)


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def canonical_json(value: Any) -> str:
    """Sorted keys, compact, integral floats as ints: ``temperature: 0`` and ``0.0`` in YAML
    are one parameter set, so they must not split a model into two keys (and resend all)."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def redact(url: str) -> str:
    """The URL with its password masked, whatever characters it holds (tasks/core/secrets.py;
    SQLAlchemy's own rendering would show the part of a password after an unencoded '@')."""
    return redact_url(url)


def _chunks(items: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _require(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing}; got {list(df.columns)}")


def _lingtest_version() -> str:
    try:
        return version("lingtest")
    except PackageNotFoundError:
        return "unknown"


def parse_database_url(url: str) -> Any:
    """The parsed URL (no connection), or one LingtestError naming it (no password) and the
    fix: checked before a run starts and again when the store opens."""
    shown = redact(url)
    fix = f"set {URL_PARAM}, {URL_EXAMPLES}"
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise LingtestError(f"{URL_PARAM} {shown!r} is not a database URL ({fix}; %-encode "
                            "/ @ : # ? % in a password)") from None
    if parsed.host and "@" in parsed.host:  # SQLAlchemy ends the password at its first '@'
        raise LingtestError(f"{URL_PARAM} {shown!r}: the password holds an unencoded '@', so "
                            f"the host would be read wrongly; fix: write it as %40")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise LingtestError(f"{URL_PARAM} {shown!r}: database {backend!r} is not supported, "
                            f"only sqlite and postgresql ({fix})")
    if backend == "sqlite" and (parsed.database or ":memory:") == ":memory:":
        raise LingtestError(f"{URL_PARAM} {shown!r} is an in-memory database: the answers "
                            f"would be gone when the stage's tasks end; fix: a file, e.g. "
                            f"sqlite:///data/consistency/results.sqlite")
    return parsed


DAMAGED = ("malformed", "not a database", "file is encrypted")  # SQLite's words for it


def _damaged(path: Path, problem: str) -> LingtestError:
    return LingtestError(
        f"{path}: the result database is damaged ({problem}); fix: move it away "
        f"(mv {path} {path}.damaged) and run again, which asks every prompt anew, or "
        f"restore it from a backup, or set {URL_PARAM} to another database")


def check_sqlite(url: str, root: Path | None = None) -> None:
    """A damaged SQLite result database (garbage mid-file) as one LingtestError naming the
    file and the fix, before a run asks or rewrites anything against it (``PRAGMA
    quick_check`` reads every page once). A database in use by another run is not judged.
    A new one's folder must exist, or lie inside the project (``root``)."""
    import contextlib
    import sqlite3

    parsed = parse_database_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database.startswith("file:"):
        return
    if not Path(database).exists():  # made on first use: where it can be made
        from lingtest.tasks.core.io import check_output_folder, unwritable

        check_output_folder(Path(database), URL_PARAM, root)  # its folder: in the project
        problem = unwritable(Path(database).parent)
        if problem:
            raise LingtestError(f"{URL_PARAM}: cannot create {database} ({problem}); fix: a "
                                "file in a writable folder, e.g. "
                                "sqlite:///data/consistency/results.sqlite")
        return
    path = Path(database)
    if not path.is_file():
        raise LingtestError(f"{URL_PARAM}: {path} is not a file; fix: name a database file "
                            f"(created when missing), e.g. {path}/results.sqlite")
    with path.open("rb") as handle:
        header = handle.read(16)
    if header and header != b"SQLite format 3\x00":
        raise LingtestError(f"{URL_PARAM}: {path} is not an SQLite database (it starts "
                            f"{header[:8]!r}); fix: move it away (mv {path} {path}.damaged) "
                            f"if it was the result database, or set {URL_PARAM} to a new or "
                            "existing .sqlite file")
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=5)) as conn:
            rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if not any(word in str(exc).lower() for word in DAMAGED):
            return  # locked or busy: a running writer, not damage
        raise _damaged(path, str(exc)) from None
    if rows != [("ok",)]:  # rows of lines like "Page 104: btreeInitPage() returns error ..."
        lines = [line.strip() for row in rows for line in str(row[0]).splitlines()
                 if line.strip() and not line.startswith("***")]
        raise _damaged(path, "; ".join(lines[:2]) + (" ..." if len(lines) > 2 else ""))


def _name_damage(path: str | None):
    """An engine hook: a damaged SQLite file met mid-run raises the same one-line error."""
    def hook(context: Any) -> None:
        reason = str(getattr(context, "original_exception", "") or "").strip()
        if path and any(word in reason.lower() for word in DAMAGED):
            raise _damaged(Path(path), reason.splitlines()[0])
    return hook


def open_store(url: str) -> Store:
    """Connect and create missing tables; every failure names the URL (no password) and fix."""
    shown = redact(url)
    fix = f"set {URL_PARAM}, {URL_EXAMPLES}"
    parsed = parse_database_url(url)
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            _make_parent(parsed.database)
            engine = create_engine(parsed, connect_args={"timeout": 30})
            event.listen(engine, "connect", _sqlite_pragmas)
            event.listen(engine, "handle_error", _name_damage(parsed.database))
        else:
            if parsed.drivername == "postgresql":  # SQLAlchemy would pick psycopg2, not installed
                parsed = parsed.set(drivername="postgresql+psycopg")
            engine = create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": 10})
    except (NoSuchModuleError, ImportError) as exc:
        raise LingtestError(f"{shown!r}: no database driver for it ({exc}); use "
                            "postgresql+psycopg:// with `pip install -e '.[postgres]'`, "
                            f"or {fix}") from None
    except OSError as exc:
        raise LingtestError(f"{shown!r}: cannot create its folder ({exc}); {fix}") from None
    try:
        _create_tables(engine)
    except DBAPIError as exc:
        engine.dispose()
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        reason = _without_password(reason, url, parsed)
        if backend == "sqlite" and any(word in reason.lower() for word in DAMAGED):
            raise _damaged(Path(parsed.database or ""), reason) from None
        raise LingtestError(f"cannot open the result database {shown!r}: {reason} "
                            f"(start the server or {fix})") from None
    return Store(engine)


def _create_tables(engine: Engine, attempts: int = 5) -> None:
    """``create_all``, again when another process or thread created a table between its
    check and its CREATE ("already exists") or held the new file's lock ("locked"): two
    tasks opening a new SQLite file at once both try to create it."""
    for attempt in range(attempts):
        try:
            Base.metadata.create_all(engine)
            return
        except OperationalError as exc:
            reason = str(exc.orig).lower()
            if attempt == attempts - 1 or not ("already exists" in reason or "locked" in reason):
                raise
            time.sleep(0.05 * (attempt + 1))


def _without_password(message: str, url: str, parsed: Any) -> str:
    """A driver's message with the password masked, as written and as decoded."""
    message = redact_text(message)
    raw = url.partition("://")[2].partition(":")[2].rpartition("@")[0]
    for secret in sorted({raw, parsed.password or ""}, key=len, reverse=True):
        if len(secret) >= 3:
            message = message.replace(secret, MASK)
    return message


def _make_parent(database: str | None) -> None:
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL lets report readers run beside a writing run; SQLite enforces FKs only on request."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


class Store:
    """The result database of one URL; thread-safe (one engine, a connection per call)."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _insert_ignore(self, conn: Any, table: type[Base], rows: Sequence[dict]) -> None:
        dialect_insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        for chunk in _chunks(rows):
            conn.execute(dialect_insert(table).on_conflict_do_nothing(), list(chunk))

    def _frame(self, stmt: Select, columns: Sequence[str], column: Any = None,
               values: Sequence[Any] | None = None) -> pd.DataFrame:
        """Run ``stmt``, restricted to ``column IN values`` in chunks (bound-parameter limits)."""
        with self.engine.connect() as conn:
            if values is None:
                rows = conn.execute(stmt).all()
            else:
                rows = [row for chunk in _chunks(list(values))
                        for row in conn.execute(stmt.where(column.in_(chunk))).all()]
        return pd.DataFrame([tuple(r) for r in rows], columns=list(columns))

    # Runs and models

    def start_run(self, params: dict, seed: int, git_commit: str) -> int:
        """Open a run record; its parameters are stored with every credential masked."""
        with self.engine.begin() as conn:
            return conn.execute(Run.__table__.insert().returning(Run.id), {
                "params": json.loads(canonical_json(redact_value(params))), "seed": int(seed),
                "git_commit": git_commit, "lingtest_version": _lingtest_version(),
            }).scalar_one()

    def finish_run(self, run_id: int, status: str) -> None:
        with self.engine.begin() as conn:
            done = conn.execute(update(Run).where(Run.id == run_id)
                                .values(status=status, finished_at=utcnow()))
        if done.rowcount != 1:
            raise ValueError(f"no run {run_id} in the result database")

    def upsert_model(self, model_id: str, params: dict) -> int:
        """The key of (model, parameters); the same parameters in any key order, same key."""
        canonical = canonical_json(params)
        digest = sha256(canonical)
        with self.engine.begin() as conn:
            self._insert_ignore(conn, Model, [{
                "model_id": model_id, "params_sha256": digest, "params": json.loads(canonical)}])
            return conn.execute(select(Model.id).where(
                Model.model_id == model_id, Model.params_sha256 == digest)).scalar_one()

    # Questions and queries

    def upsert_questions(self, df: pd.DataFrame) -> None:
        """Insert new questions; a known ``question_id`` (a content hash) is left as is."""
        _require(df, QUESTION_COLUMNS, "upsert_questions")
        rows = [{"question_id": str(r.question_id), "source": str(r.source),
                 "text": str(r.question), "expected": bool(r.answer),
                 "passage": None if pd.isna(r.passage) else str(r.passage)}
                for r in df.itertuples(index=False)]
        with self.engine.begin() as conn:
            self._insert_ignore(conn, Question, rows)

    def add_queries(self, df: pd.DataFrame) -> None:
        """Record derived questions: one query per distinct prompt, every row mapped to it."""
        _require(df, QUERY_COLUMNS, "add_queries")
        if df.empty:
            return
        df = df.assign(prompt_sha256=[sha256(p) for p in df["prompt"]])
        with self.engine.begin() as conn:
            keys = self._question_keys(conn, df["question_id"].unique().tolist())
            unknown = sorted(set(df["question_id"]) - set(keys))
            if unknown:
                raise ValueError(f"add_queries: unknown question ids {unknown[:5]} "
                                 "(call upsert_questions first)")
            df = df.assign(question_key=df["question_id"].map(keys))
            distinct = df.drop_duplicates(["question_key", "prompt_sha256"])
            self._insert_ignore(conn, Query, [
                {"question_id": int(r.question_key), "derived_text": str(r.derived_text),
                 "prompt": str(r.prompt), "prompt_sha256": r.prompt_sha256}
                for r in distinct.itertuples(index=False)])
            query_keys = {}
            for chunk in _chunks(list(keys.values())):
                query_keys.update({(q, h): i for i, q, h in conn.execute(
                    select(Query.id, Query.question_id, Query.prompt_sha256)
                    .where(Query.question_id.in_(chunk)))})
            self._insert_ignore(conn, QueryRow, [
                {"query_id": query_keys[(int(r.question_key), r.prompt_sha256)],
                 "array_row": int(r.array_row), "row_values": [int(v) for v in r.row_values]}
                for r in df.itertuples(index=False)])

    def _question_keys(self, conn: Any, question_ids: list[str]) -> dict[str, int]:
        keys: dict[str, int] = {}
        for chunk in _chunks(question_ids):
            keys.update((q, i) for q, i in conn.execute(
                select(Question.question_id, Question.id).where(Question.question_id.in_(chunk))))
        return keys

    # Responses: what resume rests on

    def pending(self, model_key: int, question_ids: list[str] | None = None) -> pd.DataFrame:
        """Queries without a successful response from ``model_key``: what a (resumed) run sends.

        Columns: query_id, question_id, derived_text, prompt; ordered by query_id.
        """
        with self.engine.connect() as conn:
            if conn.execute(select(Model.id).where(Model.id == model_key)).first() is None:
                raise ValueError(f"no model key {model_key}: use the key upsert_model returned")
        answered = select(Response.id).where(
            Response.query_id == Query.id, Response.model_id == model_key,
            Response.error.is_(None)).exists()
        stmt = (select(Query.id, Question.question_id, Query.derived_text, Query.prompt)
                .join(Question, Query.question_id == Question.id).where(~answered)
                .order_by(Query.id))
        frame = self._frame(stmt, ("query_id", "question_id", "derived_text", "prompt"),
                            Question.question_id, question_ids)
        return frame.sort_values("query_id", ignore_index=True)

    def save_responses(self, run_id: int, model_key: int, rows: list[dict]) -> None:
        """Store calls, committing every batch; an answer already stored for the query is kept.

        Each row: query_id, and either ``text`` (answered) or ``error`` (failed: stays pending),
        latency_s, attempts.
        """
        records = []
        for row in rows:
            text, error = row.get("text"), row.get("error")
            if (text is None) == (error is None):
                raise ValueError(f"response to query {row.get('query_id')}: give exactly one "
                                 f"of text and error, got text={text!r}, error={error!r}")
            latency = row.get("latency_s")
            records.append({
                "query_id": int(row["query_id"]), "model_id": int(model_key), "run_id": int(run_id),
                "raw_text": text, "error": error,
                "latency_s": None if latency is None else float(latency),
                "attempts": int(row.get("attempts") or 1)})
        for chunk in _chunks(records):
            with self.engine.begin() as conn:
                self._insert_ignore(conn, Response, chunk)

    # An LLM classifier's answers (lingtest.tasks.models.llm_classifier)

    def classifier_answers(self, model_key: int, prompts: Sequence[str]) -> dict[str, str]:
        """The stored answers among ``prompts``, by prompt."""
        by_hash = {sha256(p): p for p in prompts}
        stmt = select(ClassifierAnswer.prompt_sha256, ClassifierAnswer.answer).where(
            ClassifierAnswer.model_id == model_key)
        found = self._frame(stmt, ["sha", "answer"], ClassifierAnswer.prompt_sha256,
                            list(by_hash))
        return {by_hash[sha]: answer for sha, answer in zip(found["sha"], found["answer"])}

    def save_classifier_answers(self, model_key: int, answers: dict[str, str]) -> None:
        """Store answers (prompt → answer), committed at once; a stored one is kept."""
        rows = [{"model_id": int(model_key), "prompt_sha256": sha256(prompt),
                 "prompt": prompt, "answer": answer} for prompt, answer in answers.items()]
        with self.engine.begin() as conn:
            self._insert_ignore(conn, ClassifierAnswer, rows)

    # Oracle verdicts

    def save_verdicts(self, rows: list[dict], oracle_version: str) -> None:
        """Store the oracle's readings; one per (response, oracle version), first one kept."""
        records = []
        for row in rows:
            if row["parsed"] not in PARSED or not isinstance(row["correct"], (bool, np.bool_)):
                raise ValueError(f"verdict on response {row['response_id']}: parsed must be one "
                                 f"of {PARSED} and correct a bool, got {row!r}")
            records.append({"response_id": int(row["response_id"]), "parsed": str(row["parsed"]),
                            "correct": bool(row["correct"]), "oracle_version": oracle_version})
        for chunk in _chunks(records):
            with self.engine.begin() as conn:
                self._insert_ignore(conn, Verdict, chunk)

    def unjudged(self, oracle_version: str) -> pd.DataFrame:
        """Successful responses that ``oracle_version`` has not read: response_id, raw_text, expected."""
        judged = select(Verdict.id).where(Verdict.response_id == Response.id,
                                          Verdict.oracle_version == oracle_version).exists()
        stmt = (select(Response.id, Response.raw_text, Question.expected)
                .join(Query, Response.query_id == Query.id)
                .join(Question, Query.question_id == Question.id)
                .where(Response.error.is_(None), ~judged).order_by(Response.id))
        frame = self._frame(stmt, ("response_id", "raw_text", "expected"))
        return frame.astype({"expected": bool})

    # Reports

    def results(self, model_keys: list[int] | None = None, question_ids: list[str] | None = None,
                oracle_version: str | None = None) -> pd.DataFrame:
        """One row per (model, covering-array row): the answer, else the latest failed call.

        Columns: RESULT_COLUMNS. ``parsed``/``correct`` come from ``oracle_version``'s
        verdicts (null when it has not judged the answer, or when no version is given).
        """
        preference = case((Response.error.is_(None), 0), else_=1)
        rank = func.row_number().over(partition_by=(Response.query_id, Response.model_id),
                                      order_by=(preference, Response.id.desc()))
        ranked = select(Response.id, rank.label("rank"))
        if model_keys is not None:
            ranked = ranked.where(Response.model_id.in_([int(k) for k in model_keys]))
        ranked = ranked.subquery()
        on_verdict = Verdict.response_id == Response.id
        on_verdict = and_(on_verdict, false() if oracle_version is None
                          else Verdict.oracle_version == oracle_version)
        stmt = (select(Model.model_id, Response.model_id, Question.question_id,
                       QueryRow.array_row, Query.derived_text, Query.prompt, Question.expected,
                       Response.raw_text, Response.error, Verdict.parsed, Verdict.correct,
                       Query.id, Response.id, QueryRow.row_values)
                .select_from(ranked).join(Response, Response.id == ranked.c.id)
                .join(Model, Response.model_id == Model.id)
                .join(Query, Response.query_id == Query.id)
                .join(Question, Query.question_id == Question.id)
                .join(QueryRow, QueryRow.query_id == Query.id)
                .outerjoin(Verdict, on_verdict).where(ranked.c.rank == 1))
        frame = self._frame(stmt, RESULT_COLUMNS, Question.question_id, question_ids)
        frame = frame.sort_values(["model_key", "question_id", "array_row", "query_id"],
                                  ignore_index=True)
        return frame.astype({"expected": bool, "correct": "boolean"})

    def counts(self) -> dict[str, int]:
        """Rows per table."""
        with self.engine.connect() as conn:
            return {table.name: conn.execute(select(func.count()).select_from(table)).scalar_one()
                    for table in Base.metadata.sorted_tables}
