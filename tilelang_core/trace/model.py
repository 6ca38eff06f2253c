"""The compile trace as plain data: stages, diffs, source maps and labelled generated code.

Why this module exists: people debug kernels by watching how a tile program is lowered, and the workbench renders
that. So the core hands out data — an ordered list of :class:`Stage` (name, TVMScript text, wall time, whether it
changed anything) — rather than printing under an environment variable. Nothing here imports TVM: a trace is
text plus a few numbers, and :func:`sources_of` reads generated code from an artifact on machines without the
TVM compiler. Capturing a trace (which does need TVM) lives in :mod:`.recorder`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import SourceLocation

ORIGINS = ("input", "tilelang", "tvm", "codegen")


@dataclass
class Stage:
    """The module after one step of the lowering.

    ``origin``: ``"input"`` (the program as written, TIR with tile ops), ``"tilelang"`` (our passes), ``"tvm"``
    (TVM's passes) or ``"codegen"`` (the module handed to the code generator). ``name`` is unique within its
    trace: a pass that runs more than once gets ``#2``, ``#3`` ... (``pass_name`` keeps the bare name).
    ``seconds`` is the stage's own wall time (a pass that runs other passes inside it excludes theirs).
    """

    name: str
    text: str
    seconds: float
    changed: bool
    origin: str
    index: int
    pass_name: str = ""
    module: Any = field(default=None, repr=False, compare=False)  # the IRModule, when captured in this process

    def __repr__(self) -> str:
        return (f"Stage({self.index}: {self.name!r}, origin={self.origin}, {self.seconds * 1e3:.2f} ms, "
                f"{'changed' if self.changed else 'unchanged'}, {self.text.count(chr(10)) + 1} lines)")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pass_name": self.pass_name, "index": self.index, "origin": self.origin,
                "seconds": self.seconds, "changed": self.changed, "text": self.text}


def unified_diff(a_text: str, b_text: str, a_label: str, b_label: str, context: int = 3) -> str:
    """Unified-diff text between two TVMScript texts ('' when they are equal)."""
    a_lines = a_text.splitlines(keepends=True)
    b_lines = b_text.splitlines(keepends=True)
    for lines in (a_lines, b_lines):
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
    return "".join(difflib.unified_diff(a_lines, b_lines, fromfile=a_label, tofile=b_label, n=context))


class Trace:
    """An ordered list of :class:`Stage`: the first is the program as written, the last what codegen received.

    A trace of a compile that failed stops at the last stage that succeeded; ``failed_stage`` names the step
    that failed and ``error`` holds the exception.
    """

    def __init__(self, stages: list[Stage], name: str = "main", config: dict[str, Any] | None = None,
                 target: dict[str, Any] | None = None, failed_stage: str | None = None,
                 error: BaseException | None = None):
        self.stages = stages
        self.name = name
        self.config = dict(config or {})
        self.target = dict(target or {})
        self.failed_stage = failed_stage
        self.error = error
        self.pass_configs: Any = None  # the PassConfig the compile ran with (set by capture)

    # -- lookup --------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def __len__(self) -> int:
        return len(self.stages)

    def __iter__(self) -> Iterator[Stage]:
        return iter(self.stages)

    def __getitem__(self, key: str | int) -> Stage:
        return self.stage(key)

    def stage(self, key: str | int | Stage) -> Stage:
        """A stage by index (negative counts from the end), by unique name (``"tirx.StmtSimplify#2"``), by bare
        pass name (its first run), or by a unique suffix (``"VectorizeLoop"``). ``"first"``/``"last"`` work too."""
        if isinstance(key, Stage):
            return key
        if isinstance(key, int):
            try:
                return self.stages[key]
            except IndexError:
                raise IndexError(f"stage index {key} out of range: this trace has {len(self.stages)} stages") from None
        if not isinstance(key, str):
            raise TypeError(f"stage: expected a name or an index, got {type(key).__name__}")
        if key in ("first", "last") and self.stages:
            return self.stages[0 if key == "first" else -1]
        for s in self.stages:
            if s.name == key:
                return s
        for s in self.stages:
            if s.pass_name == key:
                return s
        tails = [s for s in self.stages if s.name.split(".")[-1] == key or s.name.endswith("." + key)]
        if len(tails) == 1:
            return tails[0]
        if len(tails) > 1:
            raise KeyError(f"stage {key!r} is ambiguous: {', '.join(s.name for s in tails)}")
        close = difflib.get_close_matches(key, self.names(), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; stages: {', '.join(self.names())}"
        raise KeyError(f"no stage {key!r} in this trace{hint}")

    # -- views ---------------------------------------------------------------------------------------------
    @property
    def first(self) -> Stage:
        return self.stages[0]

    @property
    def last(self) -> Stage:
        return self.stages[-1]

    @property
    def total_seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    def changed_stages(self) -> list[Stage]:
        """The stages whose text differs from the previous stage's (the first stage counts as changed)."""
        return [s for s in self.stages if s.changed]

    def diff(self, a: str | int | Stage, b: str | int | Stage, context: int = 3) -> str:
        """Unified diff from stage ``a`` to stage ``b`` ('' when the text is the same)."""
        sa, sb = self.stage(a), self.stage(b)
        return unified_diff(sa.text, sb.text, f"{sa.index}:{sa.name}", f"{sb.index}:{sb.name}", context)

    def diffs(self, context: int = 3) -> list[tuple[Stage, str]]:
        """Each changed stage with its diff against the stage before it."""
        return [(s, self.diff(s.index - 1, s.index, context)) for s in self.stages[1:] if s.changed]

    def source_map(self, stage: str | int | Stage = 0) -> list[tuple[str, SourceLocation]]:
        """IR statements of a stage that TVM kept a source span for, as ``(summary, user file:line)`` in program
        order. Needs the stage's module (traces captured in this process have it)."""
        st = self.stage(stage)
        if st.module is None:
            return []
        from .recorder import statement_locations

        return statement_locations(st.module)

    def label(self, other: Trace | None = None) -> str:
        """``name(k=v, ...)``; given ``other``, only the configuration entries that differ between the two."""
        items = list(self.config.items())
        if other is not None:
            missing = object()
            items = [(k, v) for k, v in items if other.config.get(k, missing) != v] or items
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in items)})"

    @property
    def notes(self) -> list[str]:
        """Fast paths the lowering did not take and why (the ``tl.notes`` / ``tl.wgmma_notes`` attributes of the
        last stage our passes produced; see :mod:`tilelang_core.transform.common.notes`)."""
        ours = [s for s in self.stages if s.origin in ("input", "tilelang") and s.module is not None]
        if not ours:
            return []
        from ..transform.common.notes import read_notes

        return read_notes(ours[-1].module)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "config": {k: repr(v) for k, v in self.config.items()}, "target": self.target,
                "notes": self.notes,
                "failed_stage": self.failed_stage, "error": None if self.error is None else str(self.error),
                "total_seconds": self.total_seconds, "stages": [s.to_dict() for s in self.stages]}

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def table(self) -> str:
        """One line per stage: index, name, origin, milliseconds, changed mark, line count."""
        width = max([len(s.name) for s in self.stages] + [5])
        rows = [f"  {'#':>3}  {'stage':<{width}}  {'origin':<8}  {'ms':>8}  chg  {'lines':>5}"]
        for s in self.stages:
            rows.append(f"  {s.index:>3}  {s.name:<{width}}  {s.origin:<8}  {s.seconds * 1e3:>8.2f}  "
                        f"{'  *' if s.changed else '   '}  {s.text.count(chr(10)) + 1:>5}")
        return "\n".join(rows)

    def __repr__(self) -> str:
        head = (f"<Trace {self.label()}: {len(self.stages)} stages, {len(self.changed_stages())} changed, "
                f"{self.total_seconds * 1e3:.1f} ms")
        if self.failed_stage:
            head += f", FAILED at {self.failed_stage}"
        opts = self.pass_configs.explicit() if self.pass_configs is not None else {}
        if opts:
            head += ", pass_configs {" + ", ".join(f"{k!r}: {v!r}" for k, v in opts.items()) + "}"
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return head + ">\n" + self.table() + notes


