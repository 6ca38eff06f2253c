"""Tile-op registration and region plumbing shared by the language modules and the passes.

Tile ops (``tl.copy``, ``tl.gemm`` ...) are TVM ``Op``s created from Python and emitted as
``Evaluate(Call(op, args))`` statements, so the program stays ordinary TIR until our passes lower it.
Operands that name a piece of a buffer are carried as ``BufferRegion`` arguments; this module turns the three
spellings a user may write (a whole buffer, TileLang's start-index form ``A[i, j]`` and an explicit slice
``A[a:b, c:d]``) into one region form and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx
from tvm.ir import Op, Range, TensorLoad, TensorRegion

TILE_OPS = ("tl.copy", "tl.gemm", "tl.fill", "tl.reduce", "tl.atomic_add", "tl.print", "tl.use_swizzle",
            "tl.import_source", "tl.annotate_layout")

for _name in TILE_OPS:
    tvm.ir.register_op_attr(_name, "TCallEffectKind", 3)  # opaque: never moved or removed by TVM
    tvm.ir.register_op_attr(_name, "TScriptPrinterName", _name)

OPS = {name: Op.get(name) for name in TILE_OPS}


def emit(op_name: str, args: list[Any]) -> None:
    """Append ``Evaluate(tl.<op>(args))`` to the statement being built by the TVMScript parser."""
    from tvm.script import tirx as _T

    _T.evaluate(tvm.ir.Call(OPS[op_name], list(args), ret_ty="handle"))


def is_buffer(x: Any) -> bool:
    return tirx.is_buffer_var(x) if isinstance(x, tvm.ir.Var) else False


def describe(x: Any) -> str:
    """A short human description of an operand, for error messages."""
    if is_buffer(x):
        return f"buffer {x.name}{list(map(int_or_expr, x.shape))} ({x.dtype}, scope {x.scope()})"
    if isinstance(x, TensorLoad):
        return f"element/start index {x.source.name}[{', '.join(map(str, x.indices))}]"
    if isinstance(x, TensorRegion):
        return f"region {x.source.name}[{', '.join(f'{r.min}:{r.min}+{r.extent}' for r in x.region)}]"
    return f"{type(x).__name__} {x!r}"


def int_or_expr(e: Any) -> Any:
    return int(e) if isinstance(e, (tirx.IntImm, int)) else e


def _imm(v: Any) -> Any:
    return tirx.IntImm("int32", v) if isinstance(v, int) else v


def shape_of(x: Any) -> list[Any] | None:
    """The extents an operand spells out by itself (None for the start-index form)."""
    if isinstance(x, TensorLoad):
        return None
    if isinstance(x, TensorRegion):
        return [r.extent for r in x.region]
    if is_buffer(x):
        return list(x.shape)
    return None


def to_region(x: Any, extents_like: list[Any] | None, what: str) -> tirx.BufferRegion:
    """Normalise Buffer | A[i, j] (start index) | A[a:b, c:d] into a BufferRegion.

    For the start-index form the extents come from the other operand (``extents_like``); when that has fewer
    dimensions than the buffer, the leading dimensions get extent 1 (TileLang's rule).
    """
    if isinstance(x, TensorLoad):
        buf, mins = x.source, list(x.indices)
        if extents_like is None:
            raise TypeError(
                f"{what}: the start-index form {describe(x)} needs the other operand to have a known shape; "
                "give a whole buffer or an explicit slice on one side"
            )
        exts = list(extents_like)
        if len(exts) > len(mins):
            raise ValueError(f"{what}: {describe(x)} has rank {len(mins)} but the other operand has rank {len(exts)}")
        exts = [1] * (len(mins) - len(exts)) + exts
    elif isinstance(x, TensorRegion):
        return x
    elif is_buffer(x):
        buf, mins, exts = x, [0] * len(x.shape), list(x.shape)
    else:
        raise TypeError(f"{what}: expected a buffer, A[i, j] (start index) or A[a:b, c:d] (slice), got {describe(x)}")
    return tirx.BufferRegion(buf, [Range.from_min_extent(_imm(m), _imm(e)) for m, e in zip(mins, exts)])


@dataclass
class Region:
    """A decoded region operand: buffer, per-dimension start and extent."""

    buffer: Any
    mins: list[Any]
    extents: list[Any]

    @staticmethod
    def of(arg: Any) -> Region:
        return Region(arg.source, [r.min for r in arg.region], [r.extent for r in arg.region])

    @property
    def scope(self) -> str:
        return self.buffer.scope()


def dtype_of(e: Any) -> str | None:
    """The dtype string of a TIR expression (0.27 keeps it on ``expr.ty``), or None for non-expressions
    (buffers included: a Buffer is a Var in 0.27 but not a scalar value)."""
    if is_buffer(e):
        return None
    ty = getattr(e, "ty", None)
    dt = getattr(ty, "dtype", None)
    if dt is not None:
        return str(dt)
    dt = getattr(e, "dtype", None)
    return str(dt) if dt is not None else None
