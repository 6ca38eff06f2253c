"""Streaming (evict-first) loads for tensors a CUDA kernel reads once: ``__ldcs`` instead of a plain load.

Why this exists: a memory-bound kernel (GEMV, elementwise, a row softmax that keeps its row in registers) streams
its big input through the 50 MB L2 once. With plain loads those lines take the L2's normal priority, so they evict
whatever else is there — another kernel's data, or dirty lines that must then be written back while this kernel
runs (on the H200, after ``triton.testing.do_bench``'s write flush, a 128 MB fp16 GEMV paid ~8 µs for it). The
``.cs`` ("cache streaming, likely accessed once") qualifier allocates those lines evict-first instead: the stream
recycles its own lines and leaves the rest of the L2 alone. It is a cache hint: results are unchanged.

Which tensors: a read-only kernel parameter (never stored to, never passed by address to a device template — those
are cp.async sources, tensor-core operands, ...) all of whose loads (a) index with every enclosing loop and block /
thread index of extent > 1 — so no load instance re-reads what another block, thread or iteration of the same
site reads — (b) sit under the same innermost serial loop, so a two-pass kernel that reads its input again in a
second loop keeps normal caching, and (c) never read the same index twice — in a kernel that writes less than a
quarter of that input's bytes (GEMV, reductions; not elementwise kernels or softmax, which churn the L2 with their
own output and measured a few % slower with it). The rewrite is textual, on the
generated CUDA: ``*(T*)(X_ptr + i)`` becomes ``__ldcs((const T*)(X_ptr + i))`` and ``X_ptr[i]`` becomes
``__ldcs(&X_ptr[i])``, for the element and vector types ``__ldcs`` has overloads for; other forms are left as they
are. ``pass_configs={"tl.cuda.streaming_loads": False}`` turns it off.
"""

from __future__ import annotations

import re
from typing import Any

# the vector / scalar types of TVM's CUDA loads that __ldcs takes (CUDA's sm_32_intrinsics + cuda_fp16 overloads)
LDCS_TYPES = {"float", "float2", "float4", "int", "int2", "int4", "uint", "uint2", "uint4", "half", "half2",
              "__half", "__half2", "double", "double2", "char", "uchar", "signed char", "unsigned char", "short",
              "ushort", "char2", "char4", "uchar2", "uchar4", "short2", "short4", "ushort2", "ushort4"}
WRITE_SHARE = 4  # stream an input only if the kernel writes less than a quarter of its bytes
SCALAR_DTYPES = {"float32", "float16", "int32", "uint32", "float64", "int8", "uint8", "int16", "uint16"}