def _as_trace(k: Any) -> Trace:
    return k if isinstance(k, Trace) else k.trace


def diff_kernels(k1: Any, k2: Any, stage: str | int = "input", context: int = 3) -> str:
    """Unified diff of the same stage of two kernels (or traces), e.g. two block sizes; '' when equal.

    The file labels name the configuration entries that differ, e.g. ``matmul(block_M=64) [input]``.
    """
    t1, t2 = _as_trace(k1), _as_trace(k2)
    s1, s2 = t1.stage(stage), t2.stage(stage)
    return unified_diff(s1.text, s2.text, f"{t1.label(t2)} [{s1.name}]", f"{t2.label(t1)} [{s2.name}]", context)


# -- generated code ------------------------------------------------------------------------------------------
@dataclass
class GeneratedCode:
    """One piece of generated code: ``kind`` (CPU: ``"llvm"``, ``"asm"``; CUDA: ``"cuda"``, ``"ptx"``, ``"sass"``),
    a human ``label``, the ``text``, and the exact ``command`` (compiler target and flags, link line) behind it."""

    kind: str
    label: str
    text: str
    command: str

    def __repr__(self) -> str:
        return f"GeneratedCode({self.kind!r}, {self.label!r}, {self.text.count(chr(10)) + 1} lines)"


LABELS = {"llvm": "LLVM IR", "asm": "assembly", "cuda": "CUDA C", "ptx": "PTX", "sass": "SASS"}
_ARCH_NAMES = {"x86_64": "x86-64", "aarch64": "AArch64", "arm64": "AArch64", "riscv64": "RISC-V 64"}


