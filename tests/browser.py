"""A real headless Chromium for the HTML report's tests: the DOM after load (--dump-dom), and a
DevTools-protocol session that records console messages, exceptions, log entries (CSP
violations land there) and every network request a page makes, evaluates JavaScript in it
and takes screenshots. Each browser gets a new empty profile; everything it started is
ended and removed when the test is done."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """chromium with a profile of its own, in a process group of its own (killed on a time-out)."""
    binary = chromium()
    assert binary is not None
    profile = tempfile.mkdtemp(prefix="diagnose-chromium-")
    proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def dump_dom(page: Path, timeout: float = 60) -> str:
    """The DOM of the page after it loaded (and ran whatever it runs), as Chromium serialises it."""
    result = _run(["--dump-dom", page.resolve().as_uri()], timeout)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def screenshot(page: Path, target: Path, width: int = 1400, height: int = 1000, timeout: float = 60) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    result = _run([f"--screenshot={target}", f"--window-size={width},{height}", page.resolve().as_uri()], timeout)
    assert result.returncode == 0 and target.is_file(), result.stderr[-2000:]


class Page:
    """One tab, driven over the DevTools protocol."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ask = self.next_id
        self.ws.send(json.dumps({"id": ask, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == ask:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)
        raise TimeoutError(method)

    def wait_for(self, event: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(deadline - time.monotonic(), 0.1))
            message = json.loads(self.ws.recv())
            if "method" in message:
                self.events.append(message)
                if message["method"] == event:
                    return message
        raise TimeoutError(event)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event; the events are kept from this navigation on."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", expression="1", awaitPromise=True)  # let late messages arrive

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries (CSP violations)."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                found.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url')})")
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def blocked(self) -> dict[str, str]:
        """url -> why the browser refused to send a request it was asked for ("csp", ...)."""
        urls = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"}
        return {urls.get(e["params"]["requestId"], "?"): e["params"]["blockedReason"] for e in self.events
                if e["method"] == "Network.loadingFailed" and e["params"].get("blockedReason")}

    def screenshot(self, target: Path) -> None:
        import base64

        target.parent.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        target.write_bytes(base64.b64decode(data))


@contextmanager
def devtools(width: int = 1400, height: int = 1000, timeout: float = 30) -> Iterator[Page]:
    """A headless Chromium with the DevTools protocol on a port of its own choosing, and its first tab."""
    import websocket

    binary = chromium()
    assert binary is not None
    profile = Path(tempfile.mkdtemp(prefix="diagnose-chromium-"))
    proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "--remote-debugging-address=127.0.0.1", f"--window-size={width},{height}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ws = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.is_file() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not open its DevTools port (exit {proc.poll()})")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:  # the local browser
            targets = json.load(answer)
        tab = next(t for t in targets if t.get("type") == "page")
        ws = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        page = Page(ws)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        yield page
    finally:
        if ws is not None:
            ws.close()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