def streaming_buffers(func: Any) -> dict[str, str]:
    """Names (and dtypes) of the parameters of ``func`` (our lowered TIR, before TVM's device passes) that are
    read once per element (see the module doc)."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    params = {buf: buf.name for buf in func.params}
    by_name = {name: buf for buf, name in params.items()}
    sites: dict[str, list[tuple[Any, list[Any]]]] = {}  # name -> [(innermost serial loop or None, indices)]
    excluded: set[str] = set()
    excluded_writes: set[str] = set()  # parameters the kernel stores to (its outputs)
    stack: list[Any] = []

    def param_of(buf: Any) -> str | None:
        for b, name in params.items():
            if b.same_as(buf):
                return name
        return None

    def vars_in(exprs: list[Any]) -> list[Any]:
        found: list[Any] = []
        for e in exprs:
            tvm_ffi.structural_map(e, [(tvm.ir.Var, lambda v: (found.append(v), v)[1])])
        return found

    def scan_expr(e: Any) -> None:
        def load(ld: Any) -> Any:
            name = param_of(ld.source)
            if name is not None:
                used = vars_in(list(ld.indices))
                ok = True
                for f in stack:
                    ext = f.extent
                    if isinstance(ext, tirx.IntImm) and int(ext.value) <= 1:
                        continue
                    if not any(v.same_as(f.loop_var) for v in used):
                        ok = False
                        break
                if not ok:
                    excluded.add(name)
                serial = [f for f in stack if f.thread_binding is None and f.kind != tirx.ForKind.VECTORIZED]
                sites.setdefault(name, []).append((serial[-1] if serial else None, list(ld.indices)))
            return ld

        def call(c: Any) -> Any:  # a parameter handed to a device template by address: not ours to rewrite
            if "address_of" in str(getattr(getattr(c, "op", None), "name", "")):
                for a in c.args:
                    excluded.update(_sources(a, param_of))
            return c

        tvm_ffi.structural_map(e, [(tvm.ir.Call, call)])
        tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load)])

    def visit(s: Any) -> None:
        if s is None:
            return
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                visit(x)
        elif isinstance(s, tirx.For):
            scan_expr(s.extent)
            stack.append(s)
            visit(s.body)
            stack.pop()
        elif isinstance(s, tirx.IfThenElse):
            scan_expr(s.condition)
            visit(s.then_case)
            visit(s.else_case)
        elif isinstance(s, tirx.BufferStore):
            name = param_of(s.buffer)
            if name is not None:
                excluded.add(name)  # written: not read-only
                excluded_writes.add(name)
            scan_expr(s.value)
            for i in s.indices:
                scan_expr(i)
        elif isinstance(s, tirx.Evaluate):
            scan_expr(s.value)
        elif hasattr(s, "body"):  # AttrStmt, While, ...: look inside, conservatively
            for attr in ("condition", "value"):
                if hasattr(s, attr):
                    scan_expr(getattr(s, attr))
            visit(s.body)
        elif hasattr(s, "value"):  # Bind / LetStmt
            scan_expr(s.value)

    visit(func.body)
    def nbytes(buf: Any) -> int:
        n = 1
        for x in buf.shape:
            n *= int(x) if isinstance(x, tirx.IntImm) else 1 << 30
        return n * tvm.runtime.DataType(str(buf.dtype)).bits // 8

    # only where reads dominate: a kernel that writes about as much as it streams in (elementwise, softmax) churns
    # the L2 with its own output anyway, and measured a few % slower with evict-first inputs on the H200
    written = sum(nbytes(by_name[n]) for n in excluded_writes)
    out: dict[str, str] = {}
    for name, ss in sites.items():
        if WRITE_SHARE * written > nbytes(by_name[name]):
            continue
        if name in excluded or str(by_name[name].dtype) not in SCALAR_DTYPES:
            continue
        owners = [owner for owner, _ in ss]
        first = owners[0]
        same_loop = all((o is None and first is None) or (o is not None and first is not None and o.same_as(first))
                        for o in owners)
        # the same index (up to the names of per-site loop variables, e.g. two vectorised loops) read twice
        reread = any(tvm_ffi.structural_equal(ss[i][1], ss[j][1], map_free_vars=True)
                     for i in range(len(ss)) for j in range(i))
        if same_loop and not reread:
            out[name] = str(by_name[name].dtype)
    return out


def _sources(e: Any, param_of: Any) -> list[str]:
    """Parameter names whose elements ``e`` (an ``address_of`` argument) points into."""
    import tvm
    import tvm_ffi

    found: list[str] = []

    def load(ld: Any) -> Any:
        name = param_of(ld.source)
        if name is not None:
            found.append(name)
        return ld

    tvm_ffi.structural_map(e, [(tvm.ir.TensorLoad, load)])
    return found


def _matching(text: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing the one at ``text[i]``."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _substitute(source: str, pat: re.Pattern[str], brackets: str, build: Any) -> str:
    """Replace each match of ``pat`` (ending on an opening bracket) through its closing bracket by
    ``build(match, inner_text)``; a ``None`` from ``build`` leaves that match alone."""
    pos = 0
    while (m := pat.search(source, pos)) is not None:
        open_i = m.end() - 1
        close_i = _matching(source, open_i, brackets[0], brackets[1])
        repl = build(m, source[open_i + 1:close_i]) if close_i >= 0 else None
        if repl is None:
            pos = m.end()
            continue
        source = source[:m.start()] + repl + source[close_i + 1:]
        pos = m.start() + len(repl)
    return source


def rewrite_source(source: str, names: dict[str, str]) -> str:
    """``source`` with the plain loads of the ``names`` parameters turned into ``__ldcs`` (see the module doc)."""
    for name in names:
        ptr = f"{name}_ptr"

        def vector(m: re.Match[str], inner: str) -> str | None:  # *(T*)(X_ptr + i)
            t = m.group("t").strip()
            return f"__ldcs((const {t}*)({inner}))" if t in LDCS_TYPES else None

        def scalar(m: re.Match[str], inner: str) -> str | None:  # X_ptr[i] (the pattern skips &X_ptr[i])
            return f"__ldcs(&{m.group(0)}{inner}])"

        source = _substitute(source, re.compile(r"\*\((?P<t>[A-Za-z_][\w ]*?)\*\)\((?=" + re.escape(ptr) + r"\b)"),
                             "()", vector)
        source = _substitute(source, re.compile(r"(?<![\w&])(?<!&\()(?<!& \()" + re.escape(ptr) + r"\["), "[]",
                             scalar)
    return source
