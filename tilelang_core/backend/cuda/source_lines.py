"""Source-line builds of CUDA kernels: which of the user's lines each line of CUDA C, PTX and SASS came from.

Why this module exists: a kernel engineer reads SASS to see what a ``T.gemm`` or a ``T.copy`` became (HGMMA or
HMMA, LDGSTS, spills), and needs each instruction tied to the line of the kernel that asked for it. TVM's CUDA code
generator writes no source locations, so with ``pass_configs={"tl.cuda.lineinfo": True}``:

1. :func:`mark_source_lines` puts a marker call (``__tl_src_line(file, line)``) before every statement of the final
   TIR that still carries the user's span (our passes keep the tile op's span on what they lower it to); none goes
   into a vectorised loop, so vectorisation is unchanged;
2. :func:`finish_source` turns each marker in the generated CUDA C into a comment, ``// tl.src "FILE":LINE``, so
   the compiled code is the program's own and the CUDA C reads as before;
3. the cubin and PTX are built with ``-lineinfo``; ptxas's line table names ``kernel.cu`` lines (and, for our
   ``tl::`` templates, the header line inlined at a ``kernel.cu`` line);
4. :func:`cuda_line_map` reads the comments back: every CUDA C line belongs to the last marker above it.
   :func:`sass_by_line` and :func:`ptx_by_line` then give each instruction its user line.

The mapping is by position in the generated code: a line between two markers (index arithmetic the code generator
hoisted, a barrier our passes inserted) is attributed to the statement above it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MARKER = "__tl_src_line"
_MARKER_RE = re.compile(rf"^(\s*)(?:\(void\))?{MARKER}\((\d+), (\d+)\);\s*$")
_COMMENT_RE = re.compile(r'//\s*tl\.src\s+"([^"]*)":(\d+)')


def _user_location(span: Any) -> tuple[str, int] | None:
    from ...transform.common.rewriter import location_of

    loc = location_of(span)
    if loc is None or loc.line <= 0 or not loc.file:
        return None
    return loc.file, loc.line


def mark_source_lines(mod: Any) -> tuple[Any, list[str]]:
    """``mod`` (our CUDA passes' output) with a marker call before each statement that carries a user span, inside
    the kernel's thread region and outside vectorised loops; returns (module, the file names the markers index)."""
    import tvm
    from tvm import tirx

    from ...transform.common.rewriter import first_span

    files: list[str] = []

    def marker(where: tuple[str, int]) -> Any:
        if where[0] not in files:
            files.append(where[0])
        call = tirx.call_extern("int32", MARKER, tirx.IntImm("int32", files.index(where[0])),
                                tirx.IntImm("int32", where[1]))
        return tirx.Evaluate(call)

    def visit(s: Any, device: bool, last: list[tuple[str, int] | None]) -> Any:
        if isinstance(s, tirx.SeqStmt):
            out: list[Any] = []
            for x in s.seq:
                where = _user_location(getattr(x, "span", None)) if device else None
                if where is None and device and isinstance(x, tirx.For) and x.kind == tirx.ForKind.VECTORIZED:
                    where = _user_location(first_span(x.body))  # not entered: its first statement's line
                if where is not None and where != last[0]:
                    out.append(marker(where))
                    last[0] = where
                out.append(visit(x, device, last))
            return tirx.SeqStmt(out, span=s.span)
        if isinstance(s, tirx.For):
            if s.kind == tirx.ForKind.VECTORIZED:
                return s
            inner = device or s.thread_binding is not None
            body = visit(s.body, inner, last)
            where = _user_location(getattr(s.body, "span", None))
            if inner and not isinstance(s.body, tirx.SeqStmt) and where is not None and where != last[0]:
                body = tirx.SeqStmt([marker(where), body])
            last[0] = None  # after a loop, the next statement gets its own marker
            return tirx.For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_binding, s.annotations, s.step,
                            s.span)
        if isinstance(s, tirx.IfThenElse):
            then = visit(s.then_case, device, [last[0]])
            els = visit(s.else_case, device, [last[0]]) if s.else_case is not None else None
            return tirx.IfThenElse(s.condition, then, els, span=s.span)
        if isinstance(s, tirx.AttrStmt):
            inner = device or s.attr_key == "thread_extent"
            return tirx.AttrStmt(s.node, s.attr_key, s.value, visit(s.body, inner, last), span=s.span)
        if isinstance(s, tirx.While):
            return tirx.While(s.condition, visit(s.body, device, [None]), span=s.span)
        return s

    out = {}
    for gv, func in mod.functions.items():
        out[gv] = func.with_body(visit(func.body, False, [None])) if isinstance(func, tirx.PrimFunc) else func
    return tvm.IRModule(out), files


