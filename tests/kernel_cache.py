"""Helpers for tests that look inside the disk kernel cache: the kernel entries a cache folder holds."""

from __future__ import annotations

from pathlib import Path


def entries(cache_dir: Path) -> list[Path]:
    """The cache's kernel folders (finished entries only: build folders start with a dot)."""
    root = cache_dir / "kernels"
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.exists() else []
