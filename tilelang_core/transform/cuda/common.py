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

from ...language._ir import Region
from ..common.notes import ATTR_WGMMA_NOTES  # noqa: F401  (re-exported for the CUDA passes)
from ..common.regions import squeezed
from ..common.rewriter import const_int
from .layouts import FragmentLayout

# AttrStmt key around a wgmma T.gemm that leaves its group in flight (value: groups left pending, 1); set by
# tl.PipelineCUDA, read by tl.LowerTileOpsCUDA
WGMMA_PENDING_ATTR = "tl.wgmma_pending"
ATTR_LAUNCH = "tl.cuda_launch"  # {"grid": [gx, gy, gz], "threads": T}
ATTR_LAYOUTS = "tl.fragment_layouts"  # {fragment buffer: layout spec}
ATTR_LOCALS = "tl.fragment_locals"  # {fragment buffer: per-thread register array}
ATTR_SWIZZLE = "tl.shared_swizzle"  # {shared buffer: swizzle shift (0 = none)}
ATTR_SMEM = "tl.dyn_smem_bytes"  # int

SCOPE_FRAGMENT = "local.fragment"
PER_THREAD_SCOPES = ("local", "local.var")
SHARED_SCOPES = ("shared", "shared.dyn")


EVICTION_NAMES = ("evict_normal", "evict_first", "evict_last")  # T.copy(..., eviction_policy=) codes 0, 1, 2


def eviction_of(s: Any) -> int | None:
    """The ``eviction_policy`` code of a ``tl.copy`` statement (its fourth argument), None when not given."""
    args = s.value.args
    return const_int(args[3]) if len(args) > 3 else None


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


def buffers_touched(s: Any) -> list[Any]:
    """Every buffer a statement reads or writes (tile-op regions, loads, stores)."""
    found: list[Any] = []

    def region(r: Any) -> Any:
        found.append(r.source)
        return r

    def store(st: Any) -> Any:
        found.append(st.buffer)
        return st

    tvm_ffi.structural_map(s, [(tvm.ir.TensorRegion, region), (tirx.BufferStore, store)])
    found.extend(ld.source for ld in loads_in(s))
    return found


def count_uses(body: Any) -> dict[Any, int]:
    """Number of leaf statements touching each shared buffer."""
    counts: dict[Any, int] = {}

    def leaf(x: Any) -> None:
        for b in {id(b): b for b in buffers_touched(x)}.values():
            if is_shared(b):
                counts[b] = counts.get(b, 0) + 1

    def walk(x: Any) -> None:
        if isinstance(x, tirx.SeqStmt):
            for y in x.seq:
                walk(y)
        elif isinstance(x, (tirx.For, tirx.While, tirx.AttrStmt)):
            walk(x.body)
        elif isinstance(x, tirx.IfThenElse):
            walk(x.then_case)
            if x.else_case is not None:
                walk(x.else_case)
        else:
            leaf(x)

    walk(body)
    return counts


def gemm_operands(s: Any, ana: Any) -> dict[str, Any]:
    """Decode a ``tl.gemm`` statement: regions, flags, (M, N, K) and whether A/B are whole tiles."""
    args = s.value.args
    a, b, c = (Region.of(x) for x in args[:3])
    ta, tb, clear = (bool(const_int(x)) for x in args[3:6])
    policy = const_int(args[6]) or 0

    def mat(r: Region) -> list[Any]:
        dims = squeezed(r, ana)
        if len(dims) != 2:
            dims = [len(r.extents) - 2, len(r.extents) - 1]
        return [const_int(r.extents[d]) for d in dims]

    am, bm = mat(a), mat(b)
    M, K = (am[1], am[0]) if ta else (am[0], am[1])
    N = bm[0] if tb else bm[1]
    return {"a": a, "b": b, "c": c, "ta": ta, "tb": tb, "clear": clear, "policy": policy, "M": M, "N": N, "K": K,
            "a_whole": is_whole_tile(a) or is_fragment(a.buffer), "b_whole": is_whole_tile(b)}


def is_whole_tile(r: Region) -> bool:
    """The region is the whole buffer, or one whole slab ``X[s, :, :]`` of a buffer with leading stage dims."""
    shape = [const_int(x) for x in r.buffer.shape]
    n = len(shape)
    if n < 2:
        return False
    for d in range(n):
        e = const_int(r.extents[d])
        if d < n - 2:
            if e != 1:
                return False
        elif e != shape[d] or const_int(r.mins[d]) != 0:
            return False
    return True


def mentions(e: Any, var: Any) -> bool:
    """``var`` (by identity) occurs in the expression ``e``."""
    hit: list[Any] = []

    def rec(v: Any) -> Any:
        if v.same_as(var):
            hit.append(v)
        return v

    tvm_ffi.structural_map(e, [(tvm.ir.Var, rec)])
    return bool(hit)
