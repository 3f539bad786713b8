"""`lingtest review` as a person uses it: the command on a free port against a copy of the
hotel tree (VADER under test, the scripted completions endpoint as generator, 2 prompts × 4
completions), headless Chromium on its page: into /Rooms, suggestions ranked by failure
score, one edited and filed as failing, a new test written (its score appears as it is
typed and once filed), a test moved to /Service, /Rooms renamed. The CSV on disk then holds
exactly those changes and round-trips through tree.py. Screenshots in the test's tmp_path."""
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

import httpx
import pytest
from browser import RENDER_WAIT_S, Browser, start_chromium, stop_chromium
from test_adaptive_generators import CompletionsServer
from test_adaptive_review_flow import room_script
from test_ui_server import free_port

from tasks.adaptive.tree import read_tree, tree_csv
from tasks.core.paths import PACKAGE_ROOT

SHEETS = "02076434c5fc4a389f127e542c479c64"  # "Sheets didn't seem clean", in /Rooms
EDITED = "The sheets were stained and smelled of smoke"
WRITTEN = "The bathroom was disgusting"
START_S = 120

SUGGESTIONS = """[...document.querySelectorAll('#sug-list .sug')].map(li => ({
    sid: li.dataset.sid, text: li.querySelector('.sug-text').value,
    score: parseFloat(li.querySelector('.model .score').innerText)}))"""
TEST_ROW = """[...document.querySelectorAll('tr.test')].find(tr =>
    tr.querySelector('td.input').innerText.startsWith(%s))"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(PACKAGE_ROOT), HF_HUB_OFFLINE="1")
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
        await b.wait_for("document.getElementById('topic-name')?.innerText === 'Rooms'",
                         "the /Rooms page")
        await b.evaluate("document.getElementById('suggest').click()")
        seen["ranked"] = await b.wait_for(
            f"(s => s.length === 8 && s)({SUGGESTIONS})", "8 suggestions listed")
        await b.screenshot(shots / "2-suggestions.png")
        await type_into(b, "#filter", "room")
        seen["filtered"] = await b.evaluate(
            "[...document.querySelectorAll('#sug-list .sug')].filter(li => !li.hidden)"
            ".map(li => li.querySelector('.sug-text').value)")
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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_review_in_the_browser(mirror: Path, tmp_path: Path) -> None:
    source = mirror / "adatest" / "imdb_hotel_conversion.csv"
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", project / "params.yaml")
    tree_path = shutil.copy(source, project / "hotel.csv")
    port = free_port()
    log = tmp_path / "review.log"
    review = chromium = None
    started = time.monotonic()
    try:
        with CompletionsServer(script=room_script) as completions:
            review = subprocess.Popen(
                [sys.executable, "-m", "tasks.core.cli", "review", "hotel.csv", "--port",
                 str(port), "--model", "vader", "--generator", "openai:gpt-test",
                 "--base-url", completions.url, "--prompts", "2", "--completions", "4",
                 "--reviewer", "ada", "--seed", "7"],
                cwd=project, env=_env(), stdout=log.open("w"), stderr=subprocess.STDOUT)
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
            review.send_signal(signal.SIGINT)  # Ctrl-C
            try:
                review.wait(timeout=20)
            except subprocess.TimeoutExpired:
                review.kill()
                review.wait(timeout=10)
    print(f"review session in the browser: {time.monotonic() - started:.1f} s")
    assert review.returncode == 0, log.read_text()

    assert seen["filtered"] == [s["text"] for s in seen["ranked"] if "room" in s["text"].lower()]
    assert 0 < len(seen["filtered"]) < 8
    scores = [s["score"] for s in seen["ranked"]]
    assert scores == sorted(scores, reverse=True), seen["ranked"]
    assert len(seen["after_accept"]) == 7
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
    added = after.loc[new].set_index("input")
    assert sorted(added.index) == sorted([EDITED, WRITTEN])
    assert set(added["topic"]) == {"/Bedrooms"} and set(added["label"]) == {"fail"}
    assert set(added["labeler"]) == {"ada"}
    provenance = json.loads(added.at[EDITED, "provenance"])
    assert provenance["edited_from"] == seen["ranked"][0]["text"]
    assert provenance["round"] == 1 and provenance["generator"] == "openai:gpt-test"
    assert json.loads(added.at[WRITTEN, "provenance"]) == {"written": True}
    assert tree_csv(read_tree(tree_path)) == tree_path.read_text()
    for shot in sorted(tmp_path.glob("*.png")):
        assert shot.stat().st_size > 10_000
