"""``scripts/start.sh`` opens JupyterLab without the "receive official Jupyter news?" toast covering the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"


def test_start_script_puts_a_config_folder_that_disables_the_news_toast_on_the_search_path(monkeypatch, tmp_path):
    pytest.importorskip("jupyterlab_server", reason="needs the notebook extras: pip install -e '.[notebook]'")
    from jupyterlab_server.config import get_static_page_config

    script = (ROOT / "scripts" / "start.sh").read_text()
    found = re.search(r'^export JUPYTER_CONFIG_PATH="\$ROOT/([^"$]+)\$\{JUPYTER_CONFIG_PATH', script, re.M)
    assert found, "start.sh does not add its Jupyter config folder to JUPYTER_CONFIG_PATH"
    assert script.index(found[0]) < script.index("exec \"$ROOT/.venv/bin/jupyter\" lab")
    folder = ROOT / found[1]
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(folder))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "user"))  # no user settings in the way
    monkeypatch.delenv("JUPYTER_NO_CONFIG", raising=False)
    page = get_static_page_config(level="all")
    assert page.get("disabledExtensions", {}).get(ANNOUNCEMENTS) is True, page
