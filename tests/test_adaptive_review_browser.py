"""`lingtest adapt` reviewed as a person does it, in the UI a browser lands in.

`lingtest ui` runs on a non-default port; `lingtest adapt` (the scripted completions server as
generator, VADER under test) pauses at round 1. Headless Chromium opens the paused run in the
V2 (React) UI, which Prefect 3.8.8 serves to a browser without a saved preference: the run
menu (a Radix dropdown, opened on ``pointerdown``, not ``click``) → Resume → the "Resume Flow
Run" dialog, whose form is generated from the run-input schema (each multi-select a popover
listbox) → one pick under Fail, one under Passing → Resume. The run completes and the picks
are rows of the tree labelled by the reviewer.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from browser import RENDER_WAIT_S, Browser, start_chromium, stop_chromium
from test_adaptive_generators import CompletionsServer
from test_adaptive_review import round_script
from test_ui_server import free_port

from lingtest.tasks.adaptive.tree import read_tree
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.runtime import ui_state_file

PICKS = {"Fail": "Room smelled like smoke", "Passing": "The towels were dirty"}
WAIT_S = 120

# The run page's menu (outside any dialog); Radix opens it on pointerdown. Once it is open,
# its Resume item is clicked.
RESUME_FROM_MENU = """(() => {
  const item = [...document.querySelectorAll('[role=menuitem]')]
      .find(i => i.innerText.trim() === 'Resume');
  if (item) { item.click(); return true; }
  const trigger = [...document.querySelectorAll('button[data-slot="dropdown-menu-trigger"]')]
      .find(b => b.innerText.trim() === 'Open menu' && !b.closest('[role=dialog]'));
  if (trigger && trigger.getAttribute('aria-expanded') !== 'true') {
    trigger.dispatchEvent(new PointerEvent('pointerdown', {bubbles: true, cancelable: true,
        button: 0, pointerType: 'mouse', isPrimary: true}));
  }
  return false;
})()"""
DIALOG = """[...document.querySelectorAll('[role=dialog]')]
    .find(d => d.innerText.includes('Resume Flow Run'))"""
DIALOG_READY = """(() => { const d = %s;
  return !!d && %s.every(t => d.innerText.includes(t))
      && !!d.querySelector('button[aria-label="Select Fail"]'); })()"""
# One pick: open the field's listbox, click the option (then the poll ends).
PICK = """((label, value) => {
  const trigger = (%s).querySelector(`button[aria-label="Select ${label}"]`);
  const option = [...document.querySelectorAll('[role=option]')]
      .find(o => o.innerText.trim() === value);
  if (option) { option.click(); return true; }
  if (trigger.getAttribute('aria-expanded') !== 'true') trigger.click();
  return false;
})(%s, %s)"""
# Close the field's listbox; then the values the field shows as chosen.
CHOSEN = """(label => {
  const trigger = (%s).querySelector(`button[aria-label="Select ${label}"]`);
  if (trigger.getAttribute('aria-expanded') === 'true') { trigger.click(); return null; }
  return {values: trigger.closest('fieldset').innerText.split('\\n').map(s => s.trim())
      .filter(s => s && s !== 'Select')};
})(%s)"""
SUBMIT = """[...(%s).querySelectorAll('button')].find(b => b.innerText.trim() === 'Resume')
    .click()""" % DIALOG


@dataclass
class LingtestUI:
    """A running `lingtest ui`: its project, port and URLs."""

    root: Path
    port: int
    ui_url: str
    api_url: str


def _env() -> dict[str, str]:
    """A user's shell: no Prefect settings (the commands find `lingtest ui` themselves)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(PACKAGE_ROOT), HF_HUB_OFFLINE="1")
    return env


