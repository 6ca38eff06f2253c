"""Hardware counters of one CUDA kernel launch from Nsight Compute (``ncu``): throughput against peak (SM, tensor
pipes, DRAM, L2), the top warp-stall reasons and the achieved occupancy.

Why this module exists: timings say how fast a configuration is, counters say why. ``profile(kernel)`` runs the
kernel once under ``ncu`` in a child process (ncu replays the launch to collect its counters; a notebook's
process cannot be profiled from inside) and reads the counters back from ncu's CSV (``--csv --page raw``: a row of
metric names, a row of units, a row per kernel launch). The child loads the compiled artifact through the runtime
(no compiler needed), draws the profiler's seeded random inputs, launches once and synchronises.

Where ``ncu`` is not found (no Nsight Compute, e.g. this CPU machine), :func:`available` says why and
:func:`profile` raises :class:`NcuUnavailableError` with that message; counters need a GPU and, on many hosts,
permission to read them (``ERR_NVGPUCTRPERM``: see NVIDIA's "Permission issues with performance counters").
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTIONS = ("SpeedOfLight", "Occupancy", "WarpStateStats", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis")
THROUGHPUT = {  # what the view shows -> the metrics that give it (first found wins), % of peak
    "SM": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "tensor": ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
               "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
               "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
    "DRAM": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
             "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    "L2": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
}
OCCUPANCY = {"achieved": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
             "theoretical": ("sm__maximum_warps_per_active_cycle_pct",)}
_STALL = re.compile(r"^smsp__(?:average_warps?_(?:latency_)?issue_stalled|pcsamp_warps_issue_stalled)_"
                    r"(?P<reason>[a-z_]+?)(?:_per_(?:issue_active|warp_active))?(?:\.(?:ratio|pct|sum))?$")


class NcuUnavailableError(RuntimeError):
    """Nsight Compute cannot profile here; the message says why and what to do."""


class NcuFailedError(RuntimeError):
    """ncu ran but did not produce counters (the message carries its output)."""


@dataclass
class NcuReport:
    """One launch's counters: ``throughput`` (% of peak per unit: SM, tensor, DRAM, L2), ``stalls`` (reason ->
    value, largest first), ``occupancy`` (achieved / theoretical, %), every raw ``metrics`` value, the kernel's
    name and the command that ran."""

    kernel: str
    throughput: dict[str, float] = field(default_factory=dict)
    stalls: list[tuple[str, float]] = field(default_factory=list)
    occupancy: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    command: str = ""

    def top_stalls(self, n: int = 5) -> list[tuple[str, float]]:
        return self.stalls[:n]


def find_ncu() -> str | None:
    """``ncu`` on PATH, in the CUDA toolkit or in an Nsight Compute install (``/opt/nvidia/nsight-compute``)."""
    import shutil

    found = shutil.which("ncu")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    cands = [os.path.join(r, "bin", "ncu") for r in roots if r]
    cands += sorted(str(p) for p in Path("/opt/nvidia/nsight-compute").glob("*/ncu"))
    return next((c for c in cands if os.access(c, os.X_OK)), None)


def available() -> tuple[bool, str]:
    """(whether ``profile`` can run here, why not / which ncu)."""
    ncu = find_ncu()
    if ncu is None:
        return False, ("Nsight Compute (ncu) is not installed here: it is on PATH on a GPU host with the CUDA "
                       "toolkit or Nsight Compute (/opt/nvidia/nsight-compute); hardware counters need a GPU")
    try:
        import torch

        if not torch.cuda.is_available():
            return False, f"ncu is at {ncu}, but no CUDA GPU is visible to profile on"
    except ImportError:
        return False, "torch is not installed: the profiled child process needs it for the kernel's inputs"
    return True, ncu


def _number(text: str) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except ValueError:
        return None


def parse_csv(text: str, kernel: str | None = None) -> NcuReport:
    """ncu's ``--csv --page raw`` output (ncu's own ``==PROF==`` lines may precede it): the row of the last launch
    of ``kernel`` (a name or a substring; default any)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"') and '"Kernel Name"' in ln), None)
    if start is None:
        raise NcuFailedError("no ncu CSV in the output (no header row with \"Kernel Name\"):\n" + text[-3000:])
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, rest = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    units: dict[str, str] = {}
    if rest and not rest[0][header.index("Kernel Name")]:  # the units row
        units = {h: u for h, u in zip(header, rest[0]) if u}
        rest = rest[1:]
    name_at = header.index("Kernel Name")
    chosen = [r for r in rest if kernel is None or kernel in r[name_at]]
    if not chosen:
        found = sorted({r[name_at] for r in rest})
        raise NcuFailedError(f"ncu profiled no launch of kernel {kernel!r}; it saw: {', '.join(found) or 'none'}")
    metrics = dict(zip(header, chosen[-1]))
    return summarize(metrics, units, metrics.get("Kernel Name", kernel or ""))


