"""Drive a real JupyterLab in Debian's Chromium through Playwright: start a server, open a notebook, run it.

Why this module exists: the browser test (``tests/test_browser.py``) and the README screenshot script
(``scripts/readme_screenshot.py``) need the same machinery — a JupyterLab server on 127.0.0.1 with a token, isolated
from the user's Jupyter configuration, that always goes away afterwards (kernels included), and a headless Chromium
page that opens a notebook, runs every cell through JupyterLab's own command and waits until all of them have
executed. Playwright never downloads a browser here: it launches ``/usr/bin/chromium`` (``apt-get install
chromium``); ``CHROMIUM`` overrides the path.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# JupyterLab's "receive news?" toast and update check: nothing in the page may talk to the outside or steal focus
DISABLED = {"@jupyterlab/apputils-extension:announcements": True}


def browser_available() -> str | None:
    """None when Playwright and Chromium are both here, else what is missing."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the Python package playwright is not installed (pip install -e '.[browser]')"
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JupyterLab:
    """A JupyterLab server on 127.0.0.1 serving ``root_dir``; use as a context manager (it always stops)."""

    def __init__(self, root_dir: Path, env: dict[str, str] | None = None, log: Path | None = None):
        self.root_dir = Path(root_dir)
        self.token = secrets.token_hex(16)
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="wb_lab_"))
        self.log_path = log or self.home / "jupyter.log"
        self.env = dict(os.environ)
        self.env.update(env or {})
        # the user's Jupyter settings, workspaces and runtime files stay untouched
        for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                         ("IPYTHONDIR", "ipython")):
            self.env[var] = str(self.home / sub)
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        labconfig = self.home / "config" / "labconfig"
        labconfig.mkdir(parents=True, exist_ok=True)
        (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": DISABLED}))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> JupyterLab:
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               "--LabApp.expose_app_in_browser=True", "--allow-root", f"--ServerApp.root_dir={self.root_dir}",
               f"--LabApp.workspaces_dir={self.home / 'workspaces'}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.root_dir, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.api("GET", "/api/status")
                return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer on {self.url} within {timeout:.0f} s:\n{self.log()}")

    def api(self, method: str, path: str) -> Any:
        req = urllib.request.Request(f"{self.url}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - our own server on 127.0.0.1
            body = r.read()
        return json.loads(body) if body else None

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-6000:]
        except OSError:
            return ""

    def shutdown_kernels(self) -> None:
        """Shut every running kernel down (a test file sharing the server leaves none behind for the next)."""
        with contextlib.suppress(Exception):
            for k in self.api("GET", "/api/kernels") or []:
                with contextlib.suppress(Exception):
                    self.api("DELETE", f"/api/kernels/{k['id']}")

    def stop(self) -> None:
        """Shut every kernel down, stop the server (SIGTERM, then SIGKILL of its process group), clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.shutdown_kernels()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self) -> JupyterLab:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Playwright page in headless Debian Chromium (closed afterwards)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.console_errors = []  # the page's console errors and uncaught exceptions, for failure messages
            page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text[:500]))
            page.on("pageerror", lambda e: page.console_errors.append(f"uncaught: {e}"[:500]))
            yield page
        finally:
            browser.close()


NOTEBOOK_READY = """(path) => {
  const app = window.jupyterapp;
  const w = app && app.shell && app.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(w && w.context && w.context.path === path && k && k.status === 'idle' && w.content
            && w.content.widgets.length > 0);
}"""

ALL_EXECUTED = """(path) => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.context || w.context.path !== path) return '';
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = w.content.widgets.filter(c => c.model.type === 'code');
  const errors = cells.filter(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  if (errors.length) return 'error';
  return k && cells.every(c => c.model.executionCount !== null) && k.status === 'idle' ? 'done' : '';
}"""

STATE = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return {path: w && w.context ? w.context.path : null, kernel: k ? k.status : null,
          cells: w && w.content && w.content.widgets ? w.content.widgets.filter(c => c.model.type === 'code')
            .map(c => c.model.executionCount) : null};
}"""

ERRORS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  return w.content.widgets.filter(c => c.model.type === 'code')
    .flatMap(c => c.model.outputs.toJSON().filter(o => o.output_type === 'error'))
    .map(o => o.ename + ': ' + o.evalue + '\\n' + (o.traceback || []).join('\\n'));
}"""


def open_notebook(page: Any, lab: JupyterLab, name: str, timeout_s: float = 180) -> None:
    """Open ``name`` (relative to the server's root) in a workspace of its own and wait until its kernel is idle.

    A fresh, reset workspace per page: a server shared by several tests would otherwise restore the notebooks that
    earlier pages had open, and one of those could be the current widget when "Run All Cells" is sent.
    """
    page.goto(f"{lab.url}/lab/workspaces/wb{secrets.token_hex(4)}/tree/{name}?reset&token={lab.token}")
    page.wait_for_function(NOTEBOOK_READY, arg=name, timeout=timeout_s * 1000)
    page.evaluate("(path) => { window.__wb_path = path; }", name)


def run_all(page: Any, timeout_s: float = 600, lab: JupyterLab | None = None) -> None:
    """Run every cell with JupyterLab's "Run All Cells" command; raise with the tracebacks if any cell failed, and
    with the notebook's state (which cells ran, the kernel's status) and the server's log if they did not finish."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    path = page.evaluate("() => window.__wb_path")
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    try:
        handle = page.wait_for_function(ALL_EXECUTED, arg=path, timeout=timeout_s * 1000, polling=500)
    except PlaywrightTimeout:
        state = page.evaluate(STATE)
        log = f"\nthe server's log:\n{lab.log()}" if lab is not None else ""
        raise AssertionError(f"{path}: not every cell finished within {timeout_s:.0f} s; the current notebook: "
                             f"{state}{log}") from None
    if handle.json_value() == "error":
        raise AssertionError("a cell failed in JupyterLab:\n" + "\n\n".join(page.evaluate(ERRORS))[-6000:])


def set_parameters(path: Path, source: str) -> None:
    """Replace the notebook's parameters cell (the first code cell), as papermill would."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
    cell["source"] = source
    path.write_text(json.dumps(nb, indent=1))


__all__ = ["JupyterLab", "chromium_page", "open_notebook", "run_all", "set_parameters", "browser_available",
           "CHROMIUM", "CHROMIUM_ARGS"]
