"""A CPU emulator of the CUDA kernels our pipeline generates, for tests on machines with no GPU.

It runs the TIR the CUDA code generator is given — our passes (``codegen.lower``), then TVM's flattening,
bf16-legalisation, vectorisation, unrolling and simplification, the passes of ``codegen._tir_pipeline`` that shape
the statements — with the semantics the generated CUDA C has: one Python generator per thread of a block; vector
accesses lane by lane in order (a scatter of several lanes to one address keeps the last lane, as the generated
``x[v.x] = ...; x[v.y] = ...`` does); float32/float16 arithmetic in numpy's IEEE types, bfloat16 rounded to
nearest even on every cast and store; ``tl::block_allreduce`` and ``tl::row_allreduce`` replayed step by step from
``include/tl/reduce.cuh`` (xor shuffles, the barriers and the shared scratch); ``tl::gemm_ss`` / ``tl::gemm_rs``
(mma.sync: the row-major XOR-swizzled tiles ldmatrix reads, the ``mma`` layouts, issued by the 32 lanes of a warp
together) and ``tl::wgmma_gemm_ss`` / ``tl::wgmma_gemm_rs`` (sm_90a, issued by the 128 threads of a warpgroup
together), A and B read from the shared tiles through the wgmma swizzled layouts their descriptors describe (A from
the threads' registers in the ``wgmma`` layout for the register-A form), the accumulators in the ``wgmma`` layout.

Threads diverge (warp specialisation): each runs until it must wait — at ``__syncthreads`` (every thread that has
not exited), a named barrier ``tl::named_barrier_sync<id, count>`` or ``tl::pingpong_wait`` (``bar.sync``; the
``bar.arrive`` of ``tl::pingpong_pass`` counts there without waiting), ``__syncwarp``, a warp shuffle (the warp's
32 lanes), a wgmma (its warpgroup) or ``tl::mbar_wait`` — and the next runnable thread runs (:class:`_Scheduler`);
when none can run, the deadlock is reported with what each waiting thread waits on. Hopper's mbarriers
(``include/tl/tma.cuh``) are kept by shared address: ``mbar_init(count)``; ``mbar_expect_tx`` = one arrival plus
the bytes of transactions; ``mbar_arrive``; a phase completes when its arrivals and bytes are all in, and
``mbar_wait(parity)`` passes once the phase of that parity has completed (the phase in progress has the other
parity: on a fresh barrier parity 1 passes at once). A TMA load ``tl::tma_load_<1..5>d<i>(dst, bar, c0..)``
completes when issued: the box of tensor map ``i`` (the kernel's ``tl.tma_maps``; dims and box innermost first;
``param`` names the tensor) at coordinates ``c0`` (innermost) .., zero outside the tensor, is written into shared
memory in row-major box order through the map's swizzle (Swizzle<B, 4, 3> of the byte offset from the start of the
block's shared memory, B = 3 / 2 / 1 for 128 / 64 / 32 bytes: the dynamic shared memory is 1024-byte aligned, and a
kernel with several static shared allocations is not modelled; a map of swizzle 0, ``tl.cuda.tma_plain_tiles``:
the box row-major, as it is), then its bytes complete on ``bar``. Every map a TMA load or store uses is checked
against the launcher's rules of ``cuTensorMapEncodeTiled`` (``runtime/exported.py``: ``tensor_map_problems``), so a
map the driver would refuse at launch is reported here too.
A TMA store ``tl::tma_store_<2..5>d<i>(src, c0..)`` (``tl.cuda.tma_store``) writes the parts of its box inside the
tensor at issue and reads its shared bytes until a ``tl::tma_store_wait_read`` retires its bulk group
(``tl::tma_store_commit``); ``tl::wgmma_acc_to_slabs`` is replayed from the header.
Thread-block clusters (``tl.cluster_dims``: ``tl.cuda.cluster``, sm90/cluster.py): the launch collects every block,
then runs the blocks of each cluster together under one scheduler (thread ``rank * n + t``, vector clocks over the
whole cluster), each block with its own shared memory, mbarriers, ``__syncthreads`` and named barriers;
``tl::tma_load_2d_multicast`` writes its box into the block of each rank in its mask and completes on each one's
mbarrier at the same offset, ``tl::mbar_arrive_cluster<n>`` arrives on the mbarrier at its offset in every block
(``mapa``), ``tl::cluster_sync`` (``barrier.cluster``) waits for every thread of the cluster; addressing a block
all of whose threads have exited is reported. ``schedule="rank_first"`` runs the lowest rank's runnable threads
first (each block as far ahead of its peers as it can), instead of every runnable thread in turn.
``tl::mbar_fence_init``, ``tl::fence_proxy_async`` and ``setmaxnreg`` change nothing (setmaxnreg's count is checked:
a multiple of 8 in 24..256, one per warpgroup, all of them within the 64K registers of an SM).

It reports what a GPU would not show reliably: shared-memory races, reads of shared or local memory never
written, and accesses outside a tensor or an allocation. Races are checked by happens-before, with vector clocks:
each thread counts its synchronisations; a barrier (of the threads at it), ``__syncwarp`` (of the warp) and an
mbarrier phase (from every arrival and TMA load in it to every thread whose wait it satisfies) order what came
before in the threads that released it before what comes after in the threads that acquire it; each shared byte
keeps its last write (thread, clock) and the reads since; an access by another thread that is not ordered after
them is a race. A wgmma (or mma.sync) read must be ordered after the write for every thread of its group, and it
is ordered before a later write once one lane of each reading warp is (the warp-synchronous ``wait_group`` retires
the whole warp's reads: ws_loop's release by lane 0 of each warp). A wgmma group left in flight (``PENDING = 1``)
computes its accumulators when issued, but its shared reads last until a ``wait_group`` retires it (the
warpgroup's next wgmma, or each thread's ``tl::wgmma_drain``): a write to those bytes before then is a race. Not
modelled: shuffles as memory ordering (they order nothing here, as on the GPU) and the fused pipelined
mma.sync mainloop
(``tl::pipe_gemm_step``). Anything it does not know (an extern template, an intrinsic) raises
``NotImplementedError``: it never guesses.

It is slow (pure Python, a few microseconds per operation per thread): emulate a few blocks of small problems.
"""

from __future__ import annotations

import functools
import json
import re
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import tvm
from tvm import tirx

from tilelang_core.language._ir import dtype_of
from tilelang_core.runtime.exported import tensor_map_problems

WARP = 32
POISON = 0xFF  # fresh shared and local memory: NaN for every float type, -1 for integers
IN_FLIGHT = np.iinfo(np.int32).max  # the read clock of a wgmma group not retired yet: after every clock

_NP = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "bfloat16": np.float32,
       "int8": np.int64, "int16": np.int64, "int32": np.int64, "int64": np.int64, "uint8": np.int64,
       "uint16": np.int64, "uint32": np.int64, "uint64": np.int64, "bool": np.bool_}
_STORAGE = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "bfloat16": np.uint16,
            "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
            "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.uint8}


class EmulationError(AssertionError):
    """The kernel did something a correct CUDA kernel must not (a race, an out-of-bounds access ...)."""


@functools.cache
def _split(dt: str) -> tuple[str, int]:
    """('float32', 4) for 'float32x4'."""
    if "x" in dt and not dt.startswith("x"):
        base, lanes = dt.rsplit("x", 1)
        if lanes.isdigit():
            return base, int(lanes)
    return dt, 1


_KINDS: dict[type, str] = {}  # expression class -> the branch of Emulator.ev that evaluates it


def _kind(e: Any) -> str:
    for cls, kind in ((tirx.IntImm, "int"), (tirx.FloatImm, "float"), (tvm.ir.TensorLoad, "load"),
                      (tirx.Ramp, "ramp"), (tirx.Broadcast, "broadcast"), (tirx.Cast, "cast"), (tirx.Not, "not"),
                      (tirx.Select, "select"), (tvm.ir.Call, "call"), (tirx.Let, "let"), (tvm.ir.Var, "var")):
        if isinstance(e, cls):
            _KINDS[type(e)] = kind
            return kind
    return "?"


def _base(e: Any) -> str:
    """The scalar type of expression ``e`` ('float16' for a float16x2)."""
    try:
        dt = str(e.ty.dtype)
    except AttributeError:
        dt = dtype_of(e) or ""
    return _split(dt)[0]


