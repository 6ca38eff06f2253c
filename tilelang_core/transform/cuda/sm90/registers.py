"""Register arithmetic of sm_90a wgmma kernels: what a thread holds at the kernel's entry, how wide one wgmma
instruction may then be, and how a warp-specialised block splits its register file between the producer
warpgroup and the consumers (``setmaxnreg``).

Why the instruction width: ptxas (13.0) checks each ``wgmma.mma_async``'s operand registers against the kernel's
*entry* register count (65536 / launched threads, rounded down to 8, at most 255: the budget ``.maxntid`` gives), not
against the count a ``setmaxnreg.inc`` has raised the warp to. A block of 512 threads (three consumer warpgroups
plus the producer: the 192x256 t384 GEMM) enters with 128 registers; one m64n256k16 (128 accumulators and its
descriptors) needs 154 and is refused outright (``C7602 Insufficient registers (128) to compile instruction ...
Try to compile with register target of 154 or higher``, the whole kernel fails to build) although the consumers
hold 160 after ``setmaxnreg``. Two m64n128k16 of the same columns (the same 128 accumulators, 64 per
instruction) are accepted and ptxas allocates the consumer part up to its ``setmaxnreg`` count. So the widest
instruction is capped where, and only where, the uncapped one cannot be compiled (:func:`wgmma_max_n`): kernels
that build today keep their instructions.

Why the split: the consumers' accumulators (``block_M * block_N / threads`` floats each) must fit their count
with room for addresses, descriptors and the epilogue; the producer keeps what its loop needs (more in a
thread-block cluster: its slice, mask and cluster-tile arithmetic). :func:`register_split` gives the consumers
what the producer leaves, and when that is too little for the accumulators it takes from the producer down to its
floor (the kernel's notes say the split).
"""

from __future__ import annotations

REGISTER_FILE = 65536  # 32-bit registers of an SM, all of which one block of the split may hold
MAX_THREAD_REGS = 255
GRANULE = 8  # setmaxnreg counts and the launch's per-thread allocation are multiples of 8
SETMAXNREG_MIN = 24  # the PTX range of setmaxnreg is 24..256
SETMAXNREG_MAX = 256
# registers one wgmma needs besides its accumulators at the entry check (ptxas 13.0: m64n256k16 asks for 154 =
# 128 accumulators + 26; the register-A form adds its A registers)
WGMMA_ISSUE_REGS = 26
WGMMA_MAX_N = 256
# registers a consumer thread needs besides its accumulators (the mainloop's stage and descriptor arithmetic, a
# cluster's remote releases, the epilogue's addresses). ptxas 13.0, the 192x256 t384 GEMM (128 accumulators):
# unclustered it builds at 160 with 0 spills (the largest register it names is R151); clustered (2x1, 1x2) at 152
# it spilled 1568 bytes and serialised the wgmma (C7512), at 160 none
CONSUMER_WORK_REGS = 32
PRODUCER_REGS = 40  # a GEMM producer (one thread issues the TMA boxes)
# a producer of a thread-block cluster (tl.cuda.cluster) computes its multicast slice, mask and, persistent, the
# cluster's tile too: ptxas spilled 32-800 bytes of its loop at 40 registers (two consumer warpgroups, 128x256
# tiles, 2x1 / 2x2) and 68-600 at 24 (three, 192x192), none at 56 (ptxas 13.0, persistent 4096^3 / 8192^3)
CLUSTER_PRODUCER_REGS = 56


def entry_registers(threads: int) -> int:
    """Registers per thread a block of ``threads`` launched threads has at entry (before any ``setmaxnreg``)."""
    return min(MAX_THREAD_REGS, REGISTER_FILE // threads) // GRANULE * GRANULE


def wgmma_max_n(entry: int, a_regs: int = 0) -> int:
    """The widest wgmma instruction (columns, a multiple of 8, at most 256) whose accumulators (``n / 2`` per
    thread), ``a_regs`` register-A operand registers and :data:`WGMMA_ISSUE_REGS` fit ``entry`` registers; 256
    when the kernel's entry count allows every width (the cap then changes nothing)."""
    n = (entry - WGMMA_ISSUE_REGS - a_regs) * 2 // 8 * 8
    return max(8, min(WGMMA_MAX_N, n))


def register_split(consumers: int, producers: int, acc_regs: int = 0, general: bool = False,
                   clustered: bool = False) -> tuple[int, int] | None:
    """(producer, consumer) registers per thread after ``setmaxnreg`` for ``consumers`` consumer threads and
    ``producers`` producer threads, or None when the launch already gives every thread what it may have (one
    consumer warpgroup: 255 registers) or the move would give the consumers nothing.

    The producer's wish is :data:`PRODUCER_REGS` (two consumer warpgroups), the 24 minimum with three or more or
    ``general`` consumers (attention: two accumulators and the softmax, FlashAttention-3's 24 / 240), and
    :data:`CLUSTER_PRODUCER_REGS` for a cluster's GEMM; the consumers get the rest. ``acc_regs``: the accumulator
    registers of a consumer thread (0: unknown). When the rest is less than ``acc_regs +``
    :data:`CONSUMER_WORK_REGS` the producer gives more, down to 24 (the 192x256 t384 clustered GEMM: 32 / 160
    instead of 56 / 152)."""
    total = consumers + producers
    at_launch = entry_registers(total)
    if consumers < 256:
        return None
    wish = PRODUCER_REGS if consumers <= 256 and not general else SETMAXNREG_MIN
    if clustered and not general:
        wish = CLUSTER_PRODUCER_REGS

    def consumer_for(producer: int) -> int:
        return min(SETMAXNREG_MAX, (at_launch * total - producer * producers) // consumers // GRANULE * GRANULE)

    producer = wish
    need = acc_regs + CONSUMER_WORK_REGS if acc_regs else 0
    while consumer_for(producer) < need and producer > SETMAXNREG_MIN:
        producer -= GRANULE
    # the producer keeps registers the consumers could not use anyway (their count is a multiple of 8)
    consumer = consumer_for(producer)
    while producer + GRANULE <= wish and consumer_for(producer + GRANULE) == consumer:
        producer += GRANULE
    return (producer, consumer) if consumer > at_launch else None
