"""The consistency oracle: free-text LLM responses → true / false / undefined, and its CLI."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from lingtest.tasks.consistency.oracle import classify_csv, guide_answer, parse_answer, read_answer
from lingtest.flows import cli
from lingtest.tasks.core.errors import InputFormatError, LingtestError

CASES = [
    # bare booleans
    ("true", "true"),
    ("False", "false"),
    ("TRUE.", "true"),
    ("  false\n", "false"),
    # yes/no words, leading word decides when nothing contradicts it
    ("Yes", "true"),
    ("no.", "false"),
    ("Yes, it is.", "true"),
    ("No, it does not.", "false"),
    ("**Yes**", "true"),
    ("Answer: no", "false"),
    ("The answer is yes.", "true"),
    ("**Answer:** True", "true"),
    # JSON and Python literals
    ('"true"', "true"),
    ('"no"', "false"),
    ('{"response": "false"}', "false"),
    ('{"answer": {"boolean": true}}', "true"),
    ('{"answer": "yes"}', "true"),
    ('{"result": true}', "true"),
    ('{"Answer": false, "explanation": "yes, the passage says no"}', "false"),
    ('{"output": {"value": "True"}, "result": true}', "true"),
    ("{'answer': True}", "true"),
    # code fences
    ('```json\n{"answer": false}\n```', "false"),
    ('Here you go:\n```\n{"result": true}\n```', "true"),
    ('```json\n{"answer": true}\n```\n```json\n{"answer": "no"}\n```', "undefined"),
    ('```json\n{"answer": true}', "undefined"),
    # reasoning blocks
    ("<think>Is it? No... wait.</think>Yes", "true"),
    ("<think>\nhmm\n</think>\n\n```json\n{\"answer\": false}\n```", "false"),
    ("<think>Let me consider whether the answer is yes", "undefined"),
    ("The passage says so, hence yes.</think> No", "false"),
    ("<think>yes</think>", "undefined"),
    # undefined: nothing, hedges, refusals, both polarities
    (None, "undefined"),
    ("", "undefined"),
    ("   ", "undefined"),
    ("maybe", "undefined"),
    ("I cannot answer", "undefined"),
    ("I don't know.", "undefined"),
    ("true or false", "undefined"),
    ("Yes. No.", "undefined"),
    ("Yes and no", "undefined"),
    ("Yes.\n\nActually, the statement is false.", "undefined"),
    ("No answer.", "undefined"),
    ("No idea", "undefined"),
    # tricky negatives: words that merely start like an answer, or negate it
    ("Yesterday it rained.", "undefined"),
    ("Nothing is certain.", "undefined"),
    ("Not true", "undefined"),
    ("It is true.", "undefined"),
    ("[1]", "undefined"),
    ("[true]", "undefined"),
    ('{"answer": tru', "undefined"),
    ('{"answer": true, "value": false}', "undefined"),
    ('{"answer": "maybe"}', "undefined"),
    ('{"confidence": true, "supported": false}', "undefined"),
    ('"yes or no"', "undefined"),
]


# Read as the guide's oracle reads them (KomMKonLLM ResultStore/services/OracleService.py:
# the first word decides), where today's rules said undefined.
PEER_CASES = [
    ("No, that's not true.", "false"),
    ("Yes, there is no doubt", "true"),
    ("Yes, there is no doubt about it.", "true"),
    ("1", "true"),
    ("0", "false"),
    (" 1.\n", "true"),
    ('{"is_landmark": true}', "true"),
    ('{"confidence": true}', "true"),
    ('{"facts": {"located_in_vienna": false}, "note": "checked"}', "false"),
    ('{"answer": 0}', "false"),
    # still undefined: contradictions after the committed word, HTML pages
    ("Yes.\n\nActually, the statement is false.", "undefined"),
    ("No, it is true.", "undefined"),
    ("<!DOCTYPE html><html><body>Yes</body></html>", "undefined"),
    ("<html><head><title>502 Bad Gateway</title></head><body>no</body></html>", "undefined"),
]


@pytest.mark.parametrize(("response", "expected"), PEER_CASES)
def test_parse_answer_reads_what_the_guide_reads(response: str, expected: str) -> None:
    assert parse_answer(response) == expected


@pytest.mark.parametrize(("response", "expected"), [
    ("true", "true"), (" false\n", "false"), ("Yes", "undefined"), ("1", "undefined"),
    ('{"answer": true}', "undefined"), ('"true"', "undefined"), ("True", "undefined"),
    ('```json\ntrue\n```', "undefined"), ("No, that's not true.", "undefined")])
def test_strict_mode_accepts_only_a_json_boolean(response: str, expected: str) -> None:
    assert parse_answer(response, strict=True) == expected


def test_oracle_versions_keep_modes_apart() -> None:
    from lingtest.tasks.consistency.oracle import oracle_version

    assert oracle_version("lenient") != oracle_version("strict")
    with pytest.raises(LingtestError, match="lenient, strict"):
        oracle_version("loose")


@pytest.mark.parametrize(("response", "expected"), CASES)
def test_parse_answer(response: str | None, expected: str) -> None:
    assert parse_answer(response) == expected


@pytest.fixture
def responses(tmp_path):
    path = tmp_path / "answers.csv"
    path.write_text("id,response,code\n"
                    "1,Yes,007\n"
                    "2,\"{\"\"answer\"\": false}\",010\n"
                    "3,,011\n"
                    "4,TRUE,012\n", encoding="utf-8")
    return path


def test_cli_adds_parsed_column_in_place(responses) -> None:
    result = CliRunner().invoke(cli.app, ["classify-answers", str(responses),
                                          "--column", "response", "--oracle", "lenient"])
    assert result.exit_code == 0, result.output
    assert "true\t2" in result.output and "false\t1" in result.output
    assert "undefined\t1" in result.output
    table = pd.read_csv(responses, dtype=str, keep_default_na=False)
    assert table["parsed"].tolist() == ["true", "false", "undefined", "true"]
    # the other cells come back as written (text, not re-typed numbers or booleans)
    assert table["code"].tolist() == ["007", "010", "011", "012"]
    assert table["response"].tolist()[3] == "TRUE"
    assert sorted(p.name for p in responses.parent.iterdir()) == ["answers.csv"]


def test_cli_output_leaves_input_alone(responses, tmp_path) -> None:
    before = responses.read_bytes()
    out = tmp_path / "out" / "parsed.csv"
    result = CliRunner().invoke(cli.app, ["classify-answers", str(responses),
                                          "--column", "response", "--output", str(out),
                                          "--oracle", "lenient"])
    assert result.exit_code == 0, result.output
    assert responses.read_bytes() == before
    assert pd.read_csv(out)["parsed"].tolist() == ["true", "false", "undefined", "true"]


def test_rerun_replaces_parsed_column_only_when_told(responses) -> None:
    first = classify_csv(responses, "response", mode="lenient")
    classified = responses.read_bytes()
    with pytest.raises(LingtestError, match="already has a `parsed` column .*pass --overwrite"):
        classify_csv(responses, "response", mode="strict")
    assert responses.read_bytes() == classified  # the earlier classification stays
    again = classify_csv(responses, "response", mode="lenient", overwrite=True)
    assert again == first == {"true": 2, "false": 1, "undefined": 1}
    assert list(pd.read_csv(responses).columns) == ["id", "response", "code", "parsed"]


def test_cli_output_folder_gets_the_file_name(responses, tmp_path) -> None:
    """`--output <folder>` writes <folder>/<FILE's name> (as cp does); FILE stays as it was;
    `~` in either path is the home folder."""
    before = responses.read_bytes()
    folder = tmp_path / "classified"
    folder.mkdir()
    result = CliRunner().invoke(cli.app, ["classify-answers", str(responses), "--column",
                                          "response", "--output", str(folder), "--oracle",
                                          "lenient"], env={"HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert f"wrote {folder / responses.name}" in result.output
    assert responses.read_bytes() == before
    assert pd.read_csv(folder / responses.name)["parsed"].tolist() == ["true", "false",
                                                                       "undefined", "true"]
    home = CliRunner().invoke(cli.app, ["classify-answers", f"~/{responses.name}", "--column",
                                        "response", "--output", "~/classified/"],
                              env={"HOME": str(tmp_path)})
    assert home.exit_code == 0, home.output
    assert pd.read_csv(folder / responses.name)["parsed"].tolist() == ["true", "undefined",
                                                                       "undefined", "true"]
    new = CliRunner().invoke(cli.app, ["classify-answers", str(responses), "--column",
                                       "response", "--output", f"{tmp_path}/new/"])
    assert new.exit_code == 0 and (tmp_path / "new" / responses.name).is_file(), new.output


def test_missing_column_lists_columns_and_changes_nothing(responses, monkeypatch,
                                                          capsys) -> None:
    before = responses.read_bytes()
    monkeypatch.setattr(sys, "argv", ["lingtest", "classify-answers", str(responses),
                                      "--column", "answer"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    message = capsys.readouterr().err
    assert "no column 'answer'" in message and "columns: id, response, code" in message
    assert "--column" in message
    assert responses.read_bytes() == before


def test_missing_file(tmp_path) -> None:
    with pytest.raises(LingtestError, match="no such file"):
        classify_csv(tmp_path / "absent.csv", "response")


def test_unreadable_csv(tmp_path) -> None:
    path = tmp_path / "binary.csv"
    path.write_bytes(b"response\n\xff\xfe\x00yes\n")
    with pytest.raises(InputFormatError, match="not a readable CSV"):
        classify_csv(path, "response")


def test_parsed_is_not_a_source_column(responses) -> None:
    with pytest.raises(LingtestError, match="overwrite"):
        classify_csv(responses, "parsed")


def test_failed_write_leaves_file_whole(responses, monkeypatch) -> None:
    """A write that dies half-way leaves the old file and no temporary file behind."""
    before = responses.read_bytes()

    def half_write(self, path, *args, **kwargs):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("id,resp")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_write)
    with pytest.raises(OSError, match="disk full"):
        classify_csv(responses, "response")
    assert responses.read_bytes() == before
    assert sorted(p.name for p in responses.parent.iterdir()) == ["answers.csv"]


PUBLISHED = Path(__file__).parent / "data" / "kommkonllm_responses.csv"


def _published() -> pd.DataFrame:
    return pd.read_csv(PUBLISHED, dtype=str, keep_default_na=False, comment=None,
                       skiprows=5)


def test_guide_oracle_reads_the_published_responses_as_the_guide_did() -> None:
    """The guide's own readings (its ``result`` column), defined and undefined alike; the
    sample holds the JSON objects lenient reads true and the guide undefined."""
    table = _published()
    assert len(table) == 40 and set(table["result"]) == {"true", "false", "undefined"}
    assert [guide_answer(text) for text in table["new_response"]] == table["result"].tolist()
    assert [read_answer(text, "guide") for text in table["new_response"]] == \
        table["result"].tolist()
    lenient = [read_answer(text, "lenient") for text in table["new_response"]]
    assert sum(a != b for a, b in zip(lenient, table["result"])) >= 12  # where they part


@pytest.mark.parametrize(("response", "expected"), [
    ("Result is: Yes, it is.", "true"), ("<pad> false", "false"), ("false</s>", "undefined"), ("1", "true"),
    ("0.", "false"), ("**No**", "false"), ('{"answer": true}', "undefined"),
    ("Yes and no", "true"), ("", "undefined"), (None, "undefined"), ("Maybe yes", "undefined"),
    ("```json\ntrue\n```", "undefined"), ("Yés", "undefined")])
def test_guide_oracle_is_the_first_word(response, expected) -> None:
    assert guide_answer(response) == expected


def test_cli_oracle_option(responses) -> None:
    result = CliRunner().invoke(cli.app, ["classify-answers", str(responses),
                                          "--column", "response"])
    assert result.exit_code == 0, result.output
    assert "oracle guide" in result.output
    assert pd.read_csv(responses)["parsed"].tolist() == ["true", "undefined", "undefined",
                                                         "true"]
    bad = CliRunner().invoke(cli.app, ["classify-answers", str(responses), "--column",
                                       "response", "--oracle", "loose"])
    assert bad.exit_code != 0 and "lenient" in bad.output + str(bad.exception)
