"""What a ``consistency`` run is configured with, read from its parameters: the answer
store's URL, the questions file, the LLM and prompt settings it records with each answer."""
from __future__ import annotations

import dataclasses
from pathlib import Path


from lingtest.tasks.consistency.params import ConsistencyParams
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace


DEFAULT_DATABASE = "data/consistency/results.sqlite"


def database_url(c: ConsistencyParams, workspace: Workspace) -> str:
    """``consistency.database_url``, else the SQLite file under ``data/consistency``."""
    if c.database_url:
        return _home_expanded(c.database_url)
    return f"sqlite:///{(workspace.root / DEFAULT_DATABASE).resolve()}"


def _home_expanded(url: str) -> str:
    """``sqlite:///~/answers.db``: the file in the home folder, as every path parameter's
    ``~`` is (SQLite itself would make a folder named ``~``)."""
    if not url.startswith("sqlite:///~"):
        return url
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return parsed.set(database=str(Path(parsed.database).expanduser())).render_as_string(
        hide_password=False)


def questions_input(c: ConsistencyParams, workspace: Workspace) -> str:
    """The file the questions come from: the user's JSONL, or the processed table."""
    if c.questions:
        path = Path(c.questions).expanduser()
        path = path if path.is_absolute() else workspace.root / path
        if not path.is_file():
            raise LingtestError(f"consistency.questions: {path} does not exist; give a JSONL "
                                "file of {\"question\", \"answer\", \"passage\"} records, or "
                                "null for the default set")
        return str(path)
    path = workspace.processed / "questions.parquet"
    if not path.is_file():
        raise LingtestError(f"{path} is missing: run `lingtest run data` (or `dvc repro data`)")
    return str(path)


def llm_settings(params: Params) -> dict:
    """The ``LLMSettings`` fields of the run (the LLM seed is the run's seed)."""
    c = params.consistency
    return {"max_new_tokens": c.max_new_tokens, "temperature": c.temperature,
            "seed": params.seed, "system": None, "timeout_s": c.timeout_s,
            "retries": c.retries, "backoff_s": c.backoff_s, "concurrency": c.concurrency,
            "offline": params.models.offline, "device": params.runtime.device,
            "batch_size": c.batch_size, **params.models.lm_path()}


def prompt_settings(c: ConsistencyParams) -> dict:
    settings = {"prompt_prefix": c.prompt_prefix, "prompt_suffix": c.prompt_suffix}
    if c.prompt_join != "space":  # the default stays out, so existing identities still hold
        settings["prompt_join"] = c.prompt_join
    return settings


def settings_record(settings: dict) -> dict:
    """The settings as the store would see them (for reports)."""
    from lingtest.tasks.models.llm import LLMSettings

    return dataclasses.asdict(LLMSettings(**settings))
