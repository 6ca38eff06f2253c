"""Check that a folder of wheels, together with what the GPU host already has, satisfies every requirement.

Why this script exists: ``scripts/gpu-notebook-wheels.sh`` downloads wheels with ``--no-deps`` for a machine that
reaches no registry, so a missing dependency would only show there, as an ImportError in the middle of a device
call. This reads each wheel's ``METADATA`` (no install, no import: the wheels are for Python 3.12 and this machine
may run another), evaluates every ``Requires-Dist`` marker for CPython 3.12 on x86-64 Linux without extras, and
fails naming each requirement that is neither in the folder nor among the host's packages. It also fails when a
wanted ``name==version`` has no wheel. Versions of the host's own packages are not known here (only their names).

    python scripts/wheel_closure.py .whl/ ipython==9.18.1 plotly==7.1.0 ...
"""

from __future__ import annotations

import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

# /work/.library/device/KINDS.md, "Python packages already there" (the 'cuda' image, read 2026-11-17)
HOST_PACKAGES = """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
    jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
    linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
    mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
    numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
    nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
    nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx
    onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning
    pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
    tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers
    toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
    triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
    xxhash yarl zipp
""".split()

# the GPU host's interpreter (python3 there is CPython 3.12.3 on x86-64 Linux)
ENVIRONMENT = {"implementation_name": "cpython", "implementation_version": "3.12.3", "os_name": "posix",
               "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
               "platform_system": "Linux", "platform_version": "", "python_full_version": "3.12.3",
               "python_version": "3.12", "sys_platform": "linux", "extra": ""}


def metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """(canonical name, version, Requires-Dist lines) of one wheel, read from its ``*.dist-info/METADATA``."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        msg = Parser().parsestr(z.read(name).decode("utf-8", "replace"))
    return canonicalize_name(msg["Name"]), msg["Version"], msg.get_all("Requires-Dist") or []


def needed(requires: list[str]) -> list[Requirement]:
    """The requirements that apply on the host (markers true for Python 3.12 on Linux, no extras asked for)."""
    out = []
    for line in requires:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(ENVIRONMENT):
            out.append(req)
    return out


def check(folder: Path, wanted: list[str]) -> list[str]:
    """Problems found: unmet requirements, wanted wheels that are missing, wheels that would not install on 3.12."""
    problems: list[str] = []
    have: dict[str, str] = {}
    wheels = sorted(folder.glob("*.whl"))
    for w in wheels:
        name, version, _ = metadata(w)
        have[name] = version
        _, _, _, tags = parse_wheel_filename(w.name)
        if not any(t.interpreter in ("py3", "cp312") or t.abi == "abi3" for t in tags):
            problems.append(f"{w.name}: no tag for CPython 3.12 ({', '.join(sorted(str(t) for t in tags))})")
    host = {canonicalize_name(n) for n in HOST_PACKAGES}
    for spec in wanted:
        name, _, version = spec.partition("==")
        got = have.get(canonicalize_name(name))
        if got is None or (version and got != version):
            problems.append(f"wanted {spec}: no such wheel in {folder}" + (f" (found {got})" if got else ""))
    for w in wheels:
        name, version, requires = metadata(w)
        for req in needed(requires):
            dep = canonicalize_name(req.name)
            if dep in have:
                if have[dep] not in req.specifier and req.specifier:
                    problems.append(f"{name} {version} needs {req}, the set has {dep} {have[dep]}")
            elif dep not in host:
                problems.append(f"{name} {version} needs {req}: neither in the set nor on the host")
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    folder = Path(argv[0])
    problems = check(folder, argv[1:])
    n = len(list(folder.glob("*.whl")))
    for p in problems:
        print(f"[wheel_closure] MISSING: {p}")
    if problems:
        return 1
    print(f"[wheel_closure] complete: every requirement of the {n} wheels is in the set or on the GPU host")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
