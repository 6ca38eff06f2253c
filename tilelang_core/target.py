"""Target resolution: what ``target=`` means.

``"auto"`` (the default) picks CUDA when an NVIDIA GPU is visible, else the host CPU; ``"cpu"`` (alias
``"llvm"``) is the host CPU; ``"cuda"`` is an NVIDIA GPU: the visible GPU's architecture (``sm_90a`` when
there is none) unless an architecture is named (``"cuda -arch=sm_80"``, ``"cuda:sm_80"`` or
``{"kind": "cuda", "arch": "sm_80"}``). An unnamed architecture on a Hopper GPU (compute capability 9.0) is
``sm_90a``, the feature set wgmma needs (code for ``sm_90a`` runs on sm_90 devices only); a named ``sm_90``
stays plain sm_90 (no wgmma). CUDA code is generated and
compiled (nvcc or NVRTC) without a GPU; running it needs one. A TVM target dict (``{"kind": "llvm", ...}``) is
accepted for the CPU.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from typing import Any

CUDA_BACKEND_AVAILABLE = True
DEFAULT_CUDA_ARCH = "sm_90a"
_ARCH_SPECIFIC = {"sm_90": "sm_90a"}  # an unnamed architecture takes the arch-specific features (wgmma)
_ARCH_RE = re.compile(r"sm_\d+a?")


@functools.lru_cache(maxsize=1)
def gpu_visible() -> bool:
    """Whether a CUDA GPU is usable here. Cheap checks first (device nodes, nvidia-smi), torch only then."""
    if os.environ.get("TILELANG_CORE_NO_GPU"):
        return False
    if not (os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi")):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def _visible_arch() -> str:
    try:
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}"
        return _ARCH_SPECIFIC.get(arch, arch)
    except Exception:  # noqa: BLE001
        return DEFAULT_CUDA_ARCH


def resolve_target(target: Any) -> str:
    """Return the backend name ("cpu" or "cuda") for a user's ``target=`` value."""
    if target is None or target == "auto":
        return "cuda" if gpu_visible() else "cpu"
    if isinstance(target, str):
        t = target.strip().lower()
        if t in ("cpu", "llvm", "host") or t.startswith("llvm "):
            return "cpu"
        if t in ("cuda", "nvidia") or t.startswith(("cuda ", "cuda:", "cuda-")):
            cuda_target(target)  # validates the arch spelling
            return "cuda"
        raise ValueError(f"target: expected 'auto', 'cpu' (alias 'llvm'), 'cuda' or a TVM target dict, got {target!r}")
    if isinstance(target, dict):
        kind = target.get("kind")
        if kind == "llvm":
            return "cpu"
        if kind == "cuda":
            cuda_target(target)
            return "cuda"
        raise ValueError(f"target: a target dict needs kind 'llvm' or 'cuda', got {target!r}")
    raise TypeError(f"target: expected a string or a TVM target dict, got {type(target).__name__}")


def cuda_target(target: Any) -> dict[str, Any]:
    """The CUDA target dict (``{"kind": "cuda", "arch": "sm_90"}``) for a CUDA ``target=`` value."""
    arch = None
    if target is None or target == "auto" or (isinstance(target, str) and target.strip().lower() in
                                               ("cuda", "nvidia")) or (isinstance(target, dict) and
                                                                       target.get("arch") is None):
        arch = _visible_arch() if gpu_visible() else DEFAULT_CUDA_ARCH
    elif isinstance(target, dict):
        arch = target.get("arch")
    elif isinstance(target, str):
        m = _ARCH_RE.search(target)
        arch = m.group(0) if m else None
        if arch is None and re.search(r"arch", target):
            raise ValueError(f"target: could not read the architecture in {target!r}; write e.g. 'cuda -arch=sm_80'")
    arch = arch or DEFAULT_CUDA_ARCH
    if not _ARCH_RE.fullmatch(str(arch)) or int(re.sub(r"\D", "", str(arch))) < 80:
        raise ValueError(f"target: CUDA architecture {arch!r} is not supported; expected sm_80 or newer "
                         "(cp.async, ldmatrix and mma.sync need Ampere)")
    return {"kind": "cuda", "arch": str(arch)}