def summarize(metrics: dict[str, str], units: dict[str, str] | None = None, kernel: str = "") -> NcuReport:
    """The view's numbers out of raw metric values."""
    def first(names: tuple[str, ...]) -> float | None:
        for n in names:
            v = _number(metrics.get(n, ""))
            if v is not None:
                return v
        return None

    report = NcuReport(kernel=kernel, metrics=dict(metrics), units=dict(units or {}))
    for label, names in THROUGHPUT.items():
        v = first(names)
        if v is not None:
            report.throughput[label] = v
    for label, names in OCCUPANCY.items():
        v = first(names)
        if v is not None:
            report.occupancy[label] = v
    families: dict[str, dict[str, float]] = {}
    for name, value in metrics.items():
        m = _STALL.match(name)
        v = _number(value)
        if m and v is not None and not m.group("reason").endswith("_not_issued"):
            family = name[:m.start("reason")]
            families.setdefault(family, {})[m.group("reason")] = v
    if families:  # one family (the largest), so latency ratios and sample counts are not mixed
        fam = max(families.values(), key=len)
        report.stalls = sorted(fam.items(), key=lambda kv: -kv[1])
    return report


_CHILD = """
import sys, torch
from pathlib import Path
from tilelang_core.jit.kernel import JITKernel
from tilelang_core.runtime.artifact import load_artifact
kernel = JITKernel(load_artifact(Path(sys.argv[1])))
inputs = [t.cuda() for t in kernel.get_profiler().inputs()]
kernel(*inputs)
torch.cuda.synchronize()
"""


def command(kernel: Any, ncu: str, script: str) -> list[str]:
    """The ncu command line that profiles one launch of ``kernel`` (its artifact) through ``script``."""
    entry = str(kernel.artifact.extra.get("cuda", {}).get("kernel") or kernel.artifact.entry)
    args = [ncu, "--csv", "--page", "raw", "--launch-count", "1", "--kernel-name", f"regex:{re.escape(entry)}",
            "--target-processes", "all"]
    for s in SECTIONS:  # sections only: naming a metric this GPU lacks would make ncu refuse the whole run
        args += ["--section", s]
    return [*args, sys.executable, script, str(kernel.artifact.path)]


def profile(kernel: Any, timeout: float = 300) -> NcuReport:
    """Run one launch of the CUDA ``kernel`` under ncu and read its counters; :class:`NcuUnavailableError` where ncu
    or a GPU is missing, :class:`NcuFailedError` (with ncu's output) when it ran but gave none."""
    if kernel.target.get("kind") != "cuda":
        raise ValueError(f"profile: kernel {kernel.name} is for {kernel.target.get('kind')}; ncu profiles CUDA "
                         "kernels")
    ok, why = available()
    if not ok:
        raise NcuUnavailableError(why)
    with tempfile.TemporaryDirectory(prefix="tilelang_core_ncu_") as tmp:
        script = os.path.join(tmp, "launch_once.py")
        Path(script).write_text(_CHILD)
        cmd = command(kernel, why, script)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                            os.environ.get("PYTHONPATH", "")])}
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as e:
            raise NcuFailedError(f"ncu did not finish within {timeout:.0f} s: {' '.join(cmd)}") from e
    out = res.stdout + ("\n" + res.stderr if res.stderr else "")
    if "ERR_NVGPUCTRPERM" in out:
        raise NcuFailedError("ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): run as a user "
                        "allowed to (NVreg_RestrictProfilingToAdminUsers=0) or as root")
    entry = str(kernel.artifact.extra.get("cuda", {}).get("kernel") or kernel.artifact.entry)
    report = parse_csv(res.stdout, entry) if '"Kernel Name"' in res.stdout else None
    if report is None:
        raise NcuFailedError(f"ncu exited with {res.returncode} and printed no counters:\n{' '.join(cmd)}\n"
                             f"{out[-4000:]}")
    report.command = " ".join(cmd)
    return report


__all__ = ["NcuReport", "NcuUnavailableError", "NcuFailedError", "available", "find_ncu", "parse_csv", "summarize",
           "profile", "command", "SECTIONS"]