def finish_source(source: str, files: list[str]) -> str:
    """The generated CUDA C with each marker call replaced by a ``// tl.src "FILE":LINE`` comment (same line
    count, so ptxas's line numbers are this text's)."""
    lines = source.split("\n")
    for i, text in enumerate(lines):
        if MARKER in text:
            m = _MARKER_RE.match(text)
            if m is None:  # a marker inside an expression: never emitted by mark_source_lines
                raise ValueError(f"finish_source: unexpected use of {MARKER} in generated line {i + 1}: {text!r}")
            file = files[int(m.group(2))].replace('"', "'")
            lines[i] = f'{m.group(1)}// tl.src "{file}":{m.group(3)}'
    return "\n".join(lines)


def cuda_line_map(source: str) -> dict[int, tuple[str, int]]:
    """CUDA C line (1-based) -> the user's (file, line) it belongs to: the last ``tl.src`` comment above it.
    Empty for a build without source lines."""
    out: dict[int, tuple[str, int]] = {}
    current: tuple[str, int] | None = None
    for i, text in enumerate(source.split("\n"), start=1):
        m = _COMMENT_RE.search(text)
        if m:
            current = (m.group(1), int(m.group(2)))
        elif current is not None:
            out[i] = current
        if text.startswith("}"):  # the kernel's closing brace: what follows is another function
            current = None
    return out


# -- SASS and PTX by line ------------------------------------------------------------------------------------------
@dataclass
class Instruction:
    """One SASS or PTX instruction: its text (``HMMA.16816.F32 R4, R8, R12, R4``), opcode (``HMMA``), the CUDA C
    line it came from and the user's (file, line) where known."""

    text: str
    opcode: str
    cuda_line: int | None = None
    user: tuple[str, int] | None = None


@dataclass
class LineListing:
    """A disassembly split by the user's lines: ``instructions`` in order, and ``by_line[(file, line)]`` the
    indices of each line's instructions."""

    instructions: list[Instruction]
    by_line: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def lines(self) -> list[tuple[str, int]]:
        return sorted(self.by_line, key=lambda fl: (fl[0], fl[1]))

    def of(self, line: int, file: str | None = None) -> list[Instruction]:
        """The instructions of the user's ``line`` (in ``file``; default: any file)."""
        return [self.instructions[i] for (f, ln), idx in self.by_line.items() if ln == line
                and (file is None or f == file) for i in idx]


_SASS_INSN = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_FILE_LINE = re.compile(r'//## File "([^"]*)", line (\d+)(?:.*?inlined at "([^"]*)", line (\d+))?')


def sass_opcode(text: str) -> str:
    """``@!P0 BRA `(.L_x_1)`` -> ``BRA``; ``HMMA.16816.F32 R4, ...`` -> ``HMMA``."""
    t = re.sub(r"^\{?\s*@!?U?P[T0-9]+\s+", "", text.strip().lstrip("{").strip())
    return re.split(r"[\s.]", t, maxsplit=1)[0] if t else ""


def _kernel_cu_line(file: str, line: int, chain: list[tuple[str, int]]) -> int | None:
    """The ``kernel.cu`` line of an instruction: its own line when in kernel.cu, else the outermost inlined-at
    line that is."""
    for f, ln in [(file, line), *chain]:
        if f.endswith("kernel.cu"):
            return ln
    return None


def sass_by_line(sass: str, cuda_source: str) -> LineListing:
    """``nvdisasm --print-line-info-inline`` output of a ``-lineinfo`` cubin, split by the user's lines through
    the CUDA C's ``tl.src`` comments."""
    cmap = cuda_line_map(cuda_source)
    insns: list[Instruction] = []
    current: int | None = None
    for text in sass.splitlines():
        if text.lstrip().startswith("//##"):
            m = re.search(r'File "([^"]*)", line (\d+)', text)
            if m:
                chain = [(f, int(ln)) for f, ln in re.findall(r'inlined at "([^"]*)", line (\d+)', text)]
                current = _kernel_cu_line(m.group(1), int(m.group(2)), chain)
            continue
        m = _SASS_INSN.match(text)
        if m and m.group(1):
            body = m.group(1)
            insns.append(Instruction(body, sass_opcode(body), current, cmap.get(current) if current else None))
    return _listing(insns)


