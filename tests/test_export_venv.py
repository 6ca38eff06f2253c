"""An exported kernel in a real virtual environment that has no ``apache-tvm`` (and no tilelang_core).

The venv is made with ``python -m venv --without-pip`` and given the test venv's installed packages one by one,
except TVM and this project, so the exported module meets exactly what a production environment would have:
torch and apache-tvm-ffi. The result must equal the in-process kernel's.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import torch
from test_export import matmul_relu

EXCLUDED = ("tvm", "apache_tvm-", "tilelang", "__editable__", "_tilelang", "workbench", "__pycache__")


def make_venv_without_tvm(root: Path) -> Path:
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    py = root / "bin" / "python"
    target = Path(subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                          text=True).strip())
    source = Path(site.getsitepackages()[0])
    for entry in source.iterdir():
        name = entry.name
        keep_ffi = name.startswith(("tvm_ffi", "apache_tvm_ffi"))
        if not keep_ffi and (name.startswith(EXCLUDED) or name.endswith(".pth")):
            continue
        (target / name).symlink_to(entry)
    return py


def test_exported_module_runs_in_a_venv_without_apache_tvm(tmp_path):
    kernel = matmul_relu(96, 80, 48)
    path = kernel.export(tmp_path / "mods" / "mm_venv.py")
    py = make_venv_without_tvm(tmp_path / "venv")
    probe = subprocess.run([str(py), "-c", "import importlib.util as u; print([u.find_spec(m) is None for m in "
                                           "('tvm', 'tilelang_core', 'workbench', 'tvm_ffi', 'torch')])"],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert probe.stdout.strip() == "[True, True, True, False, False]", probe.stderr
    torch.manual_seed(0)
    a, b = torch.randn(96, 48), torch.randn(48, 80)
    torch.save((a, b), tmp_path / "inputs.pt")
    code = ("import sys, torch, json; sys.path.insert(0, sys.argv[1]); import mm_venv; "
            "a, b = torch.load(sys.argv[2]); c = mm_venv.kernel(a, b); torch.save(c, sys.argv[3]); "
            "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules if m.startswith(('tvm', 'tilelang')))))")
    env = {**os.environ, "TILELANG_EXPORT_CACHE_DIR": str(tmp_path / "export-cache")}
    env.pop("PYTHONPATH", None)
    res = subprocess.run([str(py), "-c", code, str(path.parent), str(tmp_path / "inputs.pt"), str(tmp_path / "c.pt")],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert set(json.loads(res.stdout.strip().splitlines()[-1])) == {"tvm_ffi"}
    c_venv = torch.load(tmp_path / "c.pt")
    assert torch.equal(c_venv, kernel(a, b))  # bit-identical to the in-notebook kernel
    torch.testing.assert_close(c_venv, torch.relu(a @ b), rtol=1e-4, atol=1e-4)
    assert sys.executable != str(py)
