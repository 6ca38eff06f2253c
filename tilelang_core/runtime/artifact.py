"""The on-disk artifact of a compiled kernel: a folder holding the library and a self-describing ``meta.json``.

``meta.json`` records the parameter list (name, shape, dtype), which parameters are outputs, the target, the
entry symbol, the generated sources' file names and a SHA-256 of the library, so a truncated or corrupted
artifact is detected on load (and rebuilt by the cache) instead of crashing the process.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import TileLangRuntimeError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter: a tensor (``kind="tensor"``) of a shape and dtype, or a scalar (``kind="scalar"``,
    ``n: T.int32``; shape ``()``). A symbolic size is the symbol's name (``"m"``) or an integer expression of
    symbols as TVM prints it (``"m * 2"``); the runtime binds it from the tensors a call passes. ``strides``: the
    element strides a ``T.StridedTensor`` declares (None: contiguous, row-major)."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str
    kind: str = "tensor"
    strides: tuple[int, ...] | None = None

    def __str__(self) -> str:
        if self.kind == "scalar":
            return f"{self.name}: {self.dtype}"
        return f"{self.name}: {self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass
class Artifact:
    """A compiled kernel on disk."""

    path: Path
    entry: str
    target: dict[str, Any]
    params: list[ParamSpec]
    out_idx: list[int]
    library: str = "kernel.so"
    sources: dict[str, str] = field(default_factory=dict)  # kind -> file name
    library_sha256: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def library_path(self) -> Path:
        return self.path / self.library

    def source(self, kind: str) -> str:
        name = self.sources.get(kind)
        if name is None:
            raise KeyError(f"no {kind!r} source in this artifact; available: {sorted(self.sources)}")
        kept = self.__dict__.get("_kept_sources")
        if kept is not None and kind in kept:
            return kept[kind]
        return (self.path / name).read_text()

    def keep_sources(self) -> None:
        """Read every generated source into memory, so :meth:`source` works after the folder is gone (a cache
        cleared while the kernel is in use). Not part of ``meta.json``."""
        if self.__dict__.get("_kept_sources") is None:
            self.__dict__["_kept_sources"] = {k: (self.path / n).read_text() for k, n in self.sources.items()}

    def write_meta(self) -> None:
        meta = asdict(self)
        meta.pop("path")
        meta["params"] = [asdict(p) for p in self.params]
        meta["format_version"] = FORMAT_VERSION
        (self.path / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_artifact(path: Path, verify: bool = True) -> Artifact:
    """Read ``meta.json`` and check the library against its recorded hash."""
    path = Path(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
        if meta.pop("format_version", None) != FORMAT_VERSION:
            raise ValueError("unknown artifact format version")
        meta["params"] = [ParamSpec(p["name"], tuple(p["shape"]), p["dtype"], p.get("kind", "tensor"),
                                    tuple(p["strides"]) if p.get("strides") else None)
                          for p in meta["params"]]
        art = Artifact(path=path, **meta)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TileLangRuntimeError(f"corrupt or incomplete kernel artifact at {path}: {e}") from e
    if verify:
        lib = art.library_path
        if not lib.is_file() or sha256_file(lib) != art.library_sha256:
            raise TileLangRuntimeError(f"corrupt kernel artifact at {path}: {art.library} is missing or does not "
                                       "match its recorded hash")
    return art
