"""Helpers shared by the CUDA passes: the attributes they pass to each other, substitution, access collection.

Passes are plain Python functions over a ``PrimFunc``; what one pass decides and a later one needs (the thread
count, fragment layouts, the per-thread register array of each fragment, which shared tiles are swizzled, the
dynamic shared memory size) travels as ``PrimFunc`` attributes under the keys below, so each pass stays a pure
``PrimFunc -> PrimFunc`` function that can be traced and re-run on its own.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ._cuda_layouts import FragmentLayout

ATTR_LAUNCH = "tl.cuda_launch"  # {"grid": [gx, gy, gz], "threads": T}
ATTR_LAYOUTS = "tl.fragment_layouts"  # {fragment buffer: layout spec}
ATTR_LOCALS = "tl.fragment_locals"  # {fragment buffer: per-thread register array}
ATTR_SWIZZLE = "tl.shared_swizzle"  # {shared buffer: swizzle shift (0 = none)}
ATTR_SMEM = "tl.dyn_smem_bytes"  # int

SCOPE_FRAGMENT = "local.fragment"
PER_THREAD_SCOPES = ("local", "local.var")
SHARED_SCOPES = ("shared", "shared.dyn")


def is_buffer(x: Any) -> bool:
    return isinstance(x, tvm.ir.Var) and tirx.is_buffer_var(x)


def scope_of(buf: Any) -> str:
    return buf.scope() or "global"


def is_shared(buf: Any) -> bool:
    return scope_of(buf) in SHARED_SCOPES


def is_fragment(buf: Any) -> bool:
    return scope_of(buf) == SCOPE_FRAGMENT


def launch_info(func: Any) -> tuple[list[Any], int]:
    """(grid, threads); a symbolic grid extent (``T.ceildiv(m, bM)`` of a symbolic size) stays an expression."""
    info = func.attrs[ATTR_LAUNCH]
    return [_int_or_expr(g) for g in info["grid"]], int(info["threads"])


def _int_or_expr(g: Any) -> Any:
    try:
        return int(g)
    except TypeError:
        return g


def thread_count(func: Any) -> int:
    return launch_info(func)[1]


def layouts_of(func: Any) -> dict[Any, FragmentLayout]:
    attrs = func.attrs
    if attrs is None or ATTR_LAYOUTS not in attrs:
        return {}
    return {k: FragmentLayout.from_spec(str(v)) for k, v in attrs[ATTR_LAYOUTS].items()}


def locals_of(func: Any) -> dict[Any, Any]:
    attrs = func.attrs
    if attrs is None or ATTR_LOCALS not in attrs:
        return {}
    return dict(attrs[ATTR_LOCALS].items())


def swizzles_of(func: Any) -> dict[Any, int]:
    attrs = func.attrs
    if attrs is None or ATTR_SWIZZLE not in attrs:
        return {}
    return {k: int(v) for k, v in attrs[ATTR_SWIZZLE].items()}


def find_thread_var(func: Any) -> Any:
    """The ``threadIdx.x`` loop variable added by ``tl.LowerKernelLaunchCUDA``."""
    found: list[Any] = []

    def visit(s: Any) -> Any:
        tb = s.thread_binding
        if tb is not None and str(tb.thread_tag) == "threadIdx.x":
            found.append(s.loop_var)
        return s

    tvm_ffi.structural_map(func.body, [(tirx.For, visit)])
    if not found:
        raise ValueError("no threadIdx.x loop: run tl.LowerKernelLaunchCUDA first")
    return found[0]


def substitute(node: Any, vmap: dict[Any, Any]) -> Any:
    """Replace free variables of ``node`` (a Stmt or PrimExpr) by expressions."""
    if not vmap:
        return node

    def swap(v: Any) -> Any:
        return vmap.get(v, v)

    return tvm_ffi.structural_map(node, [(tvm.ir.Var, swap)])


def loads_in(node: Any) -> list[Any]:
    """Every TensorLoad (BufferLoad) inside ``node``, in post-order."""
    out: list[Any] = []

    def rec(x: Any) -> Any:
        out.append(x)
        return x

    tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, rec)])
    return out


def sync_stmt() -> Any:
    """``__syncthreads()``."""
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", tvm.ir.StringImm("shared")))


def is_sync(s: Any) -> bool:
    if not isinstance(s, tirx.Evaluate) or not isinstance(s.value, tvm.ir.Call):
        return False
    op = s.value.op
    return isinstance(op, tvm.ir.Op) and str(op.name) == "tirx.tvm_storage_sync"


def extern(name: str, *args: Any, dtype: str = "int32") -> Any:
    """``Evaluate(call_extern(name, args))`` — a call to a device function of our CUDA headers."""
    return tirx.Evaluate(tirx.call_extern(dtype, name, *args))


def extern_name(call: Any) -> str | None:
    """The device function a ``call_extern`` names (its first argument), else None."""
    if call.args and isinstance(call.args[0], tvm.ir.StringImm):
        return str(call.args[0].value)
    return None


def calls_extern(node: Any, name: str, exact: bool = False) -> bool:
    """``node`` calls a device function named ``name`` (``exact``) or whose name starts with it."""
    hit: list[Any] = []

    def rec(c: Any) -> Any:
        n = extern_name(c)
        if n is not None and (n == name or (not exact and n.startswith(name))):
            hit.append(c)
        return c

    tvm_ffi.structural_map(node, [(tvm.ir.Call, rec)])
    return bool(hit)


def parallel_nest(s: Any, attr: str) -> tuple[list[Any], list[Any], Any]:
    """Loop vars, extents and body of a ``T.Parallel`` nest starting at ``s``."""
    vs, exts = [s.loop_var], [s.extent]
    body = s.body
    while isinstance(body, tirx.For) and attr in body.annotations:
        vs.append(body.loop_var)
        exts.append(body.extent)
        body = body.body
    return vs, exts, body
