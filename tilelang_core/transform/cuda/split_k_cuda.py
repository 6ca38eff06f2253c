"""Pass: split the K loop of a ``T.gemm`` kernel over several blocks when its grid cannot fill the GPU (split-K).

At decode sizes (``M`` = 1..16) a GEMM's grid has ``N / block_N`` blocks — 64 for 8192 outputs in 128-wide tiles,
fewer than the 132 SMs of an H100/H200 — and each block runs the whole K loop alone. This pass gives each output
tile ``S`` blocks (a new ``blockIdx.z``), each running ``1/S`` of the K loop into its own accumulator, then meets
them exactly: every block stores its partial sums to a workspace of the kernel's module and counts its arrival
at the tile; the block whose arrival completes the tile adds the ``S`` partials in rank order (fp32, deterministic
whichever block is last) and alone runs the program's epilogue — everything after the K loop (``T.Parallel``
ReLU / bias / casts on the accumulator, ``T.copy`` to the output), which therefore sees the full sum exactly once.
The reduction is ``tl::splitk_global_reduce`` (``include/tl/splitk.cuh``); its workspace makes the kernel's
launches stream-ordered (``serial_streams`` in the launch metadata). The tile's arrival count carries the
launch's epoch (``%gridid``) and is never reset, so a launch that died half-way leaves no count that a later
launch would take for its own (docs/cuda.md, "the self-healing arrival counter").

Not specific to any operand: any kernel whose top-level K loop (``T.Pipelined`` or serial) only accumulates
``T.gemm`` products into one float32 fragment qualifies when

* the grid is constant and two-dimensional (``blockIdx.z`` free), with one ``threadIdx.x`` launch;
* the accumulator is zeroed before the loop (``T.clear`` / ``T.fill(acc, 0)``) and nothing else touches it there;
* inside the loop the accumulator is only a ``T.gemm`` destination (``clear_accum=False``), and nothing the loop
  writes is read after it except the accumulator (so a running max of flash attention refuses);
* nothing before the epilogue writes global memory (only ``T.copy`` reads of global tensors);
* the loop's trip count is a constant multiple of ``S`` with at least ``num_stages`` iterations per share.

``pass_configs["tl.cuda.split_k"]``: 0 (default) chooses ``S`` from the grid and the target's SM count: double
while the split grid stays within one wave — the SMs times the blocks of this kernel one SM holds — and each share
keeps at least ``max(8, 2 num_stages)`` K steps (the workspace round trip must be small next to the loop); 1 turns
splitting off; 2, 4, 8 force ``S``. The blocks an SM holds are estimated from the kernel's shared memory (the K
loop's ``T.copy`` destinations once per pipeline stage, every other shared tile once, and not the tiles
``tl.DequantFragmentsCUDA`` will leave unmaterialised), its threads, and its registers (the accumulator's per
thread plus :data:`REGISTER_MARGIN`); a W4A16 decode whose B fragments are computed in registers keeps 96 KB of
shared memory at 16x128x256 with 4 stages, two blocks per SM, and splits in 4 where the shared-tile decode
(160 KB) splits in 2 (measured on the H200: BENCHMARKS.md).
A forced split that cannot apply, or a kernel the automatic choice would split but the conditions rule out,
leaves a note (``tl.notes``) saying why. Kernels the W4A16 recogniser (``tl.FuseDequantGemmCUDA``) already split
are left alone (``blockIdx.z`` used). wgmma accumulators are split like mma.sync ones (measured on the H200: the
quickstart at 128x8192x28672 0.92x cuBLAS whole, 1.13x split in two; BENCHMARKS.md).
Decision and measurements: docs/cuda.md, "Dequantised GEMM by general mechanisms"."""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import Region
from ...language.loops import PARALLEL_ATTR, STAGES_ATTR
from ...pass_config import DEFAULT, PassConfig, PassConfigKey
from ..common.notes import add_notes, at_line
from ..common.regions import is_global
from ..common.rewriter import const_int, tile_op_name
from .common import ATTR_LAUNCH, extern, gemm_operands, is_fragment, is_shared, launch_info, layouts_of, locals_of
from .layouts import dtype_bytes

