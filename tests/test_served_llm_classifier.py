"""A served LLM as the sentiment classifier under test, outside ``lingtest test``: ``lingtest
adapt`` and ``lingtest review``'s model loading ask a fake chat server (on 127.0.0.1) with the
project's HTTP settings (``consistency.*``) and its answer store (a rerun asks nothing);
per-model label words and template from ``models.llm_classifier`` (inline, or a file relative
to the project root) shape the prompt and the reading of the answer; and the adaptive stage's
report names the endpoint without its secrets, the template, the label words, how the
probabilities were obtained and the undefined answers."""
from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.models.llm import LLMSettings
from tests.llm_servers import LabelChat

# consistency.*: none of them the defaults (60 s, 3 retries, 1 s, 4 in flight)
HTTP = {"timeout_s": 7.5, "retries": 0, "backoff_s": 0.25, "concurrency": 2}
UNDEFINED_MARK = "???"
POSITIVE = ("love", "great", "spotless", "comfortable", "friendly")
NEGATIVE = ("dirty", "hate", "worst", "smelled", "broken")
TREE = [("/Rooms", "The room was spotless", "pos"), ("/Rooms", "Sheets were dirty", "neg"),
        ("/Rooms", "The bed was comfortable", "pos"), ("/Rooms", "??? the minibar", "pos"),
        ("/Staff", "The staff were friendly", "pos"), ("/Staff", "I hate the night porter", "neg"),
        ("/Staff", "??? the concierge", "neg")]


def judge(prompt: str) -> str:
    """The served model: the default template's three words, or "good" / "bad" when the
    prompt asks "Good or bad?"; "I cannot tell." for a text holding ``???``."""
    binary = prompt.rstrip().endswith("Good or bad?")
    text = prompt.rsplit("Text:", 1)[-1].lower()
    if UNDEFINED_MARK in text:
        return "I cannot tell."
    if any(word in text for word in POSITIVE):
        return "good" if binary else "Positive"
    if any(word in text for word in NEGATIVE):
        return "bad" if binary else "negative"
    return "bad" if binary else "neutral"


RIVALS = {"Positive": "negative", "negative": "positive", "good": "bad", "bad": "good"}


def served(logprobs: bool = True) -> LabelChat:
    return LabelChat(judge, logprobs=logprobs, rivals=RIVALS)