@pytest.fixture(scope="module")
def lingtest_ui(tmp_path_factory):
    """`lingtest ui --port <free port>` in a fresh project, until the module's tests end."""
    root = tmp_path_factory.mktemp("project")
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    port = free_port()
    assert port != 4200
    log = root / "ui.log"
    process = subprocess.Popen([sys.executable, "-m", "lingtest.flows.cli", "ui", "--port",
                                str(port)], cwd=root, env=_env(), stdout=log.open("w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    state = ui_state_file(Workspace(root))
    try:
        deadline = time.monotonic() + WAIT_S
        while not state.is_file():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"lingtest ui did not start within {WAIT_S} s:\n"
                            f"{log.read_text()[-3000:]}")
            time.sleep(0.5)
        ui_url = f"http://127.0.0.1:{port}"
        yield LingtestUI(root, port, ui_url, f"{ui_url}/api")
    finally:
        server_pid = json.loads(state.read_text())["pid"] if state.is_file() else None
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: `lingtest ui` stops its server
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            if server_pid is not None:
                os.killpg(server_pid, signal.SIGKILL)
            process.wait(timeout=10)


def test_lingtest_ui_on_another_port_points_its_ui_at_that_port(lingtest_ui):
    """The UI asks ``/ui-settings`` where its API is; Prefect's default is port 4200 whatever
    port the server listens on, so without ``PREFECT_UI_API_URL`` every page would fail."""
    settings = httpx.get(f"{lingtest_ui.ui_url}/ui-settings", timeout=10)
    settings = settings.raise_for_status().json()
    assert settings["api_url"].endswith(f":{lingtest_ui.port}/api"), settings
    assert settings["api_url"] == lingtest_ui.api_url
    # the UI a browser without a saved preference gets, the one the review test drives
    assert settings["default_ui"] == "v2", settings


def paused_adapt_run(api_url: str, tree_path: Path, adapt: subprocess.Popen, log: Path) -> str:
    """The id of the `adapt` run on ``tree_path`` once it is paused (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if adapt.poll() is not None:
            pytest.fail(f"lingtest adapt exited ({adapt.returncode}):\n{log.read_text()[-3000:]}")
        runs = httpx.post(f"{api_url}/flow_runs/filter", timeout=10, json={
            "flow_runs": {"state": {"type": {"any_": ["PAUSED"]}}},
            "flows": {"name": {"any_": ["adapt"]}}}).raise_for_status().json()
        for run in runs:
            if run["parameters"]["tree_path"] == str(tree_path):
                return run["id"]
        time.sleep(0.5)
    pytest.fail(f"the adapt run did not pause within {WAIT_S} s:\n{log.read_text()[-3000:]}")


async def review_in_browser(websocket_url: str, run_url: str, shots: Path
                            ) -> dict[str, list[str]]:
    """Open the run, Resume from its menu, pick ``PICKS`` in the dialog, submit; returns
    what each field showed as chosen before the submit."""
    import websockets

    async with websockets.connect(websocket_url, max_size=None) as websocket:
        browser = Browser(websocket)
        await browser.text_once_shown(run_url, ["Paused"])
        await browser.wait_for(RESUME_FROM_MENU, "the run menu's Resume item")
        await browser.wait_for(DIALOG_READY % (DIALOG, json.dumps(list(PICKS.values()))),
                               "the 'Resume Flow Run' dialog with its form")
        await browser.screenshot(shots / "dialog.png")
        chosen = {}
        for label, value in PICKS.items():
            await browser.wait_for(PICK % (DIALOG, json.dumps(label), json.dumps(value)),
                                   f"{value!r} in the {label} list")
            shown = await browser.wait_for(CHOSEN % (DIALOG, json.dumps(label)),
                                           f"the {label} list closed")
            chosen[label] = shown["values"]
        await browser.screenshot(shots / "filled.png")
        await browser.evaluate(SUBMIT)
        await browser.wait_for(f"!({DIALOG})", "the dialog closed after Resume")
        return chosen


def wait_for_state(api_url: str, run_id: str, state_type: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    run = {}
    while time.monotonic() < deadline:
        run = httpx.get(f"{api_url}/flow_runs/{run_id}", timeout=10).raise_for_status().json()
        if run["state_type"] == state_type:
            return run
        time.sleep(0.5)
    pytest.fail(f"flow run {run_id} is {run.get('state_type')}, not {state_type}, after "
                f"{WAIT_S} s")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_review_a_round_in_the_v2_ui(lingtest_ui, tmp_path: Path, mirror: Path) -> None:
    tree_path = lingtest_ui.root / "inputs" / "adaptive" / "hotel.csv"
    source = mirror / "adatest" / "imdb_hotel_conversion.csv"
    before = read_tree(source)
    log = tmp_path / "adapt.log"
    chromium = adapt = None
    try:
        with CompletionsServer(script=round_script) as completions:
            adapt = subprocess.Popen(
                [sys.executable, "-m", "lingtest.flows.cli", "adapt", "--topic", "/Rooms",
                 "--tree", "inputs/adaptive/hotel.csv", "--start-from", str(source),
                 "--generator", "openai:gpt-test", "--base-url", completions.url,
                 "--model", "vader", "--reviewer", "ada", "--seed", "7"],
                cwd=lingtest_ui.root, env=_env(), stdout=log.open("w"),
                stderr=subprocess.STDOUT)
            run_id = paused_adapt_run(lingtest_ui.api_url, tree_path, adapt, log)
            profile = tmp_path / "chromium-profile"
            profile.mkdir()
            chromium, websocket_url = start_chromium(profile)
            chosen = asyncio.run(asyncio.wait_for(review_in_browser(
                websocket_url, f"{lingtest_ui.ui_url}/v2/runs/flow-run/{run_id}", tmp_path),
                timeout=8 * RENDER_WAIT_S))
            wait_for_state(lingtest_ui.api_url, run_id, "COMPLETED")
            adapt.wait(timeout=WAIT_S)
        assert adapt.returncode == 0, log.read_text()[-3000:]
    finally:
        if adapt is not None and adapt.poll() is None:
            adapt.kill()
            adapt.wait(timeout=10)
        if chromium is not None:
            stop_chromium(chromium)
    assert chosen == {label: [value] for label, value in PICKS.items()}
    tree = read_tree(tree_path)
    added = tree.frame.loc[tree.frame.index.difference(before.frame.index)]
    tests = added[added["label"] != "topic_marker"].set_index("input")
    assert sorted(tests.index) == sorted(PICKS.values())
    assert tests.loc[PICKS["Fail"], "label"] == "fail"
    assert tests.loc[PICKS["Passing"], "label"] == "pass"
    assert set(tests["labeler"]) == {"ada"} and set(tests["topic"]) == {"/Rooms"}
    for shot in ("dialog.png", "filled.png"):
        assert (tmp_path / shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (tmp_path / shot).stat().st_size > 10_000