def ptx_by_line(ptx: str, cuda_source: str) -> LineListing:
    """PTX built with ``-lineinfo`` (``.loc FILE LINE COL`` directives, ``.file`` table at the end) split by the
    user's lines. A ``.loc`` inside one of our headers keeps the ``kernel.cu`` line of the call it is inlined
    into."""
    cmap = cuda_line_map(cuda_source)
    files = {int(n): f for n, f in re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, flags=re.M)}
    insns: list[Instruction] = []
    current: int | None = None
    for text in ptx.splitlines():
        s = text.strip()
        m = re.match(r"\.loc\s+(\d+)\s+(\d+)\s+\d+(.*)$", s)
        if m:
            chain = [(files.get(int(f), ""), int(ln)) for f, ln in re.findall(r"inlined_at\s+(\d+)\s+(\d+)",
                                                                             m.group(3))]
            line = _kernel_cu_line(files.get(int(m.group(1)), ""), int(m.group(2)), chain)
            if line is not None or not chain:
                current = line
            continue
        if not s or s.startswith(("//", ".", "{", "}", "$", ")", "(")) or s.endswith(":") or not re.match(r"[@a-z]", s):
            continue
        body = s.split(None, 1)[1] if s.startswith("@") and " " in s else s
        insns.append(Instruction(s.rstrip(";"), re.split(r"[\s.;]", body, maxsplit=1)[0], current,
                                 cmap.get(current) if current else None))
    return _listing(insns)


def _listing(insns: list[Instruction]) -> LineListing:
    by: dict[tuple[str, int], list[int]] = {}
    for i, ins in enumerate(insns):
        if ins.user is not None:
            by.setdefault(ins.user, []).append(i)
    return LineListing(insns, by)


# -- instruction mix ----------------------------------------------------------------------------------------------
# Families a kernel engineer looks for, by SASS opcode (sm_80/sm_90).
MIX_FAMILIES: dict[str, tuple[str, ...]] = {
    "HGMMA": ("HGMMA", "WARPGROUP"),
    "HMMA": ("HMMA", "IMMA"),
    "LDGSTS": ("LDGSTS", "LDGDEPBAR"),
    "UTMALDG": ("UTMALDG", "UTMASTG", "UBLKCP"),
    "LDS/STS": ("LDS", "STS", "LDSM", "STSM"),
    "LDG/STG": ("LDG", "STG"),
    "FFMA": ("FFMA", "FMUL", "FADD", "HFMA2", "HADD2", "HMUL2"),
    "spills": ("LDL", "STL"),
    "BAR": ("BAR", "SYNCS"),
}


def mix_family(opcode: str) -> str | None:
    for fam, ops in MIX_FAMILIES.items():
        if opcode in ops:
            return fam
    return None


def instruction_mix(insns: list[Instruction]) -> dict[str, int]:
    """Counts per :data:`MIX_FAMILIES` family, plus ``total``."""
    out = dict.fromkeys(MIX_FAMILIES, 0)
    for ins in insns:
        fam = mix_family(ins.opcode)
        if fam is not None:
            out[fam] += 1
    out["total"] = len(insns)
    return out


__all__ = ["MARKER", "mark_source_lines", "finish_source", "cuda_line_map", "Instruction", "LineListing",
           "sass_with_lines", "sass_by_line", "ptx_by_line", "sass_opcode", "instruction_mix", "mix_family",
           "MIX_FAMILIES"]


def sass_with_lines(cubin: Any) -> str | None:
    """The SASS of ``cubin`` with its line table (``nvdisasm --print-line-info-inline``); None without nvdisasm."""
    from pathlib import Path

    from .resources import find_cuda_tool, run_tool

    tool = find_cuda_tool("nvdisasm")
    if tool is None or not Path(cubin).is_file():
        return None
    return run_tool([tool, "--print-line-info-inline", "--print-code", str(cubin)])
