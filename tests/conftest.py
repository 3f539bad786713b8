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
atexit.register(shutil.rmtree, _HOME, True)
# de-quantised model copies (lingtest.tasks.models.causal_lm.converted_dir) for this test run only,
# shared by its pytest-xdist workers (they inherit the controller's environment; a copy is
# converted once, under a lock) and removed when the process that made it ends: a run's
# copies take 0.5-1.8 GB (Gemma's 1.1 GB), and runs left behind filled this machine's disk
if os.environ.get("LINGTEST_TEST_CACHE_OWNER") is None:
    os.environ["LINGTEST_CACHE"] = tempfile.mkdtemp(prefix="lingtest-cache-")
    os.environ["LINGTEST_TEST_CACHE_OWNER"] = str(os.getpid())
if os.environ["LINGTEST_TEST_CACHE_OWNER"] == str(os.getpid()):
    atexit.register(shutil.rmtree, os.environ["LINGTEST_CACHE"], True)

import pytest  # noqa: E402

from lingtest.tasks.core.paths import PACKAGE_ROOT, default_mirror  # noqa: E402


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
def dask_cluster(prefect_harness):
    """Two Dask worker processes for the Dask tests of a pytest process, reached through
    ``runtime.dask_address`` as a user's own cluster is: started once, since each worker's
    imports and first model loads take ~20 s. (The cluster a stage starts itself is covered
    by test_dask_runner.py and the capabilities stage's ``task_runner=auto`` test.)"""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0",
                                  env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="session")
def data_project(tmp_path_factory, worker_id: str, mirror: Path, prefect_harness):
    """A temporary project whose ``data`` stage has run on the mirror: once per test run,
    by the first pytest-xdist worker that needs it (~60 s), under a lock; every worker
    gets its own copy of that project."""
    import fcntl

    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import Workspace

    # threads: the tests' reference runner; the Dask tests name their runner themselves
    overrides = [f"data.mirror={mirror}", "data.online=false", "runtime.task_runner=threads"]

    def build(root: Path, *extra: str) -> None:
        shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
        run_stage("data", load_params(root, [*overrides, *extra]), Workspace(root))

    root = tmp_path_factory.mktemp("project")
    if worker_id == "master":  # no xdist: nobody to share with
        build(root)
        return Workspace(root), overrides
    shared = tmp_path_factory.getbasetemp().parent / "data-project"
    with open(f"{shared}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "params.yaml").is_file():
            staging = Path(tempfile.mkdtemp(dir=shared.parent, prefix=".data-project-"))
            # its task results beside it, so every worker's rerun of the stage hits the cache
            build(staging, "runtime.result_storage=.results")
            staging.rename(shared)
    # the project's files, not its run state (locks, Prefect records of the builder's run);
    # the data stage's cached results go to this worker's own result storage
    shutil.copytree(shared, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".prefect", ".results"))
    shutil.copytree(shared / ".results", local_result_storage(), dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("cache-locks"))
    return Workspace(root), overrides


def local_result_storage() -> Path:
    """Prefect's default result storage of this pytest process (under its PREFECT_HOME)."""
    from prefect.settings import get_current_settings

    return Path(get_current_settings().results.local_storage_path)


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
    from lingtest.tasks.models.nlp import load_spacy

    return load_spacy("en_core_web_sm")


@pytest.fixture(scope="session")
def wn(nltk_data: Path):
    from lingtest.tasks.text.wordnet import wordnet

    return wordnet(nltk_data)


@pytest.fixture(scope="session")
def table(mirror: Path):
    """``table("sst")``: a processed table, built by its reader straight from the mirror (the
    mirror has ``data/raw``'s layout) and passed through Parquet as the data stage writes it,
    so unit tests need neither a Prefect harness nor the data flow."""
    import io

    import pandas as pd

    from lingtest.tasks.data import TABLES

    built: dict[str, pd.DataFrame] = {}

    def read(name: str) -> pd.DataFrame:
        if name not in built:
            buffer = io.BytesIO()
            TABLES[name](mirror).to_parquet(buffer, index=False)
            built[name] = pd.read_parquet(io.BytesIO(buffer.getvalue()))
        return built[name].copy()

    return read


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch at one intra-op thread for a module's direct model calls (as a stage's
    ``runtime.threads`` sets it): two pytest workers on 2 cores, each at 2 threads, spend
    several times the CPU spinning. Restored after the module."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def loads_no_weights(monkeypatch):
    """Any load of model weights fails the test: what a check that must stay fast (it runs
    before the work) promises, asserted on what it does, not timed on a busy machine."""
    import safetensors.torch
    import sentence_transformers
    import torch
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError(f"weights loaded: {args[:1]}")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(safetensors.torch, "load_file", refuse)
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr(sentence_transformers.SentenceTransformer, "__init__", refuse)
