"""Differential fuzzing of the compiler: a seeded generator of valid tile programs and their torch references.

Why: hand-written tests cover the shapes their authors thought of; the lowerings have many paths chosen by shape
(aligned or ragged tiles, vectorised or scalar loops, tensor-core or FMA gemm, reductions along the contiguous
dimension or not), and a wrong index in one of them only shows for some shape. ``generate(seed)`` returns one
program in TileLang's classic spelling (``@T.prim_func``, ``T.Kernel``, ``T.alloc_shared``/``alloc_fragment``,
``T.copy``, ``T.gemm`` with transposes, ``T.Parallel`` epilogues, ``T.reduce_*`` along either axis with ``clear``
on and off, ``T.Pipelined`` loops, ragged shapes, non-power-of-two tiles, fp32/fp16/bf16 with fp32 accumulation,
1- to 3-D tensors) as source text, with a torch reference computed in float64 from the spec (never from the
program text) and tolerances by dtype. The same seed always gives the same program, so a failure is a seed.

Semantics the references model (documented behaviour of the language, see README "Language reference"): a tile
copy reads zeros past a tensor's edge and skips writes past it, so a reduction over an edge tile sees those
zeros; ``clear=False`` combines the reduction with what the destination holds.

``python -m tests.program_fuzzer --seed N`` prints seed N's program and runs it on the CPU against torch
(``--target cuda`` on a GPU; ``--show`` only prints). ``check_on(program, "cpu")`` is what the tests call.
"""

from __future__ import annotations

import argparse
import linecache
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / ".artifacts" / "fuzz"
FAMILIES = ("gemm", "reduce", "elementwise")
DTYPES = ("float32", "float16", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
INPUT_BOUND = 3.0  # inputs are randn clipped to [-3, 3], so the elementwise bound tracking below holds

# Tile sizes both backends accept for T.gemm (CUDA splits M and N over warps: multiples of 16); non-powers of two
# included on purpose.
GEMM_TILES_MN = (16, 32, 48, 64, 80)
GEMM_TILES_K = (8, 16, 24, 32)
# Reduction and element-wise tiles: anything, non-powers of two included.
TILES = (1, 3, 4, 5, 8, 12, 16, 24, 32, 40, 64)


@dataclass
class Param:
    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool = False


@dataclass
class FuzzProgram:
    """One generated program: its source (defining ``name``, a ``@T.prim_func``), parameters, reference."""

    seed: int
    family: str
    name: str
    source: str
    params: list[Param]
    reference: Callable[[list[torch.Tensor]], list[torch.Tensor]]  # inputs -> outputs (float64)
    rtol: float
    atol: float
    summary: str = ""
    inputs_fill: dict[str, str] = field(default_factory=dict)  # name -> "randn" (default)

    @property
    def inputs(self) -> list[Param]:
        return [p for p in self.params if not p.is_output]

    @property
    def outputs(self) -> list[Param]:
        return [p for p in self.params if p.is_output]

    def prim_func(self) -> Any:
        """Execute the source (registered with ``linecache`` so TVMScript can read it) and return the function."""
        filename = f"<fuzz seed {self.seed}>"
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True), filename)
        namespace: dict[str, Any] = {}
        exec(compile(self.source, filename, "exec"), namespace)  # noqa: S102 - our own generated program
        return namespace[self.name]

    def make_inputs(self, device: str = "cpu") -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        out = []
        for p in self.inputs:
            x = torch.randn(p.shape, generator=gen, dtype=torch.float64).clamp_(-INPUT_BOUND, INPUT_BOUND)
            out.append(x.to(TORCH_DTYPES[p.dtype]).to(device))
        return out

    def poisoned_outputs(self, device: str = "cpu") -> list[torch.Tensor]:
        """Outputs filled with NaN: an element the kernel never writes fails the comparison."""
        return [torch.full(p.shape, float("nan"), dtype=TORCH_DTYPES[p.dtype], device=device) for p in self.outputs]

    def header(self) -> str:
        return f"# fuzz seed {self.seed}: {self.family}: {self.summary}\n"


