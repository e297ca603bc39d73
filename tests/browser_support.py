"""Debian's headless chromium driven by Playwright, for the tests that look at pages as a reader does.

The tests are skipped when chromium or Playwright is missing on a developer
machine, and fail when either is missing in CI (``CI`` set): there, the
browser checks are the only proof that reports and dashboards render.
Playwright never downloads a browser here (no ``playwright install``); it
drives ``/usr/bin/chromium`` from ``apt-get install chromium``.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
import pytest

from .ci import in_ci

CHROMIUM = Path("/usr/bin/chromium")
#: Flags for a quiet, self-contained headless run (no sandbox: CI runs as root in a container).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic")
#: Pages must render without the internet: requests to any other host are refused.
_REMOTE = re.compile(r"^https?://(?!127\.0\.0\.1[:/]|localhost[:/])")


def require_browser() -> None:
    """Skip (outside CI) or fail (in CI) the calling test when chromium or Playwright is missing."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"chromium at {CHROMIUM} (apt-get install -y chromium)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install playwright; no 'playwright install')")
    if not missing:
        return
    message = "browser test needs " + " and ".join(missing)
    if in_ci():
        pytest.fail(f"{message}; CI must install them", pytrace=False)
    pytest.skip(message)


@contextmanager
def browser_context(user_data_dir: Path, *, viewport: tuple[int, int] = (1280, 900)):
    """A Playwright browser context on headless chromium, closed on exit even when the test fails."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=str(CHROMIUM), args=list(FLAGS), headless=True,
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        try:
            context.route(_REMOTE, lambda route: route.abort())
            yield context
        finally:
            context.close()


def pixel_spread(png: bytes) -> float:
    """Standard deviation of the grey levels (0-255) of a PNG screenshot: 0 for a blank one."""
    from PIL import Image

    grey = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float)
    return float(grey.std())


def image_states(page) -> list[dict]:
    """Every ``<img>`` of the page: source prefix, whether it loaded and decoded, its drawn size, and whether it
    belongs to a precomputed dashboard state that is hidden until chosen."""
    return page.evaluate("""() => Array.from(document.images).map(img => ({
        src: img.src.slice(0, 40), complete: img.complete,
        natural_width: img.naturalWidth, natural_height: img.naturalHeight,
        width: img.getBoundingClientRect().width, height: img.getBoundingClientRect().height,
        in_hidden_state: Boolean(img.closest(".sappkit-state[hidden]")),
    }))""")


#: Whether an element shows anything of its own: a decoded image, a form control, or text of its own (not a child's).
_SHOWS_SOMETHING = """element => {
    if (element.getClientRects().length === 0 || getComputedStyle(element).visibility === "hidden") return false;
    if (element.tagName === "IMG") return element.complete && element.naturalWidth > 0;
    if (["INPUT", "SELECT", "PROGRESS", "CANVAS", "SVG"].includes(element.tagName.toUpperCase())) return true;
    return Array.from(element.childNodes).some(node => node.nodeType === Node.TEXT_NODE && node.textContent.trim());
}"""


def blank_parts(page) -> dict[str, list[str]]:
    """The parts of a page that show nothing: headings with nothing visible before the next heading (h1 to h4), and
    output areas with nothing visible in them (by their first 80 characters of HTML)."""
    return page.evaluate(f"""() => {{
        const shows = {_SHOWS_SOMETHING};
        const headings = Array.from(document.querySelectorAll("h1, h2, h3, h4"));
        const content = Array.from(document.body.querySelectorAll("*"))
            .filter(element => !element.closest("h1, h2, h3, h4") && shows(element));
        const follows = (a, b) => Boolean(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
        const sections = headings.filter((heading, i) => !content.some(element => follows(heading, element)
            && (i + 1 === headings.length || follows(element, headings[i + 1]))));
        const outputs = Array.from(document.querySelectorAll(".jp-OutputArea-output"))
            .filter(output => ![output, ...output.querySelectorAll("*")].some(shows));
        return {{
            sections: sections.map(heading => heading.textContent.replace("\u00b6", "").trim()),
            outputs: outputs.map(output => output.outerHTML.slice(0, 80)),
        }};
    }}""")


@contextmanager
def jupyter_lab(root: Path, home: Path, *, timeout_s: float = 90):
    """A JupyterLab server on a free localhost port serving ``root``; yields ``(base_url, token)``.

    Its configuration, settings, workspaces and runtime files live under
    ``home``, so the user's own JupyterLab setup neither leaks in nor gets
    touched. On exit the server is asked to shut down (which stops its
    kernels), then its process group is terminated, then killed.
    """
    port, token = _free_port(), secrets.token_hex(16)
    settings = home / "settings" / "@jupyterlab"
    # Start the notebook's own kernel without asking, and never fetch news from the internet.
    _write_json(settings / "notebook-extension" / "tracker.jupyterlab-settings", {"autoStartDefaultKernel": True})
    _write_json(settings / "apputils-extension" / "notification.jupyterlab-settings",
                {"fetchNews": "false", "checkForUpdates": False})
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "settings"), JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--port={port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--ServerApp.allow_root=True", "--ServerApp.terminals_enabled=False", "--LabApp.news_url="]
    log_path = home / "server.log"
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_until(lambda: _get(base, "/api/status", token) is not None, timeout_s,
                        lambda: f"JupyterLab did not answer on {base}; log {log_path}:\n{_tail(log_path)}",
                        alive=server)
            yield base, token
        finally:
            _stop(server, base, token)


def wait_for_kernel(base: str, token: str, *, timeout_s: float = 90) -> None:
    """Wait until a kernel is idle with a browser connected to it (before that, Run All may be dropped)."""
    _wait_until(lambda: any(kernel["connections"] > 0 and kernel["execution_state"] == "idle"
                            for kernel in _get(base, "/api/kernels", token) or ()),
                timeout_s, lambda: f"no idle, connected kernel after {timeout_s} s")


def log_tail(home: Path, lines: int = 30) -> str:
    """The end of the JupyterLab server log under ``home``, for failure messages."""
    return _tail(home / "server.log", lines)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def _get(base: str, route: str, token: str):
    request = urllib.request.Request(base + route, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)
    except OSError:
        return None


def _wait_until(condition, timeout_s: float, message, *, alive: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"process exited with code {alive.returncode}: {message()}")
        if time.monotonic() > deadline:
            raise TimeoutError(message())
        time.sleep(0.2)


def _stop(server: subprocess.Popen, base: str, token: str) -> None:
    request = urllib.request.Request(f"{base}/api/shutdown", method="POST", headers={"Authorization": f"token {token}"})
    try:
        urllib.request.urlopen(request, timeout=5).close()
        server.wait(timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if server.poll() is not None:
            break
        with suppress(ProcessLookupError):
            os.killpg(server.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            server.wait(timeout=wait_s)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
