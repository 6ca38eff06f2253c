"""What a timing worker measures on: the device's name, its driver version and its clocks at measurement.

Why this module exists: a latency means little without the machine that produced it. A sweep spread over several
GPUs or hosts records, with every measurement, the GPU's name, the driver's version and the SM / memory clocks read
just before timing (a throttled or down-clocked GPU explains an outlier), or the CPU's current frequency. Anything
that cannot be read here is left empty rather than guessed.

GPU facts come from ``nvidia-smi`` (no extra dependency; it ignores ``CUDA_VISIBLE_DEVICES``, so the physical index
of a pinned worker is taken from that variable), the name from torch when ``nvidia-smi`` is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

NVIDIA_SMI_TIMEOUT_S = 5.0


@dataclass
class DeviceFacts:
    """One device as seen by one timing worker."""

    name: str
    driver: str = ""
    clocks: dict[str, float] = field(default_factory=dict)


def physical_gpu(index: int = 0) -> str:
    """The ``nvidia-smi`` index of this process's ``index``-th visible GPU (``CUDA_VISIBLE_DEVICES`` applied)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if index < len(ids):
            return ids[index]
    return str(index)


def _nvidia_smi(gpu: str) -> list[str] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-i", gpu, "--query-gpu=name,driver_version,clocks.sm,clocks.mem",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return [part.strip() for part in out.stdout.strip().splitlines()[0].split(",")]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def cpu_mhz() -> float | None:
    """The mean current frequency of this machine's cores (``/proc/cpuinfo``), or None where unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            values = [float(line.split(":", 1)[1]) for line in f if line.lower().startswith("cpu mhz")]
    except (OSError, ValueError):
        return None
    return round(sum(values) / len(values), 1) if values else None


def device_facts(kind: str = "cpu", index: int = 0) -> DeviceFacts:
    """Name, driver and clocks of the device a kernel of target ``kind`` runs on in this process."""
    from ..machine import device_name

    name = device_name(kind)
    if kind != "cuda":
        mhz = cpu_mhz()
        return DeviceFacts(name, "", {"cpu_mhz": mhz} if mhz else {})
    fields = _nvidia_smi(physical_gpu(index))
    if not fields or len(fields) < 4:
        return DeviceFacts(name)
    clocks = {k: v for k, v in (("sm_mhz", _number(fields[2])), ("mem_mhz", _number(fields[3]))) if v is not None}
    return DeviceFacts(fields[0] or name, fields[1], clocks)


__all__ = ["DeviceFacts", "device_facts", "physical_gpu", "cpu_mhz"]
