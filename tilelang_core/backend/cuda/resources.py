"""What a compiled CUDA kernel uses of an SM — registers, spills, shared and local memory — and the occupancy that
follows from it.

Why this module exists: a kernel engineer choosing tile sizes reads registers per thread, spill bytes and shared
memory before anything else (a configuration that spills or fits one block per SM is rarely the fastest), and the
workbench shows them per configuration. Two sources, both available without a GPU:

- the cubin, through ``cuobjdump --dump-resource-usage`` (``REG``, ``STACK``, ``SHARED``, ``LOCAL`` per function);
- ptxas's report (``-Xptxas -v`` / NVRTC ``--ptxas-options=-v``), which the artifact stores: registers, stack
  frame, spill stores and loads, barriers, static shared memory.

The cubin is read when a ``cuobjdump`` is found (the CUDA toolkit or pip's ``nvidia-cuda-cuobjdump``), ptxas's
report always; spills come from ptxas only. The dynamic shared memory is the launch's (``dyn_smem``), known to us.

Occupancy follows the CUDA occupancy rules (as ``cuda_occupancy.h`` states them) for the architecture, with the
largest shared-memory carveout: blocks per SM are the least of the block limit, the warp limit, the register limit
(registers per warp rounded up to the 256-register allocation unit, warps counted per sub-partition) and the
shared-memory limit (static + dynamic + the 1 KB the driver reserves per block, rounded up to 128 bytes).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SMLimits:
    """One architecture's per-SM limits that occupancy depends on."""

    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    reg_granularity: int = 256  # registers are allocated to a warp in units of this many
    sub_partitions: int = 4
    max_warps: int = 64
    max_blocks: int = 32
    smem_per_sm: int = 228 * 1024
    smem_per_block: int = 227 * 1024  # the opt-in maximum of one block
    smem_reserved_per_block: int = 1024  # reserved by the driver for every resident block
    smem_granularity: int = 128
    warp_size: int = 32


