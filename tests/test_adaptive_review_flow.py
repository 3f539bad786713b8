"""``lingtest adapt`` without a browser: the review flow pauses each round with a form, a
thread resumes it through the API with a ``run_input``, and the picks land in the tree."""
from __future__ import annotations

import json
import shutil
import threading
import time

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
from prefect.flow_runs import resume_flow_run
from test_adaptive_generators import CompletionsServer
from test_adaptive_review import round_script

from lingtest.flows.adapt import adapt_flow
from lingtest.tasks.adaptive.review_form import apply_review, review_input, review_markdown, suggest
from lingtest.tasks.adaptive.tree import read_tree
from lingtest.tasks.core.errors import LingtestError

WAIT_S = 60


def paused_run(name: str, key: str):
    """The flow run called ``name`` once it is paused for input ``key`` (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[name])))
            for run in runs:
                state = run.state
                if state and state.is_paused() and state.state_details.pause_key == key \
                        and state.state_details.run_input_keyset:
                    return run
            time.sleep(0.3)
    raise AssertionError(f"flow run {name} did not pause for {key} within {WAIT_S} s")


def description_of(run) -> str:
    with get_client(sync_client=True) as client:
        return json.loads(client.read_flow_run_input(
            run.id, run.state.state_details.run_input_keyset["description"]))


def test_form_defaults_are_empty_and_options_are_the_suggestions():
    form = review_input(["a", "b"])
    empty = form()
    assert (empty.fail, empty.passing, empty.off_topic, empty.subtopic, empty.stop) == \
        ([], [], [], "", False)
    schema = json.dumps(form.model_json_schema())
    assert '"enum": ["a", "b"]' in schema
    with pytest.raises(ValueError):
        form(fail=["not shown"])


def test_two_rounds_resumed_through_the_api(mirror, tmp_path, prefect_harness):
    tree_path = tmp_path / "inputs" / "adaptive" / "hotel.csv"
    tree_path.parent.mkdir(parents=True)
    shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tree_path)
    before = read_tree(tree_path)
    answers = {"round-1": {"fail": ["Room smelled like smoke"],
                           "passing": ["The towels were dirty"],
                           "off_topic": ["The weather was nice"], "subtopic": "Smell"},
               "round-2": {"stop": True}}
    name = f"adapt-test-{time.monotonic_ns()}"
    seen: dict[str, str] = {}

    def reviewer():
        for key, answer in answers.items():
            run = paused_run(name, key)
            seen[key] = description_of(run)
            resume_flow_run(run.id, run_input=answer)

    with CompletionsServer(script=round_script) as server:
        thread = threading.Thread(target=reviewer, daemon=True)
        thread.start()
        history = adapt_flow.with_options(flow_run_name=name)(
            str(tree_path), "/Rooms", rounds=3, generator="openai:gpt-test",
            base_url=server.url, model="vader", reviewer="ada", seed=7, prompts=2,
            completions=3, binary_labels=["neg", "pos"], poll_interval_s=1,
            review_timeout_s=WAIT_S)
        thread.join(WAIT_S)
    assert [h["round"] for h in history] == [1, 2]  # round 2 said stop; round 3 never ran
    assert history[0]["written"] == 3 and history[1]["written"] == 0
    assert "| Room smelled like smoke |" in seen["round-1"]
    tree = read_tree(tree_path)
    added = tree.frame.loc[tree.frame.index.difference(before.frame.index)]
    tests = added[added["label"] != "topic_marker"].set_index("input")
    assert tests.loc["Room smelled like smoke", "label"] == "fail"
    assert tests.loc["The towels were dirty", "label"] == "pass"
    assert tests.loc["The weather was nice", "label"] == "off_topic"
    assert set(tests["labeler"]) == {"ada"} and set(tests["topic"]) == {"/Rooms/Smell"}
    provenance = json.loads(tests.loc["Room smelled like smoke", "provenance"])
    assert provenance["round"] == 1 and provenance["generator"] == "openai:gpt-test"
    assert {"prompt_id", "seed"} <= set(provenance)
    assert "/Rooms/Smell" in set(added.loc[added["label"] == "topic_marker", "topic"])


def test_a_pick_under_two_verdicts_is_refused(mirror):
    import pandas as pd

    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")
    shown = pd.DataFrame({"input": ["x"], "output": ["pos"], "prompt_id": ["p"],
                          "generator": ["g"], "seed": [1]})
    form = review_input(["x"])(fail=["x"], passing=["x"])
    assert "| x | pos |" in review_markdown(shown, "/Rooms", 1, "vader")
    with pytest.raises(LingtestError, match="both 'fail' and 'passing'"):
        apply_review(tree, shown, form, "/Rooms", "ada", 1, "vader")


def test_adapt_without_a_ui_server_or_oracle_says_how_to_review(tmp_path):
    """Nobody could resume a paused run without a server: one clear line, exit 2."""
    import os
    import subprocess
    import sys

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "home"))
    env.pop("PREFECT_API_URL", None)
    (tmp_path / "t.csv").write_text(",topic,input,output,label,labeler,description\n"
                                    "m1,/Rooms,,,topic_marker,a,\n")  # checked first
    done = subprocess.run([sys.executable, "-m", "lingtest.flows.cli", "adapt", "--topic", "/Rooms",
                           "--tree", str(tmp_path / "t.csv")], cwd=PACKAGE_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "start `lingtest ui` or pass --oracle" in done.stderr


def test_oracle_rounds_run_unattended(mirror, tmp_path, prefect_harness):
    tree_path = tmp_path / "hotel.csv"
    shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tree_path)
    with CompletionsServer(script=round_script) as server:
        history = adapt_flow(str(tree_path), "/Rooms", rounds=1, generator="openai:gpt-test",
                             base_url=server.url, oracle="vader", seed=7, prompts=2,
                             completions=3, binary_labels=["neg", "pos"],
                             oracle_min_confidence=0.0)  # VADER's proportions: take them all
    assert history[0]["oracle"] == "oracle:vader" and history[0]["accepted"] > 0
    labelers = read_tree(tree_path).frame["labeler"]
    assert (labelers == "oracle:vader").sum() == history[0]["accepted"]


def test_adapt_needs_a_tree_or_a_tree_to_start_from(tmp_path):
    """A missing --tree is one clear error; --start-from copies the tree there first."""
    import os
    import subprocess
    import sys

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "home"))
    env.pop("PREFECT_API_URL", None)
    args = [sys.executable, "-m", "lingtest.flows.cli", "adapt", "--topic", "/Rooms",
            "--oracle", "vader", "--tree", str(tmp_path / "inputs" / "adaptive" / "t.csv")]
    done = subprocess.run(args, cwd=PACKAGE_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "pass --start-from" in done.stderr, done.stderr
    done = subprocess.run(args + ["--start-from", str(tmp_path / "none.csv")], cwd=PACKAGE_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "none.csv" in done.stderr, done.stderr
    assert not (tmp_path / "inputs" / "adaptive" / "t.csv").exists()


# A /Rooms tree whose best-scored tests say one thing seven times; the rest say other things.
NEAR_DUPLICATES = ["The room was dirty", "The room was very dirty", "The room was really dirty",
                   "The room was so dirty", "The room was quite dirty",
                   "The room was extremely dirty", "The room was too dirty"]
DISTINCT = ["The bed squeaked all night", "Street noise kept us awake",
            "The shower had no hot water", "Our window would not open", "The minibar was empty",
            "The air conditioning was broken", "Check-in took an hour"]


def near_duplicate_tree():
    """Every test asks for pos; VADER gives none of them any positive mass, so it fails all
    fourteen with score 1.0 and by score alone the picks follow row order (near-duplicates
    first). The stale ``vader score`` cells are ignored: prompts score on the model."""
    from lingtest.tasks.adaptive.tree import new_tree

    rows = [{"topic": "/Rooms", "label": "topic_marker"}]
    stale = [(t, 0.5 - 0.01 * k) for k, t in enumerate(NEAR_DUPLICATES)] + \
        [(t, 0.9 - 0.01 * k) for k, t in enumerate(DISTINCT)]
    rows += [{"topic": "/Rooms", "input": text, "output": "pos", "label": "pass",
              "labeler": "me", "vader score": repr(score)} for text, score in stale]
    return new_tree(rows, [f"r{k}" for k in range(len(rows))])


def near_duplicates_in(prompts: list[str]) -> int:
    return sum(f'"{text}"' in prompt for prompt in prompts for text in NEAR_DUPLICATES)


class RecordingGenerator:
    """Records the prompts it is sent; one fixed completion per prompt."""

    generator_id = "recording"

    def __init__(self):
        self.prompts: list[str] = []

    def complete(self, prompts, n, seed):
        self.prompts += prompts
        return [["The lamp was broken"] for _ in prompts]


def test_suggest_fills_prompts_with_unlike_tests_given_the_embedder():
    """No randomness: by score alone the prompt is the seven near-duplicates; with MiniLM's
    diversity, after the best of them come the unlike tests."""
    from lingtest.tasks.adaptive.prompts import PromptSettings, minilm_embed
    from lingtest.tasks.models.sentiment import load_sentiment_model

    vader = load_sentiment_model("vader")
    sent = {}
    for diversity in (True, False):
        generator = RecordingGenerator()
        settings = PromptSettings(slot_randomization=0.0, score_randomization=0.0,
                                  skip_randomization=0.0, prompt_diversity=diversity)
        suggest(near_duplicate_tree(), "/Rooms", generator, vader, seed=3, prompts=1,
                completions=1, settings=settings, embed=minilm_embed() if diversity else None)
        sent[diversity] = generator.prompts
    assert near_duplicates_in(sent[False]) == 7
    assert near_duplicates_in(sent[True]) <= 2
    assert sent[True][0].endswith('"The room was dirty"\n"')  # the best test, last


def test_adapt_diversity_switch_reaches_the_prompts(tmp_path, prefect_harness):
    """`adapt_flow(diversity=...)` decides which tests the generator is shown."""
    from lingtest.tasks.adaptive.tree import write_tree

    sent = {}
    for diversity in (True, False):
        tree_path = write_tree(near_duplicate_tree(), tmp_path / f"rooms-{diversity}.csv")
        with CompletionsServer(script=round_script) as server:
            adapt_flow(str(tree_path), "/Rooms", rounds=1, generator="openai:gpt-test",
                       base_url=server.url, oracle="vader", seed=4, prompts=2, completions=1,
                       binary_labels=["neg", "pos"], diversity=diversity)
            sent[diversity] = [r.body["prompt"] for r in server.generations()]
    assert sent[True] != sent[False]
    assert near_duplicates_in(sent[True]) < near_duplicates_in(sent[False])


def test_lingtest_adapt_passes_its_options_to_the_flow(tmp_path, monkeypatch, mirror):
    """`--no-diversity` and `--oracle-min-confidence` reach `adapt_flow`; defaults on, 0.8;
    `--base-url` reaches it as a MaskedURL (Prefect stores it masked)."""
    from typer.testing import CliRunner

    import lingtest.flows.adapt
    from lingtest.flows.cli import app
    from lingtest.tasks.core.secrets import MaskedURL

    calls = []
    monkeypatch.setattr(lingtest.flows.adapt, "adapt_flow",
                        lambda *a, **kw: calls.append({**kw, "base_url": a[4]}))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    tree = shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tmp_path / "t.csv")
    args = ["adapt", "--topic", "/Rooms", "--oracle", "vader", "--tree", str(tree)]
    for extra in ([], ["--no-diversity", "--oracle-min-confidence", "0.3",
                       "--no-oracle-topic-filter", "--top", "5", "--review-timeout-s", "120"]):
        done = CliRunner().invoke(app, args + extra)
        assert done.exit_code == 0, done.output
    assert [kw["diversity"] for kw in calls] == [True, False]
    assert [kw["top"] for kw in calls] == [20, 5]
    assert [kw["review_timeout_s"] for kw in calls] == [3600, 120]
    assert [kw["oracle_min_confidence"] for kw in calls] == [0.8, 0.3]
    assert [kw["oracle_topic_filter"] for kw in calls] == [True, False]
    url = "http://alice:Zq9%2FXk7@127.0.0.1:9/v1"
    done = CliRunner().invoke(app, args + ["--generator", "openai:gpt-test", "--base-url", url])
    assert done.exit_code == 0, done.output
    assert [kw["base_url"] for kw in calls] == [None, None, MaskedURL(url=url)]


ROOM_LINES = ["The room was spotless", "Sheets were stained", "The bed was comfortable",
              "The minibar was overpriced", "Room service never came", "Lovely view of the sea",
              "The carpet smelled of smoke", "Towels were fresh every day",
              "The walls were paper thin", "Our room was upgraded for free",
              "The shower was lukewarm at best", "Quiet room at the end of the hall",
              "The curtains did not block any light", "Spacious room with a sofa",
              "The safe was broken", "Nice toiletries in the bathroom",
              "The heater made a loud noise", "Room was cleaned daily",
              "There was hair in the sink", "Big windows and lots of light",
              "The TV had no channels", "Comfortable pillows",
              "The door lock was flimsy", "Very cozy little room"]


def room_script(prompt: str, n: int, seed: int) -> list[str]:
    """Prompt k (seed 7 + k) gets lines 12k .. 12k + n - 1: every completion distinct."""
    return [ROOM_LINES[((seed - 7) * 12 + k) % len(ROOM_LINES)] for k in range(n)]


def test_suggest_ranks_all_prompts_and_completions_by_failure_score(mirror):
    """2 prompts × 12 completions: the form shows the 20 highest failure scores of all 24
    (not the first 20 generated), highest first, with the score in the table."""
    from lingtest.tasks.adaptive.generators import HTTPGenerator
    from lingtest.tasks.adaptive.prompts import PromptSettings
    from lingtest.tasks.models.llm import LLMSettings
    from lingtest.tasks.models.sentiment import VaderModel

    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")
    settings = PromptSettings(prompt_diversity=False)
    shown = {}
    with CompletionsServer(script=room_script) as server:
        generator = HTTPGenerator("gpt-test", server.url, settings=LLMSettings(retries=0))
        for top in (20, 100):
            shown[top] = suggest(tree, "/Rooms", generator, VaderModel(), seed=7, prompts=2,
                                 completions=12, settings=settings, top=top,
                                 binary_labels=("neg", "pos"))
    everything = shown[100]
    assert sorted(everything["input"]) == sorted(ROOM_LINES)  # 24 generated, all scored
    assert len(shown[20]) == 20
    scores = list(shown[20]["score"])
    assert scores == sorted(scores, reverse=True) and 0 <= scores[-1] <= scores[0] <= 1
    assert list(shown[20]["input"]) == list(everything["input"][:20])
    generated_first = set(ROOM_LINES[:20])
    assert set(shown[20]["input"]) != generated_first  # ranked, not generation order
    # VADER reads "Sheets were stained" as neutral: the /Rooms tests ask for neg or pos,
    # so it fails it (score near 1) and it ranks above "Lovely view of the sea" (pos, right)
    by_input = everything.set_index("input")
    assert by_input.loc["Sheets were stained", "output"] == "neutral"
    assert by_input.loc["Sheets were stained", "score"] > by_input.loc[
        "Lovely view of the sea", "score"]
    table = review_markdown(shown[20], "/Rooms", 1, "vader")
    assert "| # | input | vader output | failure score |" in table
    first = shown[20].iloc[0]
    assert f"| 1 | {first['input']} | {first['output']} | {first['score']:.2f} |" in table
