"""JupyterLab and the book in a real, headless browser: the pieces the browser tests share.

A throw-away JupyterLab server (its config, data, runtime, settings and workspace folders all in a
temporary folder, so a run leaves nothing behind) and Playwright driving Chromium from the
operating system's packages, which is what a student's browser runs: widgets, plotly.js, the
kernel connection.

Chromium is found at ``$WORKBOOK_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH
(Debian and Ubuntu: ``apt-get install chromium``). Without it the browser tests are skipped with
that instruction, unless ``WORKBOOK_REQUIRE_BROWSER=1`` is set (continuous integration sets it),
when they fail instead.
"""

from __future__ import annotations

import json
import mimetypes
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tools import lab

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "browser"

#: Chromium flags for a closed network and no display; without the background-networking ones
#: Chromium keeps trying to reach Google's services.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    """The Chromium executable to drive, or None if there is none."""
    env = os.environ.get("WORKBOOK_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser() -> str:
    """Chromium's path and a working Playwright, or skip (fail under WORKBOOK_REQUIRE_BROWSER=1)."""
    problem = None
    path = chromium_path()
    if path is None:
        problem = ("no Chromium found (install it with `apt-get install chromium`, or point "
                   "WORKBOOK_CHROMIUM at one)")
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "Playwright is not installed (it is in the test dependencies: `make env`)"
    if problem:
        if os.environ.get("WORKBOOK_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser tests required but {problem}")
        pytest.skip(problem)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A JupyterLab server on 127.0.0.1 serving ``root``, with a random token.

    With ``workbook=True`` it is started as ``make lab`` starts it (:mod:`tools.lab`: its
    options and configuration folder), and nothing here turns news or update checks off: that
    must come from the workbook's configuration. ``settings`` are JupyterLab user settings to
    write first, ``{plugin id: {key: value}}``."""

    def __init__(self, root: Path, home: Path, workbook: bool = False,
                 settings: dict | None = None):
        self.root = root
        self.port = free_port()
        self.token = os.urandom(16).hex()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "jupyterlab.log"
        env = dict(os.environ)
        for var, sub in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython"),
                         ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                         ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")]:
            (home / sub).mkdir(parents=True, exist_ok=True)
            env[var] = str(home / sub)
        env["JUPYTER_PLATFORM_DIRS"] = "1"
        settings = {
            # Render every cell (no virtual scrolling), so all outputs are in the page to inspect.
            "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
            **({} if workbook else {  # neither ask about nor fetch news: there may be no network
                "@jupyterlab/apputils-extension:notification": {"fetchNews": "false",
                                                                "checkForUpdates": False}}),
            **(settings or {})}
        for plugin, values in settings.items():
            package, name = plugin.split(":")
            folder = home / "settings" / package
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip", "127.0.0.1",
               "--port", str(self.port), f"--ServerApp.token={self.token}",
               "--ServerApp.port_retries=0"]
        if workbook:
            lab.prepare_work(root)
            cmd += lab.arguments(root)
            env = lab.environment(env)
        else:
            cmd += [f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
                    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(cmd, cwd=root, env=env, stdout=self._log,
                                        stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited early:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}",
                                            timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"JupyterLab did not answer in {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def kernel_state(self) -> str | None:
        """The execution state of the one running kernel ("idle", "busy", ...), or None."""
        with urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}", timeout=10) as r:
            kernels = json.load(r)
        return kernels[0]["execution_state"] if len(kernels) == 1 else None

    def wait_kernel_idle(self, timeout_s: float, pause=time.sleep) -> None:
        """Wait until one kernel runs, is idle and has a browser connected to it.

        ``pause(seconds)`` waits between polls: pass ``lambda s: page.wait_for_timeout(s * 1e3)``
        so that Playwright keeps serving the page's routed requests meanwhile."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/api/kernels?token={self.token}",
                                            timeout=10) as r:
                    kernels = json.load(r)
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    raise
                # the server lists a kernel that is still starting as an error: ask again
                pause(0.5)
                continue
            if (len(kernels) == 1 and kernels[0]["execution_state"] == "idle"
                    and kernels[0]["connections"] >= 1):
                return
            pause(0.5)
        raise AssertionError(f"no idle, connected kernel within {timeout_s:.0f} s:\n{self.log()}")

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"

    def printed_url(self) -> str:
        """The URL the server printed for the learner to open, with the real token in it
        (a token given in the configuration is printed as ``...``)."""
        found = re.findall(r"http://127\.0\.0\.1:\d+/\S*", self.log())
        assert found, f"no URL in JupyterLab's log:\n{self.log()}"
        return found[-1].replace("token=...", f"token={self.token}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


@contextmanager
def chromium(path: str):
    """A headless Chromium browser driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class PageErrors:
    """Console errors and uncaught exceptions of one page, as text lines, and the hosts other
    than 127.0.0.1 that the page asked for.

    The tests run offline, so an http(s) request to another host is answered here with an
    empty response (and its host recorded) rather than left to fail with a console error that a
    connected student would not see. Local files and 127.0.0.1 are served as usual.
    """

    def __init__(self, page):
        self.lines: list[str] = []
        self.external_hosts: set[str] = set()
        page.route(re.compile(r"^https?://(?!(127\.0\.0\.1|localhost)[:/])"), self._external)
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.lines.append(f"uncaught: {exc}"))

    def _external(self, route) -> None:
        self.external_hosts.add(urlsplit(route.request.url).hostname)
        # An empty script for scripts (a module import must get a JavaScript type), else nothing.
        kind = mimetypes.guess_type(urlsplit(route.request.url).path)[0]
        if route.request.resource_type == "script" or kind in (None, "text/javascript"):
            route.fulfill(status=200, body="", content_type="text/javascript")
        else:
            route.fulfill(status=204, body="")

    def _console(self, msg) -> None:
        if msg.type == "error":
            self.lines.append(f"console.error: {msg.text} ({msg.location.get('url', '')})")


# ----------------------------------------------------------------------------- JupyterLab

#: An init script for a page: plotly's FigureWidget code (sent to the page by anywidget, one
#: copy per chart) finishes loading only 8 s after it arrives, as on a busy machine. anywidget
#: gives a widget's code 2 s; after that its front end drops every message to the widget, so
#: a FigureWidget chart stays as first drawn. The explorers' charts must not depend on it.
SLOW_PLOTLY_WIDGET = """
(() => {
  const Blob0 = window.Blob;
  function SlowBlob(parts, options) {
    if (options && options.type === "text/javascript" && parts && parts.length === 1
        && typeof parts[0] === "string" && parts[0].includes("_py2js_addTraces")) {
      parts = ["await new Promise(r => setTimeout(r, 8000));\\n" + parts[0]];
    }
    return new Blob0(parts, options);
  }
  SlowBlob.prototype = Blob0.prototype;
  window.Blob = SlowBlob;
})();
"""


#: Error outputs as JupyterLab renders them: a traceback is shown as stderr, so this finds
#: tracebacks and anything else written to stderr (warnings), in cells and in Output widgets.
ERROR_OUTPUTS = (".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'], "
                 ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")


def run_all_cells(page, server: LabServer, timeout_s: float = 600.0) -> list[str]:
    """Run > Run All Cells; wait until the run ends; return the cells' prompts.

    Waits first for the notebook's kernel to be started, idle and connected (asked of the
    server): running cells straight after the page loads can race the kernel connection. The
    run has ended when no cell is queued or running ("[*]:") and the kernel has stayed idle for
    two seconds; a cell that raised stops it, leaving later cells "[ ]:". Every code cell that
    ran shows "[n]:".
    Raises AssertionError if it has not ended within ``timeout_s``.
    """
    def pause(seconds: float) -> None:
        page.wait_for_timeout(seconds * 1000)

    server.wait_kernel_idle(timeout_s=120, pause=pause)
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt")
    stored = [t.strip() for t in prompts.all_inner_texts()]     # the saved execution counts
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    deadline = time.monotonic() + timeout_s
    started, quiet_since = False, None
    texts: list[str] = []
    while time.monotonic() < deadline:
        texts = [t.strip() for t in prompts.all_inner_texts()]
        running = any("*" in t for t in texts)
        started = started or running or texts != stored
        if started and not running and server.kernel_state() == "idle":
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= 2.0:
                return texts
        else:
            quiet_since = None
        pause(0.5)
    raise AssertionError(f"the run did not end within {timeout_s:.0f} s: prompts {texts}")


def error_outputs(page) -> list[str]:
    """The text of every traceback or stderr output shown in the notebook."""
    return page.locator(ERROR_OUTPUTS).all_inner_texts()


def cell_with(page, selector: str, text: str):
    """The code cell whose output has an element ``selector`` containing ``text`` (exactly one
    must), e.g. ``cell_with(page, ".widget-slider", "kernel size k")``."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").filter(
        has=page.locator(f".jp-OutputArea {selector}", has_text=text))
    assert cell.count() == 1, f"{cell.count()} cells show {selector} {text!r}"
    return cell