NUM_SMS = {"sm_80": 108, "sm_86": 84, "sm_89": 128, "sm_90": 132, "sm_90a": 132}  # A100 ... H100/H200 SXM
WORKSPACE_LIMIT = 64 << 20  # bytes of fp32 partials a kernel may keep in its module
REDUCE = "tl::splitk_global_reduce"
MIN_SHARE = 8  # K steps per block below which the automatic choice does not split
REGISTER_MARGIN = 64  # registers a thread needs besides its accumulators (addresses, loop state, operands)


def split_k_cuda(func: tirx.PrimFunc, arch: str = "sm_90", options: PassConfig = DEFAULT) -> tirx.PrimFunc:
    """Run the pass (see the module doc)."""
    forced = int(options[PassConfigKey.TL_CUDA_SPLIT_K])
    if forced == 1 or ATTR_LAUNCH not in (func.attrs or {}):
        return func
    return _SplitK(func, arch, forced, options).run()


class _SplitK:
    def __init__(self, func: tirx.PrimFunc, arch: str, forced: int, options: PassConfig = DEFAULT) -> None:
        self.func, self.arch, self.forced, self.options = func, arch, forced, options
        self.grid, self.threads = launch_info(func)
        self.sms = NUM_SMS.get(arch)
        self.small = (all(isinstance(g, int) for g in self.grid) and self.sms is not None
                      and self.grid[0] * self.grid[1] * self.grid[2] * 2 <= self.sms)

    def skip(self, why: str, at: Any = None, shape: bool = False) -> tirx.PrimFunc:
        """``func`` unchanged, with a note when the user asked for a split, or when the automatic choice wants one
        and ``shape`` is False (``shape``: the kernel is not a GEMM of split-K's form at all — attention's two
        accumulators, a cleared score tile — which is not worth a note unless a split was asked for)."""
        if self.forced > 1 or (not self.forced and not shape):
            where = at_line(at) if at is not None else ""
            return add_notes(self.func, [f"{where}split-K not applied: {why}"])
        return self.func

    def run(self) -> tirx.PrimFunc:  # noqa: C901 - one check per condition of the module doc
        func, grid = self.func, self.grid
        tloops = thread_loops(func.body)
        if not tloops:
            return func
        gemm_loops = [s for s in top_stmts(tloops[0]) if isinstance(s, tirx.For) and gemm_stmts(s)]
        if not gemm_loops:
            return func  # no T.gemm in a loop: nothing to split
        if not all(isinstance(g, int) for g in grid) or grid[2] != 1:
            if not self.forced:
                return func
            return self.skip("the grid is symbolic" if grid[2] == 1 else "the grid already uses blockIdx.z")
        loop = gemm_loops[0]
        n = const_int(loop.extent)
        stages = int(loop.annotations[STAGES_ATTR]) if STAGES_ATTR in loop.annotations else 1
        if not self.forced and (not self.small or n is None or self.choose(grid[0] * grid[1], n, stages) == 1):
            return func  # the automatic choice would not split it: nothing to say
        if len(tloops) != 1:
            return self.skip("the kernel does not have exactly one threadIdx.x launch", shape=True)
        tloop = tloops[0]
        stmts = top_stmts(tloop)
        if len(gemm_loops) != 1:
            return self.skip(f"the kernel has {len(gemm_loops)} top-level loops with a T.gemm (split-K splits one)",
                             shape=True)
        idx = next(i for i, s in enumerate(stmts) if s.same_as(loop))
        if loop.thread_binding is not None or PARALLEL_ATTR in loop.annotations:
            return self.skip("the loop around the T.gemm is not a serial or T.Pipelined K loop", loop, shape=True)
        gemms = gemm_stmts(loop)
        ana = tvm.sym.Analyzer()
        ops = [gemm_operands(g, ana) for g in gemms]
        accs = {id(o["c"].buffer): o["c"].buffer for o in ops}
        if len(accs) != 1:
            return self.skip(f"the K loop's T.gemm calls accumulate into {len(accs)} fragments (split-K reduces one)",
                             loop, shape=True)
        acc = next(iter(accs.values()))
        layouts, locs = layouts_of(func), locals_of(func)
        if not is_fragment(acc) or acc not in layouts or acc not in locs:
            return self.skip(f"the accumulator {acc.name} is not a register fragment", loop)
        if str(acc.dtype) != "float32":
            return self.skip(f"the accumulator {acc.name} is {acc.dtype}; the reduction adds float32 partials", loop)
        lay = layouts[acc]
        if any(o["clear"] for o in ops):
            return self.skip("a T.gemm in the K loop has clear_accum=True", loop, shape=True)
        why = _loop_problem(loop, acc, gemms, stmts[idx + 1:])
        if why:
            return self.skip(why, loop)
        why = prologue_problem(stmts[:idx], acc)
        if why:
            return self.skip(why, loop)
        if n is None:
            return self.skip("the K loop's trip count is not a constant", loop)
        per_sm = 1 if self.forced else self.resident_blocks(loop, stages, lay.num_regs)
        S = self.choose(grid[0] * grid[1], n, stages, per_sm)
        if S == 1:
            if self.forced > 1:
                return self.skip(f"pass_configs 'tl.cuda.split_k'={self.forced} needs a K loop whose {n} iterations "
                                 f"divide by {self.forced} with at least num_stages={stages} per share", loop)
            return func
        regs, tiles = lay.num_regs, grid[0] * grid[1]
        if S * tiles * regs * self.threads * 4 > WORKSPACE_LIMIT:
            return self.skip(f"the partial sums ({S} x {tiles} tiles x {regs * self.threads} floats) exceed the "
                             f"{WORKSPACE_LIMIT >> 20} MB workspace limit", loop)
        return self.rewrite(tloop, stmts, idx, locs[acc], S, regs, tiles)

    def choose(self, blocks: int, n: int, stages: int, per_sm: int = 1) -> int:
        """``S``: the forced value when it divides the loop (else 1), or the automatic choice (module doc) for a
        kernel of which one SM holds ``per_sm`` blocks."""
        if self.forced:
            ok = n % self.forced == 0 and n // self.forced >= max(1, stages)
            return self.forced if ok else 1
        s = 1
        while (s < 8 and blocks * s * 2 <= self.sms * per_sm and n % (s * 2) == 0
               and n // (s * 2) >= max(MIN_SHARE, 2 * stages)):
            s *= 2
        return s

    def resident_blocks(self, loop: Any, stages: int, acc_regs: int) -> int:
        """Blocks of this kernel one SM holds (at least 1), estimated before the pipeline and ptxas: shared memory
        (each shared tile a ``T.copy`` in the K loop writes once per stage, every other one once, without the tiles
        the fragments fusion removes), threads, and registers (``acc_regs`` accumulator registers per thread plus
        :data:`REGISTER_MARGIN`). A shared tile of symbolic shape counts as filling the SM (1)."""
        from ...backend.cuda.resources import limits_for

        lim = limits_for(self.arch)
        staged = [Region.of(s.value.args[1]).buffer for s in tile_ops(loop) if tile_op_name(s) == "tl.copy"]
        gone = self.unmaterialised()
        total = 0
        for buf in _shared_allocations(self.func.body):
            if any(buf.same_as(g) for g in gone):
                continue
            size = dtype_bytes(str(buf.dtype))
            for d in buf.shape:
                if const_int(d) is None:
                    return 1
                size *= const_int(d)
            total += size * (stages if any(buf.same_as(b) for b in staged) else 1)
        by_smem = lim.smem_per_sm // (total + lim.smem_reserved_per_block)
        by_threads = lim.max_warps * lim.warp_size // max(1, self.threads)
        by_regs = lim.regs_per_sm // (max(1, self.threads) * min(lim.max_regs_per_thread, acc_regs + REGISTER_MARGIN))
        return max(1, min(by_smem, by_threads, by_regs, lim.max_blocks))

    def unmaterialised(self) -> list[Any]:
        """The shared tiles ``tl.DequantFragmentsCUDA`` (after this pass, when ``tl.cuda.dequant_fragments`` is on)
        will not allocate: its own analysis, run on the kernel as it is now."""
        if not self.options[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS]:
            return []
        from .dequant_fragments_cuda import DequantFragmentsCUDA

        probe = DequantFragmentsCUDA(self.func, bool(self.options[PassConfigKey.TL_CUDA_DEQUANT_FRAGMENTS_DIRECT]))
        probe.run(self.func)
        return list(probe.removed)

    def rewrite(self, tloop: Any, stmts: list[Any], idx: int, acc_local: Any, S: int, regs: int,
                tiles: int) -> tirx.PrimFunc:
        func, loop = self.func, stmts[idx]
        bz = tvm.ir.Var("bz_split", "int32")
        chunk = const_int(loop.extent) // S
        new_loop = tirx.For(loop.loop_var, loop.min + bz * chunk, tirx.IntImm("int32", chunk), loop.kind, loop.body,
                            loop.thread_binding, loop.annotations, loop.step, loop.span)
        zero = tirx.IntImm("int32", 0)
        flag = tirx.decl_buffer((1,), "int32", "splitk_last", scope="local")
        reduce = extern(f"{REDUCE}<{regs}, {S}, {self.threads}, {tiles}>",
                        tirx.address_of(tirx.BufferLoad(acc_local, [zero])),
                        tirx.address_of(tirx.BufferLoad(flag, [zero])))
        epilogue = stmts[idx + 1:]
        tail: list[Any] = [tirx.AllocBuffer(flag), reduce]
        if epilogue:
            body = epilogue[0] if len(epilogue) == 1 else tirx.SeqStmt(epilogue)
            tail.append(tirx.IfThenElse(tirx.NE(tirx.BufferLoad(flag, [zero]), zero), body, None))
        new_body = tirx.SeqStmt(stmts[:idx] + [new_loop] + tail)
        new_t = tirx.For(tloop.loop_var, tloop.min, tloop.extent, tloop.kind, new_body, tloop.thread_binding,
                         tloop.annotations, tloop.step, tloop.span)
        iv = tirx.IterVar(tvm.ir.Range.from_min_extent(0, S), bz, tirx.IterVar.ThreadIndex, "blockIdx.z")
        zloop = tirx.For(bz, zero, tirx.IntImm("int32", S), tirx.ForKind.THREAD_BINDING, new_t, iv, None, None, None)

        def swap(f: Any) -> Any:
            return zloop if f.same_as(tloop) else f

        out = func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, swap)]))
        grid = list(self.grid)
        return out.with_attr(ATTR_LAUNCH, {"grid": [grid[0], grid[1], S], "threads": self.threads})


