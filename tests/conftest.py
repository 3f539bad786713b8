"""Test set-up: an isolated Prefect home, telemetry off, the mirror, and the Prefect harness."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_HOME = tempfile.mkdtemp(prefix="lingtest-prefect-")
os.environ["PREFECT_HOME"] = _HOME
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.pop("PREFECT_API_URL", None)
# de-quantised model copies (tasks.models.causal_lm.converted_dir) for this session only
os.environ["LINGTEST_CACHE"] = tempfile.mkdtemp(prefix="lingtest-cache-")
# removed when the process ends: a session's copies take 0.5-1.8 GB (Gemma's 1.1 GB), and
# runs left behind filled this machine's disk
for _folder in (_HOME, os.environ["LINGTEST_CACHE"]):
    atexit.register(shutil.rmtree, _folder, True)

import pytest  # noqa: E402

from tasks.core.paths import PACKAGE_ROOT, default_mirror  # noqa: E402


@pytest.fixture(scope="session")
def mirror() -> Path:
    found = default_mirror(PACKAGE_ROOT)
    if found is None:
        pytest.fail("the mirror is missing: set LINGTEST_MIRROR or put shared/mirror beside the repo")
    return found


@pytest.fixture(scope="session")
def prefect_harness():
    """A throw-away Prefect API (SQLite) for every flow run of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def data_project(tmp_path_factory, mirror: Path, prefect_harness):
    """A temporary project whose ``data`` stage has run on the mirror (once per session)."""
    import shutil

    from flows.stage import run_stage
    from tasks.core.config import load_params
    from tasks.core.paths import Workspace

    root = tmp_path_factory.mktemp("project")
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    # threads: the tests' reference runner; the Dask tests name their runner themselves
    overrides = [f"data.mirror={mirror}", "data.online=false", "runtime.task_runner=threads"]
    run_stage("data", load_params(root, overrides), Workspace(root))
    return Workspace(root), overrides


@pytest.fixture(scope="session")
def processed(data_project) -> Path:
    """The processed tables of the session's temporary project (built from the mirror)."""
    return data_project[0].processed


@pytest.fixture(scope="session")
def nltk_data(mirror: Path) -> Path:
    """The mirror's nltk_data (``data/raw`` has the same layout): no data stage needed."""
    return mirror / "nltk_data"


@pytest.fixture(scope="session")
def nlp():
    from tasks.models.nlp import load_spacy

    return load_spacy("en_core_web_sm")


@pytest.fixture(scope="session")
def wn(nltk_data: Path):
    from tasks.text.wordnet import wordnet

    return wordnet(nltk_data)


@pytest.fixture(scope="session")
def table(mirror: Path):
    """``table("sst")``: a processed table, built by its reader straight from the mirror (the
    mirror has ``data/raw``'s layout) and passed through Parquet as the data stage writes it,
    so unit tests need neither a Prefect harness nor the data flow."""
    import io

    import pandas as pd

    from tasks.data import TABLES

    built: dict[str, pd.DataFrame] = {}

    def read(name: str) -> pd.DataFrame:
        if name not in built:
            buffer = io.BytesIO()
            TABLES[name](mirror).to_parquet(buffer, index=False)
            built[name] = pd.read_parquet(io.BytesIO(buffer.getvalue()))
        return built[name].copy()

    return read
