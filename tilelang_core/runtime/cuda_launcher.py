"""Launching CUDA kernel artifacts on torch tensors through the CUDA driver API (``cuda.bindings.driver``).

Why a launcher of our own: GPU hosts and exported kernels have no TVM, and TVM's runtime would re-check every
argument through its FFI on each call. An artifact describes itself (cubin, kernel symbol, grid, block, dynamic
shared memory, parameter order, shapes and dtypes), so launching needs only the driver: the cubin is loaded once
per device (``cuModuleLoadData``), the dynamic shared memory limit is raised when a kernel needs more than the
default 48 KiB, and every call checks its tensors (``runtime.call``'s checks: dtype, rank, shape, device,
contiguity) and launches on torch's current stream. Nothing here imports TVM or ``tvm_ffi``.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from ..errors import TileLangRuntimeError
from .artifact import Artifact
from .call import KernelCallable, torch_dtype
from .exported import (
    CUDA_ALIGNMENT,
    StreamOrder,
    TensorMaps,
    check_no_overlap,
    has_symbols,
    launch_grid,
    launch_plan,
    raise_smem_limit,
    scalar_bits,
)

_STREAM_AS_INT = True  # cuda.bindings takes raw stream handles as int; older versions need CUstream(...)


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6 spelling
        except ImportError:
            raise TileLangRuntimeError("launching CUDA kernels needs the CUDA Python bindings: "
                                       "pip install cuda-python (or cuda-bindings)") from None
    return driver


def _check(res: Any, what: str) -> Any:
    """Unpack a cuda.bindings result tuple, raising on an error code."""
    driver = _driver()
    err = res[0] if isinstance(res, tuple) else res
    if err != driver.CUresult.CUDA_SUCCESS:
        try:
            _, name = driver.cuGetErrorName(err)
            _, desc = driver.cuGetErrorString(err)
            msg = f"{name.decode()}: {desc.decode()}"
        except Exception:  # noqa: BLE001
            msg = str(err)
        raise TileLangRuntimeError(f"CUDA driver call {what} failed: {msg}")
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


class _Loaded:
    """The cubin loaded on one device: module, function handle and the context it belongs to."""

    def __init__(self, module: Any, function: Any, context: Any):
        self.module = module
        self.function = function
        self.context = context


class CudaKernelCallable(KernelCallable):
    """Validates torch CUDA tensors, allocates outputs and launches one CUDA kernel."""

    def __init__(self, artifact: Artifact):
        meta = artifact.extra.get("cuda")
        if not meta:
            raise TileLangRuntimeError(f"artifact at {artifact.path} has no CUDA launch description")
        self.artifact = artifact
        self.device = "cuda"
        n = len(artifact.params)
        self.out_idx = sorted(i % n for i in artifact.out_idx)
        self.in_idx = [i for i in range(n) if i not in self.out_idx]
        self.kernel_name = str(meta["kernel"])
        self.grid = tuple(g if isinstance(g, str) else int(g) for g in meta["grid"])  # str: a symbolic extent
        self.block = tuple(int(b) for b in meta["block"])
        self.dyn_smem = int(meta["dyn_smem"])
        # a kernel with state in its module's globals (the split-K workspace) must not run on two streams at once
        self.stream_order = StreamOrder() if meta.get("serial_streams", False) else None
        self.bound = has_symbols(artifact.params)  # scalar parameters or symbolic sizes (see KernelCallable.bind)
        self.plan = launch_plan(meta, artifact.params)
        if not self.bound and any(kind != "tensor" for kind, _, _ in self.plan):
            raise TileLangRuntimeError(f"artifact at {artifact.path}: kernel arguments {meta['args']} are not all "
                                       "among the tensor parameters")
        self.arg_order = [w for _, w, _ in self.plan]
        # TMA kernels: their tensor maps, encoded per call, are the last kernel parameter (exported.TensorMaps)
        self.tma = TensorMaps(meta["tma"], [p.name for p in artifact.params]) if meta.get("tma") else None
        self.cubin = (artifact.path / meta["cubin"]).read_bytes()
        self._loaded: dict[int, _Loaded] = {}
        self._lock = threading.Lock()
        self._tls = threading.local()
        self._fn = self._launch

    # -- loading -------------------------------------------------------------------------------------------
    def _load(self, device_index: int) -> _Loaded:
        loaded = self._loaded.get(device_index)
        if loaded is not None:
            return loaded
        with self._lock:
            loaded = self._loaded.get(device_index)
            if loaded is not None:
                return loaded
            import torch

            driver = _driver()
            torch.cuda.current_stream(device_index).synchronize()  # makes torch create the primary context
            ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
            if not int(ctx):
                dev = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
                ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            module = _check(driver.cuModuleLoadData(self.cubin), "cuModuleLoadData")
            fn = _check(driver.cuModuleGetFunction(module, self.kernel_name.encode()), "cuModuleGetFunction")
            raise_smem_limit(driver, fn, self.dyn_smem, _check)
            loaded = _Loaded(module, fn, ctx)
            self._loaded[device_index] = loaded
            return loaded

    # -- calling -------------------------------------------------------------------------------------------
    def alloc_outputs(self) -> list[Any]:
        import torch

        dev = torch.device("cuda", torch.cuda.current_device())
        return [torch.empty(self.params[i].shape, dtype=torch_dtype(self.params[i].dtype), device=dev)
                for i in self.out_idx]

    def _expected(self) -> list[tuple[Any, tuple[int, ...]]]:
        exp = getattr(self, "_exp", None)
        if exp is None:
            exp = self._exp = [(torch_dtype(p.dtype), tuple(p.shape)) for p in self.params]
        return exp

    def __call__(self, *args: Any) -> Any:
        n_all = len(self.params)
        if self.bound:
            bound = self.bind(args)
            if bound is None:
                raise self._count_error(len(args))
            full, outs, symbols = bound
            self._launch_bound(full, symbols)
            return None if not self.out_idx else (outs[0] if len(outs) == 1 else tuple(outs))
        if len(args) == len(self.in_idx) and (len(args) != n_all or not self.out_idx):
            if self.out_idx:
                import torch

                outs = self.alloc_outputs()
                full: list[Any] = [None] * n_all
                for i, a in zip(self.in_idx, args):
                    full[i] = a
                for i, o in zip(self.out_idx, outs):
                    full[i] = o
                if args:
                    dev = getattr(args[0], "device", None)
                    if dev is not None and dev.type == "cuda" and dev != outs[0].device:
                        outs = [torch.empty_like(o, device=dev) for o in outs]
                        for i, o in zip(self.out_idx, outs):
                            full[i] = o
            else:
                full, outs = list(args), []
        elif len(args) == n_all and self.out_idx:
            full = list(args)
            outs = [full[i] for i in self.out_idx]
            if all(hasattr(t, "data_ptr") for t in full):  # else _launch raises the detailed argument error
                check_no_overlap(self.params, full, self.out_idx)
        else:
            return super().__call__(*args)  # raises the argument-count error with the parameter names
        self._launch(*full)
        if not self.out_idx:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _launch_bound(self, full: list[Any], symbols: dict[str, int]) -> None:
        """Launch with arguments already checked by ``bind``: scalars packed by dtype, the grid evaluated."""
        known = dict(symbols)
        known.update({self.params[i].name: full[i] for kind, i, _ in self.plan if kind == "scalar"})
        grid = launch_grid(self.grid, known)
        values = [full[w].data_ptr() if kind == "tensor" else scalar_bits(full[w] if kind == "scalar" else known[w],
                                                                          dt)
                  for kind, w, dt in self.plan]
        tensors = [t for t in full if hasattr(t, "get_device")]
        devs = {t.get_device() for t in tensors}
        if len(devs) > 1:
            raise ValueError(f"kernel {self.kernel_name}: all tensors must be on one device; got "
                             f"{', '.join(f'cuda:{d}' for d in sorted(devs))}")
        dev_index = devs.pop() if devs else torch_current_device()
        if 0 in grid:
            return  # a size of 0: an empty grid, nothing to compute
        self._launch_values(dev_index, values, grid, self.tma.param_address(full) if self.tma else None)

    def _launch(self, *tensors: Any) -> None:
        exp = self._expected()
        dev_index = -2
        for i, t in enumerate(tensors):
            dt, shape = exp[i]
            try:
                ok = t.dtype is dt and t.shape == shape and t.is_cuda and t.is_contiguous() and \
                    t.data_ptr() % CUDA_ALIGNMENT == 0 and not t.is_neg()
            except AttributeError:
                ok = False
            if not ok:
                self.check_arg(self.params[i], t)  # raises the detailed error (an empty tensor may pass)
            d = t.get_device()
            if dev_index == -2:
                dev_index = d
            elif d != dev_index:
                raise ValueError(f"argument {self.params[i].name!r}: all tensors must be on one device; got "
                                 f"cuda:{d} and cuda:{dev_index}")
        self._launch_values(dev_index, [tensors[i].data_ptr() for i in self.arg_order], self.grid,
                            self.tma.param_address(tensors) if self.tma else None)

    def _launch_values(self, dev_index: int, slot_values: list[int], grid: tuple, by_value: int | None = None) -> None:
        """Launch with the kernel's pointer/scalar parameters ``slot_values``; ``by_value``: the address of the
        tensor maps' bytes, passed as one more parameter (TMA kernels)."""
        loaded = self._load(dev_index)
        driver = _driver()
        tls = self._tls
        if getattr(tls, "ctx", None) != dev_index:
            _check(driver.cuCtxSetCurrent(loaded.context), "cuCtxSetCurrent")
            tls.ctx = dev_index
        n = len(self.arg_order)
        arrays = getattr(tls, "arrays", None)
        if arrays is None:
            values = (ctypes.c_uint64 * max(n, 1))()
            base = ctypes.addressof(values)
            params = (ctypes.c_void_p * max(n + 1, 1))(*[base + 8 * i for i in range(max(n, 1))])
            arrays = tls.arrays = (values, params, ctypes.addressof(params))
        values, params, params_addr = arrays
        for k, v in enumerate(slot_values):
            values[k] = v
        if by_value is not None:
            params[n] = by_value
        stream = _current_stream(dev_index)
        gx, gy, gz = grid
        bx, by, bz = self.block
        if self.stream_order is not None:
            self.stream_order.before_launch(driver, dev_index, stream, _check)
        global _STREAM_AS_INT
        if not _STREAM_AS_INT:
            stream = driver.CUstream(stream)
        try:
            res = driver.cuLaunchKernel(loaded.function, gx, gy, gz, bx, by, bz, self.dyn_smem, stream, params_addr,
                                        0)
        except TypeError:
            if not _STREAM_AS_INT:
                raise
            _STREAM_AS_INT = False  # this cuda.bindings wants a CUstream object
            res = driver.cuLaunchKernel(loaded.function, gx, gy, gz, bx, by, bz, self.dyn_smem,
                                        driver.CUstream(stream), params_addr, 0)
        if res[0] != driver.CUresult.CUDA_SUCCESS:
            _check(res, f"cuLaunchKernel({self.kernel_name}, grid={grid}, block={self.block}, "
                        f"smem={self.dyn_smem})")


def torch_current_device() -> int:
    import torch

    return int(torch.cuda.current_device())


def _current_stream(index: int) -> int:
    """torch's current stream on device ``index`` as a raw handle."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return int(raw(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def make_callable(artifact: Artifact) -> KernelCallable:
    """The right callable for an artifact: CUDA launcher for ``kind == "cuda"``, else the CPU library caller."""
    if artifact.target.get("kind") == "cuda":
        return CudaKernelCallable(artifact)
    return KernelCallable(artifact)