# -- helpers -----------------------------------------------------------------------------------------------------
def _shared_allocations(body: Any) -> list[Any]:
    """The shared buffers ``body`` allocates."""
    found: list[Any] = []

    def visit(s: Any) -> Any:
        if is_shared(s.buffer):
            found.append(s.buffer)
        return s

    tvm_ffi.structural_map(body, [(tirx.AllocBuffer, visit)])
    return found


def thread_loops(body: Any) -> list[Any]:
    found: list[Any] = []

    def visit(f: Any) -> Any:
        if f.thread_binding is not None and str(f.thread_binding.thread_tag) == "threadIdx.x":
            found.append(f)
        return f

    tvm_ffi.structural_map(body, [(tirx.For, visit)])
    return found


def top_stmts(tloop: Any) -> list[Any]:
    return list(tloop.body.seq) if isinstance(tloop.body, tirx.SeqStmt) else [tloop.body]


def tile_ops(node: Any) -> list[Any]:
    """The tile-op statements (``Evaluate`` of a ``tl.*`` op) inside ``node``."""
    found: list[Any] = []

    def visit(e: Any) -> Any:
        if tile_op_name(e):
            found.append(e)
        return e

    tvm_ffi.structural_map(node, [(tirx.Evaluate, visit)])
    return found