def _round_bf16(v: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(v, dtype=np.float32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(nan, np.float32("nan"), out).astype(np.float32)


@functools.cache
def _bits(dt: str) -> int:
    return int(re.sub(r"\D", "", dt))


def _cast(v: np.ndarray, dt: str) -> np.ndarray:
    """C conversion of ``v`` to scalar type ``dt``: round to nearest for floats, truncate and wrap for ints."""
    v = np.asarray(v)
    if dt == "bfloat16":
        return _round_bf16(v.astype(np.float32))
    if dt == "bool":
        return v != 0
    if dt.startswith(("int", "uint")):
        bits = _bits(dt)
        iv = np.trunc(v).astype(np.int64) if v.dtype.kind == "f" else v.astype(np.int64)
        iv = iv & ((1 << bits) - 1) if bits < 64 else iv
        if dt.startswith("int") and bits < 64:
            iv = np.where(iv >= 1 << (bits - 1), iv - (1 << bits), iv)
        return iv.astype(np.int64)
    return v.astype(_NP[dt])


def _reinterpret(v: np.ndarray, src: str, dst: str) -> np.ndarray:
    """The bits of ``v`` (values of scalar type ``src``) read as ``dst`` (``reinterpret`` in the generated C)."""
    v = np.asarray(v)
    if src == "bfloat16":
        bits = (_round_bf16(v).view(np.uint32) >> 16).astype(np.uint16)
    else:
        bits = _cast(v, src).astype(_STORAGE[src])
    out = bits.view(_STORAGE[dst])
    if dst == "bfloat16":
        return (out.astype(np.uint32) << 16).view(np.float32)
    return out.astype(_NP[dst])


def _workspace_size(data: Any) -> int | None:
    """Elements of the ``tl::global_workspace<KEY, T, N>()`` array a buffer is declared over (else None)."""
    if not (isinstance(data, tvm.ir.Call) and str(data.op.name) in ("tirx.call_extern", "tirx.call_pure_extern")):
        return None
    m = re.fullmatch(r"tl::global_workspace<\d+, [^,]+, (\d+)>", str(data.args[0].value))
    return int(m.group(1)) if m else None


@dataclass
class _Storage:
    """The bytes of one tensor or allocation; ``shared`` ones track, per byte, the last write (thread and its clock)
    and the reads since (each thread's clock at its read), for the happens-before race checks."""

    name: str
    data: np.ndarray  # uint8
    shared: bool = False
    written: np.ndarray | None = None  # bool per byte: ever written (shared and local)
    writer: np.ndarray | None = None  # int per byte: thread of the last write, -1 none
    wclk: np.ndarray | None = None  # int per byte: that thread's own clock at the write
    rvc: np.ndarray | None = None  # bytes x threads: each thread's clock at its last read since the write, 0 none
    avc: np.ndarray | None = None  # the same for the warp-collective reads of wgmma / mma (ldmatrix)
    inflight: np.ndarray | None = None  # int per byte: thread whose cp.async has not landed yet, -1 none
    views: dict[str, np.ndarray] = field(default_factory=dict)

    def view(self, dt: str) -> np.ndarray:
        v = self.views.get(dt)
        if v is None:
            st = np.dtype(_STORAGE[dt])
            n = len(self.data) - len(self.data) % st.itemsize
            v = self.views[dt] = self.data[:n].view(st)
        return v


def _fresh(name: str, nbytes: int, shared: bool, track: bool, width: int = 0) -> _Storage:
    """Fresh (poisoned) memory; ``width``: the block's thread count rounded up to whole warps (shared memory)."""
    data = np.full(nbytes, POISON, dtype=np.uint8)
    st = _Storage(name, data, shared=shared)
    if track:
        st.written = np.zeros(nbytes, dtype=bool)
    if shared:
        st.writer = np.full(nbytes, -1, dtype=np.int32)
        st.wclk = np.zeros(nbytes, dtype=np.int32)
        st.rvc = np.zeros((nbytes, width), dtype=np.int32)
        st.avc = np.zeros((nbytes, width), dtype=np.int32)
        st.inflight = np.full(nbytes, -1, dtype=np.int32)
    return st


@dataclass
class _Pointer:
    """``&buf[i]``: an element of a storage, handed to a device template."""

    storage: _Storage
    elem: int
    dtype: str


class _Thread:
    """One thread: its variables and its private (register / local) allocations; ``tid`` -1 outside the launch."""

    def __init__(self, block: _Block, tid: int, env: dict[Any, Any]) -> None:
        # ``tid``: the thread's index in its scheduler and vector clocks (in a cluster: rank * threads + ltid);
        # ``ltid``: its threadIdx.x; ``rank``: its block's rank in the cluster; ``shared``: its block's allocations
        self.block, self.tid = block, tid
        self.ltid, self.rank = tid, 0
        self.shared: dict[Any, _Storage] = block.shared
        self.coords: dict[str, int] = {}  # blockIdx.x / .y / .z of its block
        self.env = dict(env)
        self.local: dict[Any, _Storage] = {}
        # cp.async: copies issued since the last commit, and the committed groups still in flight (oldest first);
        # a copy is (shared storage, first byte, the 16 bytes it will write)
        self.issued: list[tuple[_Storage, int, np.ndarray]] = []
        self.groups: list[list[tuple[_Storage, int, np.ndarray]]] = []
        # TMA stores: the shared bytes the stores issued since the last commit read, and the committed bulk groups
        self.bulk_issued: list[tuple[_Storage, np.ndarray]] = []
        self.bulk_groups: list[list[tuple[_Storage, np.ndarray]]] = []


class _Block:
    """One block: its shared allocations, its threads' vector clocks (``vc[t]``: the last clock of every thread
    that thread ``t`` has synchronised with; ``vc[t, t]`` its own), its mbarriers and its scheduler."""

    def __init__(self, n: int = 0) -> None:
        self.shared: dict[Any, _Storage] = {}
        self.n = n
        self.width = -(-n // WARP) * WARP
        self.vc = np.zeros((n, self.width), dtype=np.int32)
        self.vc[np.arange(n), np.arange(n)] = 1
        self.mbars: dict[tuple[int, int], _Mbar] = {}
        self.sched: _Scheduler | None = None
        self.regs: dict[int, int] = {}  # setmaxnreg: registers per thread of each warpgroup that asked
        # the shared bytes each warpgroup's wgmma group left in flight (PENDING = 1) still reads, and the lanes that
        # have not retired it yet (a wait_group: the next wgmma, tl::wgmma_drain)
        self.in_flight: dict[int, list[tuple[_Storage, np.ndarray, set[int]]]] = {}
        # a thread-block cluster run as one scheduling unit: each rank's shared allocations (None: one block)
        self.rank_shared: list[dict[Any, _Storage]] | None = None

    def retire(self, group: int, lanes: list[int]) -> None:
        """``lanes`` of warpgroup ``group`` wait for its wgmma group in flight: its reads are done at their clocks."""
        keep = []
        for st, nbytes, left in self.in_flight.pop(group, []):
            mine = np.asarray(sorted(left.intersection(lanes)), dtype=np.int64)
            if len(mine):
                st.avc[nbytes[:, None], mine[None, :]] = self.vc[mine, mine][None, :]
                left.difference_update(mine.tolist())
            if left:
                keep.append((st, nbytes, left))
        if keep:
            self.in_flight[group] = keep

    def release(self, tids: Any) -> None:
        """A barrier of ``tids``: each leaves having seen what all of them did before it."""
        tids = np.asarray(tids, dtype=np.int64)
        self.vc[tids] = self.vc[tids].max(axis=0)
        self.vc[tids, tids] += 1


@dataclass
class _Mbar:
    """An mbarrier object (``tl::mbar_init``): ``count`` arrivals and ``tx`` bytes of transactions complete the
    phase in progress; ``phases`` completed so far; ``vc`` the clocks released into the phase in progress,
    ``done_vc`` those of the last completed phase (what a satisfied wait acquires)."""

    label: str
    count: int
    pending: int
    tx: int
    phases: int
    vc: np.ndarray
    done_vc: np.ndarray | None = None

    def satisfied(self, parity: int) -> bool:
        # try_wait.parity P: the phase of parity P has completed, i.e. the phase in progress has the other parity
        return (self.phases & 1) != (parity & 1)


class Emulator:
    """Runs the CUDA-bound TIR of ``func`` (a ``@T.prim_func`` before our passes) on CPU tensors."""

    def __init__(self, func: Any, arch: str = "sm_90", pass_configs: dict[str, Any] | None = None,
                 schedule: str = "round_robin") -> None:
        # ``schedule`` of a cluster's threads: "round_robin" (each runnable thread in turn) or "rank_first" (always a
        # runnable thread of the lowest rank: each block runs as far ahead of its peers as it can)
        if schedule not in ("round_robin", "rank_first"):
            raise ValueError(f"schedule: 'round_robin' or 'rank_first', not {schedule!r}")
        self.schedule = schedule
        self.func = prepare(func, arch, pass_configs)
        self.views: dict[Any, tuple[Any, Any]] = {}  # declared buffer -> (buffer it views, its element offset)
        self.globals: dict[Any, _Storage] = {}
        self.threads = 0
        # thread-block clusters (``tl.cluster_dims``, sm90/cluster.py): the blocks of a cluster run together, so
        # the launch collects every block (its body, blockIdx values, thread variable) before running any
        attrs = self.func.attrs
        self.cluster = tuple(int(c) for c in attrs["tl.cluster_dims"]) if attrs is not None and \
            "tl.cluster_dims" in attrs else None
        self.pending: list[tuple[Any, _Thread, Any, int]] = []
        self.grid_depth = 0

    # -- entry -----------------------------------------------------------------------------------------
    def run(self, tensors: list[torch.Tensor]) -> None:
        """Run the kernel over ``tensors`` (its parameters, in order; outputs are written in place), every block.
        Raises :class:`EmulationError` on the first problem."""
        params = list(self.func.params)
        if len(params) != len(tensors):
            raise ValueError(f"expected {len(params)} tensors, got {len(tensors)}")
        for p, t in zip(params, tensors):
            raw = t.detach().contiguous().cpu().view(torch.uint8).reshape(-1).numpy().copy()
            self.globals[p] = _Storage(p.name, raw)
        for _ in self._gen(self.func.body, _Thread(_Block(), -1, {})):
            raise EmulationError("a barrier outside the thread launch")
        for p, t in zip(params, tensors):
            back = torch.from_numpy(self.globals[p].data.copy()).view(t.dtype).reshape(t.shape)
            t.copy_(back)

    @staticmethod
    def problem(msg: str) -> None:
        raise EmulationError(msg)

    # -- memory ----------------------------------------------------------------------------------------
    def resolve(self, th: _Thread, buf: Any) -> tuple[_Storage, int]:
        """The storage a buffer lives in and its element offset there."""
        off = 0
        while buf in self.views:  # a view's element offset counts elements of its own type
            root, eo = self.views[buf]
            off += self.scalar(eo, th) if eo is not None else 0
            buf = root
        st = th.local.get(buf) or th.shared.get(buf) or self.globals.get(buf)
        if st is None:
            raise EmulationError(f"buffer {buf.name} used before its allocation")
        return st, off

    def load(self, th: _Thread, buf: Any, idx: np.ndarray) -> np.ndarray:
        st, off = self.resolve(th, buf)
        base = str(buf.dtype)
        elems = idx.astype(np.int64) + off
        size = np.dtype(_STORAGE[base]).itemsize
        view = st.view(base)
        if elems.min() < 0 or elems.max() >= len(view):
            self.problem(f"read of {buf.name}[{int(elems.min())}..{int(elems.max())}] outside its "
                         f"{len(view)} elements")
        self._track(st, th, elems, size, write=False)
        raw = view[elems]
        if base == "bfloat16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(_NP[base])

    def store(self, th: _Thread, buf: Any, idx: np.ndarray, value: np.ndarray) -> None:
        st, off = self.resolve(th, buf)
        base = str(buf.dtype)
        elems = idx.astype(np.int64) + off
        size = np.dtype(_STORAGE[base]).itemsize
        view = st.view(base)
        if elems.min() < 0 or elems.max() >= len(view):
            self.problem(f"write of {buf.name}[{int(elems.min())}..{int(elems.max())}] outside its "
                         f"{len(view)} elements")
        self._track(st, th, elems, size, write=True)
        v = _cast(np.broadcast_to(value, elems.shape), base)
        if base == "bfloat16":
            v = (v.view(np.uint32) >> 16).astype(np.uint16)
        for e, x in zip(elems, v):  # lane by lane, in order: a scatter to one address keeps the last lane
            view[e] = x

    def _track(self, st: _Storage, th: _Thread, elems: np.ndarray, size: int, write: bool) -> None:
        """Check and record an access of ``th`` to the ``size``-byte elements ``elems`` of ``st``."""
        if st.written is None:
            return
        if st.writer is None and len(elems) == 1:  # a register: only whether it was written
            b0 = int(elems[0]) * size
            w = st.written[b0:b0 + size]
            if write:
                w[:] = True
            elif not w.all():
                self.problem(f"thread {th.tid} reads {st.name} bytes {b0}..{b0 + size} that were never written")
            return
        nbytes = (np.asarray(elems, dtype=np.int64)[:, None] * size + np.arange(size)).reshape(-1)
        self._track_bytes(st, th, nbytes, write)

    def _track_bytes(self, st: _Storage, th: _Thread, nbytes: np.ndarray, write: bool,
                     who: str | None = None) -> None:
        """Check and record an access of ``th`` (or, ``who``, of the asynchronous copy it issued) to the bytes
        ``nbytes`` of ``st``: a byte a cp.async is still writing, a read of a byte never written, and in shared
        memory a race — another thread's write, or (for a write) another thread's read, that no barrier, mbarrier
        phase or ``__syncwarp`` orders before this access (vector clocks: thread ``w``'s access at its clock ``c``
        is ordered before ``th``'s iff ``vc[th, w] >= c``)."""
        if st.written is None:
            return
        who = who or f"thread {th.tid}"
        span = f"{st.name} bytes {int(nbytes.min())}..{int(nbytes.max()) + 1}"
        if st.inflight is not None:
            inf = st.inflight[nbytes]
            if (inf >= 0).any():
                self.problem(f"{who} {'writes' if write else 'reads'} {span} that a cp.async of thread "
                             f"{int(inf.max())} is still writing (no cp_async_wait covers it)")
        if not write and not st.written[nbytes].all():
            self.problem(f"{who} reads {span} that were never written")
        if st.writer is not None and th.tid >= 0:
            t = th.tid
            vc = th.block.vc[t]
            w = st.writer[nbytes]
            other = (w >= 0) & (w != t)
            if other.any():
                unordered = vc[w[other]] < st.wclk[nbytes][other]
                if unordered.any():
                    self.problem(f"shared-memory race on {span}: {who} {'writes' if write else 'reads'} what thread "
                                 f"{int(w[other][unordered][0])} wrote with no barrier (or mbarrier phase) "
                                 "ordering the two")
            if write:
                r = st.rvc[nbytes]
                late = r > vc
                if late.any():
                    self.problem(f"shared-memory race on {span}: {who} overwrites what thread "
                                 f"{int(np.nonzero(late.any(axis=0))[0][0])} read with no barrier (or mbarrier "
                                 "phase) ordering the two")
                self._check_collective_reads(st, th, nbytes, span, who)
                st.writer[nbytes] = t
                st.wclk[nbytes] = vc[t]
                st.rvc[nbytes] = 0
                st.avc[nbytes] = 0
            else:
                st.rvc[nbytes, t] = vc[t]
        if write:
            st.written[nbytes] = True

    def _check_collective_reads(self, st: _Storage, th: _Thread, nbytes: np.ndarray, span: str, who: str) -> None:
        """A write after a wgmma / mma (or TMA store) read of the same bytes: the read completes for a whole warp
        (the ``wait_group`` is warp-synchronous), so it is ordered before the write once any lane of each reading
        warp is (ws_loop's release by lane 0 of each warp); a read still in flight is ordered before nothing."""
        a = st.avc[nbytes]
        if not a.any():
            return
        warps = a.reshape(len(nbytes), -1, WARP)
        seen = th.block.vc[th.tid].reshape(-1, WARP)
        read = (warps > 0).any(axis=2)
        ordered = ((warps > 0) & (warps <= seen)).any(axis=2)
        bad = read & ~ordered
        if bad.any():
            warp = int(np.nonzero(bad.any(axis=0))[0][0])
            self.problem(f"shared-memory race on {span}: {who} overwrites what an asynchronous read (a wgmma, a TMA "
                         f"store) of warp {warp} read, with no barrier or mbarrier phase after the read ordering the "
                         "two")

    # -- expressions -----------------------------------------------------------------------------------
    def scalar(self, e: Any, th: _Thread) -> int:
        v = self.ev(e, th)
        if v.shape != (1,):
            raise EmulationError(f"expected a scalar, got {v.shape[0]} lanes: {e}")
        return int(v[0])

    def ev(self, e: Any, th: _Thread) -> np.ndarray:  # noqa: C901 - one dispatch over the expression kinds
        """The value of ``e`` in thread ``th`` as a numpy array of its lanes."""
        t = type(e)
        op = _BINARY.get(t)
        if op is not None:
            a, b = self.ev(e.a, th), self.ev(e.b, th)
            out = op(a, b)
            dt = _base(e)
            return _cast(out, dt) if dt == "bfloat16" or dt.startswith(("int", "uint")) else out
        kind = _KINDS.get(t) or _kind(e)
        if kind == "var" and not tirx.is_buffer_var(e):
            v = th.env.get(e)
            if v is None:
                raise EmulationError(f"variable {e} has no value")
            return v
        if kind == "load":
            idx = self._indices(e.indices, th)
            return self.load(th, e.source, idx)
        if kind == "int":
            return np.array([int(e.value)], dtype=np.bool_ if _base(e) == "bool" else np.int64)
        if kind == "float":
            return _cast(np.array([float(e.value)]), _base(e))
        if kind == "cast":
            return _cast(self.ev(e.value, th), _base(e))
        if kind == "call":
            return self._call(e, th)
        if kind == "ramp":
            base, stride = self.scalar(e.base, th), self.scalar(e.stride, th)
            return base + stride * np.arange(int(e.lanes), dtype=np.int64)
        if kind == "broadcast":
            return np.repeat(self.ev(e.value, th), int(e.lanes))
        if kind == "not":
            return ~self.ev(e.a, th)
        if kind == "select":
            c = self.ev(e.condition, th)
            return np.where(c, self.ev(e.true_value, th), self.ev(e.false_value, th))
        if kind == "let":
            th.env[e.var] = self.ev(e.value, th)
            return self.ev(e.body, th)
        raise NotImplementedError(f"emulator: expression {type(e).__name__}: {e}")

    def _indices(self, indices: Any, th: _Thread) -> np.ndarray:
        if len(indices) != 1:
            raise EmulationError(f"expected flattened (1-D) buffer indices, got {list(indices)}")
        return self.ev(indices[0], th).astype(np.int64)

    def _call(self, e: Any, th: _Thread) -> np.ndarray:
        name = str(e.op.name) if isinstance(e.op, tvm.ir.Op) else str(e.op)
        args = list(e.args)
        if name in ("tirx.call_extern", "tirx.call_pure_extern"):
            fname = str(args[0].value)
            fn = _EXTERN_MATH.get(fname)
            if fn is None:
                raise NotImplementedError(f"emulator: device function {fname} in an expression")
            return _cast(fn(*[self.ev(a, th) for a in args[1:]]), _split(dtype_of(e))[0])
        if name in ("tirx.if_then_else", "prim.if_then_else"):
            c = self.ev(args[0], th)
            if c.shape == (1,):
                return self.ev(args[1] if c[0] else args[2], th)
            return np.where(c, self.ev(args[1], th), self.ev(args[2], th))
        if name == "tirx.reinterpret":  # the same bits as another type of the same width
            return _reinterpret(self.ev(args[0], th), _split(dtype_of(args[0]))[0], _split(dtype_of(e))[0])
        fn = _MATH.get(name)
        if fn is not None:
            vals = [self.ev(a, th) for a in args]
            return _cast(fn(*vals), _split(dtype_of(e))[0])
        raise NotImplementedError(f"emulator: intrinsic {name}")

    def pointer(self, e: Any, th: _Thread) -> _Pointer:
        if not (isinstance(e, tvm.ir.Call) and str(e.op.name) == "tirx.address_of"):
            raise NotImplementedError(f"emulator: pointer argument {e}")
        ld = e.args[0]
        st, off = self.resolve(th, ld.source)
        return _Pointer(st, off + int(self._indices(ld.indices, th)[0]), str(ld.source.dtype))

    # -- statements ------------------------------------------------------------------------------------
    def _gen(self, s: Any, th: _Thread) -> Generator[Any, Any, None]:  # noqa: C901 - one dispatch
        """Execute ``s`` in thread ``th``; yields ``("sync",)`` at a barrier and ``("shfl", value, offset)`` at
        a warp shuffle (the scheduler sends the partner lane's value back)."""
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                yield from self._gen(x, th)
        elif isinstance(s, tirx.BufferStore):
            idx = self._indices(s.indices, th)
            self.store(th, s.buffer, idx, self.ev(s.value, th))
        elif isinstance(s, tirx.IfThenElse):
            c = self.ev(s.condition, th)
            if c.shape != (1,):
                raise EmulationError(f"vector condition {s.condition}")
            if c[0]:
                yield from self._gen(s.then_case, th)
            elif s.else_case is not None:
                yield from self._gen(s.else_case, th)
        elif isinstance(s, tirx.For):
            lo, n = self.scalar(s.min, th), self.scalar(s.extent, th)
            for i in range(lo, lo + n):
                th.env[s.loop_var] = np.array([i], dtype=np.int64)
                yield from self._gen(s.body, th)
        elif isinstance(s, tirx.Evaluate):
            yield from self._evaluate(s.value, th)
        elif isinstance(s, tirx.AllocBuffer):
            self._alloc(s.buffer, th)
        elif isinstance(s, tirx.DeclBuffer):
            data = s.data
            ws = _workspace_size(data)
            if ws is not None:  # T.alloc_global: one array of the module for the whole launch, never written yet
                if s.buffer not in self.globals:
                    nbytes = ws * np.dtype(_STORAGE[str(s.buffer.dtype)]).itemsize
                    self.globals[s.buffer] = _fresh(s.buffer.name, nbytes, shared=False, track=True)
                return
            if not (isinstance(data, tvm.ir.Call) and str(data.op.name) == "tirx.buffer_data"):
                raise NotImplementedError(f"emulator: buffer declared over {data}")
            root = data.args[0]
            if not root.same_as(s.buffer):
                self.views[s.buffer] = (root, s.buffer.elem_offset)
        elif isinstance(s, tirx.Bind):
            th.env[s.var] = self.ev(s.value, th)
        elif isinstance(s, tirx.LetStmt):
            th.env[s.var] = self.ev(s.value, th)
            yield from self._gen(s.body, th)
        elif isinstance(s, tirx.AttrStmt):
            if s.attr_key == "thread_extent":
                yield from self._launch(s, th)
            else:
                yield from self._gen(s.body, th)
        elif isinstance(s, tirx.While):
            while self.ev(s.condition, th)[0]:
                yield from self._gen(s.body, th)
        else:
            raise NotImplementedError(f"emulator: statement {type(s).__name__}")

    def _alloc(self, buf: Any, th: _Thread) -> None:
        scope = buf.scope()
        n = 1
        for x in buf.shape:
            n *= self.scalar(x, th)
        nbytes = n * np.dtype(_STORAGE[str(buf.dtype)]).itemsize
        if scope.startswith("shared"):
            if buf not in th.shared:
                th.shared[buf] = _fresh(buf.name, nbytes, shared=True, track=True, width=th.block.width)
        else:  # local / local.var: private to the thread, fresh at each allocation
            th.local[buf] = _fresh(buf.name, nbytes, shared=False, track=True)

    def _evaluate(self, v: Any, th: _Thread) -> Generator[Any, Any, None]:
        if isinstance(v, tirx.IntImm):
            return
        if not isinstance(v, tvm.ir.Call):
            self.ev(v, th)
            return
        name = str(v.op.name) if isinstance(v.op, tvm.ir.Op) else str(v.op)
        if name == "tirx.tvm_storage_sync":
            yield ("sync",)
            return
        if name in ("tirx.call_extern", "tirx.call_pure_extern"):
            fname = str(v.args[0].value)
            yield from self._extern(fname, list(v.args[1:]), th)
            return
        self.ev(v, th)

    def _extern(self, fname: str, args: list[Any], th: _Thread) -> Generator[Any, Any, None]:
        m = re.fullmatch(r"tl::block_allreduce<tl::(\w+), (\d+), (\d+)>", fname)
        if m:
            yield from self._block_allreduce(m[1], int(m[2]), int(m[3]), args, th)
            return
        m = re.fullmatch(r"tl::row_allreduce<tl::(\w+), (\d+), (\d+)>", fname)
        if m:
            yield from self._row_allreduce(m[1], int(m[2]), int(m[3]), args, th)
            return
        if fname == "printf":
            return
        if fname == "tl::ldg_cs16":  # include/tl/gemm_frag.cuh: 16 bytes from global memory, zeros when not pred
            dst, src = self.pointer(args[0], th), self.pointer(args[1], th)
            out = dst.storage.view("uint8")
            at = dst.elem * np.dtype(_STORAGE[dst.dtype]).itemsize
            if self.scalar(args[2], th):
                inp, frm = src.storage.view("uint8"), src.elem * np.dtype(_STORAGE[src.dtype]).itemsize
                if frm % 16 or not 0 <= frm <= len(inp) - 16:
                    self.problem(f"tl::ldg_cs16 at byte {frm} of {src.storage.name} ({len(inp)} bytes, 16-aligned)")
                self._track_bytes(src.storage, th, np.arange(frm, frm + 16), write=False)
                out[at:at + 16] = inp[frm:frm + 16]
            else:
                out[at:at + 16] = 0
            self._track_bytes(dst.storage, th, np.arange(at, at + 16), write=True)
            return
        if fname == "tl::lds16":  # include/tl/gemm_frag.cuh: 16 bytes of a shared tile into registers
            dst, src = self.pointer(args[0], th), self.pointer(args[1], th)
            out, inp = dst.storage.view("uint8"), src.storage.view("uint8")
            at = dst.elem * np.dtype(_STORAGE[dst.dtype]).itemsize
            frm = src.elem * np.dtype(_STORAGE[src.dtype]).itemsize
            if frm % 16 or not 0 <= frm <= len(inp) - 16:
                self.problem(f"tl::lds16 at byte {frm} of {src.storage.name} ({len(inp)} bytes, 16-aligned)")
            self._track_bytes(src.storage, th, np.arange(frm, frm + 16), write=False)
            out[at:at + 16] = inp[frm:frm + 16]
            self._track_bytes(dst.storage, th, np.arange(at, at + 16), write=True)
            return
        if fname == "atomicAdd":  # T.atomic_add: read-modify-write of one element (an atomic is never a race)
            ptr = self.pointer(args[0], th)
            if ptr.dtype == "bfloat16":
                raise NotImplementedError("emulator: atomicAdd on bfloat16")
            view = ptr.storage.view(ptr.dtype)
            if not 0 <= ptr.elem < len(view):
                self.problem(f"atomicAdd at {ptr.storage.name}[{ptr.elem}] outside its {len(view)} elements")
            view[ptr.elem] = _cast(view[ptr.elem:ptr.elem + 1] + self.ev(args[1], th), ptr.dtype)[0]
            return
        m = re.fullmatch(r"tl::atomic_add_v([24])", fname)
        if m:  # tl.cuda.vector_atomics: red.global.add.v2/v4.f32, each element added atomically
            n, ptr = int(m[1]), self.pointer(args[0], th)
            view = ptr.storage.view(ptr.dtype)
            if ptr.dtype != "float32" or ptr.elem % n or not 0 <= ptr.elem <= len(view) - n:
                self.problem(f"{fname} at {ptr.storage.name}[{ptr.elem}] ({ptr.dtype}, {len(view)} elements): "
                             f"needs float32, {4 * n}-byte aligned, inside the tensor")
            for k in range(n):
                view[ptr.elem + k] = _cast(view[ptr.elem + k:ptr.elem + k + 1] + self.ev(args[1 + k], th),
                                           "float32")[0]
            return
        m = re.fullmatch(r"tl::gemm_rb_step<([\d, ]+)>", fname)
        if m:  # one k-step of mma.sync with B fragments from the threads' registers (include/tl/gemm_frag.cuh)
            params = tuple(int(x) for x in m[1].split(","))
            yield ("wgmma", ("mma_rb", params), tuple(self.pointer(a, th) for a in args[:3]))
            return
        m = re.fullmatch(r"tl::(wgmma_gemm|gemm)_(ss|rs)<([\d, ]+)>", fname)
        if m:
            params = tuple(int(x) for x in m[3].split(","))
            ptrs = tuple(self.pointer(a, th) for a in args[:3])
            yield ("wgmma", (m[2] if m[1] == "wgmma_gemm" else f"mma_{m[2]}", params), ptrs)
            return
        m = re.fullmatch(r"tl::wgmma_acc_ready<(-?\d+), \d+>", fname)
        if m:  # wait_group W (W = -1: none), then the accumulators' fences (no value changes)
            if int(m[1]) == 0:
                th.block.retire(th.tid // 128, [th.tid])
            elif int(m[1]) != -1:
                raise NotImplementedError(f"emulator: {fname} (only waits for all groups, or none, are modelled)")
            return
        if re.fullmatch(r"tl::keep_before_wait<[\d, ]+>", fname):
            # stores that never run (k < 0; include/tl/wgmma.cuh): they only order the softmax before the next wait
            if self.scalar(args[0], th) < 0:
                self.problem(f"{fname}: its loop counter is negative, so its stores would run")
            return
        if re.fullmatch(r"tl::wgmma_drain<\d+>", fname):
            # the emulated wgmma wrote its accumulators when issued (the drain's x + -0.0 changes nothing); its
            # wait_group 0 retires this thread's share of its warpgroup's group in flight
            th.block.retire(th.tid // 128, [th.tid])
            return
        # an L2 eviction hint (T.copy eviction_policy) changes no value: the copies without it
        fname = re.sub(r"^(tl::cp_async_16(?:_zfill)?)_hint<\d>$", r"\1", fname)
        if fname in ("tl::cp_async_16", "tl::cp_async_16_zfill"):
            self._cp_async(fname, args, th)
            return
        if re.fullmatch(r"tl::copy_16_hint<\d>", fname):
            self._copy_16(args, th)
            return
        if fname == "tl::cp_async_commit":
            th.groups.append(th.issued)
            th.issued = []
            return
        m = re.fullmatch(r"tl::cp_async_wait<(\d+)>", fname)
        if m:
            keep = int(m[1])
            while len(th.groups) > keep:
                self._cp_async_land(th, th.groups.pop(0))
            return
        if fname == "__syncwarp":
            yield ("syncwarp",)
            return
        m = re.fullmatch(r"tl::named_barrier_sync<(\d+), (\d+)>", fname)
        if m:
            yield ("named", int(m[1]), int(m[2]))
            return
        if fname in ("tl::pingpong_wait", "tl::pingpong_pass"):  # bar.sync 2 + wg, 256 / bar.arrive 3 - wg, 256
            wg = self.scalar(args[0], th)
            if wg not in (0, 1):
                self.problem(f"{fname}({wg}): a warpgroup index of 0 or 1")
            if fname == "tl::pingpong_wait":
                yield ("named", 2 + wg, 256)
            else:
                th.block.sched.bar_arrive(th.tid, 3 - wg, 256)
            return
        if fname in ("tl::mbar_init", "tl::mbar_arrive", "tl::mbar_expect_tx"):
            self._mbar_op(fname, args, th)
            return
        if fname == "tl::mbar_wait":
            bar = self._mbar(self.pointer(args[0], th), th, args[0])
            yield ("mbar_wait", bar, self.scalar(args[1], th))
            return
        if fname in ("tl::mbar_fence_init", "tl::fence_proxy_async"):
            return  # orderings the emulator's memory has already: init and TMA act at once, in program order
        m = re.fullmatch(r"tl::tma_load_([1-5])d<(\d+)>", fname)
        if m:
            self._tma_load(int(m[1]), int(m[2]), args, th)
            return
        # thread-block clusters (tl/cluster.cuh)
        if fname == "tl::cluster_sync":
            yield ("cluster",)
            return
        m = re.fullmatch(r"tl::mbar_arrive_cluster<(\d+)>", fname)
        if m:
            self._mbar_arrive_cluster(int(m[1]), args, th)
            return
        m = re.fullmatch(r"tl::tma_load_2d_multicast<(\d+)>", fname)
        if m:
            self._tma_load(2, int(m[1]), args, th, multicast=True)
            return
        m = re.fullmatch(r"tl::tma_store_([2-5])d<(\d+)>", fname)
        if m:
            self._tma_store(int(m[1]), int(m[2]), args, th)
            return
        if fname == "tl::tma_store_commit":
            th.bulk_groups.append(th.bulk_issued)
            th.bulk_issued = []
            return
        m = re.fullmatch(r"tl::tma_store_wait_read<(\d+)>", fname)
        if m:
            self._tma_store_wait(int(m[1]), th)
            return
        m = re.fullmatch(r"tl::wgmma_acc_to_slabs<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)>", fname)
        if m:
            self._acc_to_slabs(*(int(x) for x in m.groups()), args, th)
            return
        m = re.fullmatch(r"tl::setmaxnreg_(dec|inc)<(\d+)>", fname)
        if m:
            self._setmaxnreg(int(m[2]), th)
            return
        raise NotImplementedError(f"emulator: device function {fname}")

    # -- mbarriers and TMA loads (tl/tma.cuh) ---------------------------------------------------------------
    def _mbar(self, ptr: _Pointer, th: _Thread, expr: Any, init: int | None = None) -> _Mbar:
        """The mbarrier at ``ptr`` (its state keyed by the shared address), created by ``init``."""
        size = np.dtype(_STORAGE[ptr.dtype]).itemsize
        b = ptr.elem * size
        if not ptr.storage.shared or b % 8:
            self.problem(f"an mbarrier at {ptr.storage.name} byte {b}: not 8 aligned bytes of shared memory")
        key = (id(ptr.storage), b)
        blk = th.block
        if init is not None:
            name = expr.args[0].source.name if isinstance(expr, tvm.ir.Call) else ptr.storage.name
            where = f"block {th.rank}, " if blk.rank_shared is not None else ""
            blk.mbars[key] = _Mbar(f"{name} ({where}shared byte {b})", init, init, 0, 0,
                                   np.zeros(blk.width, np.int32))
        bar = blk.mbars.get(key)
        if bar is None:
            self.problem(f"thread {th.tid} uses the mbarrier at {ptr.storage.name} byte {b} before tl::mbar_init")
        return bar

    def _mbar_op(self, fname: str, args: list[Any], th: _Thread) -> None:
        ptr = self.pointer(args[0], th)
        if fname == "tl::mbar_init":
            count = self.scalar(args[1], th)
            if not 1 <= count < 1 << 20:
                self.problem(f"tl::mbar_init with an arrival count of {count} (1 .. 2^20 - 1)")
            self._mbar(ptr, th, args[0], init=count)
            return
        bar = self._mbar(ptr, th, args[0])
        if fname == "tl::mbar_expect_tx":
            bar.tx += self.scalar(args[1], th)
        if bar.pending == 0:
            self.problem(f"thread {th.tid} arrives on mbarrier {bar.label} whose phase {bar.phases} already has its "
                         f"{bar.count} arrivals (and waits for {bar.tx} bytes of transactions)")
        self._release_into(bar, th)
        bar.pending -= 1
        self._mbar_progress(bar, th.block)

    def _release_into(self, bar: _Mbar, th: _Thread) -> None:
        """What ``th`` did so far is ordered before what the threads whose waits this phase satisfies do after."""
        vc = th.block.vc
        np.maximum(bar.vc, vc[th.tid], out=bar.vc)
        vc[th.tid, th.tid] += 1

    def _mbar_progress(self, bar: _Mbar, blk: _Block) -> None:
        """Complete ``bar``'s phase once its arrivals and bytes are all in, and wake the waits it satisfies."""
        if bar.pending or bar.tx:
            return
        bar.phases += 1
        bar.done_vc, bar.vc = bar.vc, np.zeros(blk.width, np.int32)
        bar.pending = bar.count
        if blk.sched is not None:
            blk.sched.wake(bar)

    def _tma_box(self, op: str, rank: int, index: int, args: list[Any],
                 th: _Thread) -> tuple[dict[str, Any], _Storage, np.ndarray, np.ndarray, _Storage, np.ndarray]:
        """The geometry of the TMA box ``op`` moves: (its map, the global tensor, which box elements lie inside the
        tensor, their byte offsets there (elements x bytes, clipped where outside), the shared storage at
        ``args[0]``, the shared bytes of the box in row-major box order through the map's swizzle — CUTLASS's
        Swizzle<B, 4, 3> of the byte offset from the start of the block's shared memory (bits 4.. XOR bits 7..,
        B = 3 / 2 / 1 for 128 / 64 / 32 bytes)). The coordinates are the last ``rank`` arguments, innermost first."""
        maps = self._tma_maps()
        if index >= len(maps):
            self.problem(f"{op} but the kernel has {len(maps)} tensor maps")
        mp = maps[index]
        dims, box, swz = [int(x) for x in mp["dims"]], [int(x) for x in mp["box"]], int(mp["swizzle"])
        if len(dims) != rank or len(box) != rank:
            self.problem(f"{op} of a {len(dims)}-D map ({mp['param']})")
        refused = tensor_map_problems(mp)  # what the launcher checks before cuTensorMapEncodeTiled
        if refused:
            self.problem(f"tensor map {index} ({mp['param']}): cuTensorMapEncodeTiled would refuse it: "
                         f"{'; '.join(refused)}")
        es = np.dtype(_STORAGE[str(mp["dtype"])]).itemsize if mp["dtype"] in _STORAGE else 1
        if (swz not in (32, 64, 128) or box[0] * es > swz) and (swz != 0 or box[0] * es % 16) or \
                any(not 1 <= x <= 256 for x in box):
            self.problem(f"tensor map {index} ({mp['param']}): a box of {box} elements of {es} bytes with a {swz}-byte "
                         "swizzle (the inner box dimension may span at most the swizzle's bytes, or without a swizzle "
                         "a multiple of 16 bytes; each at most 256)")
        smem = self.pointer(args[0], th)
        coords = [self.scalar(a, th) for a in args[-rank:]]
        param = next((p for p in self.func.params if p.name == mp["param"]), None)
        if param is None:
            self.problem(f"tensor map {index} names {mp['param']}, not a parameter of the kernel")
        glob = self.globals[param]
        if len(glob.data) != int(np.prod(dims)) * es:
            self.problem(f"tensor map {index}: {mp['param']} has {len(glob.data)} bytes, the map describes "
                         f"{'x'.join(map(str, reversed(dims)))} elements of {es} bytes")
        # the box's elements, outermost dimension first, in the order they are stored
        idx = np.indices(tuple(reversed(box))).reshape(rank, -1)
        pos = idx + np.array(list(reversed(coords)), dtype=np.int64)[:, None]
        outer = np.array(list(reversed(dims)), dtype=np.int64)[:, None]
        inside = ((pos >= 0) & (pos < outer)).all(axis=0)
        lin = np.ravel_multi_index(tuple(np.clip(pos, 0, outer - 1)), tuple(reversed(dims)))
        gbytes = lin[:, None] * es + np.arange(es)
        d0 = smem.elem * np.dtype(_STORAGE[smem.dtype]).itemsize
        st = smem.storage
        if not st.shared or d0 % 128:
            self.problem(f"{op} at {st.name} byte {d0}: not 128-byte aligned shared memory")
        lb = d0 + np.arange(gbytes.size, dtype=np.int64)
        phys = lb ^ (((lb >> 7) & (swz // 16 - 1)) << 4) if swz else lb  # 0: SWIZZLE_NONE, the box row-major
        if phys.max() >= len(st.data):
            self.problem(f"{op} covers {st.name} bytes {d0}..{d0 + gbytes.size} outside its {len(st.data)}")
        return mp, glob, inside, gbytes, st, phys

    def _tma_load(self, rank: int, index: int, args: list[Any], th: _Thread, multicast: bool = False) -> None:
        """``tl::tma_load_<rank>d<index>(dst, bar, c0 ..)``: the box of tensor map ``index`` (``tl.tma_maps``) at
        coordinates ``c0`` (innermost) .., zero outside the tensor, written into shared memory at ``dst`` (see
        :meth:`_tma_box`) at once (the copy completes when issued), then its bytes complete on ``bar``.
        ``multicast`` (``tl::tma_load_2d_multicast<index>(dst, bar, mask, c0, c1)``): the same box written at
        ``dst``'s offset into the shared memory of every block of the cluster whose rank is set in ``mask``, its
        bytes completing on the mbarrier at ``bar``'s offset in each of them."""
        op = f"tl::tma_load_{rank}d{'_multicast' if multicast else ''}<{index}>"
        if len(args) != 2 + multicast + rank:
            self.problem(f"{op} with {len(args)} arguments")
        _mp, src, inside, gbytes, st, phys = self._tma_box(op, rank, index, args, th)
        data = np.where(inside[:, None], src.data[gbytes], 0).astype(np.uint8).reshape(-1)
        dst, barp = self.pointer(args[0], th), self.pointer(args[1], th)
        targets = [(st, barp)]
        if multicast:
            mask = self.scalar(args[2], th)
            size = len(th.block.rank_shared or [None])
            if not 0 < mask < 1 << size:
                self.problem(f"{op}: a multicast mask of {mask:#x} in a cluster of {size} blocks")
            targets = [(self._peer(dst, th, r).storage, self._peer(barp, th, r)) for r in range(size)
                       if mask >> r & 1]
        for dst_st, bar_ptr in targets:
            bar = self._mbar(bar_ptr, th, args[1])
            self._track_bytes(dst_st, th, phys, write=True, who=f"the TMA load of thread {th.tid}")
            dst_st.data[phys] = data
            # complete_tx: the copy's writes are released into the barrier's phase with the bytes
            self._release_into(bar, th)
            bar.tx -= len(data)
            self._mbar_progress(bar, th.block)

    def _peer(self, ptr: _Pointer, th: _Thread, rank: int) -> _Pointer:
        """``mapa``: the element at ``ptr``'s offset in the shared memory of the cluster's block ``rank``."""
        peers = th.block.rank_shared
        if peers is None:
            if rank != 0:
                self.problem(f"thread {th.tid} addresses block {rank} of a cluster in a kernel without clusters")
            return ptr
        if not 0 <= rank < len(peers):
            self.problem(f"thread {th.tid} addresses block {rank} of a cluster of {len(peers)}")
        if th.block.sched is not None and th.block.sched.block_exited(rank):
            self.problem(f"thread {th.tid} (block {th.rank}) addresses the shared memory of block {rank} of its "
                         "cluster, which has exited (a barrier.cluster before exit keeps every block until its peers "
                         "are done with it)")
        buf = next((b for b, st in th.shared.items() if st is ptr.storage), None)
        if buf is None:
            self.problem(f"{ptr.storage.name}: not a shared allocation of the block")
        if buf not in peers[rank]:  # a block's shared memory exists from its launch: the peer has not run its
            # allocation yet (its bytes are fresh, its mbarriers not initialised)
            peers[rank][buf] = _fresh(buf.name, len(ptr.storage.data), shared=True, track=True,
                                      width=th.block.width)
        return _Pointer(peers[rank][buf], ptr.elem, ptr.dtype)

    def _mbar_arrive_cluster(self, n: int, args: list[Any], th: _Thread) -> None:
        """``tl::mbar_arrive_cluster<n>(bar)``: one arrival on the mbarrier at ``bar``'s offset in each of the
        cluster's blocks 0 .. n-1 (a remote arrival releases what the thread did before into that phase)."""
        size = len(th.block.rank_shared or [None])
        if n != size:
            self.problem(f"tl::mbar_arrive_cluster<{n}> in a cluster of {size} blocks")
        ptr = self.pointer(args[0], th)
        for r in range(n):
            bar = self._mbar(self._peer(ptr, th, r), th, args[0])
            if bar.pending == 0:
                self.problem(f"thread {th.tid} arrives on mbarrier {bar.label} of block {r} whose phase "
                             f"{bar.phases} already has its {bar.count} arrivals")
            self._release_into(bar, th)
            bar.pending -= 1
            self._mbar_progress(bar, th.block)

    def _tma_store(self, rank: int, index: int, args: list[Any], th: _Thread) -> None:
        """``tl::tma_store_<rank>d<index>(src, c0 ..)``: the box at ``src`` (through the map's swizzle) into the
        map's tensor, the parts outside it not written. The global writes happen at issue; the shared bytes are
        read by the copy until a ``tl::tma_store_wait_read`` retires its bulk group (a write to them before then
        is a race)."""
        op = f"tl::tma_store_{rank}d<{index}>"
        if len(args) != 1 + rank:
            self.problem(f"{op} with {len(args)} arguments")
        mp, dst, inside, gbytes, st, phys = self._tma_box(op, rank, index, args, th)
        if not mp.get("store"):
            self.problem(f"{op}: tensor map {index} ({mp['param']}) is not encoded for stores")
        self._track_bytes(st, th, phys, write=False, who=f"the TMA store of thread {th.tid}")
        st.avc[phys, th.tid] = IN_FLIGHT
        th.bulk_issued.append((st, phys))
        data = st.data[phys].reshape(-1, gbytes.shape[1])
        dst.data[gbytes[inside].reshape(-1)] = data[inside].reshape(-1)

    def _tma_store_wait(self, keep: int, th: _Thread) -> None:
        """``tl::tma_store_wait_read<keep>``: this thread's bulk groups but the ``keep`` newest are done reading."""
        while len(th.bulk_groups) > keep:
            for st, phys in th.bulk_groups.pop(0):
                st.avc[phys, th.tid] = th.block.vc[th.tid, th.tid]

    def _acc_to_slabs(self, MI: int, NT: int, warp_m: int, warp_n: int, rows: int, w: int, swz: int, step: int,
                      args: list[Any], th: _Thread) -> None:
        """``tl::wgmma_acc_to_slabs`` (include/tl/tma.cuh), replayed: the thread's accumulator registers of column
        block ``step`` stored as pairs of the slabs' type into its warpgroup column's slab, swizzled."""
        acc, slabs = _PtrBuf(self.pointer(args[0], th)), self.pointer(args[1], th)
        lg = 1 if np.dtype(_STORAGE[slabs.dtype]).itemsize == 2 else 0
        mask = swz // 16 - 1
        warp, lane = th.ltid // WARP, th.ltid % WARP
        g = warp // 4
        gr, gc = g // warp_n, g % warp_n
        slab = _PtrBuf(_Pointer(slabs.storage, slabs.elem + gc * rows * w, slabs.dtype))
        for mi in range(MI):
            for a in range(w // 8):
                for h in range(2):
                    reg = mi * NT * 4 + (step * (w // 8) + a) * 4 + h * 2
                    row = mi * warp_m * 64 + 8 * h + gr * 64 + (warp % 4) * 16 + lane // 4
                    q = row * w + a * 8 + (lane % 4) * 2
                    q ^= ((q >> (7 - lg)) & mask) << (4 - lg)
                    for j in range(2):  # store_pair: __floats2half2_rn / __floats2bfloat162_rn
                        self._raw_store(th, slab, q + j, self._raw_load(th, acc, reg + j))

    def _tma_maps(self) -> list[dict[str, Any]]:
        text = self.func.attrs["tl.tma_maps"] if "tl.tma_maps" in self.func.attrs else None
        if text is None:
            self.problem("a TMA load in a kernel without tl.tma_maps")
        return list(json.loads(str(text)))

    def _setmaxnreg(self, regs: int, th: _Thread) -> None:
        """``setmaxnreg`` changes no value; its count must be a multiple of 8 in 24 .. 256, the same for the whole
        warpgroup, and the warpgroups' counts must fit the register file."""
        if regs % 8 or not 24 <= regs <= 256:
            self.problem(f"setmaxnreg<{regs}>: a count of 24 .. 256 registers, a multiple of 8")
        wg = th.ltid // 128
        blk = th.block
        key = th.rank * 1024 + wg  # per block of a cluster: each runs on its own SM
        if blk.regs.setdefault(key, regs) != regs:
            self.problem(f"the threads of warpgroup {wg} ask setmaxnreg for {blk.regs[key]} and {regs} registers")
        mine = {k % 1024: v for k, v in blk.regs.items() if k // 1024 == th.rank}
        if sum(mine.values()) * 128 > 65536:
            self.problem(f"setmaxnreg: the warpgroups ask for {mine} registers per thread, more than the "
                         "65536 of an SM")

    # -- cp.async (tl/copy.cuh) --------------------------------------------------------------------------
    def _cp_async(self, fname: str, args: list[Any], th: _Thread) -> None:
        """Issue a 16-byte copy: the source is read now, the shared bytes are written when a ``cp_async_wait``
        retires its group; until then any access to them (by any thread) is reported."""
        dst, src = self.pointer(args[0], th), self.pointer(args[1], th)
        d0 = dst.elem * np.dtype(_STORAGE[dst.dtype]).itemsize
        if not dst.storage.shared or d0 % 16 or d0 + 16 > len(dst.storage.data):
            self.problem(f"cp.async to {dst.storage.name} byte {d0}: not 16 aligned bytes of shared memory")
        pred = not fname.endswith("zfill") or bool(self.ev(args[2], th)[0])
        if pred:
            s0 = src.elem * np.dtype(_STORAGE[src.dtype]).itemsize
            if s0 % 16 or s0 < 0 or s0 + 16 > len(src.storage.data):
                self.problem(f"cp.async from {src.storage.name} byte {s0}: not 16 aligned bytes inside it")
            data = src.storage.data[s0:s0 + 16].copy()
        else:
            data = np.zeros(16, dtype=np.uint8)
        sl = slice(d0, d0 + 16)
        self._track(dst.storage, th, np.array([d0 // 16]), 16, write=True)  # conflicts at issue
        dst.storage.writer[sl] = -1  # ... but the bytes change only when the copy lands
        dst.storage.inflight[sl] = th.tid
        th.issued.append((dst.storage, d0, data))

    def _copy_16(self, args: list[Any], th: _Thread) -> None:
        """A synchronous 16-byte copy (``tl::copy_16_hint``): read now, written now."""
        dst, src = self.pointer(args[0], th), self.pointer(args[1], th)
        d0 = dst.elem * np.dtype(_STORAGE[dst.dtype]).itemsize
        s0 = src.elem * np.dtype(_STORAGE[src.dtype]).itemsize
        for name, b, st in ((dst.storage.name, d0, dst.storage), (src.storage.name, s0, src.storage)):
            if b % 16 or b < 0 or b + 16 > len(st.data):
                self.problem(f"16-byte copy at {name} byte {b}: not 16 aligned bytes inside it")
        self._track(src.storage, th, np.array([s0 // 16]), 16, write=False)
        self._track(dst.storage, th, np.array([d0 // 16]), 16, write=True)
        dst.storage.data[d0:d0 + 16] = src.storage.data[s0:s0 + 16]

    def _cp_async_land(self, th: _Thread, group: list[tuple[_Storage, int, np.ndarray]]) -> None:
        for st, d0, data in group:
            st.inflight[d0:d0 + 16] = -1
            self._track(st, th, np.array([d0 // 16]), 16, write=True)
            st.data[d0:d0 + 16] = data

    # -- the reduce.cuh templates, step by step --------------------------------------------------------
    def _raw_load(self, th: _Thread, pb: _PtrBuf, i: int) -> np.ndarray:
        st, dt = pb.p.storage, pb.p.dtype
        elems = np.array([pb.p.elem + i], dtype=np.int64)
        if elems[0] >= len(st.view(dt)):
            self.problem(f"template read outside {st.name}")
        self._track(st, th, elems, np.dtype(_STORAGE[dt]).itemsize, write=False)
        raw = st.view(dt)[elems]
        return (raw.astype(np.uint32) << 16).view(np.float32) if dt == "bfloat16" else raw.astype(_NP[dt])

    def _raw_store(self, th: _Thread, pb: _PtrBuf, i: int, value: np.ndarray) -> None:
        st, dt = pb.p.storage, pb.p.dtype
        elems = np.array([pb.p.elem + i], dtype=np.int64)
        if elems[0] >= len(st.view(dt)):
            self.problem(f"template write outside {st.name}")
        self._track(st, th, elems, np.dtype(_STORAGE[dt]).itemsize, write=True)
        v = _cast(np.asarray(value).reshape(1), dt)
        st.view(dt)[elems[0]] = (v.view(np.uint32) >> 16).astype(np.uint16)[0] if dt == "bfloat16" else v[0]

    def _block_allreduce(self, op: str, threads: int, d: int, args: list[Any],
                         th: _Thread) -> Generator[Any, Any, None]:
        if threads != self.threads:
            self.problem(f"block_allreduce<{threads}> in a block of {self.threads} threads")
        comb = _COMBINE[op]
        vals, scratch = self.pointer(args[0], th), self.pointer(args[1], th)
        pv, ps = _PtrBuf(vals), _PtrBuf(scratch)
        if threads < WARP:  # a block under one warp: through scratch of threads * d elements, no shuffles
            if threads > 1:
                yield ("sync",)
                for k in range(d):
                    self._raw_store(th, ps, th.ltid * d + k, self._raw_load(th, pv, k))
                yield ("sync",)
                for k in range(d):
                    v = self._raw_load(th, ps, k)
                    for t in range(1, threads):
                        v = comb(v, self._raw_load(th, ps, t * d + k))
                    self._raw_store(th, pv, k, v)
            return
        for k in range(d):
            v = self._raw_load(th, pv, k)
            for off in (16, 8, 4, 2, 1):
                other = yield ("shfl", v, off)
                v = comb(v, other)
            self._raw_store(th, pv, k, v)
        if threads > WARP:
            w_count = threads // WARP
            warp, lane = th.ltid // WARP, th.ltid % WARP
            yield ("sync",)
            if lane == 0:
                for k in range(d):
                    self._raw_store(th, ps, warp * d + k, self._raw_load(th, pv, k))
            yield ("sync",)
            for k in range(d):
                v = self._raw_load(th, ps, k)
                for w in range(1, w_count):
                    v = comb(v, self._raw_load(th, ps, w * d + k))
                self._raw_store(th, pv, k, v)

    def _row_allreduce(self, op: str, warp_n: int, r: int, args: list[Any],
                       th: _Thread) -> Generator[Any, Any, None]:
        comb = _COMBINE[op]
        pv = _PtrBuf(self.pointer(args[0], th))
        for k in range(r):
            v = self._raw_load(th, pv, k)
            for off in (1, 2):
                other = yield ("shfl", v, off)
                v = comb(v, other)
            self._raw_store(th, pv, k, v)
        if warp_n > 1:
            ps = _PtrBuf(self.pointer(args[1], th))
            warp, lane = th.ltid // WARP, th.ltid % WARP
            wr = warp // warp_n
            yield ("sync",)
            if lane % 4 == 0:
                for k in range(r):
                    self._raw_store(th, ps, (warp * 8 + lane // 4) * r + k, self._raw_load(th, pv, k))
            yield ("sync",)
            for k in range(r):
                v = self._raw_load(th, ps, ((wr * warp_n) * 8 + lane // 4) * r + k)
                for c in range(1, warp_n):
                    v = comb(v, self._raw_load(th, ps, ((wr * warp_n + c) * 8 + lane // 4) * r + k))
                self._raw_store(th, pv, k, v)

    # -- wgmma ------------------------------------------------------------------------------------------
    def _wgmma(self, block: _Block, tokens: list[Any], tids: list[int]) -> None:
        """``tl::wgmma_gemm_ss`` / ``tl::wgmma_gemm_rs``, issued by the 128 threads ``tids`` of one warpgroup
        together (``tl::gemm_ss`` / ``tl::gemm_rs``, mma.sync: the 32 of one warp): C += A B in float32 (fp16/bf16
        products are exact in float32; the hardware's summation order may differ) for the accumulator registers
        of these threads. A and B are read from shared memory in the wgmma swizzled layouts the template's
        descriptors describe (or A from the threads' registers in the ``wgmma`` fragment layout), C is the threads'
        accumulator registers in the ``wgmma`` layout of the ``wg_m x wg_n`` warpgroups of the call. The shared
        bytes read must have been written, no cp.async may still be writing them, and their last write must be
        ordered (a barrier, an mbarrier phase) before every thread of the group (wgmma reads through the async
        proxy after ``fence.proxy.async``, which orders only the writes the issuing threads have seen); they are
        then marked read by the group's warps, so a later write that no synchronisation with them orders after
        the read is a race."""
        from tilelang_core.transform.cuda.layouts import FragmentLayout

        kinds = {tok[1] for tok in tokens}
        if len(kinds) != 1:
            self.problem(f"the threads of a warpgroup issue different wgmma calls: {sorted(kinds)}")
        form, params = tokens[0][1]
        mma = form.startswith("mma_")  # tl::gemm_ss / tl::gemm_rs (mma.sync): warps, not warpgroups
        if form == "mma_rb":
            self._mma_rb(block, tokens, tids, params)
            return
        if form in ("ss", "mma_ss"):
            if mma:
                M, N, K, wg_m, wg_n, ta, tb, swa, swb = params[:9]
            else:
                M, N, K, wg_m, wg_n, _nc, ta, tb, swa, swb = params[:10]
        elif mma:
            M, N, K, wg_m, tb, swb = params[:6]
            wg_n, ta, swa = 1, 0, 0
        else:
            M, N, K, wg_m, _nc, tb, swb = params[:7]
            wg_n, ta, swa = 1, 0, 0
        # PENDING: the group stays in flight after the call (wait_group 1 retires the one before it; PENDING = 2,
        # tl.cuda.attention_overlap's scores gemm, retires nothing: wait_group 2 with at most two groups issued)
        at = 10 if form == "ss" else 7
        pend = params[at] if not mma and len(params) > at else 0
        pending = pend >= 1
        group = 32 if mma else 128
        threads = wg_m * wg_n * group
        local = [t % self.threads for t in tids]  # threadIdx.x (a cluster's schedule numbers its blocks' threads on)
        if form == "ss" and len(params) > 11 and params[11]:  # OWN_TILE (tl.cuda.gemm_pingpong): g = 0
            local = [t % group for t in local]
        if local[-1] >= threads:
            self.problem(f"{'mma.sync' if mma else 'wgmma'} over a {wg_m} x {wg_n} grid ({threads} threads) issued by "
                         f"threads {tids[0]}..{tids[-1]}")
        b_ptr = tokens[0][2][1]
        if any(tok[2][1].storage is not b_ptr.storage or tok[2][1].elem != b_ptr.elem for tok in tokens):
            self.problem("the threads of a warpgroup pass different B tiles to one wgmma")
        # the part of A and B this group reads (wgmma.cuh: warpgroup g = (gr, gc) owns the m64 blocks
        # mi * WG_M + gr and the column slice gc * WN ..; mma.sync: the whole tiles)
        wg = local[0] // group
        rows_used = np.arange(M) if mma else np.nonzero((np.arange(M) // 64) % wg_m == wg // wg_n)[0]
        cols_used = np.arange(N) if mma else np.nonzero(np.arange(N) // (N // wg_n) == wg % wg_n)[0]
        b_vals, b_elems = _wgmma_tile(b_ptr, N if tb else K, K if tb else N, swb, "B", mma)
        b = b_vals.T if tb else b_vals  # K x N
        reads = [(b_ptr.storage, _tile_bytes(b_elems[cols_used] if tb else b_elems[:, cols_used], b_ptr.dtype))]
        if form in ("ss", "mma_ss"):
            a_ptr = tokens[0][2][0]
            if any(tok[2][0].storage is not a_ptr.storage or tok[2][0].elem != a_ptr.elem for tok in tokens):
                self.problem("the threads of a warpgroup pass different A tiles to one wgmma")
            a_vals, a_elems = _wgmma_tile(a_ptr, K if ta else M, M if ta else K, swa, "A", mma)
            a = a_vals.T if ta else a_vals  # M x K
            reads.append((a_ptr.storage, _tile_bytes(a_elems[:, rows_used] if ta else a_elems[rows_used],
                                                     a_ptr.dtype)))
        else:  # A from the registers of every thread, in the wgmma layout of its own M x K tile
            alay = (FragmentLayout.mma if mma else FragmentLayout.wgmma)((M, K), threads, wg_m, 1)
            a = np.full((M, K), np.nan, dtype=np.float32)
            for t, tok in zip(local, tokens):
                ap = tok[2][0]
                if ap.storage.shared:
                    self.problem("the A operand of a register-A wgmma is in shared memory")
                pb = _PtrBuf(ap)
                for r in range(alay.num_regs):
                    row, col = alay.element_of(t, r)
                    a[row, col] = self._raw_load(_Thread(_Block(), t, {}), pb, r)[0]
        g = np.asarray(tids, dtype=np.int64)
        if not mma and pend < 2:  # this call's wait_group (1 or 0) retires the group left in flight before it
            block.retire(tids[0] // 128, tids)
        seen = block.vc[g].min(axis=0)  # what every thread of the group has synchronised with
        for st, nbytes in reads:
            if st.inflight is not None and (st.inflight[nbytes] >= 0).any():
                self.problem(f"wgmma reads {st.name} bytes that a cp.async is still writing (no cp_async_wait "
                             "covers them)")
            if st.written is not None and not st.written[nbytes].all():
                self.problem(f"wgmma reads {st.name} bytes that were never written")
            if st.writer is not None:
                w = st.writer[nbytes]
                some = w >= 0
                late = seen[w[some]] < st.wclk[nbytes][some]
                if late.any():
                    self.problem(f"shared-memory race on {st.name}: the wgmma of threads {tids[0]}..{tids[-1]} reads "
                                 f"bytes written by thread {int(w[some][late][0])} that no barrier (or mbarrier phase) "
                                 "orders before every thread of the group (nor, so, before the async proxy)")
                if pending:  # read until retired: no clock orders a write after it yet
                    st.avc[nbytes[:, None], g[None, :]] = IN_FLIGHT
                    block.in_flight.setdefault(tids[0] // 128, []).append((st, nbytes, set(tids)))
                else:
                    st.avc[nbytes[:, None], g[None, :]] = block.vc[g, g][None, :]
        prod = a.astype(np.float32) @ b.astype(np.float32)
        clay = (FragmentLayout.mma if mma else FragmentLayout.wgmma)((M, N), threads, wg_m, wg_n)
        for t, tok in zip(local, tokens):
            pc = _PtrBuf(tok[2][2])
            th = _Thread(_Block(), t, {})
            for r in range(clay.num_regs):
                row, col = clay.element_of(t, r)
                acc = self._raw_load(th, pc, r)
                self._raw_store(th, pc, r, (acc + prod[row, col]).astype(np.float32))

    def _mma_rb(self, block: _Block, tokens: list[Any], tids: list[int], params: tuple[int, ...]) -> None:
        """``tl::gemm_rb_step<M, N, K, WARP_M, WARP_N, SWZ_A, CH, KK, D>(A, bfrag, C)`` (include/tl/gemm_frag.cuh),
        issued by the 32 lanes of a warp: C += A[:, ks] B_regs for k-step KK, where lane l (q = l % 4, r = l / 4)
        feeds the tile's k = (KK / (CH/4)) 4 CH + q CH + rb_offset(KK % (CH/4), e, D) (e = 0..3) with its registers
        bfrag[ni * 4 + e] (column wc WN + ni 8 + r of B) and with A's elements at those k (from the swizzled shared
        tile, which must be written and ordered before every lane of the warp, as for tl::gemm_ss)."""
        from tilelang_core.transform.cuda.layouts import FragmentLayout

        M, N, K, wg_m, wg_n, swa, ch, kk, d = params
        ks = [(kk // (ch // 4)) * 4 * ch + q * ch + rb_offset(kk % (ch // 4), e, d) for q in range(4) for e in range(4)]
        a_ptr = tokens[0][2][0]
        if any(tok[2][0].storage is not a_ptr.storage or tok[2][0].elem != a_ptr.elem for tok in tokens):
            self.problem("the lanes of a warp pass different A tiles to one tl::gemm_rb_step")
        a_vals, a_elems = _wgmma_tile(a_ptr, M, K, swa, "A", True)
        WM, WN = M // wg_m, N // wg_n
        warp = (tids[0] % self.threads) // WARP
        wr, wc = warp // wg_n, warp % wg_n
        rows = np.arange(wr * WM, (wr + 1) * WM)
        a = a_vals[:, ks]  # M x 16, in the order (q, e)
        nbytes = _tile_bytes(a_elems[rows][:, ks], a_ptr.dtype)
        st = a_ptr.storage
        g = np.asarray(tids, dtype=np.int64)
        seen = block.vc[g].min(axis=0)
        if st.inflight is not None and (st.inflight[nbytes] >= 0).any():
            self.problem(f"mma.sync reads {st.name} bytes that a cp.async is still writing (no cp_async_wait covers "
                         "them)")
        if st.written is not None and not st.written[nbytes].all():
            self.problem(f"mma.sync reads {st.name} bytes that were never written")
        if st.writer is not None:
            w = st.writer[nbytes]
            some = w >= 0
            late = seen[w[some]] < st.wclk[nbytes][some]
            if late.any():
                self.problem(f"shared-memory race on {st.name}: the mma.sync of threads {tids[0]}..{tids[-1]} reads "
                             f"bytes written by thread {int(w[some][late][0])} that no barrier orders before every "
                             "lane of the warp")
            st.avc[nbytes[:, None], g[None, :]] = block.vc[g, g][None, :]
        b = np.zeros((16, N), dtype=np.float32)
        for t, tok in zip(tids, tokens):
            lane = t % WARP
            pb = _PtrBuf(tok[2][1])
            th = _Thread(_Block(), t, {})
            for ni in range(WN // 8):
                for e in range(4):
                    b[(lane % 4) * 4 + e, wc * WN + ni * 8 + lane // 4] = self._raw_load(th, pb, ni * 4 + e)[0]
        prod = a.astype(np.float32) @ b
        clay = FragmentLayout.mma((M, N), wg_m * wg_n * WARP, wg_m, wg_n)
        for t, tok in zip(tids, tokens):
            pc = _PtrBuf(tok[2][2])
            th = _Thread(_Block(), t, {})
            for r in range(clay.num_regs):
                row, col = clay.element_of(t % self.threads, r)
                acc = self._raw_load(th, pc, r)
                self._raw_store(th, pc, r, (acc + prod[row, col]).astype(np.float32))

    # -- the launch ------------------------------------------------------------------------------------
    def _launch(self, s: Any, th: _Thread) -> Generator[Any, Any, None]:
        iv = s.node
        tag = str(iv.thread_tag)
        n = self.scalar(s.value, th)
        if tag.startswith("blockIdx"):
            self.grid_depth += 1
            for b in range(n):
                inner = _Thread(_Block(), -1, th.env)
                inner.coords = {**th.coords, tag: b}
                inner.env[iv.var] = np.array([b], dtype=np.int64)
                yield from self._gen(s.body, inner)
            self.grid_depth -= 1
            if self.grid_depth == 0 and self.cluster is not None:
                self._run_clusters()
            return
        if tag != "threadIdx.x":
            raise NotImplementedError(f"emulator: launch over {tag}")
        self.threads = n
        if self.cluster is not None:
            self.pending.append((s.body, th, iv.var, n))
            return
        self._run_block(s.body, th, iv.var, n)

    def _run_block(self, body: Any, outer: _Thread, tvar: Any, n: int) -> None:
        """All ``n`` threads of one block, each running until it blocks (see :class:`_Scheduler`)."""
        block = _Block(n)
        outer.block = block
        threads = []
        for t in range(n):
            th = _Thread(block, t, outer.env)
            th.env[tvar] = np.array([t], dtype=np.int64)
            threads.append(th)
        block.sched = _Scheduler(self, block, [self._gen(body, th) for th in threads])
        block.sched.run()
        self._check_transactions(block)

    def _check_transactions(self, block: _Block) -> None:
        """When a block ends, every mbarrier's phases have had exactly the bytes they expected (``expect_tx``): a
        count left above zero is bytes that never landed, below zero bytes that landed after their phase had
        completed (a stage's barrier that leaves out some of its boxes), either a wrong kernel on the GPU."""
        for bar in block.mbars.values():
            if bar.tx:
                self.problem(f"mbarrier {bar.label} ends with {-bar.tx if bar.tx < 0 else bar.tx} bytes of "
                             f"transactions {'beyond what its phases expected' if bar.tx < 0 else 'never landed'}")

    def _run_clusters(self) -> None:
        """Every cluster of the collected blocks, one after the other; the blocks of a cluster together: one
        scheduler over all their threads (thread ``rank * n + t``: thread ``t`` of the block of that rank; ranks
        ``x % cx + (y % cy) * cx``, as %cluster_ctarank), one vector clock per thread of the cluster, each block's own
        shared memory and barriers (``__syncthreads`` and named barriers meet within a block)."""
        cx, cy, cz = self.cluster
        clusters: dict[tuple[int, int, int], dict[int, tuple[Any, _Thread, Any, int]]] = {}
        for body, outer, tvar, n in self.pending:
            x, y, z = (outer.coords.get(f"blockIdx.{d}", 0) for d in "xyz")
            rank = x % cx + (y % cy) * cx + (z % cz) * cx * cy
            clusters.setdefault((x // cx, y // cy, z // cz), {})[rank] = (body, outer, tvar, n)
        self.pending = []
        size = cx * cy * cz
        for key, blocks in sorted(clusters.items()):
            if len(blocks) != size:
                self.problem(f"cluster {key} has {len(blocks)} of its {size} blocks: the grid is not a multiple of "
                             f"the cluster shape {self.cluster}")
            n = blocks[0][3]
            block = _Block(n * size)
            block.rank_shared = [{} for _ in range(size)]
            gens = []
            for r in range(size):
                body, outer, tvar, _ = blocks[r]
                for t in range(n):
                    th = _Thread(block, r * n + t, outer.env)
                    th.ltid, th.rank, th.shared, th.coords = t, r, block.rank_shared[r], outer.coords
                    th.env[tvar] = np.array([t], dtype=np.int64)
                    gens.append(self._gen(body, th))
            block.sched = _Scheduler(self, block, gens, per_block=n, rank_first=self.schedule == "rank_first")
            block.sched.run()
            self._check_transactions(block)


class _Scheduler:
    """Runs the threads of one block: each runs until it yields a token it must wait at, then the next runnable
    thread runs. The tokens: ``("sync",)`` (``__syncthreads``: every thread that has not exited), ``("named", id,
    count)`` (``bar.sync id, count``), ``("syncwarp",)`` (the warp's lanes that have not exited), ``("shfl",
    value, offset)`` (the 32 lanes of the warp; each gets its xor partner's value back), ``("wgmma", call,
    pointers)`` (the 128 threads of a warpgroup issue together; ``tl::gemm_*`` (mma.sync): the 32 of a warp) and
    ``("mbar_wait", barrier, parity)`` (until the barrier's phase of that parity has completed). A barrier makes its
    threads' vector clocks meet; a satisfied mbarrier wait acquires the clocks released into the completed phase.
    No runnable thread while some wait: a deadlock, reported with what each thread waits on."""

    def __init__(self, emu: Emulator, block: _Block, gens: list[Iterator[Any]], per_block: int = 0,
                 rank_first: bool = False) -> None:
        self.emu, self.block, self.gens = emu, block, gens
        n = len(gens)
        self.n = n
        # the threads of one block (a cluster's scheduler runs several: barriers 0..15 meet within a block; the
        # ("cluster",) token, barrier.cluster, across all of them)
        self.per_block = per_block or n
        self.rank_first = rank_first
        self.left = [self.per_block] * (n // self.per_block)  # per block: threads that have not exited
        self.ready: deque[int] = deque(range(n))
        self.replies: list[Any] = [None] * n
        self.waiting: dict[int, Any] = {}  # thread -> the token it waits at
        self.exited: set[int] = set()
        self.groups: dict[Any, list[int]] = {}  # a collective (its key) -> the threads arrived at it
        self.named: dict[tuple[int, int], int] = {}  # (block, barrier id) -> its thread count while in use
        self.mbar_waiters: dict[int, list[int]] = {}  # id(mbarrier) -> waiting threads
        # bar.arrive: a named barrier's arrivals that do not wait (their count, the clocks they released)
        self.arrived: dict[Any, tuple[int, np.ndarray]] = {}

    def run(self) -> None:
        while self.ready:
            if self.rank_first:
                t = min(self.ready, key=lambda x: x // self.per_block)
                self.ready.remove(t)
            else:
                t = self.ready.popleft()
            self.advance(t)
        if len(self.exited) != self.n:
            self.deadlock()

    def advance(self, t: int) -> None:
        """Run thread ``t`` until it waits (a satisfied mbarrier wait does not stop it) or exits."""
        g = self.gens[t]
        reply, self.replies[t] = self.replies[t], None
        while True:
            try:
                tok = g.send(reply)
            except StopIteration:
                self.exited.add(t)
                self.on_exit(t)
                return
            reply = None
            if tok[0] == "mbar_wait":
                bar, parity = tok[1], tok[2]
                if bar.satisfied(parity):
                    self.acquire(t, bar)
                    continue
                self.waiting[t] = tok
                self.mbar_waiters.setdefault(id(bar), []).append(t)
                return
            self.waiting[t] = tok
            self.arrive(t, tok)
            return

    def acquire(self, t: int, bar: _Mbar) -> None:
        if bar.done_vc is not None:
            np.maximum(self.block.vc[t], bar.done_vc, out=self.block.vc[t])

    def wake(self, bar: _Mbar) -> None:
        """``bar`` completed a phase: its satisfied waiters acquire it and run again."""
        still = []
        for t in self.mbar_waiters.pop(id(bar), []):
            if bar.satisfied(self.waiting[t][2]):
                del self.waiting[t]
                self.acquire(t, bar)
                self.ready.append(t)
            else:
                still.append(t)
        if still:
            self.mbar_waiters[id(bar)] = still

    def key(self, t: int, tok: Any) -> Any:
        kind = tok[0]
        if kind == "sync":
            return ("bar", t // self.per_block, 0)
        if kind == "named":
            return ("bar", t // self.per_block, tok[1])
        if kind == "cluster":
            return ("cluster",)
        if kind in ("syncwarp", "shfl"):
            return (kind, t // WARP)
        if kind == "wgmma":
            size = WARP if tok[1][0].startswith("mma_") else 128
            return ("wgmma", t // size, size)
        raise NotImplementedError(f"emulator: token {kind}")

    def expected(self, key: Any) -> int:
        """How many threads complete the collective ``key`` now."""
        kind = key[0]
        if kind == "bar":
            if key[2] == 0 and key[1:] not in self.named:
                lo = key[1] * self.per_block
                return sum(1 for x in range(lo, lo + self.per_block) if x not in self.exited)
            return self.named[key[1:]]
        if kind == "cluster":
            return self.n - len(self.exited)
        if kind == "syncwarp":
            lanes = range(key[1] * WARP, min(self.n, (key[1] + 1) * WARP))
            return sum(1 for x in lanes if x not in self.exited)
        if kind == "shfl":
            return min(WARP, self.n - key[1] * WARP)
        return key[2]

    def arrive(self, t: int, tok: Any) -> None:
        key = self.key(t, tok)
        if tok[0] == "named":
            self.check_named(t, tok[1], tok[2])
        elif tok[0] == "sync" and key[1:] in self.named:
            self.emu.problem(f"__syncthreads while threads wait at bar.sync 0, {self.named[key[1:]]}")
        self.groups.setdefault(key, []).append(t)
        self.complete(key)

    def bar_arrive(self, t: int, bid: int, count: int) -> None:
        """``bar.arrive bid, count``: thread ``t`` counts at the barrier and runs on; what it did before is ordered
        before what the waiting threads do after the barrier completes."""
        self.check_named(t, bid, count)
        key = ("bar", t // self.per_block, bid)
        n, vc = self.arrived.get(key, (0, np.zeros(self.block.width, np.int32)))
        np.maximum(vc, self.block.vc[t], out=vc)
        self.block.vc[t, t] += 1
        self.arrived[key] = (n + 1, vc)
        self.groups.setdefault(key, [])
        self.complete(key)

    def check_named(self, t: int, bid: int, count: int) -> None:
        if count % WARP or not 0 < count <= self.per_block:
            self.emu.problem(f"bar.sync {bid}, {count}: a thread count that is a multiple of 32 up to the "
                             f"block's {self.per_block}")
        key = (t // self.per_block, bid)
        if self.named.setdefault(key, count) != count:
            self.emu.problem(f"threads meet at bar.sync {bid} with counts {self.named[key]} and {count}")

    def complete(self, key: Any) -> None:
        """If all the threads the collective ``key`` needs are there: perform it and let them run on."""
        tids = self.groups.get(key)
        extra, released = self.arrived.get(key, (0, None))
        if tids is None or len(tids) + extra < self.expected(key):
            return
        if len(tids) + extra > self.expected(key):
            self.emu.problem(f"{len(tids) + extra} threads at bar.sync {key[-1]}, {self.expected(key)}")
        del self.groups[key]
        self.arrived.pop(key, None)
        if key[0] == "bar":
            self.named.pop(key[1:], None)
        if released is not None:  # the arrivals' clocks, through the barrier, to its waiting threads
            for t in tids:
                np.maximum(self.block.vc[t], released, out=self.block.vc[t])
        if not tids:
            return
        tids.sort()
        toks = [self.waiting.pop(t) for t in tids]
        if key[0] == "shfl":
            vals = {t: tok[1] for t, tok in zip(tids, toks)}
            for t, tok in zip(tids, toks):
                self.replies[t] = vals[(t // WARP) * WARP + ((t % WARP) ^ tok[2])]
        elif key[0] == "wgmma":
            self.emu._wgmma(self.block, toks, tids)
        else:
            self.block.release(tids)
        self.ready.extend(tids)

    def block_exited(self, rank: int) -> bool:
        """Every thread of the cluster's block ``rank`` has exited (its shared memory is gone)."""
        return self.left[rank] == 0

    def on_exit(self, t: int) -> None:
        """An exited thread no longer counts at ``__syncthreads`` and ``__syncwarp``."""
        self.left[t // self.per_block] -= 1
        for key in (("bar", t // self.per_block, 0), ("syncwarp", t // WARP), ("cluster",)):
            self.complete(key)

    def deadlock(self) -> None:
        waits: dict[str, list[int]] = {}
        for t, tok in sorted(self.waiting.items()):
            waits.setdefault(self.describe(t, tok), []).append(t)
        lines = [f"{_ranges(ts)}: {what}" for what, ts in waits.items()]
        self.emu.problem(f"deadlock: no thread of the block can run ({len(self.exited)} of {self.n} exited); "
                         + "; ".join(lines))

    def describe(self, t: int, tok: Any) -> str:
        kind = tok[0]
        if kind == "mbar_wait":
            bar = tok[1]
            return (f"wait on mbarrier {bar.label} for parity {tok[2]} ({bar.phases} phases completed; the phase in "
                    f"progress waits for {bar.pending} of {bar.count} arrivals and {bar.tx} bytes)")
        key = self.key(t, tok)
        have = len(self.groups.get(key, []))
        if kind == "sync":
            return f"__syncthreads ({have} of {self.expected(key)} threads there)"
        if kind == "named":
            return (f"bar.sync {tok[1]}, {tok[2]} ({have} threads there, "
                    f"{self.arrived.get(key, (0, None))[0]} arrived by bar.arrive)")
        if kind == "shfl":
            return f"a warp shuffle of warp {t // WARP} ({have} of 32 lanes there)"
        if kind == "syncwarp":
            return f"__syncwarp of warp {t // WARP} ({have} of {self.expected(key)} lanes there)"
        if kind == "cluster":
            return f"barrier.cluster ({have} of the cluster's {self.expected(key)} threads there)"
        return f"a {tok[1][0]} gemm of {'warp' if key[2] == WARP else 'warpgroup'} {key[1]} ({have} of {key[2]} there)"


def _ranges(ts: list[int]) -> str:
    """'threads 0-127, 130' for a sorted list of thread ids."""
    out, i = [], 0
    while i < len(ts):
        j = i
        while j + 1 < len(ts) and ts[j + 1] == ts[j] + 1:
            j += 1
        out.append(f"{ts[i]}-{ts[j]}" if j > i else str(ts[i]))
        i = j + 1
    return ("threads " if len(ts) > 1 else "thread ") + ", ".join(out)


# -- wgmma (include/tl/wgmma.cuh), all the block's warpgroups at once ----------------------------------------------
def _wgmma_tile(ptr: _Pointer, rows: int, cols: int, swz: int, what: str,
                mma: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The ``rows x cols`` stored tile at ``ptr`` in the wgmma swizzled layout of ``swz`` bytes (or, ``mma``, the
    row-major tile XOR-swizzled at shift ``swz`` that ``tl::gemm_ss`` reads with ldmatrix) as float32, and the
    element (of ``ptr``'s type) each of its values is stored at."""
    from tilelang_core.transform.cuda.layouts import WGMMA_SWIZZLE_BASE, swizzle_py, wgmma_offset_py

    code = swz if mma else WGMMA_SWIZZLE_BASE + swz
    off = _WGMMA_OFFSETS.get((rows, cols, code, ptr.dtype))
    if off is None:
        if mma:
            off = np.array([[swizzle_py(r * cols + c, swz, ptr.dtype) for c in range(cols)] for r in range(rows)],
                           dtype=np.int64)
        else:
            off = np.array([[wgmma_offset_py(r, c, rows, code, ptr.dtype) for c in range(cols)]
                            for r in range(rows)], dtype=np.int64)
        _WGMMA_OFFSETS[(rows, cols, code, ptr.dtype)] = off
    st = ptr.storage
    if not st.shared:
        raise EmulationError(f"wgmma {what} operand {st.name} is not in shared memory")
    size = np.dtype(_STORAGE[ptr.dtype]).itemsize
    if not mma and (ptr.elem * size) % (8 * swz):
        # the hardware XORs absolute shared addresses (the descriptors' base offset is 0): the tile's layout is the
        # one the descriptors read only where the tile starts on a whole period of the swizzle
        raise EmulationError(f"wgmma {what} operand at {st.name} byte {ptr.elem * size}: not on a {8 * swz}-byte "
                             f"boundary (the period of its {swz}-byte swizzle)")
    view = st.view(ptr.dtype)
    elems = ptr.elem + off
    if elems.min() < 0 or elems.max() >= len(view):
        raise EmulationError(f"wgmma {what} operand reads {st.name} outside its {len(view)} elements")
    raw = view[elems]
    vals = (raw.astype(np.uint32) << 16).view(np.float32) if ptr.dtype == "bfloat16" else raw.astype(np.float32)
    return vals, elems


def rb_offset(t: int, e: int, d: int) -> int:
    """Where element ``e`` (0..3) of step ``t`` sits in a lane's k run (include/tl/gemm_frag.cuh): pair ``2t + e // 2``
    holds ``2d (p // d) + p % d`` and that ``+ d``."""
    p = 2 * t + e // 2
    return 2 * d * (p // d) + p % d + d * (e % 2)


def _tile_bytes(elems: np.ndarray, dtype: str) -> np.ndarray:
    size = np.dtype(_STORAGE[dtype]).itemsize
    return (elems[..., None] * size + np.arange(size)).reshape(-1)


_WGMMA_OFFSETS: dict[tuple[int, int, int, str], np.ndarray] = {}


@dataclass
class _PtrBuf:
    p: _Pointer


def _fdiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        return np.trunc(a / b).astype(np.int64)  # C division of ints
    return a / b


_BINARY = {
    tirx.Add: lambda a, b: a + b,
    tirx.Sub: lambda a, b: a - b,
    tirx.Mul: lambda a, b: a * b,
    tirx.Div: _fdiv,
    tirx.Mod: lambda a, b: np.fmod(a, b),
    tirx.FloorDiv: lambda a, b: np.floor_divide(a, b),
    tirx.FloorMod: lambda a, b: np.mod(a, b),
    tirx.Min: np.minimum,
    tirx.Max: np.maximum,
    tirx.EQ: lambda a, b: a == b,
    tirx.NE: lambda a, b: a != b,
    tirx.LT: lambda a, b: a < b,
    tirx.LE: lambda a, b: a <= b,
    tirx.GT: lambda a, b: a > b,
    tirx.GE: lambda a, b: a >= b,
    tirx.And: lambda a, b: a & b,
    tirx.Or: lambda a, b: a | b,
    tirx.BitwiseAnd: lambda a, b: a & b,
    tirx.BitwiseOr: lambda a, b: a | b,
    tirx.BitwiseXor: lambda a, b: a ^ b,
    tirx.LShift: lambda a, b: a << b,
    tirx.RShift: lambda a, b: a >> b,
}


def _f(fn: Any) -> Any:
    def wrapped(*xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(*xs)
    return wrapped


_MATH = {
    "tirx.rsqrt": _f(lambda x: (1 / np.sqrt(x)).astype(x.dtype)),
    "tirx.sqrt": _f(np.sqrt),
    "tirx.exp": _f(np.exp),
    "tirx.exp2": _f(np.exp2),
    "tirx.log": _f(np.log),
    "tirx.log2": _f(np.log2),
    "tirx.fabs": _f(np.abs),
    "tirx.tanh": _f(np.tanh),
    "tirx.sigmoid": _f(lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype)),
    "tirx.floor": _f(np.floor),
    "tirx.ceil": _f(np.ceil),
    "tirx.pow": _f(np.power),
    "tirx.fma": _f(lambda a, b, c: a * b + c),
    "tirx.isnan": _f(np.isnan),
}

# device functions of our headers used as values (tl/common.cuh): same results up to their stated error
_EXTERN_MATH = {
    "tl::fast_exp2": _f(np.exp2),  # ex2.approx.ftz.f32: relative error about 2^-22
    # include/tl/gemm_frag.cuh: one LOP3 (the word-pair decode of tl.DequantFragmentsCUDA, fragment_pairs.py)
    "tl::lop3<234>": lambda a, b, c: (a & b) | c,
    "tl::lop3<106>": lambda a, b, c: (a & b) ^ c,
    "tl::lop3<202>": lambda a, b, c: (a & b) | (~a & c),
    # include/tl/gemm_frag.cuh: prmt.b32 and the nibble-table lookup of fragment_tables.py
    "tl::prmt": lambda a, b, c: _prmt(a, b, c),
}


def _prmt(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """PTX ``prmt.b32`` (default mode): byte i of the result is byte ``c[4i+2:4i]`` of ``{b, a}``, its sign bit
    replicated over the byte when ``c[4i+3]`` is set."""
    src = (np.asarray(b).astype(np.uint64) << np.uint64(32)) | np.asarray(a).astype(np.uint64)
    c = np.asarray(c).astype(np.uint64)
    out = np.zeros(np.broadcast(src, c).shape, dtype=np.uint64)
    for i in range(4):
        sel = (c >> np.uint64(4 * i)) & np.uint64(0xF)
        byte = (src >> (np.uint64(8) * (sel & np.uint64(7)))) & np.uint64(0xFF)
        byte = np.where(sel & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
        out |= byte << np.uint64(8 * i)
    return out.astype(np.uint32)


def _nib_lut4(group: int, mask: int) -> Any:
    """``tl::nib_lut4<G, MASK>(w, t0..t3)`` replayed with :func:`_prmt`, as the header computes it."""
    def fn(w: np.ndarray, t0: np.ndarray, t1: np.ndarray, t2: np.ndarray, t3: np.ndarray) -> np.ndarray:
        w = np.asarray(w).astype(np.uint32)
        x = (w >> np.uint32(16)) if group else w
        low = np.uint32((mask & 7) * 0x1111)
        lo = _prmt(t0, t1, x & low)
        if mask < 8:
            return lo
        hi = _prmt(t2, t3, x & low)
        m = _prmt((w << np.uint32(4)).astype(np.uint32), w, np.uint32(0xFBEA if group else 0xD9C8))
        return (m & hi) | (~m & lo)
    return fn


_EXTERN_MATH.update({f"tl::nib_lut4<{g}, {m}>": _nib_lut4(g, m) for g in (0, 1) for m in (1, 3, 7, 15)})

_COMBINE = {"SumOp": lambda a, b: a + b, "MaxOp": lambda a, b: np.where(a > b, a, b),
            "MinOp": lambda a, b: np.where(a < b, a, b),
            # nan_propagate=True (reduce.cuh): a NaN on either side wins
            "MaxNanOp": lambda a, b: np.where(np.isnan(a) | np.isnan(b), a + b, np.where(a > b, a, b)),
            "MinNanOp": lambda a, b: np.where(np.isnan(a) | np.isnan(b), a + b, np.where(a < b, a, b))}


def prepare(func: Any, arch: str = "sm_90", pass_configs: dict[str, Any] | None = None) -> Any:
    """The device-bound TIR of ``func``: our CUDA passes (with ``pass_configs``), then the statement-shaping TVM
    passes that ``tilelang_core.backend.cuda.codegen`` runs before generating CUDA C (same order)."""
    from tvm import s_tir

    from tilelang_core.backend.cuda.codegen import lower
    from tilelang_core.pass_config import resolve

    mod = lower(func, arch=arch, options=resolve(pass_configs))
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    host = tvm.target.Target("llvm") if tvm.runtime.enabled("llvm") else tvm.target.Target("c")
    seq = tvm.ir.transform.Sequential([
        s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(True),
        tirx.transform.UnrollLoop(),
        tirx.transform.StmtSimplify(),
        tirx.transform.RemoveNoOp(),
    ])
    with tvm.transform.PassContext(opt_level=3):
        mod = tvm.tirx.transform.BindTarget(target.with_host(host))(mod)
        mod = seq(mod)
    return mod["main"]


def emulate(factory: Any, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[torch.Tensor],
            arch: str = "sm_90", pass_configs: dict[str, Any] | None = None) -> list[torch.Tensor]:
    """Emulate ``factory(*args, **kwargs)`` (a ``@jit`` factory) for CUDA on CPU ``inputs``; returns the outputs
    (the ``out_idx`` parameters), allocated filled with NaN (or the dtype's minimum) so unwritten elements show."""
    from tilelang_core.jit import _normalize_out_idx, _param_specs

    func = factory.get_program(*args, **kwargs)
    specs = _param_specs(func)
    outs = _normalize_out_idx(factory.out_idx, len(specs))
    it = iter(inputs)
    tensors, results = [], []
    for i, sp in enumerate(specs):
        if i in outs:
            dt = getattr(torch, sp.dtype)
            fill = float("nan") if dt.is_floating_point else torch.iinfo(dt).min
            t = torch.full(sp.shape, fill, dtype=dt)
            results.append(t)
        else:
            t = next(it)
        tensors.append(t)
    Emulator(func, arch, pass_configs).run(tensors)
    return results


def is_close_fraction(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> float:
    """The fraction of elements of ``out`` outside ``atol + rtol * |ref|`` (NaN counts as outside)."""
    o, r = out.double(), ref.double()
    bad = ~((o - r).abs() <= atol + rtol * r.abs())
    return float(bad.double().mean()) if bad.numel() else 0.0


__all__ = ["EmulationError", "Emulator", "emulate", "is_close_fraction", "prepare"]
