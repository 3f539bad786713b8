"""Headless Chromium for the UI tests, driven over the DevTools protocol with ``websockets``.

Chromium is Debian's (``.ci/run`` installs it). Pages are Vue / React apps that render after
the load event, so the tests poll the page (``text_once_shown``, ``wait_for``) within
``RENDER_WAIT_S`` instead of sleeping a fixed time.
"""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

CHROMIUM = "chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--window-size=1400,1000", "--remote-debugging-port=0"]
RENDER_WAIT_S = 60


class Browser:
    """One headless Chromium page over the DevTools protocol."""

    def __init__(self, websocket) -> None:
        self.websocket = websocket
        self.ids = itertools.count(1)

    async def call(self, method: str, **params) -> dict:
        call_id = next(self.ids)
        await self.websocket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:  # events arrive in between; the answer carries our id
            message = json.loads(await self.websocket.recv())
            if message.get("id") == call_id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message["result"]

    async def evaluate(self, expression: str):
        """The value of a JavaScript expression on the page (a thrown error fails the test)."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, \
            f"{expression[:200]}: {result['exceptionDetails']}"
        return result["result"].get("value")

    async def wait_for(self, expression: str, what: str, timeout_s: float = RENDER_WAIT_S):
        """Poll ``expression`` until it is truthy and return its value; fail after
        ``timeout_s`` naming ``what`` did not happen, with the page's text."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.3)
        text = await self.evaluate("document.body ? document.body.innerText : ''")
        pytest.fail(f"{what}: not within {timeout_s} s; page text:\n{text}")

    async def text_once_shown(self, url: str, expected: list[str]) -> str:
        """Open ``url`` and poll the page text until every string of ``expected`` shows."""
        await self.call("Page.navigate", url=url)
        deadline = time.monotonic() + RENDER_WAIT_S
        text = ""
        while time.monotonic() < deadline:
            result = await self.call("Runtime.evaluate", returnByValue=True,
                                     expression="document.body ? document.body.innerText : ''")
            text = result["result"].get("value", "")
            if all(item in text for item in expected):
                return text
            await asyncio.sleep(0.5)
        missing = [item for item in expected if item not in text]
        pytest.fail(f"{url} did not show {missing} within {RENDER_WAIT_S} s; page text:\n{text}")

    async def screenshot(self, path: Path) -> None:
        result = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(result["data"]))


def start_chromium(user_data_dir: Path) -> tuple[subprocess.Popen, str]:
    """Chromium on a free DevTools port; returns the process and its page's websocket URL."""
    binary = shutil.which(CHROMIUM)
    if binary is None:
        pytest.fail("chromium is not installed: `apt-get install chromium` (as .ci/run does)")
    process = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}",
                                "about:blank"], stdout=subprocess.DEVNULL,
                               stderr=open(user_data_dir.parent / "chromium.log", "w"))
    port_file = user_data_dir / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, (user_data_dir.parent / "chromium.log").read_text()[-2000:]
        if port_file.exists() and len(port_file.read_text().splitlines()) >= 2:
            port = port_file.read_text().splitlines()[0]
            pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
            return process, next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        time.sleep(0.2)
    process.kill()
    pytest.fail("chromium did not open its DevTools port within 30 s")


def stop_chromium(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def read_pages(websocket_url: str, pages: list[tuple[str, list[str]]],
                     screenshots: dict[int, Path]) -> list[str]:
    """The text of each page once its expected strings show; screenshots of the pages named
    by index."""
    import websockets

    async with websockets.connect(websocket_url, max_size=None) as websocket:
        browser = Browser(websocket)
        texts = []
        for index, (url, expected) in enumerate(pages):
            texts.append(await browser.text_once_shown(url, expected))
            if index in screenshots:
                await browser.screenshot(screenshots[index])
        return texts