def gemm_stmts(node: Any) -> list[Any]:
    return [s for s in tile_ops(node) if tile_op_name(s) == "tl.gemm"]


def accesses(node: Any) -> tuple[list[Any], list[Any]]:
    """(buffers read, buffers written) by ``node``: loads and stores, tile-op regions (a ``tl.copy`` reads its
    first region and writes its second, a ``tl.gemm`` writes its third, ``tl.fill`` writes its first; any other
    tile op is taken to read and write every region it names)."""
    reads: list[Any] = []
    writes: list[Any] = []

    def load(ld: Any) -> Any:
        reads.append(ld.source)
        return ld

    def store(st: Any) -> Any:
        writes.append(st.buffer)
        return st

    tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    for op in tile_ops(node):
        name = tile_op_name(op)
        regions = [a.source for a in op.value.args if isinstance(a, tvm.ir.TensorRegion)]
        if name == "tl.copy" and len(regions) >= 2:
            reads.append(regions[0])
            writes.append(regions[1])
        elif name == "tl.gemm" and len(regions) >= 3:
            reads.extend(regions[:3])
            writes.append(regions[2])
        elif name == "tl.fill" and regions:
            writes.append(regions[0])
        else:
            reads.extend(regions)
            writes.extend(regions)
    return reads, writes


