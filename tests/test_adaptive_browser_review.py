"""`lingtest adapt` reviewed in the browser: headless Chromium opens the paused run in the
Prefect UI served by `lingtest ui` on a non-default port, clicks Resume, picks suggestions in
the "Resume Flow Run" dialog's form and submits; the run finishes and the picks are in the tree.

The UI is the one `prefect server start` serves by default (Prefect 3.8.8: the Vue UI, whose
run page has a Resume button; the dialog and its form are generated from the run-input
schema). The form's multi-selects are native ``<select multiple>`` elements: the test selects
options and sends the ``change`` event a user's pick sends.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_adaptive_generators import CompletionsServer
from test_adaptive_review import round_script
from test_ui_browser import RENDER_WAIT_S, Browser, _start_chromium, _stop_chromium
from test_ui_server import free_port

from tasks.adaptive.tree import read_tree
from tasks.core.paths import PACKAGE_ROOT, Workspace
from tasks.core.server import start_server, stop_server

PICKS = {"Fail": "Room smelled like smoke", "Passing": "The towels were dirty"}
WAIT_S = 120

ADAPT = """
import json, sys
from flows.adapt import adapt_flow
name, tree, url = sys.argv[1:4]
history = adapt_flow.with_options(flow_run_name=name)(
    tree, "/Rooms", rounds=1, generator="openai:gpt-test", base_url=url, model="vader",
    reviewer="ada", seed=7, prompts=2, completions=3, binary_labels=["neg", "pos"],
    poll_interval_s=1, review_timeout_s=300)
print(json.dumps(history))
"""

# Select ``value`` in the multi-select whose field label starts with ``label``.
PICK_JS = """((label, value) => {
  const field = [...document.querySelectorAll('.schema-form-property')].find(
      f => f.querySelector('.schema-form-property__label').innerText.startsWith(label));
  const select = field.querySelector('select[multiple]');
  const option = [...select.options].find(o => o.value === value);
  option.selected = true;
  select.dispatchEvent(new Event('input', {bubbles: true}));
  select.dispatchEvent(new Event('change', {bubbles: true}));
  return [...select.selectedOptions].map(o => o.value);
})(%s, %s)"""
CLICK_JS = """[...document.querySelectorAll('%s button')].find(
    b => b.innerText.trim() === %s).click()"""


def paused_run_id(api_url: str, name: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        runs = httpx.post(f"{api_url}/flow_runs/filter", timeout=10,
                          json={"flow_runs": {"name": {"any_": [name]}}}).json()
        if runs and runs[0]["state_type"] == "PAUSED":
            return runs[0]["id"]
        time.sleep(0.5)
    pytest.fail(f"flow run {name} did not pause within {WAIT_S} s")


async def review_in_browser(websocket_url: str, run_url: str, shots: Path) -> list[list[str]]:
    """Open the run, click Resume, pick ``PICKS`` in the dialog, submit; returns the picks as
    the selects hold them."""
    import websockets

    async with websockets.connect(websocket_url, max_size=None) as websocket:
        browser = Browser(websocket)
        await browser.text_once_shown(run_url, ["Paused", "Resume"])
        await browser.call("Runtime.evaluate", expression=CLICK_JS % ("", '"Resume"'))
        await wait_for_text(browser, ["Resume Flow Run", *PICKS.values()])
        await browser.screenshot(shots / "dialog.png")
        held = []
        for label, value in PICKS.items():
            result = await browser.call("Runtime.evaluate", returnByValue=True,
                                        expression=PICK_JS % (json.dumps(label),
                                                              json.dumps(value)))
            held.append(result["result"]["value"])
        await browser.screenshot(shots / "filled.png")
        await browser.call("Runtime.evaluate",
                           expression=CLICK_JS % (".p-modal__footer", '"Submit"'))
        await wait_for_text(browser, ["Running"], absent=["Resume Flow Run"])
        return held


async def wait_for_text(browser: Browser, shown: list[str], absent: list[str] = ()) -> str:
    deadline = time.monotonic() + RENDER_WAIT_S
    text = ""
    while time.monotonic() < deadline:
        result = await browser.call("Runtime.evaluate", returnByValue=True,
                                    expression="document.body.innerText")
        text = result["result"].get("value", "")
        if all(s in text for s in shown) and not any(s in text for s in absent):
            return text
        await asyncio.sleep(0.3)
    pytest.fail(f"the page did not show {shown} (without {list(absent)}) within "
                f"{RENDER_WAIT_S} s; page text:\n{text}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_review_a_round_in_the_prefect_ui(tmp_path: Path, mirror: Path) -> None:
    workspace = Workspace(tmp_path / "project")
    workspace.root.mkdir()
    tree_path = workspace.root / "inputs" / "adaptive" / "hotel.csv"
    tree_path.parent.mkdir(parents=True)
    shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tree_path)
    before = read_tree(tree_path)
    port = free_port()
    assert port != 4200
    server, api_url = start_server(workspace, "127.0.0.1", port)
    chromium = adapt = None
    try:
        ui_url = api_url.removesuffix("/api")
        # the UI asks this endpoint where its API is: the server's own port, not 4200
        settings = httpx.get(f"{ui_url}/ui-settings", timeout=10).raise_for_status().json()
        assert settings["api_url"] == api_url
        with CompletionsServer(script=round_script) as completions:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            env.update(PREFECT_API_URL=api_url, PYTHONPATH=str(PACKAGE_ROOT),
                       PREFECT_HOME=str(workspace.prefect_home), HF_HUB_OFFLINE="1")
            name = f"adapt-browser-{time.monotonic_ns()}"
            adapt = subprocess.Popen([sys.executable, "-c", ADAPT, name, str(tree_path),
                                      completions.url], cwd=PACKAGE_ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            run_id = paused_run_id(api_url, name)
            profile = tmp_path / "chromium-profile"
            profile.mkdir()
            chromium, websocket_url = _start_chromium(profile)
            held = asyncio.run(asyncio.wait_for(review_in_browser(
                websocket_url, f"{ui_url}/runs/flow-run/{run_id}", tmp_path),
                timeout=4 * RENDER_WAIT_S))
            out, err = adapt.communicate(timeout=WAIT_S)
        assert adapt.returncode == 0, err[-3000:]
    finally:
        if adapt is not None and adapt.poll() is None:
            adapt.kill()
        if chromium is not None:
            _stop_chromium(chromium)
        stop_server(server, workspace)
    assert held == [[PICKS["Fail"]], [PICKS["Passing"]]]
    history = json.loads(out.strip().splitlines()[-1])
    assert history[0]["written"] == 2
    tree = read_tree(tree_path)
    added = tree.frame.loc[tree.frame.index.difference(before.frame.index)]
    tests = added[added["label"] != "topic_marker"].set_index("input")
    assert tests.loc[PICKS["Fail"], "label"] == "fail"
    assert tests.loc[PICKS["Passing"], "label"] == "pass"
    assert set(tests["labeler"]) == {"ada"} and len(tests) == 2
    for shot in ("dialog.png", "filled.png"):
        assert (tmp_path / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / shot).stat().st_size > 10_000