def _asm_label(target: dict[str, Any]) -> str:
    arch = str(target.get("mtriple", "")).split("-")[0]
    return f"{_ARCH_NAMES.get(arch, arch or 'host')} assembly"


def llvm_command(target: dict[str, Any], extra: dict[str, Any]) -> str:
    """How LLVM code was generated: TVM's target (triple, cpu, opt level), LLVM's own target string, and the
    equivalent ``llc`` flags."""
    tgt = json.dumps(target, sort_keys=False)
    ver = extra.get("llvm_version")
    llc = ["llc"]
    if target.get("mtriple"):
        llc.append(f"-mtriple={target['mtriple']}")
    if target.get("mcpu"):
        llc.append(f"-mcpu={target['mcpu']}")
    if target.get("mattr"):
        mattr = target["mattr"]
        llc.append(f"-mattr={','.join(mattr) if isinstance(mattr, (list, tuple)) else mattr}")
    llc.append(f"-O{target.get('opt-level', 3)}")
    lines = [f"tvm.compile(mod, target=tvm.target.Target({tgt})) under PassContext(opt_level=3)"
             + (f"  [LLVM {ver}]" if ver else ""),
             f"LLVM target: {extra.get('llvm_target') or tgt}",
             f"equivalent flags: {' '.join(llc)}"]
    return "\n".join(lines)


def link_command(extra: dict[str, Any]) -> str:
    cmd = extra.get("link_command") or []
    return "link: " + (" ".join(str(c) for c in cmd) if cmd else "(not recorded)")


def cuda_command(target: dict[str, Any], extra: dict[str, Any]) -> str:
    """How CUDA code was built: TVM's CUDA target and the nvcc (or NVRTC) command line."""
    meta = extra.get("cuda") or {}
    cmd = meta.get("nvcc_command") or extra.get("compile_command") or []
    cmd_text = " ".join(str(c) for c in cmd) if isinstance(cmd, (list, tuple)) else str(cmd)
    return (f"TVM CUDA codegen, target {json.dumps(target)}\n"
            f"compile: {cmd_text or '(not compiled: no nvcc or NVRTC)'}")


def find_disassembler() -> list[str] | None:
    """The command that prints a cubin's SASS: ``cuobjdump -sass`` or ``nvdisasm``, from PATH, the CUDA toolkit
    (``$CUDA_HOME``, ``/usr/local/cuda``) or pip's ``nvidia-cuda-cuobjdump`` wheel; None when there is none."""
    import os
    import shutil
    from pathlib import Path

    dirs = [os.path.join(b, "bin") for b in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                                             "/usr/local/cuda") if b]
    try:
        import nvidia  # type: ignore[import-not-found]

        dirs += [str(p) for root in getattr(nvidia, "__path__", []) for p in sorted(Path(root).glob("*/bin"))]
    except ImportError:
        pass
    for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        found = shutil.which(tool) or next((os.path.join(d, tool) for d in dirs
                                            if os.access(os.path.join(d, tool), os.X_OK)), None)
        if found:
            return [found, *args]
    return None


def _sass(artifact: Any) -> GeneratedCode | None:
    """SASS of a cubin artifact (None when no disassembler or no cubin is there)."""
    import subprocess

    cubin = artifact.library_path
    tool = find_disassembler()
    if tool is None or not str(cubin).endswith(".cubin") or not cubin.is_file():
        return None
    import os

    cmd = [*tool, str(cubin)]
    env = {**os.environ, "PATH": os.path.dirname(tool[0]) + os.pathsep + os.environ.get("PATH", "")}
    try:  # cuobjdump runs nvdisasm, which pip's wheels put beside it
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return GeneratedCode(kind="sass", label=LABELS["sass"], text=res.stdout, command=" ".join(cmd))


def sources_of(artifact: Any) -> dict[str, GeneratedCode]:
    """The labelled generated code of a compiled artifact (read from its folder; no TVM needed).

    CPU: ``llvm`` and ``asm``. CUDA: ``cuda`` (and ``ptx`` when the artifact stores it), plus ``sass`` when
    ``cuobjdump`` is on the PATH.
    """
    out: dict[str, GeneratedCode] = {}
    target = dict(artifact.target)
    extra = dict(artifact.extra)
    kind = target.get("kind")
    if kind == "llvm":
        cmd = llvm_command(target, extra) + "\n" + link_command(extra)
        labels = {"llvm": LABELS["llvm"], "asm": _asm_label(target)}
    else:
        cmd = cuda_command(target, extra)
        labels = {k: LABELS[k] for k in ("cuda", "ptx", "sass")}
    for k, label in labels.items():
        if k in artifact.sources:
            out[k] = GeneratedCode(kind=k, label=label, text=artifact.source(k), command=cmd)
    if kind == "cuda" and "sass" not in out:
        sass = _sass(artifact)
        if sass is not None:
            out["sass"] = sass
    return out