def has_buffer(bufs: list[Any], buf: Any) -> bool:
    return any(b.same_as(buf) for b in bufs)


def _extern_calls(node: Any) -> list[str]:
    found: list[str] = []

    def visit(c: Any) -> Any:
        if isinstance(c.op, tvm.ir.Op) and str(c.op.name) in ("tirx.call_extern", "tirx.call_pure_extern"):
            found.append(str(c.args[0].value))
        return c

    tvm_ffi.structural_map(node, [(tvm.ir.Call, visit)])
    return found


def _loop_problem(loop: Any, acc: Any, gemms: list[Any], after: list[Any]) -> str | None:
    """Why the K loop cannot be split (None: it can)."""
    reads, writes = accesses(loop.body)
    if any(is_global(b) for b in writes):
        return "the K loop writes global memory (each block would write its share)"
    externs = _extern_calls(loop.body)
    if externs:
        return f"the K loop calls a device function ({externs[0]}) whose effect split-K cannot see"
    others = [s for s in tile_ops(loop.body) if not any(s.same_as(g) for g in gemms)]
    if any(has_buffer(accesses(s)[0] + accesses(s)[1], acc) for s in others) or \
            touches_outside_tile_ops(loop.body, acc):
        return f"the K loop reads or writes the accumulator {acc.name} other than as a T.gemm destination"
    after_reads = [b for s in after for b in accesses(s)[0]]
    for b in {id(b): b for b in writes}.values():
        if not b.same_as(acc) and has_buffer(after_reads, b):
            return f"{b.name} is written in the K loop and read after it (its value would be one block's share)"
    return None


def touches_outside_tile_ops(node: Any, buf: Any) -> bool:
    hit: list[Any] = []

    def load(ld: Any) -> Any:
        if ld.source.same_as(buf):
            hit.append(ld)
        return ld

    def store(st: Any) -> Any:
        if st.buffer.same_as(buf):
            hit.append(st)
        return st

    tvm_ffi.structural_map(node, [(tvm.ir.TensorLoad, load), (tirx.BufferStore, store)])
    return bool(hit)


def prologue_problem(before: list[Any], acc: Any) -> str | None:
    """Why the statements before the K loop rule splitting out (None: they do not): the accumulator must start
    at zero in every block, and nothing may write global memory (every block runs them)."""
    zeroed = False
    for s in before:
        reads, writes = accesses(s)
        if any(is_global(b) for b in writes) or _extern_calls(s):
            return "a statement before the K loop writes global memory or calls a device function"
        if not (has_buffer(reads, acc) or has_buffer(writes, acc)):
            continue
        if tile_op_name(s) == "tl.fill" and _is_zero(s.value.args[1]):
            zeroed = True
            continue
        return f"the accumulator {acc.name} is set to something else than zero before the K loop"
    if not zeroed:
        return f"the accumulator {acc.name} is not cleared (T.clear) before the K loop"
    return None


def _is_zero(v: Any) -> bool:
    return isinstance(v, (tirx.IntImm, tirx.FloatImm)) and float(v.value) == 0.0
