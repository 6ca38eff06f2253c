"""Handing a compiled kernel from the process that compiled it to the process that times it, as bytes.

Why this module exists: in a sweep spread over processes or hosts, the compile worker and the timing worker need
not share a disk (a Ray node elsewhere), so the kernel cache cannot be the hand-over. A compiled kernel is a folder
(the kernel cache's entry: ``meta.json``, the library, the generated sources, ``checksums.json``); :func:`pack` reads
it into a :class:`ShippedKernel` (a few hundred KB of bytes, picklable), :func:`unpack` writes it under the timing
worker's own folder and loads it with the runtime — verified against its checksums, never recompiled.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_FILES = 64


@dataclass
class ShippedKernel:
    """A compiled kernel's files, by name, and the configuration it was compiled for."""

    key: str  # the cache entry's name (content-addressed), or a digest of the files
    files: dict[str, bytes]
    config: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def nbytes(self) -> int:
        return sum(len(v) for v in self.files.values())


def pack(kernel: Any) -> ShippedKernel:
    """The files of ``kernel``'s artifact folder (a :class:`~tilelang_core.jit.kernel.JITKernel`)."""
    folder = Path(kernel.artifact.path)
    files = {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}
    if len(files) > MAX_FILES or "meta.json" not in files:
        raise ValueError(f"{folder}: not a compiled kernel's folder ({len(files)} files)")
    key = folder.name
    if not key or key.startswith(("build-", ".")):  # a private build folder: name it by content
        h = hashlib.sha256()
        for name, data in files.items():
            h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        key = h.hexdigest()[:32]
    return ShippedKernel(key=key, files=files, config=dict(kernel.config), name=str(kernel.name))


def unpack(shipped: ShippedKernel, root: str | Path) -> Any:
    """Write the files under ``root/<key>`` (once; atomically) and load the kernel from there."""
    from ..jit.cache import load_entry
    from ..jit.kernel import JITKernel

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / shipped.key
    if not final.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=root))
        for name, data in shipped.files.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"shipped kernel {shipped.key}: bad file name {name!r}")
            (tmp / name).write_bytes(data)
        try:
            os.rename(tmp, final)
        except OSError:  # another thread or process of this worker unpacked it first
            for f in tmp.iterdir():
                f.unlink()
            tmp.rmdir()
    artifact = load_entry(final)  # every file checked against checksums.json
    return JITKernel(artifact, config=shipped.config, cache_status="shipped", name=shipped.name or None)


__all__ = ["ShippedKernel", "pack", "unpack"]