def chart_state(chart) -> dict:
    """The data and title a rendered plotly chart is drawing (read from plotly.js itself)."""
    return chart.evaluate(
        "el => ({title: (el.layout && el.layout.title && el.layout.title.text) || '',"
        " traces: (el.data || []).map(t => ({name: t.name, x: Array.from(t.x || []),"
        " y: Array.from(t.y || [])}))})")


def wait_for_change(chart, before: dict, timeout_s: float = 180.0, until=None,
                    cell=None) -> dict:
    """Poll the chart until its data or title differs from ``before`` (and ``until(state)``
    holds, when given: an explorer that draws as points arrive changes its chart more than
    once); return the new state. If it does not within ``timeout_s``, the error quotes the
    end of what ``cell`` (the chart's notebook cell, when given) shows: the explorer's status
    says what it measured and what not."""
    deadline = time.monotonic() + timeout_s
    state = before
    while time.monotonic() < deadline:
        if chart.count():   # an explorer may show a message in its charts' place meanwhile
            state = chart_state(chart)
            if state != before and (until is None or until(state)):
                return state
        chart.page.wait_for_timeout(500)
    shown = ""
    if cell is not None:
        try:
            shown = "; the cell shows: " + cell.inner_text(timeout=10_000)[-2_000:]
        except Exception as exc:  # noqa: BLE001 - the message must not hide the timeout
            shown = f"; the cell could not be read ({type(exc).__name__})"
    raise AssertionError(f"chart did not change within {timeout_s:.0f} s: "
                         f"{state.get('title')!r}{shown}")