# By compute capability major.minor (sm_90 is the H200's). sm_80 (A100): 164 KB shared, 32 blocks, 64 warps.
LIMITS: dict[str, SMLimits] = {
    "sm_90": SMLimits(),
    "sm_80": SMLimits(smem_per_sm=164 * 1024, smem_per_block=163 * 1024),
    "sm_86": SMLimits(max_warps=48, max_blocks=16, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
    "sm_89": SMLimits(max_warps=48, max_blocks=24, smem_per_sm=100 * 1024, smem_per_block=99 * 1024),
}


def limits_for(arch: str) -> SMLimits:
    """The limits of ``arch`` (``sm_90``, ``sm_90a``, ``sm_80``, ...); an unknown one is an error naming the known."""
    base = re.sub(r"[a-z]$", "", str(arch))
    if base not in LIMITS:
        raise ValueError(f"occupancy: no SM limits known for arch {arch!r}; known: {', '.join(sorted(LIMITS))}")
    return LIMITS[base]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, what limits them (``"registers"``, ``"shared memory"``, ``"warps"``,
    ``"blocks"``), and ``fraction``: active warps over the SM's maximum (the theoretical occupancy)."""

    blocks_per_sm: int
    warps_per_sm: int
    max_warps: int
    limiter: str
    limits: dict[str, int]  # blocks per SM allowed by each resource

    @property
    def fraction(self) -> float:
        return self.warps_per_sm / self.max_warps if self.max_warps else 0.0


def occupancy(registers: int, threads: int, smem_bytes: int, arch: str = "sm_90") -> Occupancy:
    """Theoretical occupancy of a block of ``threads`` using ``registers`` per thread and ``smem_bytes`` of shared
    memory (static + dynamic) on ``arch``."""
    for name, value in (("registers", registers), ("threads", threads), ("smem_bytes", smem_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"occupancy: {name} must be a non-negative int, got {value!r}")
    if threads == 0:
        raise ValueError("occupancy: threads must be at least 1, got 0")
    lim = limits_for(arch)
    warps = -(-threads // lim.warp_size)
    by: dict[str, int] = {"blocks": lim.max_blocks, "warps": lim.max_warps // warps}
    regs_per_warp = _round_up(max(registers, 1) * lim.warp_size, lim.reg_granularity)
    hw_check = regs_per_warp * _round_up(warps, lim.sub_partitions)  # the launch check assumes every partition
    if registers > lim.max_regs_per_thread or hw_check > lim.regs_per_block:
        by["registers"] = 0
    else:
        per_partition = (lim.regs_per_sm // lim.sub_partitions) // regs_per_warp
        by["registers"] = per_partition * lim.sub_partitions // warps
    smem = _round_up(smem_bytes + lim.smem_reserved_per_block, lim.smem_granularity)
    if smem_bytes > lim.smem_per_block:
        by["shared memory"] = 0
    else:
        by["shared memory"] = lim.smem_per_sm // smem
    limiter = min(by, key=lambda k: (by[k], ["registers", "shared memory", "warps", "blocks"].index(k)))
    blocks = by[limiter]
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * warps, max_warps=lim.max_warps, limiter=limiter,
                     limits=by)


@dataclass(frozen=True)
class KernelResources:
    """Per-thread and per-block resources of one CUDA kernel and the occupancy they allow (bytes unless named
    otherwise). ``source`` says where the numbers came from: ``"cubin"`` (cuobjdump) plus ptxas, or ``"ptxas"``."""

    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    local: int  # per-thread local memory: the stack frame (where spills go) plus other local data
    static_smem: int
    dynamic_smem: int
    barriers: int
    threads: int
    occupancy: Occupancy
    source: str
    warnings: tuple[str, ...] = ()  # ptxas's performance warnings, e.g. wgmma serialised for want of registers

    @property
    def smem(self) -> int:
        """Shared memory per block, static + dynamic."""
        return self.static_smem + self.dynamic_smem

    @property
    def spills(self) -> int:
        """Spilled bytes (stores + loads), 0 when nothing spills."""
        return self.spill_stores + self.spill_loads

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: every field, occupancy flattened (``blocks_per_sm``, ``warps_per_sm``, ``occupancy``,
        ``limiter``)."""
        d = asdict(self)
        occ = d.pop("occupancy")
        d["warnings"] = list(self.warnings)
        d.update(blocks_per_sm=occ["blocks_per_sm"], warps_per_sm=occ["warps_per_sm"],
                 occupancy=round(self.occupancy.fraction, 4), limiter=occ["limiter"])
        return d

    def summary(self) -> str:
        """One line: ``62 regs, no spills, 17.0 KB smem (1.0 static + 16.0 dynamic), 0 B local; occupancy 4
        blocks = 16/64 warps (25%), limited by registers``."""
        spill = "no spills" if not self.spills else f"spills {self.spill_stores} B stored / {self.spill_loads} B loaded"
        occ = self.occupancy
        return (f"{self.registers} regs, {spill}, {self.smem / 1024:.1f} KB smem ({self.static_smem / 1024:.1f} "
                f"static + {self.dynamic_smem / 1024:.1f} dynamic), {self.local} B local; occupancy "
                f"{occ.blocks_per_sm} block(s) = {occ.warps_per_sm}/{occ.max_warps} warps ({occ.fraction:.0%}), "
                f"limited by {occ.limiter}")


# -- reading the reports -------------------------------------------------------------------------------------------
_FUNC = re.compile(r"Function properties for (\S+)")
_ENTRY = re.compile(r"Compiling entry function '([^']+)'")


def parse_ptxas(text: str, kernel: str | None = None) -> dict[str, int]:
    """ptxas's ``-v`` report for ``kernel`` (default: the first entry function) as numbers: ``registers``,
    ``stack``, ``spill_stores``, ``spill_loads``, ``barriers``, ``static_smem``, ``cmem``. Empty when the report
    has no such function."""
    out: dict[str, int] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _ENTRY.search(line) or _FUNC.search(line)
        if m:
            current = m.group(1)
            continue
        if current is None or (kernel is not None and current != kernel):
            continue
        if kernel is None:
            kernel = current
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out.update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out["registers"] = int(m[1])
            b = re.search(r"used (\d+) barriers", line)
            out["barriers"] = int(b[1]) if b else 0
            s = re.search(r"(\d+) bytes smem", line)
            out["static_smem"] = int(s[1]) if s else 0
            c = re.search(r"(\d+) bytes cmem\[0\]", line)
            if c:
                out["cmem"] = int(c[1])
    return out


def parse_resource_usage(text: str, kernel: str | None = None) -> dict[str, int]:
    """``cuobjdump --dump-resource-usage`` for ``kernel`` (default: the first function): ``registers``, ``stack``,
    ``static_smem``, ``local``. Empty when it lists no such function."""
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"\s*Function (\S+?):?\s*$", line)
        if m:
            current = m.group(1)
            continue
        if current is not None and (kernel is None or current == kernel) and "REG:" in line:
            fields = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line))
            return {"registers": int(fields.get("REG", 0)), "stack": int(fields.get("STACK", 0)),
                    "static_smem": int(fields.get("SHARED", 0)), "local": int(fields.get("LOCAL", 0))}
    return {}


def tool_dirs() -> list[str]:
    """Where CUDA's binary tools may be besides PATH: ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``,
    ``/usr/local/cuda/bin`` and the ``bin`` folders of pip's ``nvidia-*`` wheels."""
    dirs = [os.path.join(b, "bin") for b in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                                             "/usr/local/cuda") if b]
    try:
        import nvidia  # type: ignore[import-not-found]

        dirs += [str(p) for root in getattr(nvidia, "__path__", []) for p in sorted(Path(root).glob("*/bin"))]
    except ImportError:
        pass
    return dirs


@functools.lru_cache(maxsize=8)
def find_cuda_tool(name: str) -> str | None:
    """The path of a CUDA binary tool (``cuobjdump``, ``nvdisasm``, ``ncu``) on PATH or in :func:`tool_dirs`."""
    found = shutil.which(name)
    if found:
        return found
    return next((os.path.join(d, name) for d in tool_dirs() if os.access(os.path.join(d, name), os.X_OK)), None)


def run_tool(cmd: list[str], timeout: float = 60) -> str | None:
    """Run a CUDA tool (its own folder first on PATH: cuobjdump runs nvdisasm beside it); stdout, or None when it
    failed."""
    env = {**os.environ, "PATH": os.path.dirname(cmd[0]) + os.pathsep + os.environ.get("PATH", "")}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def read_resources(cubin: Path | None, ptxas_log: str, kernel: str, arch: str, threads: int,
                   dynamic_smem: int) -> KernelResources | None:
    """The resources of ``kernel`` from its cubin (when a cuobjdump is found) and ptxas's report; None when neither
    names the kernel (e.g. a build that generated CUDA C only)."""
    from_ptxas = parse_ptxas(ptxas_log or "", kernel)
    from_cubin: dict[str, int] = {}
    tool = find_cuda_tool("cuobjdump")
    if tool is not None and cubin is not None and Path(cubin).is_file():
        text = run_tool([tool, "--dump-resource-usage", str(cubin)])
        from_cubin = parse_resource_usage(text or "", kernel)
    if not from_cubin and "registers" not in from_ptxas:
        return None
    merged = {"stack": 0, "spill_stores": 0, "spill_loads": 0, "barriers": 0, "static_smem": 0, **from_ptxas,
              **from_cubin}
    local = int(merged.get("local", 0)) + int(merged["stack"])  # the stack frame (spills land there) + the rest
    warnings = tuple(m.group(1).strip() for m in re.finditer(r"ptxas info\s*:\s*(\(C\d+\)[^\n]*)", ptxas_log or ""))
    regs = int(merged["registers"])
    occ = occupancy(regs, int(threads), int(merged["static_smem"]) + int(dynamic_smem), arch)
    return KernelResources(kernel=kernel, arch=arch, registers=regs, spill_stores=int(merged["spill_stores"]),
                           spill_loads=int(merged["spill_loads"]), stack=int(merged["stack"]), local=int(local),
                           static_smem=int(merged["static_smem"]), dynamic_smem=int(dynamic_smem),
                           barriers=int(merged["barriers"]), threads=int(threads), occupancy=occ,
                           source="cubin" if from_cubin else "ptxas", warnings=warnings)


def artifact_resources(artifact: Any) -> KernelResources | None:
    """:func:`read_resources` of a CUDA artifact (its cubin, the ptxas report and launch stored in ``meta.json``);
    None for other targets or a build without a cubin."""
    if artifact.target.get("kind") != "cuda":
        return None
    meta = artifact.extra.get("cuda") or {}
    if not meta.get("kernel"):
        return None
    threads = 1
    for b in meta.get("block") or [1]:
        threads *= int(b)
    cubin = artifact.library_path if artifact.library_path.suffix == ".cubin" else None
    return read_resources(cubin, str(meta.get("ptxas_info") or ""), str(meta["kernel"]),
                          str(meta.get("arch", "sm_90")), threads, int(meta.get("dyn_smem") or 0))


__all__ = ["KernelResources", "Occupancy", "SMLimits", "LIMITS", "limits_for", "occupancy", "parse_ptxas",
           "parse_resource_usage", "read_resources", "artifact_resources", "find_cuda_tool", "run_tool",
           "tool_dirs"]