def write_tree(path: Path, rows=TREE) -> Path:
    lines = [",topic,input,output,label,labeler,description"]
    lines += [f"m{n},{topic},,,topic_marker,imputed," for n, topic in
              enumerate(dict.fromkeys(t for t, _, _ in rows))]
    lines += [f"t{n},{topic},{text},{out},pass,ada," for n, (topic, text, out) in
              enumerate(rows)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def project(tmp_path, monkeypatch) -> Path:
    """A project of its own: the shipped params.yaml with the HTTP settings of ``HTTP``, the
    thread runner and small bootstraps; a tree of seven tests under inputs/adaptive/."""
    root = tmp_path / "project"
    root.mkdir()
    params = yaml.safe_load((PACKAGE_ROOT / "params.yaml").read_text())
    params["consistency"].update(HTTP)
    params["runtime"]["task_runner"] = "threads"
    params["adaptive"].update(bootstrap=100, models=["vader"])
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_tree(root / "inputs" / "adaptive" / "rooms.csv")
    monkeypatch.setenv("LINGTEST_ROOT", str(root))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(root)
    return root


def set_llm_classifier(root: Path, settings: dict) -> None:
    """``models.llm_classifier`` in the project's params.yaml."""
    path = root / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["models"]["llm_classifier"] = settings
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def load_params(root: Path, *sets: str):
    from lingtest.flows.registry import load_params as load

    return load(root, list(sets))


def chat_count(server: LabelChat) -> int:
    return len(server.generations())


# ------------------------------------------------------------------ lingtest adapt

ROUND_LINES = ["The carpet smelled of smoke", "Lovely pool, great view", "??? the lift",
               "The kettle was broken", "Spotless bathroom"]


def round_lines(prompt: str, n: int, seed: int) -> list[str]:
    """The suggestion generator: the same lines whatever it is asked."""
    return ROUND_LINES[:n]


def test_lingtest_adapt_asks_the_served_classifier_with_the_project_s_http_settings(
        project, monkeypatch, prefect_harness) -> None:
    """``lingtest adapt --model openai-chat:...`` (an oracle round, unattended): the model
    under test's answers come from the server, its HTTP client has ``consistency.*``, and
    the same command on the same tree again sends the server no chat request."""
    from typer.testing import CliRunner

    import lingtest.flows.adapt
    from lingtest.flows.cli import app
    from test_adaptive_generators import CompletionsServer

    built = []
    loader = lingtest.flows.adapt.load_sentiment_model
    monkeypatch.setattr(lingtest.flows.adapt, "load_sentiment_model",
                        lambda *a, **kw: built.append(loader(*a, **kw)) or built[-1])
    monkeypatch.setenv("PREFECT_HOME", str(project / ".prefect"))
    start = project / "inputs" / "start.csv"
    shutil.copy(project / "inputs" / "adaptive" / "rooms.csv", start)
    tree = project / "inputs" / "adaptive" / "grown.csv"
    with served() as chat, CompletionsServer(script=round_lines) as generator:
        args = ["adapt", "--topic", "/Rooms", "--tree", str(tree), "--start-from", str(start),
                "--model", f"openai-chat:tiny-chat@{chat.url}#name=judge",
                "--oracle", "vader", "--oracle-min-confidence", "0",
                "--no-oracle-topic-filter", "--no-diversity",
                "--generator", "openai:gpt-test", "--base-url", generator.url]
        counts = []
        for _ in range(2):
            tree.unlink(missing_ok=True)
            done = CliRunner().invoke(app, args)
            assert done.exit_code == 0, done.output
            counts.append(chat_count(chat))
        assert generator.generations(), "the suggestions came from the generator's server"
        prompts = chat.chat_prompts()
    assert counts[0] > 0 and counts[1] == counts[0], counts  # the rerun: all from the store
    assert any(p.endswith("Text: Spotless bathroom") for p in prompts)  # a suggestion scored
    assert any(p.endswith("Text: Sheets were dirty") for p in prompts)  # and the tree's tests
    first, rerun = [m for m in built if m.model_id == "judge"]  # (the oracle: vader)
    for under_test in (first, rerun):
        assert under_test.http == LLMSettings(**HTTP)
        settings = under_test._served().settings
        assert (settings.timeout_s, settings.retries, settings.concurrency) == (7.5, 0, 2)
    assert first.tally.asked == counts[0] and first.tally.undefined > 0  # "??? the lift"
    assert rerun.tally.asked == 0 and rerun.tally.stored == counts[0]
    grown = tree.read_text()
    assert "Spotless bathroom" in grown and "judge score" in grown


# ------------------------------------------------------------------ lingtest review's models

TEXTS = ["I love this room", "The worst breakfast", "??? the view", "It opens at nine"]


def test_review_loads_a_served_classifier_with_the_project_s_http_settings(project) -> None:
    """``lingtest review``'s model loading (``review_models``): the served classifier has
    ``consistency.*``; its answers come from the server, then from the store."""
    from lingtest.tasks.adaptive.cli import review_models

    params, workspace = load_params(project), Workspace(project)
    with served() as chat:
        spec = f"openai-chat:tiny-chat@{chat.url}#name=judge"
        model, vader = review_models([spec, "vader"], params, workspace)
        assert (model.model_id, vader.model_id) == ("judge", "vader")
        assert model.model.http == LLMSettings(**HTTP)
        assert model.model._served().settings.backoff_s == 0.25
        labels, probs = model.predict_with_probabilities(TEXTS)
        asked = chat_count(chat)
        again = review_models([spec], params, workspace)[0]
        labels2, probs2 = again.predict_with_probabilities(TEXTS)
        assert chat_count(chat) == asked == len(TEXTS)
    assert labels == labels2 == ["pos", "neg", "undefined", "neutral"]
    assert np.array_equal(probs, probs2, equal_nan=True)
    assert probs[0, 2] == pytest.approx(0.8 / 0.95)  # the server's logprobs, normalised
    assert again.model.tally.asked == 0 and again.model.tally.stored == len(TEXTS)


def test_the_flow_s_http_parameter_is_the_project_s_settings(project) -> None:
    """``lingtest adapt`` hands ``adapt_flow`` the project's ``consistency.*`` as plain
    values; without a consistency section they are the defaults (which ``HTTP`` is not)."""
    from lingtest.flows.adapt import http_parameters

    assert LLMSettings(**http_parameters(load_params(project))) == LLMSettings(**HTTP)
    assert LLMSettings(**http_parameters(None)) == LLMSettings()


# ------------------------------------------------------------------ label words and template

TEMPLATE = "Review: {text}\nGood or bad?"
GOOD_BAD = {"neg": ["bad"], "pos": ["good"]}


@pytest.mark.parametrize("where", ["inline", "file"])
def test_per_model_label_words_and_template_from_params(project, tmp_path, monkeypatch,
                                                        where) -> None:
    """``models.llm_classifier: {judge: {labels: {neg: [bad], pos: [good]}, template: ...}}``
    (or ``template_file`` relative to the project root, read from another folder): the server
    gets the template, "good" / "bad" read as pos / neg, two-label probabilities."""
    from lingtest.tasks.models.llm_classifier import LLMClassifier
    from lingtest.tasks.models.sentiment import LABELS2, load_configured

    settings = {"labels": GOOD_BAD}
    if where == "inline":
        settings["template"] = TEMPLATE
    else:
        (project / "prompts").mkdir()
        (project / "prompts" / "judge.txt").write_text(TEMPLATE, encoding="utf-8")
        settings["template_file"] = "prompts/judge.txt"
        monkeypatch.chdir(tmp_path)  # not the project root
    set_llm_classifier(project, {"judge": settings})
    params = load_params(project)
    texts = ["I love this room", "The worst breakfast", "??? the view"]
    with served() as chat:
        model = load_configured(f"openai-chat:tiny-chat@{chat.url}#name=judge", params,
                                project, (0.4, 0.6))
        assert isinstance(model, LLMClassifier) and model.labels == LABELS2
        probs = model.predict_proba(texts)
        assert model.tally.undefined == 1 and model.tally.by_method == {"logprobs": 3}
        labels = model.predict(texts)  # from the store
        prompts = chat.chat_prompts()
    assert sorted(prompts) == sorted(TEMPLATE.replace("{text}", t) for t in texts)  # 2 in flight
    assert labels == ["pos", "neg", "undefined"]
    assert probs.shape == (3, 2) and np.isnan(probs[2]).all()
    assert probs[0] == pytest.approx([0.15 / 0.95, 0.8 / 0.95])
    assert probs[1] == pytest.approx([0.8 / 0.95, 0.15 / 0.95])
    about = model.parameters()
    assert about["label_words"] == GOOD_BAD
    assert about["template"] == ("models.llm_classifier['judge']" if where == "inline"
                                 else "prompts/judge.txt")


# ------------------------------------------------------------------ the adaptive stage's report

PASSWORD, KEY = "Pw7s3cretZ", "sk-judge-K3y9q"


def reported(root: Path) -> dict[str, str]:
    """Every file the stage wrote under reports/ and data/interim/adaptive/, as text."""
    files = [*sorted((root / "reports").rglob("*")),
             *sorted((root / "data" / "interim" / "adaptive").rglob("*"))]
    return {str(f.relative_to(root)): f.read_bytes().decode("utf-8", "replace")
            for f in files if f.is_file()}


def test_the_adaptive_report_names_a_served_classifier_without_its_secrets(
        project, monkeypatch, prefect_harness) -> None:
    """The adaptive stage on two served classifiers, one server returning token
    log-probabilities (its URL holds a password) and one text only (its key in
    ``#key_env``): each provenance line names the endpoint with neither secret, the default
    template, the label words, where the probabilities came from, and the two texts the
    server answered "I cannot tell." as undefined; no file the stage wrote holds a secret."""
    from lingtest.flows.stage import run_stage

    monkeypatch.setenv("JUDGE_KEY", KEY)
    with served(logprobs=True) as scored, served(logprobs=False) as worded:
        with_password = scored.url.replace("http://", f"http://alice:{PASSWORD}@")
        specs = [f"openai-chat:tiny-chat@{with_password}#name=scored",
                 f"openai-chat:tiny-chat@{worded.url}#name=worded&key_env=JUDGE_KEY"]
        params = load_params(project, f"adaptive.models={json.dumps(specs)}",
                             "adaptive.trees=[inputs/adaptive/rooms.csv]")
        run_stage("adaptive", params, Workspace(project))
        asked = [chat_count(scored), chat_count(worded)]
        sent = [server.generations()[0].headers.get("authorization")
                for server in (scored, worded)]
    assert asked == [len(TREE), len(TREE)]
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert sent == [f"Basic {basic}", f"Bearer {KEY}"]  # both secrets used, neither written
    provenance = json.loads((project / "reports" / "adaptive" / "provenance.json").read_text())
    rule = ("token log-probabilities over the label words where the server returns them, "
            "else the parsed answer (probability 1); no label named: undefined")
    for name, server, how in (("scored", scored, "logprobs"), ("worded", worded, "text")):
        line = provenance[f"LLM classifier {name}"]
        # the endpoint as the server's public address: no user, no password, no key
        assert line.startswith(f"endpoint {server.url}; template default (sha256 "), line
        assert "label words neg: negative; neutral: neutral; pos: positive" in line
        assert f"probabilities: {rule}; " in line
        assert f"answers: {len(TREE)} asked now, 0 from the answer store, 0 failed calls, " \
               f"2 undefined; probabilities from {how} {len(TREE)}" in line, line
    files = reported(project)
    assert len(files) > 3 and any("scored" in text for text in files.values())
    leaked = [name for name, text in files.items()
              if PASSWORD in text or KEY in text or basic in text]
    assert not leaked, leaked


def test_the_answer_store_keeps_no_url_password(project) -> None:
    """data/cache/llm-answers.sqlite names the model without the password in its URL, as
    the consistency stage's store does (``answering.store_key``)."""
    from lingtest.tasks.models.llm_classifier import ANSWERS_DB
    from lingtest.tasks.models.sentiment import load_configured

    with served() as chat:
        url = chat.url.replace("http://", f"http://alice:{PASSWORD}@")
        model = load_configured(f"openai-chat:tiny-chat@{url}#name=judge",
                                load_params(project), project, (0.5, 0.5))
        assert model.predict(TEXTS[:1]) == ["pos"]
    store = (project / ANSWERS_DB).parent
    written = {f.name: f.read_bytes() for f in store.iterdir() if f.is_file()}
    assert written and not [name for name, data in written.items()
                            if PASSWORD.encode() in data]
