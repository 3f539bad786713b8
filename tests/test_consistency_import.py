"""Importing the guide's own artefacts (KomMKonLLM example/: ca-N.csv, synonyms-N.txt,
test_runs.csv): exactly its derived questions and prompts, checked files, and a run of the
stage on them against a fake Ollama server (whose host is part of the model's identity)."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from llm_servers import DIGEST, FakeLLMServer

from lingtest.tasks.consistency.guide_import import guide_queries, read_guide_folder
from lingtest.tasks.core.errors import InputFormatError, LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT

# The guide's sentence 1: its synonyms-1.txt (one Python list literal per token), the first
# two lines of its ca-1.csv and the first three prompts its queries.csv records for it.
SENTENCE_1 = ("Is St. Stephen's Cathedral in Vienna, with its 136-meter-high south tower, its "
              "impressive Gothic architectural style, and its striking roof made of "
              "approximately 230,000 colorful roof tiles, one of the most famous and most "
              "visited landmarks of the Austrian capital Vienna?")
SYNONYMS_1 = """['is']|['st.']|['stephen', 'sir_leslie_stephen']|["'s"]|['cathedral', 'duomo']|\
['in']|['vienna', 'austrian_capital', 'capital_of_austria']|[',']|['with']|['its']|['136']|['-']|\
['meter', 'metre', 'm']|['-']|['high', 'eminent', 'high-pitched']|['south']|\
['tower', 'column', 'pillar']|[',']|['its']|['impressive', 'telling']|\
['gothic', 'medieval', 'mediaeval']|['architectural']|['style', 'manner', 'mode']|[',']|['and']|\
['its']|['striking', 'dramatic', 'spectacular']|['roof', 'ceiling', 'cap']|\
['made', 'make', 'do']|['of']|['approximately']|['230,000']|\
['colorful', 'colourful', 'colored']|['roof', 'ceiling', 'cap']|\
['tiles', 'tile', 'roofing_tile']|[',']|['one']|['of']|['the']|['most']|\
['famous', 'celebrated', 'famed']|['and']|['most']|['visited', 'visit', 'see']|\
['landmarks', 'landmark', 'turning_point']|['of']|['the']|['austrian']|\
['capital', 'working_capital', 'capital_letter']|\
['vienna', 'austrian_capital', 'capital_of_austria']|['?']""".replace("|", "\n")
CA_1 = ("0,0,1,0,1,0,1,0,0,0,0,0,1,0,2,0,0,0,0,0,0,0,1,0,0,0,1,0,2,0,0,0,2,0,2,0,0,0,0,0,0,0,0,"
        "0,2,0,0,0,1,0,0\n"
        "0,0,0,0,0,0,0,0,0,0,0,0,2,0,1,0,1,0,0,1,1,0,0,0,0,0,0,2,0,0,0,0,0,1,0,0,0,0,0,0,1,0,0,"
        "2,0,0,0,0,2,2,0\n")
GUIDE_PROMPTS_1 = [
    "is st. stephen 's cathedral in vienna , with its 136 - meter - high south tower , its "
    "impressive gothic architectural style , and its striking roof made of approximately "
    "230,000 colorful roof tiles , one of the most famous and most visited landmarks of the "
    "austrian capital vienna ?? Return a JSON boolean.",
    "is st. sir leslie stephen 's duomo in austrian capital , with its 136 - metre - "
    "high-pitched south tower , its impressive gothic architectural manner , and its dramatic "
    "roof do of approximately 230,000 colored roof roofing tile , one of the most famous and "
    "most visited turning point of the austrian working capital vienna ?? Return a JSON "
    "boolean.",
    "is st. stephen 's cathedral in vienna , with its 136 - m - eminent south column , its "
    "telling medieval architectural style , and its striking cap made of approximately "
    "230,000 colorful ceiling tiles , one of the most celebrated and most see landmarks of "
    "the austrian capital letter capital of austria ?? Return a JSON boolean.",
]
# A second, small sentence in the same format; its array has an all-zero row (skipped, as
# the guide's runner skips it) and covers every pair of the three 2-valued tokens.
SENTENCE_2 = "Is the sky blue?"
SYNONYMS_2 = "['is']\n['the']\n['sky', 'heaven']\n['blue', 'bluish']\n['?', '?!']\n"
CA_2 = "0,0,0,0,0\n0,0,1,1,0\n0,0,1,0,1\n0,0,0,1,1\n"
RUNS = ("id,sentence,date,correct_answer_label,model_name,note,strength\n"
        f"1,\"{SENTENCE_1}\",2025-04-04,true,OLLAMA,ollama-starling-lm-t2,2\n"
        f"2,\"{SENTENCE_2}\",2025-04-04,true,OLLAMA,ollama-starling-lm-t2,2\n"
        f"1,\"{SENTENCE_1}\",2025-04-05,true,OLLAMA,ollama-mistral-t2,2\n")


@pytest.fixture
def guide_folder(tmp_path):
    folder = tmp_path / "example"
    folder.mkdir()
    for name, text in (("synonyms-1.txt", SYNONYMS_1), ("ca-1.csv", CA_1), ("test_runs.csv", RUNS),
                       ("synonyms-2.txt", SYNONYMS_2), ("ca-2.csv", CA_2)):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _queries(folder, **prompt):
    questions, synonyms, arrays = read_guide_folder(folder)
    questions["store_id"] = questions["question_id"]
    settings = {"prefix": "", "suffix": "? Return a JSON boolean.", "join": "none", **prompt}
    return questions, guide_queries(questions, synonyms, arrays, **settings)


def test_guide_prompts_are_reproduced_exactly(guide_folder):
    questions, queries = _queries(guide_folder)
    assert questions[["question_id", "question", "answer"]].values.tolist() == [
        ["guide-01", SENTENCE_1, True], ["guide-02", SENTENCE_2, True]]
    first = queries[queries["question_id"] == "guide-01"]
    assert first["prompt"].tolist() == GUIDE_PROMPTS_1
    assert first["array_row"].tolist() == [0, 1, 2] and not any(first["row_values"].iloc[0])
    second = queries[queries["question_id"] == "guide-02"]
    assert second["derived_text"].tolist() == [
        "is the sky blue ?", "is the heaven bluish ?", "is the heaven blue ?!",
        "is the sky bluish ?!"]
    _, spaced = _queries(guide_folder, suffix="Return a JSON Boolean.", join="space")
    assert spaced["prompt"].iloc[0].endswith("vienna ? Return a JSON Boolean.")


def test_labels_from_public_questions_when_there_is_no_test_runs(guide_folder):
    (guide_folder / "test_runs.csv").unlink()
    (guide_folder / "public_questions.jsonl").write_text(
        json.dumps({"question": SENTENCE_1, "answer": True}) + "\n"
        + json.dumps({"question": SENTENCE_2, "answer": False}) + "\n", encoding="utf-8")
    questions, _, _ = read_guide_folder(guide_folder)
    assert questions["answer"].tolist() == [True, False]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("ca-2.csv", "0,0,0,0\n", r"ca-2\.csv:1: 4 columns, but its synonyms file has 5"),
    ("ca-2.csv", "0,0,0,0,0\n0,0,2,0,0\n", r"ca-2\.csv:2: value 2 in column 3.*'sky'"),
    ("synonyms-2.txt", "['is']\n{'the'}\n", r"synonyms-2\.txt:2: not a non-empty list"),
    ("synonyms-2.txt", "['is'\n", r"synonyms-2\.txt:1: not a list literal"),
])
def test_bad_files_name_file_and_line(guide_folder, name, text, message):
    (guide_folder / name).write_text(text, encoding="utf-8")
    with pytest.raises(InputFormatError, match=message):
        read_guide_folder(guide_folder)


def test_missing_partner_file_and_sentence_are_named(guide_folder):
    (guide_folder / "synonyms-2.txt").unlink()
    with pytest.raises(LingtestError, match=r"synonyms-2\.txt is missing"):
        read_guide_folder(guide_folder)
    (guide_folder / "ca-2.csv").unlink()
    (guide_folder / "ca-3.csv").write_text(CA_2)
    (guide_folder / "synonyms-3.txt").write_text(SYNONYMS_2)
    with pytest.raises(LingtestError, match="no sentence 3"):
        read_guide_folder(guide_folder)


@pytest.mark.slow
def test_stage_runs_the_imported_questions(guide_folder, tmp_path, monkeypatch,
                                           prefect_harness):
    """The stage (thread runner) on the imported folder with the default settings, which are
    the guide's (prompt text and join, oracle, metric definitions): every derived question
    answered by a fake Ollama with the guide's published prompt, the guide's metric
    definitions named in the report, the endpoint in the provenance; the same model on
    another host is asked again (its answers are not reused)."""
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import Workspace

    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    overrides = [f"consistency.import_dir={guide_folder}", "consistency.llms=[ollama:llama3.2]",
                 "consistency.bootstrap=0", "consistency.retries=0",
                 "runtime.task_runner=threads"]  # the tests' reference runner (conftest)
    params = load_params(root, overrides)
    with FakeLLMServer("ollama") as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        first = run_stage("consistency", params, Workspace(root))
        again = run_stage("consistency", params, Workspace(root))
    assert first["prompts"] == first["sent"] == 7 and first["errors"] == 0
    assert again["sent"] == 0
    assert set(GUIDE_PROMPTS_1) <= {r.body["prompt"] for r in server.generations()}
    reports = root / "reports" / "consistency"
    results = pd.read_csv(reports / "results.csv", dtype=str)
    # the fake answers {"answer": "false", …}: the guide's oracle reads its first word,
    # "answer", so undefined, as the guide reads the published JSON objects
    assert len(results) == 7 and set(results["parsed"]) == {"undefined"}
    queries = pd.read_csv(reports / "queries.csv", dtype=str)  # the guide's own layout
    assert set(GUIDE_PROMPTS_1) <= set(queries["modified_question"])
    assert set(queries["result"]) == {"undefined"}
    summary = (reports / "consistency-summary.md").read_text()
    assert "(the guide's)" in summary and f"endpoint {server.url}" in summary
    assert f"digest {DIGEST}" in summary
    assert (root / "data" / "interim" / "consistency" / "ca" / "ca-guide-02.csv").read_text() == CA_2
    with FakeLLMServer("ollama") as other:
        monkeypatch.setenv("OLLAMA_HOST", other.url)
        third = run_stage("consistency", params, Workspace(root))
    assert third["sent"] == 7  # another server: asked again, not reused
