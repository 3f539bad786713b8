"""`lingtest review` as a person uses it: the command on a free port against a copy of the
hotel tree (VADER driving, MiniLM-SST2 beside it; the scripted completions endpoint and
SmolLM2 as generators, 2 prompts × 4 completions), headless Chromium on its page: into
/Rooms, suggestions ranked by failure score, the filter over suggestions and tests, one
edited and filed as failing, the driving model switched to MiniLM-SST2 (the list re-ranked,
the next row filed with its output), subtopic names from SmolLM2 and one created in one
click, a new test written (its score appears as it is typed and once filed), a test moved
to /Service, /Rooms renamed. The CSV on disk then holds exactly those changes and
round-trips through tree.py; SIGTERM ends the command and its `review-session` flow run is
Completed on the test session's Prefect server, its artifact listing the filed rows.
Screenshots in the test's tmp_path."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import urllib.parse

import httpx
import pytest
from browser import RENDER_WAIT_S, Browser, start_chromium, stop_chromium
from test_adaptive_generators import CompletionsServer
from test_adaptive_review_app import minilm_root  # noqa: F401
from test_adaptive_review_flow import room_script
from test_ui_server import free_port

from lingtest.tasks.adaptive.tree import read_tree, tree_csv
from lingtest.tasks.core.paths import PACKAGE_ROOT
from lingtest.tasks.models.sentiment import VaderModel, load_sentiment_model

SHEETS = "02076434c5fc4a389f127e542c479c64"  # "Sheets didn't seem clean", in /Rooms
EDITED = "The sheets were stained and smelled of smoke"
WRITTEN = "The bathroom was disgusting"
START_S = 120
GENERATE_WAIT_S = 240  # SmolLM2 loads and writes 18 names: 10 s idle, minutes on a busy CPU

SUGGESTIONS = """[...document.querySelectorAll('#sug-list .sug')].map(li => ({
    sid: li.dataset.sid, text: li.querySelector('.sug-text').value,
    score: parseFloat(li.querySelector('.model .score').innerText)}))"""
TEST_ROW = """[...document.querySelectorAll('tr.test')].find(tr =>
    tr.querySelector('td.input').innerText.startsWith(%s))"""


MINILM = "lingtest/minilm-sst2"
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _env(api_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(PACKAGE_ROOT), HF_HUB_OFFLINE="1", PREFECT_API_URL=api_url)
    return env


def wait_until_serving(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"lingtest review exited ({process.returncode}):\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"lingtest review did not serve {url} within {START_S} s:\n{log.read_text()}")


async def type_into(browser: Browser, selector: str, text: str) -> None:
    """Focus the field, select what it holds and type ``text`` over it (key events)."""
    await browser.evaluate(f"(e => {{ e.focus(); e.select(); }})"
                           f"(document.querySelector({json.dumps(selector)}))")
    await browser.call("Input.insertText", text=text)


async def review_in_browser(websocket_url: str, url: str, shots: Path) -> dict:
    import websockets

    seen: dict = {}
    async with websockets.connect(websocket_url, max_size=None) as websocket:
        b = Browser(websocket)
        text = await b.text_once_shown(url, ["Rooms", "Service", "fail ·"])
        seen["root"] = text
        await b.screenshot(shots / "1-root.png")
        await b.evaluate("document.querySelector('a.folder[data-topic=\"/Rooms\"]').click()")
        # a real navigation: the new page is parsed in pieces, so wait until it is whole
        await b.wait_for("document.readyState === 'complete' && "
                         "document.getElementById('topic-name')?.innerText === 'Rooms'",
                         "the /Rooms page")
        await b.evaluate("document.getElementById('suggest').click()")
        seen["ranked"] = await b.wait_for(
            f"(s => s.length === 8 && s)({SUGGESTIONS})", "8 suggestions listed")
        await b.screenshot(shots / "2-suggestions.png")
        await type_into(b, "#filter", "room")
        seen["filtered"] = await b.evaluate(  # shown: laid out, not just flagged hidden
            "[...document.querySelectorAll('#sug-list .sug')].filter(li => li.offsetParent)"
            ".map(li => li.querySelector('.sug-text').value)")
        seen["filtered_count"] = await b.evaluate(
            "document.querySelector('.sug-head .count').innerText")
        seen["filtered_tests"] = await b.evaluate(
            "[...document.querySelectorAll('tr.test')].map(tr => [!tr.offsetParent, "
            "tr.querySelector('td.input').innerText])")
        await b.screenshot(shots / "2b-filtered.png")
        await b.evaluate("(e => { e.value = ''; e.dispatchEvent(new Event('input', "
                         "{bubbles: true})); })(document.getElementById('filter'))")

        # edit the best-ranked suggestion (its score follows the typing), file it as failing
        top = seen["ranked"][0]
        item = f"document.querySelector('.sug[data-sid=\"{top['sid']}\"]')"
        await type_into(b, f".sug[data-sid=\"{top['sid']}\"] .sug-text", EDITED)
        await b.wait_for(f"{item}.dataset.previewed === {json.dumps(EDITED)}",
                         "the edited suggestion re-scored")
        await b.screenshot(shots / "3-edited.png")
        await b.evaluate(f"{item}.querySelector('button[data-verdict=fail]').click()")
        await b.wait_for(f"!!({TEST_ROW % json.dumps(EDITED)})", "the filed test listed")
        seen["after_accept"] = await b.evaluate(SUGGESTIONS)
        seen["filed_row_class"] = await b.evaluate(f"({TEST_ROW % json.dumps(EDITED)}).className")
        await b.screenshot(shots / "3b-filed.png")

        # switch the driving model: the list re-ranked by MiniLM-SST2, its output filed
        await b.evaluate(f"""(s => {{ s.value = {json.dumps(MINILM)};
            s.dispatchEvent(new Event('change', {{bubbles: true}})); }})
            (document.getElementById('driving'))""")
        seen["reranked"] = await b.wait_for(
            f"document.querySelector('.suggestions p.hint b')?.innerText === "
            f"{json.dumps(MINILM)} && "
            f"{SUGGESTIONS}", "the suggestions ranked by the new driving model")
        seen["first_cell"] = await b.evaluate(
            "document.querySelector('#sug-list .model').dataset.model")
        await b.screenshot(shots / "3c-driving-minilm.png")
        pick = seen["reranked"][0]
        await b.evaluate(f"document.querySelector('.sug[data-sid=\"{pick['sid']}\"] "
                         f"button[data-verdict=pass]').click()")
        await b.wait_for(f"!!({TEST_ROW % json.dumps(pick['text'])})", "the MiniLM pick filed")

        # subtopic names from SmolLM2, one created in one click
        await b.evaluate(f"""(s => {{ s.value = {json.dumps(SMOLLM2)};
            s.dispatchEvent(new Event('change', {{bubbles: true}})); }})
            (document.getElementById('generator'))""")
        await b.wait_for(f"document.getElementById('suggest-topics').title.includes("
                         f"{json.dumps(SMOLLM2)})", "the page re-rendered with SmolLM2 chosen")
        # what the session answers the page's request with, to compare with what it shows
        await b.evaluate("""(orig => { window.fetch = async (url, opts) => {
            const response = await orig(url, opts);
            if (String(url).endsWith('/api/topic/suggest'))
                window.suggestedNames = (await response.clone().json()).names;
            return response; }; })(window.fetch)""")
        await b.evaluate("document.getElementById('suggest-topics').click()")
        seen["topic_names"] = await b.wait_for(
            "(n => n.length && n)([...document.querySelectorAll('button.topic-name')]"
            ".map(b => b.dataset.name))", "subtopic names suggested",
            timeout_s=GENERATE_WAIT_S)
        await b.screenshot(shots / "3d-topic-names.png")
        seen["suggested_names"] = await b.evaluate("window.suggestedNames")
        await b.evaluate("document.querySelector('button.topic-name').click()")
        name = seen["topic_names"][0]
        seen["created_folder"] = await b.wait_for(
            f"[...document.querySelectorAll('a.folder .fname')].some(f => f.innerText === "
            f"{json.dumps(name)})",
            "the suggested subtopic created")
        await b.screenshot(shots / "3e-topic-created.png")

        # write a new test: its score shows while typing, then on the filed row
        await type_into(b, "#new-text", WRITTEN)
        seen["preview"] = await b.wait_for(
            "document.querySelector('#new-preview .model .score')?.innerText",
            "the new test's score while typing")
        await b.screenshot(shots / "4-typed.png")
        await b.evaluate("document.querySelector('button[data-action=add][data-verdict=fail]')"
                         ".click()")
        seen["written_score"] = await b.wait_for(
            f"({TEST_ROW % json.dumps(WRITTEN)})?.querySelector('.model .score').innerText",
            "the written test listed with its score")

        # move a test to /Service
        await b.evaluate(f"""(tr => {{ const s = tr.querySelector('select.move');
            s.value = '/Service'; s.dispatchEvent(new Event('change', {{bubbles: true}})); }})
            ({TEST_ROW % json.dumps("Sheets didn't seem clean")})""")
        await b.wait_for(f"!({TEST_ROW % json.dumps('Sheets didn')})",
                         "the moved test gone from /Rooms")
        await b.screenshot(shots / "5-moved.png")

        # rename the topic
        await type_into(b, "#rename-topic", "Bedrooms")
        await b.evaluate("document.querySelector('button[data-action=\"rename-topic\"]')"
                         ".click()")
        await b.wait_for("document.getElementById('topic-name')?.innerText === 'Bedrooms'"
                         " && location.search === '?topic=%2FBedrooms'", "the renamed topic")
        seen["renamed"] = await b.evaluate("document.body.innerText")
        await b.screenshot(shots / "6-renamed.png")
    return seen


def review_run(name_prefix: str):
    """The `review-session` flow run whose name starts with ``name_prefix``, and the last
    version of its artifact."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                FlowRunFilter, FlowRunFilterName)

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            name=FlowRunFilterName(like_=name_prefix)))
        assert len(runs) == 1, [r.name for r in runs]
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[runs[0].id])))
    return runs[0], max(artifacts, key=lambda a: a.created).data


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_review_in_the_browser(mirror: Path, tmp_path: Path, minilm_root: Path,  # noqa: F811
                               prefect_harness) -> None:
    from prefect.settings import PREFECT_API_URL

    source = mirror / "adatest" / "imdb_hotel_conversion.csv"
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "models").symlink_to(minilm_root / "data" / "models")
    shutil.copy(PACKAGE_ROOT / "params.yaml", project / "params.yaml")
    tree_path = shutil.copy(source, project / "hotel.csv")
    port = free_port()
    log = tmp_path / "review.log"
    review = chromium = None
    started = time.monotonic()
    try:
        with CompletionsServer(script=room_script) as completions:
            review = subprocess.Popen(
                [sys.executable, "-m", "lingtest.flows.cli", "review", "hotel.csv", "--port",
                 str(port), "--model", "vader", "--model", MINILM,
                 "--generator", "openai:gpt-test", "--generator", SMOLLM2,
                 "--base-url", completions.url, "--prompts", "2", "--completions", "4",
                 "--reviewer", "grace", "--seed", "7"],
                cwd=project, env=_env(PREFECT_API_URL.value()), stdout=log.open("w"),
                stderr=subprocess.STDOUT)
            url = f"http://127.0.0.1:{port}/"
            wait_until_serving(url, review, log)
            assert f"at {url}" in log.read_text()
            profile = tmp_path / "chromium-profile"
            profile.mkdir()
            chromium, websocket_url = start_chromium(profile)
            seen = asyncio.run(asyncio.wait_for(review_in_browser(websocket_url, url, tmp_path),
                                                timeout=10 * RENDER_WAIT_S))
    finally:
        if chromium is not None:
            stop_chromium(chromium)
        if review is not None and review.poll() is None:
            review.send_signal(signal.SIGTERM)  # as a service manager stops it
            try:
                review.wait(timeout=20)
            except subprocess.TimeoutExpired:
                review.kill()
                review.wait(timeout=10)
    print(f"review session in the browser: {time.monotonic() - started:.1f} s")
    assert review.returncode == 0, log.read_text()

    assert seen["filtered"] == [s["text"] for s in seen["ranked"] if "room" in s["text"].lower()]
    assert 0 < len(seen["filtered"]) < 8
    assert seen["filtered_count"] == f"{len(seen['filtered'])} of 8 shown · round 1"
    hidden = {text for gone, text in seen["filtered_tests"] if gone}
    assert hidden == {text for _, text in seen["filtered_tests"] if "room" not in text.lower()}
    assert 0 < len(hidden) < len(seen["filtered_tests"])
    reranked = [s["score"] for s in seen["reranked"]]
    assert reranked == sorted(reranked, reverse=True) and seen["first_cell"] == MINILM
    assert [s["text"] for s in seen["reranked"]] != [s["text"] for s in seen["after_accept"]]
    name = seen["topic_names"][0]
    # the page shows exactly the session's names, in its order (the names themselves:
    # test_adaptive_review_app pins them to a direct seeded call)
    assert seen["topic_names"] == seen["suggested_names"]
    assert "Bedrooms" not in seen["topic_names"]
    scores = [s["score"] for s in seen["ranked"]]
    assert scores == sorted(scores, reverse=True), seen["ranked"]
    assert len(seen["after_accept"]) == 7 and len(seen["reranked"]) == 7
    assert seen["filed_row_class"] == "test fail recent"  # highlighted, scrolled into view
    assert float(seen["preview"]) >= 0 and float(seen["written_score"]) > 0.5
    assert "Bedrooms" in seen["renamed"]

    before, after = read_tree(source).frame, read_tree(tree_path).frame
    expected = before.copy()
    expected["topic"] = expected["topic"].replace({"/Rooms": "/Bedrooms"})
    expected.loc[SHEETS, "topic"] = "/Service"
    new = after.index.difference(before.index)
    # old rows: only the move and the rename; the new provenance column empty for them
    assert after.loc[before.index, list(before.columns)].equals(expected)
    assert list(after.columns) == [*before.columns, "provenance"]
    assert (after.loc[before.index, "provenance"] == "").all()
    assert list(after.index[:len(before)]) == list(before.index)  # in their order
    marker = after.loc[new][after.loc[new, "label"] == "topic_marker"]
    assert list(marker["topic"]) == ["/Bedrooms/" + urllib.parse.quote(name, safe="")]
    added = after.loc[new.difference(marker.index)].set_index("input")
    picked = seen["reranked"][0]["text"]
    assert sorted(added.index) == sorted([EDITED, picked, WRITTEN])
    assert set(added["topic"]) == {"/Bedrooms"}
    assert dict(added["label"]) == {EDITED: "fail", picked: "pass", WRITTEN: "fail"}
    assert set(added["labeler"]) == {"grace"}
    # the filed rows' output: the driving model's at the time (VADER, then MiniLM-SST2)
    assert added.at[EDITED, "output"] == VaderModel().predict([EDITED])[0]
    minilm = load_sentiment_model(MINILM, (0.5, 0.5), root=minilm_root)  # as the CLI loads it
    assert added.at[picked, "output"] == minilm.predict([picked])[0]
    assert added.at[WRITTEN, "output"] == minilm.predict([WRITTEN])[0]
    provenance = json.loads(added.at[EDITED, "provenance"])
    assert provenance["edited_from"] == seen["ranked"][0]["text"]
    assert provenance["round"] == 1 and provenance["generator"] == "openai:gpt-test"
    assert json.loads(added.at[WRITTEN, "provenance"]) == {"written": True}
    assert tree_csv(read_tree(tree_path)) == tree_path.read_text()
    for shot in sorted(tmp_path.glob("*.png")):
        assert shot.stat().st_size > 10_000

    # SIGTERM closed the session's flow run; its artifact lists the filed rows
    run, artifact = review_run("hotel.csv-grace-%")
    assert run.state.is_completed(), (run.state, log.read_text())
    assert {"review", "tree:hotel.csv", "reviewer:grace"} <= set(run.tags)
    for text in (EDITED, picked, WRITTEN):
        assert text in artifact, artifact
    rooms = int(((before["topic"] == "/Rooms") & (before["label"] != "topic_marker")).sum())
    assert (f"**2** accepted · **1** written · **0** relabelled · **{rooms}** moved · "
            "**0** deleted · **1** topics created") in artifact  # renamed: all of /Rooms moved

