"""Target resolution: what ``target=`` means.

``"auto"`` (the default) picks CUDA when a GPU is visible and the CUDA backend is available, else the host CPU;
``"cpu"`` (alias ``"llvm"``) is the host CPU; a TVM target dict (``{"kind": "llvm", ...}``) is accepted for the
CPU. The CUDA backend is not part of this release: asking for it raises an error that says so.
"""

from __future__ import annotations

from typing import Any

from .errors import TileLangError

CUDA_BACKEND_AVAILABLE = False


def resolve_target(target: Any) -> str:
    """Return the backend name ("cpu" or "cuda") for a user's ``target=`` value."""
    if target is None or target == "auto":
        return "cpu"  # the CUDA backend is not in this release; auto means the host CPU
    if isinstance(target, str):
        t = target.strip().lower()
        if t in ("cpu", "llvm", "host") or t.startswith("llvm "):
            return "cpu"
        if t in ("cuda", "nvidia") or t.startswith("cuda"):
            raise TileLangError("target='cuda': the CUDA backend is not available in this build; use target='cpu' "
                                "(or 'auto')")
        raise ValueError(f"target: expected 'auto', 'cpu' (alias 'llvm'), 'cuda' or a TVM target dict, got {target!r}")
    if isinstance(target, dict):
        kind = target.get("kind")
        if kind == "llvm":
            return "cpu"
        if kind == "cuda":
            return resolve_target("cuda")
        raise ValueError(f"target: a target dict needs kind 'llvm' or 'cuda', got {target!r}")
    raise TypeError(f"target: expected a string or a TVM target dict, got {type(target).__name__}")
