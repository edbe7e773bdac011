"""`aw tui --web`: a page that loads nothing from outside the machine, and the app
working in a real headless browser (Chromium from the system's packages)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from agentworld.tui.command import web_server

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_the_page_loads_nothing_from_outside_the_machine(pool_path: Path) -> None:
    pytest.importorskip("textual_serve")
    server = web_server(pool_path, None, None, "ann", "monitor", "127.0.0.1", 8566)
    client = TestClient(TestServer(await server._make_app()))
    await client.start_server()
    try:
        page = await (await client.get("/")).text()
        urls = re.findall(r"""(?:src|href)=["']([^"']+)""", page) + re.findall(
            r"""url\(["']?([^"')]+)""", page
        )
        assert urls and "googleapis" not in page
        for url in urls:
            assert url.startswith("http://127.0.0.1:8566/static/"), url
            font = await client.get(url.removeprefix("http://127.0.0.1:8566"))
            assert font.status == 200, url  # served by the same server, font included
        assert "starting aw tui" in page and "100vh" in page
    finally:
        await client.close()


class Browser:
    """Headless Chromium driven over the DevTools protocol (no extra Python package)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.requests: list[str] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            msg = json.loads((await self.ws.receive(timeout=60)).data)
            if msg.get("method") == "Network.requestWillBeSent":
                self.requests.append(msg["params"]["request"]["url"])
            if msg.get("id") == self.next_id:
                return msg.get("result", {})

    async def js(self, expression: str) -> Any:
        got = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return got.get("result", {}).get("value")

    async def screenshot(self) -> bytes:
        return base64.b64decode((await self.call("Page.captureScreenshot"))["data"])

    async def key(self, char: str) -> None:
        for kind in ("keyDown", "char", "keyUp"):
            await self.call("Input.dispatchKeyEvent", type=kind, text=char, key=char)


async def until(check, wait_s: float = 90.0) -> Any:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.25)
    raise AssertionError("the page never got there")


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")
async def test_the_web_view_renders_and_takes_keys_in_headless_chromium(
    pool_path: Path,
) -> None:
    pytest.importorskip("textual_serve")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tui = subprocess.Popen(
        [sys.executable, "-m", "agentworld.cli", "tui", "--web", "--pool", str(pool_path),
         "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    profile = tempfile.mkdtemp()
    chrome = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--remote-debugging-port=0", "--window-size=1280,800",
         "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        active = Path(profile) / "DevToolsActivePort"

        async def devtools_port() -> str | None:
            lines = active.read_text().split() if active.exists() else []
            return lines[0] if lines else None  # the file is written, then filled

        debug_port = await until(devtools_port, 60)
        async with aiohttp.ClientSession() as http:
            targets = await (await http.get(f"http://127.0.0.1:{debug_port}/json")).json()
            page = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                b = Browser(ws)
                await b.call("Network.enable")
                await b.call("Page.enable")

                async def serving() -> bool:
                    try:
                        await http.get(f"http://127.0.0.1:{port}/")
                    except aiohttp.ClientError:
                        return False
                    return True

                await until(serving, 60)
                await b.call("Page.navigate", url=f"http://127.0.0.1:{port}/")

                async def app_started() -> bool:
                    return await b.js("document.body.classList.contains('-first-byte')")

                await until(app_started)
                shots = [b"", b""]

                async def settled() -> bool:  # the monitor drawn: two frames alike
                    shots[:] = [shots[1], await b.screenshot()]
                    await asyncio.sleep(1)
                    return shots[0] == shots[1]

                await until(settled)
                monitor = shots[1]
                filled = await b.js(
                    "document.querySelector('.xterm-screen').getBoundingClientRect().height"
                    " / window.innerHeight"
                )
                assert filled > 0.9, filled  # the terminal fills the window
                await b.js("document.querySelector('.xterm-helper-textarea').focus()")

                async def changed() -> bool:
                    # A loaded host may take a while to start the app's process; a key
                    # it had no app to read yet is pressed again (l again stays there).
                    await b.key("l")  # to the trajectory list
                    await asyncio.sleep(2)
                    return await b.screenshot() != monitor

                await until(changed, 120)
                outside = [
                    u for u in b.requests
                    if not u.startswith((f"http://127.0.0.1:{port}/", "about:", "data:"))
                ]  # fmt: skip
                assert not outside, outside
    finally:
        for proc in (chrome, tui):
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)