# -- helpers for the program text -----------------------------------------------------------------------------


def _tensor(p: Param) -> str:
    return f"{p.name}: T.Tensor({p.shape!r}, {p.dtype!r})"


def _signature(name: str, params: list[Param]) -> str:
    return (f"import tilelang_core.language as T\n\n\n@T.prim_func\ndef {name}("
            + ", ".join(_tensor(p) for p in params) + "):\n")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pad_to(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    """Zeros appended along ``dim`` up to a multiple (what a tile copy reads past the edge)."""
    extra = _cdiv(x.shape[dim], multiple) * multiple - x.shape[dim]
    if extra == 0:
        return x
    shape = list(x.shape)
    shape[dim] = extra
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _tol(stored: list[str], compute: str, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol): rtol covers rounding to the coarsest ``stored`` dtype, atol the rounding of the arithmetic
    in ``compute`` dtype on intermediate values up to ``scale`` in magnitude (cancellation near zero)."""
    return 4 * max(EPS[d] for d in stored), 4 * EPS[compute] * scale + 1e-6


# -- GEMM -----------------------------------------------------------------------------------------------------


def _gen_gemm(rng: random.Random, seed: int, name: str) -> FuzzProgram:
    dt = rng.choice(DTYPES)
    out_dt = rng.choice([dt, "float32"])
    bm, bn = rng.choice(GEMM_TILES_MN), rng.choice(GEMM_TILES_MN)
    bk = rng.choice(GEMM_TILES_K)
    ragged = rng.random() < 0.7
    M = rng.randint(1, 2 * bm) if ragged else bm * rng.randint(1, 2)
    N = rng.randint(1, 2 * bn) if ragged else bn * rng.randint(1, 2)
    K = rng.randint(1, 3 * bk) if ragged else bk * rng.randint(1, 3)
    ta, tb = rng.random() < 0.4, rng.random() < 0.5
    batch = rng.choice([0, 0, 0, 2])  # 3-D operands with a batch grid dimension
    stages = rng.choice([0, 1, 2, 3])
    threads = 128
    epi = rng.choice(["none", "relu", "bias", "scale_clamp", "bias_relu"])
    via_shared = rng.random() < 0.4

    pre = (batch,) if batch else ()
    a_shape = pre + ((K, M) if ta else (M, K))
    b_shape = pre + ((N, K) if tb else (K, N))
    params = [Param("A", a_shape, dt), Param("B", b_shape, dt)]
    if "bias" in epi:
        params.append(Param("Bias", (N,), dt))
    params.append(Param("C", pre + (M, N), out_dt, is_output=True))

    z = "bz, " if batch else ""
    grid = f"T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm})" + (f", {batch}" if batch else "")
    ids = "(bx, by, bz)" if batch else "(bx, by)"
    a_tile, a_idx = ((bk, bm), f"A[{z}k * {bk}, by * {bm}]") if ta else ((bm, bk), f"A[{z}by * {bm}, k * {bk}]")
    b_tile, b_idx = ((bn, bk), f"B[{z}bx * {bn}, k * {bk}]") if tb else ((bk, bn), f"B[{z}k * {bk}, bx * {bn}]")
    src = _signature(name, params)
    src += f"    with T.Kernel({grid}, threads={threads}) as {ids}:\n"
    src += f"        A_s = T.alloc_shared({a_tile!r}, {dt!r})\n"
    src += f"        B_s = T.alloc_shared({b_tile!r}, {dt!r})\n"
    src += f"        C_f = T.alloc_fragment(({bm}, {bn}), \"float32\")\n"
    if via_shared:
        src += f"        C_s = T.alloc_shared(({bm}, {bn}), {out_dt!r})\n"
    src += "        T.clear(C_f)\n"
    src += f"        for k in T.Pipelined(T.ceildiv({K}, {bk}), num_stages={stages}):\n"
    src += f"            T.copy({a_idx}, A_s)\n"
    src += f"            T.copy({b_idx}, B_s)\n"
    src += f"            T.gemm(A_s, B_s, C_f, transpose_A={ta}, transpose_B={tb})\n"
    body = {
        "relu": "T.max(C_f[i, j], 0)",
        "bias": f"C_f[i, j] + T.cast(Bias[bx * {bn} + j], \"float32\")",
        "scale_clamp": "T.min(C_f[i, j] * 0.5, 2.0)",
        "bias_relu": f"T.max(C_f[i, j] + T.cast(Bias[bx * {bn} + j], \"float32\"), 0.0)",
    }.get(epi)
    if body is not None:
        src += f"        for i, j in T.Parallel({bm}, {bn}):\n"
        src += f"            C_f[i, j] = {body}\n"
    dst = f"C[{z}by * {bm}, bx * {bn}]"
    if via_shared:
        src += "        T.copy(C_f, C_s)\n"
        src += f"        T.copy(C_s, {dst})\n"
    else:
        src += f"        T.copy(C_f, {dst})\n"

    def reference(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        a, b = inputs[0].double(), inputs[1].double()
        a = a.transpose(-1, -2) if ta else a
        b = b.transpose(-1, -2) if tb else b
        c = a @ b
        if "bias" in epi:
            c = c + inputs[2].double()
        if epi in ("relu", "bias_relu"):
            c = c.clamp_min(0)
        if epi == "scale_clamp":
            c = (c * 0.5).clamp_max(2.0)
        return [c]

    rtol, atol = _tol([dt, out_dt], "float32", scale=K * INPUT_BOUND**2)
    summary = (f"{dt}->{out_dt} M,N,K={M},{N},{K} tiles {bm}x{bn}x{bk} tA={ta} tB={tb} batch={batch} "
               f"stages={stages} epilogue={epi}{' via shared' if via_shared else ''}")
    return FuzzProgram(seed, "gemm", name, src, params, reference, rtol, atol, summary)


# -- reductions -----------------------------------------------------------------------------------------------

_IDENTITY = {"sum": "0.0", "abssum": "0.0", "absmax": "0.0", "max": "-T.infinity(\"float32\")",
             "min": "T.infinity(\"float32\")"}


def _torch_reduce(kind: str, x: torch.Tensor, dim: int) -> torch.Tensor:
    if kind == "sum":
        return x.sum(dim)
    if kind == "abssum":
        return x.abs().sum(dim)
    if kind == "max":
        return x.amax(dim)
    if kind == "min":
        return x.amin(dim)
    return x.abs().amax(dim)


def _combine(kind: str, acc: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
    if kind in ("sum", "abssum"):
        return acc + part
    return torch.maximum(acc, part) if kind in ("max", "absmax") else torch.minimum(acc, part)


def _combine_text(kind: str, acc: str, part: str) -> str:
    if kind in ("sum", "abssum"):
        return f"{acc} + {part}"
    return f"T.max({acc}, {part})" if kind in ("max", "absmax") else f"T.min({acc}, {part})"


def _gen_reduce(rng: random.Random, seed: int, name: str) -> FuzzProgram:
    """Reduce a 2-D (or a 2-D slice of a 3-D) tensor along rows (dim=1) or columns (dim=0), looping over tiles
    of the reduced dimension; the running result either accumulates in ``dst`` (``clear=False``) or in a
    partial (``clear=True``) combined by a ``T.Parallel`` step."""
    dt = rng.choice(DTYPES)
    out_dt = rng.choice([dt, "float32"])
    kind = rng.choice(["sum", "max", "min", "abssum", "absmax"])
    dim = rng.choice([0, 1])
    bm, bn = rng.choice(TILES), rng.choice(TILES)
    M, N = rng.randint(1, 3 * bm + 2), rng.randint(1, 3 * bn + 2)
    batch = rng.choice([0, 0, 2])
    stages = rng.choice([0, 1, 2])
    mode = rng.choice(["accumulate", "partial", "single"])  # accumulate: clear=False; partial: clear=True + combine
    tile_mem = rng.choice(["shared", "fragment"])
    tile_dt = rng.choice([dt, "float32"])  # a float32 tile casts in the copy
    start = rng.choice(["identity", "constant"])  # T.fill of dst before accumulating (clear=False)
    scale = rng.choice([None, 0.5, -1.0])

    kept, red = (bm, bn) if dim == 1 else (bn, bm)  # kept: tile extent of the output; red: of the reduced dim
    M_red, M_kept = (N, M) if dim == 1 else (M, N)
    if mode == "single":  # one tile covers the whole reduced dimension
        red = M_red + rng.randint(0, 3)
        if dim == 1:
            bn = red
        else:
            bm = red
    pre = (batch,) if batch else ()
    params = [Param("X", pre + (M, N), dt), Param("Out", pre + (M_kept,), out_dt, is_output=True)]
    z = "bz, " if batch else ""
    grid = f"T.ceildiv({M_kept}, {kept})" + (f", {batch}" if batch else "")
    ids = "(bx, bz)" if batch else "bx"
    x_idx = f"X[{z}bx * {bm}, k * {bn}]" if dim == 1 else f"X[{z}k * {bm}, bx * {bn}]"
    alloc = "T.alloc_shared" if tile_mem == "shared" else "T.alloc_fragment"
    src = _signature(name, params)
    src += f"    with T.Kernel({grid}, threads=128) as {ids}:\n"
    src += f"        X_t = {alloc}(({bm}, {bn}), {tile_dt!r})\n"
    src += f"        acc = T.alloc_fragment(({kept},), \"float32\")\n"
    init = _IDENTITY[kind] if start == "identity" else "0.75"
    if mode == "partial":
        src += f"        part = T.alloc_fragment(({kept},), \"float32\")\n"
    if mode == "single":
        x_idx = x_idx.replace("k * ", "0 * ")
        src += f"        T.copy({x_idx}, X_t)\n"
        clear = rng.random() < 0.5
        if not clear:
            src += f"        T.fill(acc, {init})\n"
        src += f"        T.reduce_{kind}(X_t, acc, dim={dim}, clear={clear})\n"
    else:
        clear = mode == "partial"
        src += f"        T.fill(acc, {init})\n"
        src += f"        for k in T.Pipelined(T.ceildiv({M_red}, {red}), num_stages={stages}):\n"
        src += f"            T.copy({x_idx}, X_t)\n"
        if mode == "accumulate":
            src += f"            T.reduce_{kind}(X_t, acc, dim={dim}, clear=False)\n"
        else:
            src += f"            T.reduce_{kind}(X_t, part, dim={dim}, clear=True)\n"
            src += f"            for i in T.Parallel({kept}):\n"
            src += f"                acc[i] = {_combine_text(kind, 'acc[i]', 'part[i]')}\n"
    if scale is not None:
        src += f"        for i in T.Parallel({kept}):\n"
        src += f"            acc[i] = acc[i] * {scale}\n"
    src += f"        T.copy(acc, Out[{z}bx * {kept}])\n"
    seeded = mode != "single" or not clear
    init_value = {"identity": {"sum": 0.0, "abssum": 0.0, "absmax": 0.0, "max": -math.inf, "min": math.inf}[kind],
                  "constant": 0.75}[start]

    def reference(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0].to(TORCH_DTYPES[tile_dt]).double()
        # the tile copy reads zeros past the edge of the reduced dimension (the kept one is cut on the way out)
        x = _pad_to(x, x.dim() - 1 - (1 - dim), red)
        r = _torch_reduce(kind, x, x.dim() - 1 - (1 - dim))
        if seeded:
            r = _combine(kind, torch.full_like(r, init_value), r)
        if scale is not None:
            r = r * scale
        return [r]

    rtol, atol = _tol([tile_dt, out_dt], "float32", scale=INPUT_BOUND * (M_red + 4))
    summary = (f"reduce_{kind} dim={dim} {dt} (tile {tile_mem} {tile_dt}) ->{out_dt} X{pre + (M, N)} tiles "
               f"{bm}x{bn} mode={mode} clear={clear} start={start if seeded else '-'} stages={stages} "
               f"scale={scale}")
    return FuzzProgram(seed, "reduce", name, src, params, reference, rtol, atol, summary)


# -- element-wise ---------------------------------------------------------------------------------------------


@dataclass
class _Expr:
    text: str  # TileLang expression
    fn: Callable[[dict[str, torch.Tensor]], torch.Tensor]  # float64 torch evaluation
    bound: float  # |value| <= bound
    ops: int


def _gen_expr(rng: random.Random, leaves: list[tuple[str, str]], depth: int, compute: str) -> _Expr:
    """A random expression over ``leaves`` ((text, key) pairs), in ``compute`` dtype, with a bound on |value| so
    the program cannot overflow (exp only of bounded arguments, products of bounded factors)."""
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.15:
            c = rng.choice([0.5, 1.5, -2.0, 3.0])
            return _Expr(repr(c), lambda env, c=c: torch.tensor(c, dtype=torch.float64), abs(c), 0)
        text, key = rng.choice(leaves)
        return _Expr(text, lambda env, key=key: env[key], INPUT_BOUND, 0)
    op = rng.choice(["add", "sub", "mul", "max", "min", "abs", "exp", "sigmoid", "tanh", "sqrt", "neg"])
    a = _gen_expr(rng, leaves, depth - 1, compute)
    if op in ("add", "sub", "mul", "max", "min"):
        b = _gen_expr(rng, leaves, depth - 1, compute)
        if op == "mul" and a.bound * b.bound > 64:
            op = "add"
        ops = a.ops + b.ops + 1
        if op == "add":
            return _Expr(f"({a.text} + {b.text})", lambda e: a.fn(e) + b.fn(e), a.bound + b.bound, ops)
        if op == "sub":
            return _Expr(f"({a.text} - {b.text})", lambda e: a.fn(e) - b.fn(e), a.bound + b.bound, ops)
        if op == "mul":
            return _Expr(f"({a.text} * {b.text})", lambda e: a.fn(e) * b.fn(e), a.bound * b.bound, ops)
        f = torch.maximum if op == "max" else torch.minimum
        return _Expr(f"T.{op}({a.text}, {b.text})", lambda e: f(a.fn(e), b.fn(e)), max(a.bound, b.bound), ops)
    if op == "exp" and a.bound > 4:
        op = "tanh"
    ops = a.ops + 1
    if op == "abs":
        return _Expr(f"T.abs({a.text})", lambda e: a.fn(e).abs(), a.bound, ops)
    if op == "neg":
        return _Expr(f"(-{a.text})", lambda e: -a.fn(e), a.bound, ops)
    if op == "exp":
        return _Expr(f"T.exp({a.text})", lambda e: a.fn(e).exp(), math.exp(a.bound), ops)
    if op == "sigmoid":
        return _Expr(f"T.sigmoid({a.text})", lambda e: torch.sigmoid(a.fn(e)), 1.0, ops)
    if op == "tanh":
        return _Expr(f"T.tanh({a.text})", lambda e: torch.tanh(a.fn(e)), 1.0, ops)
    c = 0.25  # sqrt of |a| + c: defined everywhere, derivative bounded
    return _Expr(f"T.sqrt(T.abs({a.text}) + {c})", lambda e: (a.fn(e).abs() + c).sqrt(), math.sqrt(a.bound + c), ops)


def _gen_elementwise(rng: random.Random, seed: int, name: str) -> FuzzProgram:
    """Y = f(X, Z) over a 1-, 2- or 3-D tensor; Z is full-shape or a vector broadcast along the last axis. Either
    through tiles (``T.copy`` in, ``T.Parallel`` on the tile, ``T.copy`` out) or by indexing the tensors inside
    ``T.Parallel`` (guarded at ragged edges)."""
    dt = rng.choice(DTYPES)
    out_dt = rng.choice([dt, "float32"])
    rank = rng.choice([1, 2, 3])
    compute = rng.choice(["float32", "float32", dt])  # arithmetic in float32 (casts) or in the storage dtype
    mode = rng.choice(["tiles", "direct"])
    broadcast = rank >= 2 and rng.random() < 0.4
    t_last = rng.choice(TILES)
    t_row = rng.choice(TILES) if rank >= 2 else 1
    shape = [rng.randint(1, 3 * t_last + 3)]
    if rank >= 2:
        shape.insert(0, rng.randint(1, 3 * t_row + 3))
    if rank == 3:
        shape.insert(0, rng.randint(1, 3))
    shape_t = tuple(shape)
    z_shape = (shape_t[-1],) if broadcast else shape_t
    params = [Param("X", shape_t, dt), Param("Z", z_shape, dt), Param("Y", shape_t, out_dt, is_output=True)]

    def leaf(buf: str, idx: str) -> str:
        ref = f"{buf}[{idx}]"
        return ref if compute == dt else f"T.cast({ref}, \"float32\")"

    n_last = shape_t[-1]
    if rank == 1:
        grid, ids, tile = f"T.ceildiv({n_last}, {t_last})", "bx", (t_last,)
        loop, lvars = f"T.Parallel({t_last})", "j"
        g_idx, t_idx, origin = f"bx * {t_last} + j", "j", f"bx * {t_last}"
        zg_idx, zt_idx = g_idx, t_idx
    else:
        n_row = shape_t[-2]
        z = "bz, " if rank == 3 else ""
        grid = f"T.ceildiv({n_last}, {t_last}), T.ceildiv({n_row}, {t_row})" + (f", {shape_t[0]}" if rank == 3 else "")
        ids = "(bx, by, bz)" if rank == 3 else "(bx, by)"
        tile = (t_row, t_last)
        loop, lvars = f"T.Parallel({t_row}, {t_last})", "i, j"
        g_idx = f"{z}by * {t_row} + i, bx * {t_last} + j"
        t_idx = "i, j"
        origin = f"{z}by * {t_row}, bx * {t_last}"
        zg_idx = f"bx * {t_last} + j" if broadcast else g_idx
        zt_idx = "j" if broadcast else t_idx
    expr = _gen_expr(rng, [("X", "X"), ("Z", "Z")], rng.randint(1, 3), compute)
    src = _signature(name, params)
    src += f"    with T.Kernel({grid}, threads=128) as {ids}:\n"
    if mode == "tiles":
        mem = rng.choice(["T.alloc_shared", "T.alloc_fragment"])
        src += f"        X_t = {mem}({tile!r}, {dt!r})\n"
        z_tile = (t_last,) if broadcast else tile
        z_origin = f"bx * {t_last}" if broadcast else origin
        src += f"        Z_t = {mem}({z_tile!r}, {dt!r})\n"
        src += f"        Y_t = T.alloc_fragment({tile!r}, {out_dt!r})\n"
        src += f"        T.copy(X[{origin}], X_t)\n"
        src += f"        T.copy(Z[{z_origin}], Z_t)\n"
        text = expr.text.replace("X", leaf("X_t", t_idx)).replace("Z", leaf("Z_t", zt_idx))
        src += f"        for {lvars} in {loop}:\n"
        src += f"            Y_t[{t_idx}] = {text}\n"
        src += f"        T.copy(Y_t, Y[{origin}])\n"
    else:
        text = expr.text.replace("X", leaf("X", g_idx)).replace("Z", leaf("Z", zg_idx))
        src += f"        for {lvars} in {loop}:\n"
        src += f"            Y[{g_idx}] = {text}\n"

    def reference(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        env = {"X": inputs[0].double(), "Z": inputs[1].double()}
        return [expr.fn(env) + torch.zeros(shape_t, dtype=torch.float64)]

    rtol, atol = _tol([compute, out_dt], compute, scale=expr.bound * (expr.ops + 1))
    summary = (f"{dt}->{out_dt} compute {compute} shape {shape_t} tile {tile} {mode} "
               f"{'broadcast Z ' if broadcast else ''}y = {expr.text}")
    return FuzzProgram(seed, "elementwise", name, src, params, reference, rtol, atol, summary)


# -- entry points ---------------------------------------------------------------------------------------------

_GENERATORS = {"gemm": _gen_gemm, "reduce": _gen_reduce, "elementwise": _gen_elementwise}


def generate(seed: int, family: str | None = None) -> FuzzProgram:
    """The program of ``seed`` (its family drawn from the seed unless given)."""
    rng = random.Random(seed)
    fam = family or FAMILIES[seed % len(FAMILIES)]
    return _GENERATORS[fam](rng, seed, f"fuzz_{seed}")


def compare(program: FuzzProgram, got: list[torch.Tensor], inputs: list[torch.Tensor]) -> str | None:
    """None when every output matches the float64 reference (rounded to the output dtype) within tolerance,
    else a message saying where and by how much it does not."""
    refs = program.reference([x.cpu() for x in inputs])
    for p, out, ref in zip(program.outputs, got, refs):
        out = out.cpu()
        ref = ref.to(TORCH_DTYPES[p.dtype]).double()
        if tuple(out.shape) != tuple(ref.shape):
            return f"output {p.name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
        o = out.double()
        unwritten = torch.isnan(o) & ~torch.isnan(ref)
        if unwritten.any():
            first = tuple(int(v) for v in unwritten.nonzero()[0])
            return f"output {p.name}: {int(unwritten.sum())} of {o.numel()} elements never written (first {first})"
        bad = ~torch.isclose(o, ref, rtol=program.rtol, atol=program.atol, equal_nan=True)
        if bad.any():
            first = tuple(int(v) for v in bad.nonzero()[0])
            err = (o - ref).abs()[bad]
            return (f"output {p.name}: {int(bad.sum())} of {o.numel()} elements differ (rtol={program.rtol:.2g}, "
                    f"atol={program.atol:.2g}); first at {first}: got {o[first].item():.6g}, expected "
                    f"{ref[first].item():.6g}; max abs error {err.max().item():.4g}")
    return None


def run_on(program: FuzzProgram, kernel: Any, device: str = "cpu") -> str | None:
    """Run a compiled ``kernel`` of ``program`` on fresh random inputs; a mismatch message or None."""
    inputs = program.make_inputs(device)
    outs = program.poisoned_outputs(device)
    kernel(*inputs, *outs)
    if device == "cuda":
        torch.cuda.synchronize()
    return compare(program, outs, inputs)


def check_on(program: FuzzProgram, target: str = "cpu") -> str | None:
    """Compile ``program`` for ``target`` ("cpu" or "cuda", run on that device) and compare with torch."""
    import tilelang_core as tilelang

    kernel = tilelang.compile(program.prim_func(), target=target)
    return run_on(program, kernel, "cuda" if target == "cuda" else "cpu")


def save_reproducer(program: FuzzProgram, message: str, target: str, directory: Path = ARTIFACTS) -> Path:
    """Write the failing program, its seed and the failure to ``directory/seed_<N>_<target>.py``; returns the
    path. The file is the program itself, runnable through ``python -m tests.program_fuzzer --seed N``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed_{program.seed}_{target}.py"
    lines = [program.header(),
             f"# target: {target}\n",
             "# failure: " + message.replace("\n", "\n#   ") + "\n",
             f"# reproduce: python -m tests.program_fuzzer --seed {program.seed} --target {target}\n\n",
             program.source]
    path.write_text("".join(lines))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True, nargs="+", help="seed(s) of the program(s)")
    ap.add_argument("--family", choices=FAMILIES, help="force a family (default: drawn from the seed)")
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda"], help="compile and run for (default cpu)")
    ap.add_argument("--show", action="store_true", help="print the program(s) only; compile nothing")
    args = ap.parse_args(argv)
    failed = 0
    for seed in args.seed:
        program = generate(seed, args.family)
        print(program.header() + program.source)
        if args.show:
            continue
        msg = check_on(program, args.target)
        print(f"seed {seed} on {args.target}: " + ("OK" if msg is None else f"MISMATCH: {msg}"))
        failed += msg is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
