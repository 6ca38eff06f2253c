"""The loader inside every exported kernel module (``tilelang_core.export``), kept here as real, linted code.

Why this module exists: an exported kernel is one ``.py`` file that must run where neither TVM nor tilelang_core is
installed — only ``torch`` and ``apache-tvm-ffi``. ``export_kernel`` copies the code below (everything after this
docstring) verbatim into that file, then appends the kernel's data (``META``, ``KERNEL_SOURCE``,
``LIBRARY_BASE64``). So this module imports nothing but the standard library at the top, and ``torch`` /
``tvm_ffi`` only when a kernel is loaded or called.

The library is written once to a content-addressed cache (``$TILELANG_EXPORT_CACHE_DIR``, else
``$XDG_CACHE_HOME/tilelang_core/exported``, else ``~/.cache/tilelang_core/exported``, else the temp folder),
checked against its SHA-256, and loaded with ``tvm_ffi.load_module``. Inputs are validated with the same errors
as tilelang_core's own kernels: ``TypeError`` for a wrong kind or dtype, ``ValueError`` naming the parameter, what
was expected and what was given for rank, shape, device and contiguity. CPU kernels are compiled assuming only
element alignment of their tensors, so views with a storage offset and numpy arrays are fine; a pointer that is not
even element-aligned is refused. CUDA kernels read and write with 16-byte vector accesses, so on CUDA a data pointer
must be 16-byte aligned (a view with an odd storage offset is refused by name instead of faulting on the GPU).
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

EXPORT_FORMAT = 1
ALIGNMENT = 1  # bytes beyond element alignment: kernels declare their tensors element-aligned (T.Tensor align=)
CUDA_ALIGNMENT = 16  # bytes: generated CUDA code uses 16-byte vector accesses and cp.async on every tensor
_ISA_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "bmi", "amx", "popcnt", "abm", "movbe", "gfni", "vaes",
                 "vpclmulqdq", "adx", "asimd", "sve", "fphp", "i8mm", "bf16")


def isa_flags(flags: frozenset[str] | None = None) -> list[str]:
    """The instruction-set extensions of this CPU that generated code may use (from /proc/cpuinfo)."""
    if flags is None:
        flags = frozenset()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("flags", "Features")):
                        flags = frozenset(line.split(":", 1)[1].split())
                        break
        except OSError:
            pass
    return sorted(f for f in flags if f.startswith(_ISA_PREFIXES))


def check_gpu(meta: dict[str, Any], device_index: int) -> None:
    """Refuse to launch a cubin on a GPU of another architecture (it would fail with an opaque driver error)."""
    import torch

    arch = str(meta.get("target", {}).get("arch", ""))
    if not torch.cuda.is_available():
        raise RuntimeError(f"kernel {meta.get('name')!r} was compiled for CUDA {arch}; this machine has no CUDA GPU")
    major, minor = torch.cuda.get_device_capability(device_index)
    if arch.startswith("sm_") and arch[3:].rstrip("a").isdigit():
        want = arch[3:].rstrip("a")
        if f"{major}{minor}" != want:
            name = torch.cuda.get_device_name(device_index)
            raise RuntimeError(f"kernel {meta.get('name')!r} was compiled for {arch} and needs a GPU of compute "
                               f"capability {want[:-1]}.{want[-1]}; cuda:{device_index} is {name} "
                               f"(sm_{major}{minor}); export it again for this GPU")


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6
        except ImportError:
            raise RuntimeError("this kernel runs on CUDA: install the CUDA Python bindings "
                               "(pip install cuda-bindings)") from None
    return driver


DEFAULT_SMEM = 48 * 1024  # bytes of shared memory a kernel gets without opting in


def raise_smem_limit(driver: Any, fn: Any, dyn_smem: int, check: Any) -> None:
    """Opt ``fn`` into ``dyn_smem`` bytes of dynamic shared memory when that plus its static shared memory (the
    ``__shared__`` variables of our device templates) exceeds the default 48 KiB. ``check`` unpacks a driver
    result, raising on an error (each launcher brings its own error type)."""
    attrs = driver.CUfunction_attribute
    static = check(driver.cuFuncGetAttribute(attrs.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
                   "cuFuncGetAttribute(SHARED_SIZE_BYTES)")
    if dyn_smem + int(static) > DEFAULT_SMEM:
        check(driver.cuFuncSetAttribute(fn, attrs.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn_smem),
              f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={dyn_smem})")


class StreamOrder:
    """Orders the launches of a kernel that keeps state in its module (the split-K workspace; meta
    ``serial_streams``): a launch on another stream than the previous one first waits for that stream. Within one
    stream CUDA orders launches already, so the common case costs a dictionary lookup."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}
        self._lock = threading.Lock()

    def before_launch(self, driver: Any, device: int, stream: int, check: Any) -> None:
        with self._lock:
            prev = self._last.get(device)
            self._last[device] = int(stream)
        if prev is not None and prev != int(stream):
            try:
                res = driver.cuStreamSynchronize(prev)
            except TypeError:  # this cuda.bindings wants a CUstream object
                res = driver.cuStreamSynchronize(driver.CUstream(prev))
            check(res, "cuStreamSynchronize (a stateful kernel changed streams)")


def _cu(res: Any, what: str) -> Any:
    driver = _driver()
    err = res[0] if isinstance(res, tuple) else res
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver call {what} failed: {err}")
    return res[1] if isinstance(res, tuple) and len(res) == 2 else None


class CudaLaunch:
    """Loads the embedded cubin on a device and launches it on torch's current stream (driver API)."""

    def __init__(self, meta: dict[str, Any], cubin: bytes, params: list[Any]):
        import ctypes

        info = meta["cuda"]
        self.meta, self.cubin = meta, cubin
        self.kernel_name = str(info["kernel"])
        self.grid = tuple(g if isinstance(g, str) else int(g) for g in info["grid"])  # str: a symbolic extent
        self.block = tuple(int(b) for b in info["block"])
        self.dyn_smem = int(info["dyn_smem"])
        self.plan = launch_plan(info, params)
        self.arg_order = [w for _, w, _ in self.plan]
        n = max(len(self.arg_order), 1)
        self._values = (ctypes.c_uint64 * n)()
        base = ctypes.addressof(self._values)
        self._params = (ctypes.c_void_p * (n + 1))(*[base + 8 * i for i in range(n)])
        # TMA kernels: the tensor maps, encoded per call, are one more parameter (TensorMaps below)
        self.tma = TensorMaps(info["tma"], [p["name"] for p in meta["params"]]) if info.get("tma") else None
        self._loaded: dict[int, Any] = {}
        # module state (the split-K workspace): launches on different streams are ordered
        self.stream_order = StreamOrder() if info.get("serial_streams", False) else None

    def _function(self, index: int) -> Any:
        fn = self._loaded.get(index)
        if fn is None:
            import torch

            check_gpu(self.meta, index)
            driver = _driver()
            torch.cuda.current_stream(index).synchronize()  # makes torch create the primary context
            ctx = _cu(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
            if not int(ctx):
                dev = _cu(driver.cuDeviceGet(index), "cuDeviceGet")
                _cu(driver.cuCtxSetCurrent(_cu(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")),
                    "cuCtxSetCurrent")
            module = _cu(driver.cuModuleLoadData(self.cubin), "cuModuleLoadData")
            fn = _cu(driver.cuModuleGetFunction(module, self.kernel_name.encode()), "cuModuleGetFunction")
            raise_smem_limit(driver, fn, self.dyn_smem, _cu)
            self._loaded[index] = fn
        return fn

    def __call__(self, *tensors: Any, symbols: dict[str, int] | None = None) -> None:
        import ctypes

        import torch

        index = next(t for t in tensors if hasattr(t, "get_device")).get_device()
        fn = self._function(index)
        grid = self.grid
        if symbols is not None:  # scalar parameters or symbolic sizes
            known = dict(symbols)
            known.update({self.meta["params"][i]["name"]: tensors[i] for kind, i, _ in self.plan if kind == "scalar"})
            for k, (kind, w, dt) in enumerate(self.plan):
                self._values[k] = tensors[w].data_ptr() if kind == "tensor" else \
                    scalar_bits(tensors[w] if kind == "scalar" else known[w], dt)
            grid = launch_grid(self.meta["cuda"]["grid"], known)
            if 0 in grid:
                return  # an empty grid (a size of 0): nothing to compute
        else:
            for k, i in enumerate(self.arg_order):
                self._values[k] = tensors[i].data_ptr()
        if self.tma is not None:
            self._params[len(self.arg_order)] = self.tma.param_address(list(tensors))
        stream = int(torch.cuda.current_stream(index).cuda_stream)
        driver = _driver()
        if self.stream_order is not None:
            self.stream_order.before_launch(driver, index, stream, _cu)
        args = (*grid, *self.block, self.dyn_smem)
        try:
            res = driver.cuLaunchKernel(fn, *args, stream, ctypes.addressof(self._params), 0)
        except TypeError:
            res = driver.cuLaunchKernel(fn, *args, driver.CUstream(stream), ctypes.addressof(self._params), 0)
        _cu(res, f"cuLaunchKernel({self.kernel_name})")



# -- tensor maps (TMA kernels) -----------------------------------------------------------------------------------
# A TMA load reads a global tensor through a 128-byte CUtensorMap holding its address, shape, strides, the box and
# the swizzle; the address is the caller's tensor, so the map is made at launch (cuTensorMapEncodeTiled) from the
# description the compiler stored (meta.json's cuda.tma; transform/cuda/sm90/tma.py) and handed to the kernel by
# value as its last parameter (const __grid_constant__ tl::TmaDescs<n> tl_tmaps). Encoding costs microseconds, so
# the bytes are kept and re-encoded only when a tensor's address changes; each thread has its own buffer (a launch
# copies the parameter bytes, so the buffer may be rewritten right after it).

DESC_BYTES = 128
DESC_ALIGN = 64


class TensorMaps:
    """The kernel parameter holding every tensor map of one kernel, for the tensors of the current call."""

    def __init__(self, specs: list[dict[str, Any]], param_names: list[str]):
        self.specs = specs
        try:
            self.param_index = [param_names.index(s["param"]) for s in specs]
        except ValueError as e:
            raise RuntimeError(f"tensor maps name parameters {[s['param'] for s in specs]} that the kernel "
                                       f"does not have ({param_names})") from e
        self._tls = threading.local()

    def _buffer(self) -> tuple[Any, int]:
        buf = getattr(self._tls, "buf", None)
        if buf is None:
            raw = (ctypes.c_uint8 * (DESC_BYTES * len(self.specs) + DESC_ALIGN))()
            addr = (ctypes.addressof(raw) + DESC_ALIGN - 1) // DESC_ALIGN * DESC_ALIGN
            buf = self._tls.buf = (raw, addr)
            self._tls.ptrs = None
        return buf

    def param_address(self, tensors: list[Any]) -> int:
        """The address of the parameter's bytes (``n`` descriptors) for ``tensors`` (the call's arguments)."""
        _, addr = self._buffer()
        ptrs = tuple(int(tensors[i].data_ptr()) for i in self.param_index)
        if ptrs != self._tls.ptrs:
            for k, (spec, ptr) in enumerate(zip(self.specs, ptrs)):
                ctypes.memmove(addr + DESC_BYTES * k, encode_tensor_map(spec, ptr), DESC_BYTES)
            self._tls.ptrs = ptrs
        return addr


TMA_ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
                     # plain tiles (pass_configs tl.cuda.tma_plain_tiles)
                     "float32": 4, "int32": 4, "int8": 1, "uint8": 1}

# cuTensorMapEncodeTiled's documented limits (cuda.h, CUDA 13.0) for the maps made here: INTERLEAVE_NONE, element
# strides 1, OOB_FILL_NONE, one of the swizzles below
TMA_MIN_RANK = 2  # documented: 1; but see tensor_map_problems
TMA_MAX_RANK = 5
TMA_MAX_DIM = 1 << 32  # each globalDim in 1 .. 2^32
TMA_MAX_STRIDE = 1 << 40  # each globalStride a multiple of 16 bytes, < 2^40
TMA_MAX_BOX = 256  # each boxDim in 1 .. 256
TMA_SWIZZLES = (0, 32, 64, 128)  # bytes (0: SWIZZLE_NONE)


def tensor_map_strides(dims: list[int], elem_bytes: int) -> list[int]:
    """The ``globalStrides`` (bytes) of dimensions 1 .. rank-1 of a contiguous tensor of extents ``dims`` (innermost
    first). A dimension of extent 1 with only extent-1 dimensions outside it is never stepped (its one coordinate
    inside the tensor is 0; a box past it is zero-filled, not read), so its stride is rounded up to a multiple of 16
    bytes: the 2-D map ``(n, 1)`` of a 1-D tensor of ``n`` elements is then valid for any ``n``."""
    strides, step = [], elem_bytes
    for d in dims[:-1]:
        step *= d
        strides.append(step)
    for i in reversed(range(len(strides))):
        if dims[i + 1] != 1:
            break
        strides[i] = -(-strides[i] // 16) * 16
    return strides


def tensor_map_problems(spec: dict[str, Any]) -> list[str]:
    """Why ``cuTensorMapEncodeTiled`` would refuse the map ``spec`` describes (``[]`` when it would not), checked
    without a GPU, by the compiler when it plans a map (the load then keeps cp.async with a note) and by the launcher
    before the driver call. The rules are the documented ones for what this launcher passes (tensor rank 1 .. 5;
    each dimension 1 .. 2^32; each stride a multiple of 16 bytes below 2^40; each box dimension 1 .. 256, the
    innermost a multiple of 16 bytes, and with a swizzle at most the swizzle's span) plus one the H200 showed: a
    rank-1 map is refused (CUDA_ERROR_INVALID_VALUE for dims [1008], box [64] of float32, every documented rule
    met: cuda.bindings passes the empty stride list as a NULL ``globalStrides`` pointer), so 1-D tensors are
    described as 2-D maps ``(n, 1)``. The 16-byte global address is checked per call (:func:`encode_tensor_map`)."""
    dtype = str(spec.get("dtype"))
    if dtype not in TMA_ELEMENT_BYTES:
        return [f"element type {dtype} has no tensor-map type here ({', '.join(TMA_ELEMENT_BYTES)})"]
    es = TMA_ELEMENT_BYTES[dtype]
    dims, box, swz = [int(d) for d in spec["dims"]], [int(b) for b in spec["box"]], int(spec["swizzle"])
    out = []
    if not TMA_MIN_RANK <= len(dims) <= TMA_MAX_RANK:
        out.append(f"rank {len(dims)}: maps here are {TMA_MIN_RANK}-D to {TMA_MAX_RANK}-D (the driver refused a "
                   "rank-1 map: an empty globalStrides list reaches it as a NULL pointer)")
    bad = [d for d in dims if not 1 <= d <= TMA_MAX_DIM]
    if bad:
        out.append(f"globalDim {dims}: each must be 1 .. 2^32")
    strides = tensor_map_strides(dims, es) if not bad else []
    if any(s % 16 or s >= TMA_MAX_STRIDE for s in strides):
        out.append(f"globalStrides {strides} bytes: each must be a multiple of 16 and below 2^40")
    if len(box) != len(dims):
        out.append(f"box {box} has {len(box)} dimensions, the map {len(dims)}")
    if any(not 1 <= b <= TMA_MAX_BOX for b in box):
        out.append(f"boxDim {box}: each must be 1 .. {TMA_MAX_BOX}")
    if box and (box[0] * es) % 16:
        out.append(f"boxDim[0] x element size = {box[0]} x {es} = {box[0] * es} bytes: must be a multiple of 16")
    if swz not in TMA_SWIZZLES:
        out.append(f"swizzle {swz} bytes: one of {TMA_SWIZZLES}")
    elif swz and box and box[0] * es > swz:
        out.append(f"the box's inner dimension is {box[0] * es} bytes, more than the {swz}-byte swizzle's span")
    return out


def encode_tensor_map(spec: dict[str, Any], address: int) -> bytes:
    """The 128 bytes of the tensor map ``spec`` describes, over the tensor at ``address``: its rules are checked
    (:func:`tensor_map_problems`, the address 16-byte aligned) before the driver is called."""
    if address % 16:
        off = "'tl.cuda.tma_store': False" if spec.get("store") else "'tl.disable_tma_lower': True"  # a store map
        raise RuntimeError(f"argument {spec['param']!r}: its data starts at an address that is not a "
                                   "multiple of 16 bytes, which TMA needs; pass a tensor that is not an offset view, "
                                   f"or compile with pass_configs={{{off}}}")
    problems = tensor_map_problems(spec)
    if problems:
        raise RuntimeError(f"the tensor map of argument {spec['param']!r} (dims {spec['dims']}, box {spec['box']}, "
                           f"swizzle {spec['swizzle']} B) breaks cuTensorMapEncodeTiled's rules: "
                           f"{'; '.join(problems)}; recompile the kernel (this compiler plans only valid maps)")
    from cuda.bindings import driver

    # float8 tiles travel as bytes (TMA only copies; the OOB fill is zero bytes, +0.0 in both float8 formats)
    dtypes = {"float16": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
              "bfloat16": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
              "float8_e4m3fn": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
              "float8_e5m2": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
              "float32": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
              "int32": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_INT32,
              "int8": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,  # bytes, as float8
              "uint8": driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8}
    swizzles = {0: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,  # a store from a row-major shared tile
                32: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                64: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
                128: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}
    dims = [int(d) for d in spec["dims"]]  # innermost first; the tensor is contiguous (checked at the call)
    strides = tensor_map_strides(dims, TMA_ELEMENT_BYTES[spec["dtype"]])  # never empty: rank >= 2
    err, tmap = driver.cuTensorMapEncodeTiled(
        dtypes[spec["dtype"]], len(dims), address, [driver.cuuint64_t(d) for d in dims],
        [driver.cuuint64_t(x) for x in strides], [driver.cuuint32_t(int(b)) for b in spec["box"]],
        [driver.cuuint32_t(1)] * len(dims), driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzles[int(spec["swizzle"])], driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled for argument {spec['param']!r} (dims {spec['dims']}, box "
                                   f"{spec['box']}, swizzle {spec['swizzle']} B) failed: {err}")
    return ctypes.string_at(int(tmap.getPtr()), DESC_BYTES)


def check_host(meta: dict[str, Any]) -> None:
    """Refuse to load a library built for another architecture or for CPU features this machine lacks (it would
    die with SIGILL). ``TILELANG_EXPORT_SKIP_CPU_CHECK=1`` skips the feature check."""
    if meta.get("target", {}).get("kind") == "cuda":
        return  # checked against the GPU at the first launch (check_gpu)
    triple = str(meta.get("target", {}).get("mtriple", ""))
    arch = triple.split("-")[0]
    here = platform.machine()
    if arch and here and arch != here and {arch, here} != {"aarch64", "arm64"}:
        raise RuntimeError(f"kernel {meta.get('name')!r} was compiled for {arch} ({triple}); this machine is {here}")
    if os.environ.get("TILELANG_EXPORT_SKIP_CPU_CHECK", "") in ("1", "true", "yes"):
        return
    needed = set(meta.get("cpu_flags") or [])
    have = set(isa_flags())
    missing = sorted(needed - have) if have else []
    if missing:
        raise RuntimeError(
            f"kernel {meta.get('name')!r} was compiled for mcpu={meta.get('target', {}).get('mcpu')} and may use "
            f"instructions this CPU lacks ({', '.join(missing)}); re-export it on (or for) this machine, or set "
            "TILELANG_EXPORT_SKIP_CPU_CHECK=1 to try anyway")


def cache_dir() -> Path:
    env = os.environ.get("TILELANG_EXPORT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilelang_core" / "exported"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def materialize(library_b64: str, sha256: str, suffix: str = ".so") -> Path:
    """Write the library to ``<cache>/<sha256>.so`` once (atomically) and return its path."""
    data = base64.b64decode(library_b64)
    if _sha256(data) != sha256:
        raise RuntimeError("the embedded kernel library does not match its recorded SHA-256: the exported file "
                           "was modified or truncated; export it again")
    for root in (cache_dir(), Path(tempfile.gettempdir()) / f"tilelang_core_exported_{os.getuid()}"):
        path = root / f"{sha256[:32]}{suffix}"
        try:
            if path.is_file() and path.stat().st_size == len(data) and _sha256(path.read_bytes()) == sha256:
                return path
            root.mkdir(parents=True, exist_ok=True)
            tmp = root / f".{sha256[:16]}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
            return path
        except OSError:
            continue  # read-only or full cache folder: try the next place
    raise RuntimeError(f"could not write the kernel library to {cache_dir()} or the temp folder")


_TORCH_DTYPES: dict[str, Any] = {}


def torch_dtype(name: str) -> Any:
    import torch

    if not _TORCH_DTYPES:
        for n in ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
                  "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"):
            _TORCH_DTYPES[n] = getattr(torch, n, None)
    return _TORCH_DTYPES[name]


def _as_tensor(spec: Any, value: Any) -> Any:
    """``value`` as a torch tensor of ``spec``'s dtype and rank (numpy arrays become zero-copy torch tensors), or the
    ``TypeError`` / ``ValueError`` naming the parameter."""
    import torch

    if not isinstance(value, torch.Tensor):
        if type(value).__module__ == "numpy" and hasattr(value, "__array_interface__"):
            value = torch.from_numpy(value)  # zero-copy
        else:
            raise TypeError(f"argument {spec.name!r}: expected a torch.Tensor of {spec.dtype} with shape "
                            f"{list(spec.shape)}, got {type(value).__name__}")
    got = str(value.dtype).replace("torch.", "")
    if got != spec.dtype:
        raise TypeError(f"argument {spec.name!r}: expected dtype {spec.dtype}, got {got}")
    if value.dim() != len(spec.shape):
        raise ValueError(f"argument {spec.name!r}: expected a rank-{len(spec.shape)} tensor of shape "
                         f"{list(spec.shape)}, got rank {value.dim()} with shape {list(value.shape)}")
    return value


def check_tensor(spec: Any, value: Any, device: str, shape: Any = None) -> Any:
    """Check one argument against its parameter (``spec``: name, shape, dtype; ``shape``: the shape it must have,
    when ``spec.shape`` has symbolic sizes); returns the tensor (numpy arrays become zero-copy torch tensors).
    ``TypeError`` for a wrong kind or dtype, ``ValueError`` for rank, shape, device, contiguity or alignment, naming
    the parameter, what was expected and what was given. The core's runtime uses this same function, so exported
    kernels and in-process ones fail with identical messages."""
    value = _as_tensor(spec, value)
    want = tuple(spec.shape if shape is None else shape)
    if tuple(value.shape) != want:
        spelled = f" ({format_shape(spec.shape)})" if list(want) != list(spec.shape) else ""
        raise ValueError(f"argument {spec.name!r}: expected shape {list(want)}{spelled}, got {list(value.shape)}")
    if value.device.type != device:
        raise ValueError(f"argument {spec.name!r}: expected a tensor on {device}, got one on {value.device}")
    strides = getattr(spec, "strides", None)
    if strides:  # a T.StridedTensor: exactly the declared layout (the kernel's offsets are built from it)
        if tuple(value.stride()) != tuple(strides):
            raise ValueError(f"argument {spec.name!r}: expected strides {list(strides)} (its T.StridedTensor), got "
                             f"{list(value.stride())} for shape {list(value.shape)}")
    elif not value.is_contiguous():
        raise ValueError(f"argument {spec.name!r}: expected a contiguous tensor, got strides {list(value.stride())}"
                         f" for shape {list(value.shape)} (call .contiguous() first, or declare the parameter "
                         "T.StridedTensor(shape, strides, dtype) to read this layout in place; CPU)")
    if value.is_neg():  # the kernel reads the raw memory: the lazy sign would be lost (or, for an output, kept)
        raise ValueError(f"argument {spec.name!r}: got a lazily negated view (its negative bit is set, e.g. "
                         f"torch._neg_view); call .resolve_neg() first")
    check_alignment(spec.name, value.data_ptr(), value.numel(), alignment_for(device, value.element_size()))
    return value


def format_shape(shape: Any) -> str:
    """A shape as the program spells it: ``[m, 64]`` for a symbolic first dimension."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def is_scalar(spec: Any) -> bool:
    """A scalar parameter (``n: T.int32``) rather than a tensor."""
    return getattr(spec, "kind", "tensor") == "scalar"


def has_symbols(params: Any) -> bool:
    """Whether any parameter is a scalar or has a symbolic size (then calls go through :func:`bind_arguments`)."""
    return any(is_scalar(p) or any(isinstance(d, str) for d in p.shape) for p in params)


def eval_size(expr: Any, symbols: dict[str, int]) -> int:
    """The value of one dimension: an int, a symbol's name (``"m"``) or an integer expression of symbols as TVM
    prints it (``"m * 2"``, ``"(m + 3) // 4"``). ``KeyError`` (the symbol's name) for a symbol not bound yet."""
    if isinstance(expr, int):
        return expr
    if expr in symbols:
        return symbols[expr]
    import ast
    import operator

    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod}

    def ev(node: Any) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return symbols[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"unsupported size expression {expr!r}")

    return ev(ast.parse(str(expr), mode="eval"))


SYMBOL_MAX = 2**31 - 1  # a symbolic size is an int32 in the kernel (tensors may still hold more elements in all)

_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32,
               "uint64": 64}


def check_scalar(spec: Any, value: Any) -> Any:
    """A scalar argument as the Python number the kernel receives: ``TypeError`` naming the parameter for a value of
    the wrong kind (a tensor, a string, a float for an integer parameter), ``ValueError`` for an integer out of
    the dtype's range."""
    import operator

    dt = spec.dtype
    kind = "bool" if dt == "bool" else ("an integer" if dt in _INT_RANGES else "a number")
    if isinstance(value, (str, bytes)) or value is None or (hasattr(value, "dim") and value.dim() != 0) \
            or (hasattr(value, "ndim") and getattr(value, "ndim", 0) != 0):
        raise TypeError(f"argument {spec.name!r}: expected {kind} for the scalar parameter {spec.name}: {dt}, "
                        f"got {type(value).__name__} {value!r}"[:300])
    if dt == "bool":
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            return bool(value)
        raise TypeError(f"argument {spec.name!r}: expected a bool for the scalar parameter {spec.name}: bool, "
                        f"got {type(value).__name__} {value!r}")
    if dt in _INT_RANGES:
        if isinstance(value, bool):
            raise TypeError(f"argument {spec.name!r}: expected an integer for the scalar parameter {spec.name}: "
                            f"{dt}, got a bool ({value!r})")
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"argument {spec.name!r}: expected an integer for the scalar parameter {spec.name}: "
                            f"{dt}, got {type(value).__name__} {value!r}") from None
        bits = _INT_RANGES[dt]
        lo, hi = (0, 2 ** bits - 1) if dt.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if not lo <= v <= hi:
            raise ValueError(f"argument {spec.name!r}: {v} is out of range for the scalar parameter {spec.name}: "
                             f"{dt} ({lo} .. {hi})")
        return v
    if isinstance(value, bool) or isinstance(value, complex):
        raise TypeError(f"argument {spec.name!r}: expected a real number for the scalar parameter {spec.name}: "
                        f"{dt}, got {type(value).__name__} {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"argument {spec.name!r}: expected a real number for the scalar parameter {spec.name}: "
                        f"{dt}, got {type(value).__name__}") from None
    if dt == "bfloat16":  # the value the kernel computes with: rounded as torch rounds (see scalar_bits)
        import struct

        return struct.unpack("<f", (scalar_bits(v, "bfloat16") << 16).to_bytes(4, "little"))[0]
    return v


def bind_arguments(params: Any, values: dict[int, Any], device: str) -> tuple[dict[int, Any], dict[str, int]]:
    """Check the arguments given (``values``: parameter index -> value) of a kernel with scalar parameters or
    symbolic sizes. Each symbolic size (a dimension spelled ``m``) takes its value from the first tensor that has
    it, in parameter order; every other use of ``m`` must agree, else a ``ValueError`` names both arguments.
    Returns the checked values and the symbols' values (for the outputs' shapes and the launch)."""
    out: dict[int, Any] = {}
    symbols: dict[str, int] = {}
    origin: dict[str, str] = {}
    for i in sorted(values):
        spec = params[i]
        if is_scalar(spec):
            continue
        t = _as_tensor(spec, values[i])
        out[i] = t
        for k, (d, n) in enumerate(zip(spec.shape, t.shape)):
            if not isinstance(d, str) or not d.isidentifier():
                continue
            if d not in symbols:
                if n > SYMBOL_MAX:  # the kernel's size variable is an int32: it would wrap
                    raise ValueError(f"argument {spec.name!r}: dimension {k} (the symbolic size {d}) is {int(n)}; a "
                                     f"symbolic size must be at most {SYMBOL_MAX} (2**31 - 1); reshape the tensor "
                                     f"so that every dimension is below 2**31 (shape {list(t.shape)})")
                symbols[d], origin[d] = int(n), f"argument {spec.name!r} (dimension {k})"
            elif symbols[d] != n:
                raise ValueError(f"argument {spec.name!r}: dimension {k} is the symbolic size {d}, which "
                                 f"{origin[d]} fixed at {symbols[d]}; got {int(n)} (shape {list(t.shape)})")
    for i in sorted(values):
        spec = params[i]
        if is_scalar(spec):
            v = check_scalar(spec, values[i])
            if spec.name in symbols and v != symbols[spec.name]:
                raise ValueError(f"argument {spec.name!r}: {v} disagrees with the size {spec.name} = "
                                 f"{symbols[spec.name]} that {origin[spec.name]} gives")
            out[i] = v
            continue
        try:
            shape = [eval_size(d, symbols) for d in spec.shape]
        except KeyError as e:
            raise ValueError(f"argument {spec.name!r}: its shape {format_shape(spec.shape)} uses the symbolic size "
                             f"{e.args[0]}, which no tensor argument has as a whole dimension") from None
        out[i] = check_tensor(spec, out[i], device, shape)
    return out, symbols


def output_shape(spec: Any, symbols: dict[str, int]) -> list[int]:
    """The shape to allocate for an output, or a ``ValueError`` when a symbolic size is not fixed by any input."""
    try:
        return [eval_size(d, symbols) for d in spec.shape]
    except KeyError as e:
        raise ValueError(f"output {spec.name!r} (shape {format_shape(spec.shape)}): the symbolic size {e.args[0]} "
                         "is not fixed by any input, so it cannot be allocated; pass every tensor, the output "
                         "included") from None


def scalar_bits(value: Any, dtype: str) -> int:
    """A scalar kernel argument as the bits of its CUDA parameter slot (little-endian, zero-extended to 8 bytes)."""
    import math
    import struct

    if dtype in ("float32", "float64", "float16"):
        fmt = {"float32": "<f", "float64": "<d", "float16": "<e"}[dtype]
        try:
            raw = struct.pack(fmt, float(value))
        except OverflowError:  # beyond the format's range: infinity, as a cast (and torch) gives
            raw = struct.pack(fmt, math.copysign(math.inf, float(value)))
        return int.from_bytes(raw, "little")
    if dtype == "bfloat16":  # float32 first (as torch), then round to nearest even on the upper 16 bits
        f32 = scalar_bits(value, "float32")
        if (f32 & 0x7F800000) == 0x7F800000 and f32 & 0x007FFFFF:
            return 0x7FC0  # any NaN: the canonical quiet NaN, as torch gives
        return ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16) & 0xFFFF
    bits = 8 if dtype == "bool" else int(dtype.lstrip("uint") or 32)
    return int(value) & ((1 << bits) - 1)


def launch_plan(meta: dict[str, Any], params: Any) -> list[tuple[str, Any, str]]:
    """Each CUDA kernel argument as (kind, what, dtype): ("tensor", parameter index, "handle"), ("scalar", parameter
    index, dtype) or ("symbol", name, dtype) for a symbolic size the kernel reads."""
    info = meta["cuda"] if "cuda" in meta else meta
    names = [p.name for p in params]
    dtypes = list(info.get("arg_dtypes") or ["handle"] * len(info["args"]))
    plan = []
    for a, dt in zip(info["args"], dtypes):
        if a in names:
            i = names.index(a)
            plan.append(("scalar" if is_scalar(params[i]) else "tensor", i, dt))
        else:
            plan.append(("symbol", a, dt))
    return plan


def launch_grid(grid: Any, symbols: dict[str, int]) -> tuple[int, ...]:
    """The grid of one launch: symbolic extents evaluated with this call's sizes and scalar arguments."""
    return tuple(int(eval_size(g, symbols)) for g in grid)


def check_no_overlap(params: Any, tensors: list[Any], out_idx: list[int]) -> None:
    """``ValueError`` naming both parameters when a caller's output tensor shares memory with another argument: the
    kernel would overwrite values it still has to read (torch refuses such ``out=`` arguments too). Each argument
    occupies ``[data_ptr, data_ptr + extent)``, the extent reaching its last element (a strided view's span covers
    the gaps its strides leave)."""
    spans = []
    for t in tensors:
        n = (1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))) * t.element_size() if t.numel() else 0
        spans.append((t.data_ptr(), t.data_ptr() + n) if n else None)
    for o in out_idx:
        so = spans[o]
        if so is None:
            continue
        for i, si in enumerate(spans):
            if i != o and si is not None and si[0] < so[1] and so[0] < si[1]:
                role = "output" if i in out_idx else "input"
                raise ValueError(f"argument {params[o].name!r} (an output) overlaps {role} {params[i].name!r} in "
                                 f"memory: the kernel would overwrite values it still reads; pass a separate "
                                 f"output tensor (or clone the input)")


def new_output(spec: Any, shape: Any, device: Any) -> Any:
    """An uninitialised output tensor for parameter ``spec``: contiguous, or in its ``T.StridedTensor`` layout."""
    import torch

    dt = torch_dtype(spec.dtype)
    strides = getattr(spec, "strides", None)
    if strides:
        return torch.empty_strided(tuple(shape), tuple(strides), dtype=dt, device=device)
    return torch.empty(tuple(shape), dtype=dt, device=device)


def alignment_for(device: str, element_size: int) -> int:
    """The data-pointer alignment (bytes) a kernel on ``device`` assumes of a tensor of ``element_size`` bytes."""
    return max(ALIGNMENT, element_size, CUDA_ALIGNMENT if device == "cuda" else 1)


def check_alignment(name: str, ptr: int, numel: int, align: int) -> None:
    """``ValueError`` naming the parameter when a non-empty tensor's data pointer is not ``align``-byte aligned (the
    kernel may assume it; anything less would fault)."""
    misaligned = ptr % align if numel else 0
    if misaligned:
        raise ValueError(f"argument {name!r}: expected a {align}-byte aligned tensor, got a data pointer "
                         f"{misaligned} bytes past alignment (a view with a storage offset?); call .clone() first")



def force_backend_hooks(library: Any) -> None:
    """Point a CPU kernel library's parallel-launch and workspace hooks at its own OpenMP shim, whoever loaded it:
    TVM's runtime, when in the process, installs its thread pool (one thread on a 2-core x86 VM). Libraries built
    before the shim had this entry point are left as they are."""
    import ctypes

    try:
        fn = ctypes.CDLL(str(library)).tl_force_backend_hooks
    except (OSError, AttributeError):
        return
    fn.restype = None
    fn()


class Param:
    """One kernel parameter: name, shape (ints, and symbol names for symbolic sizes), dtype, kind ("tensor" or
    "scalar")."""

    def __init__(self, name: str, shape: list[Any], dtype: str, kind: str = "tensor", strides: Any = None):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = dtype
        self.kind = kind
        self.strides = tuple(strides) if strides else None  # a T.StridedTensor's declared element strides

    def __repr__(self) -> str:
        if self.kind == "scalar":
            return f"{self.name}: {self.dtype}"
        return f"{self.name}: {self.dtype}{format_shape(self.shape)}"


class ExportedKernel:
    """The exported kernel: call it with the input tensors (outputs are allocated and returned), or with every
    tensor including preallocated outputs."""

    def __init__(self, meta: dict[str, Any], library_b64: str, source: str):
        self.meta = meta
        self.name: str = meta["name"]
        self.entry: str = meta["entry"]
        self.params = [Param(p["name"], p["shape"], p["dtype"], p.get("kind", "tensor"), p.get("strides"))
                       for p in meta["params"]]
        self._bound = has_symbols(self.params)  # scalars or symbolic sizes: arguments go through bind_arguments
        n = len(self.params)
        self.out_idx = sorted(i % n for i in meta["out_idx"])
        self.in_idx = [i for i in range(n) if i not in self.out_idx]
        self.config: dict[str, Any] = dict(meta.get("config", {}))
        self.target: dict[str, Any] = dict(meta.get("target", {}))
        self.source = source
        self.device = "cuda" if self.target.get("kind") == "cuda" else "cpu"
        self._library_b64 = library_b64
        self._fn: Any = None
        self._module: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """Write the library to the cache and load it (done on the first call)."""
        with self._lock:
            if self._fn is None and self.device == "cuda":
                data = base64.b64decode(self._library_b64)
                if _sha256(data) != self.meta["library_sha256"]:
                    raise RuntimeError("the embedded cubin does not match its recorded SHA-256: the exported file "
                                       "was modified or truncated; export it again")
                self._fn = CudaLaunch(self.meta, data, self.params)
            if self._fn is None:
                check_host(self.meta)
                path = materialize(self._library_b64, self.meta["library_sha256"])
                import tvm_ffi

                try:
                    self._module = tvm_ffi.load_module(str(path))
                    self._fn = self._module[self.entry]
                    force_backend_hooks(path)
                except Exception as e:  # noqa: BLE001 - say which file and which runtime
                    built = self.meta.get("versions", {}).get("apache-tvm-ffi")
                    raise RuntimeError(f"could not load kernel {self.name!r} from {path} with apache-tvm-ffi "
                                       f"(exported with apache-tvm-ffi {built}): {e}") from e
            return self._fn

    def check_arg(self, spec: Param, value: Any) -> Any:
        return check_tensor(spec, value, self.device)

    def alloc_outputs(self, device: Any = None) -> list[Any]:
        import torch

        dev = device or (torch.device("cuda", torch.cuda.current_device()) if self.device == "cuda" else "cpu")
        return [new_output(self.params[i], self.params[i].shape, dev) for i in self.out_idx]

    def _call_bound(self, args: tuple) -> Any:
        """A call of a kernel with scalar parameters or symbolic sizes (see :func:`bind_arguments`)."""
        n_in, n_all = len(self.in_idx), len(self.params)
        import torch

        if len(args) == n_in:
            checked, symbols = bind_arguments(self.params, dict(zip(self.in_idx, args)), self.device)
            dev = next((v.device for v in checked.values() if hasattr(v, "device")), None)
            dev = dev if self.device == "cuda" and dev is not None else \
                (torch.device("cuda", torch.cuda.current_device()) if self.device == "cuda" else "cpu")
            outs = [new_output(self.params[i], output_shape(self.params[i], symbols), dev) for i in self.out_idx]
            checked.update(zip(self.out_idx, outs))
        elif len(args) == n_all and self.out_idx:
            checked, symbols = bind_arguments(self.params, dict(enumerate(args)), self.device)
            tensors = [i for i in range(n_all) if not is_scalar(self.params[i])]
            check_no_overlap([self.params[i] for i in tensors], [checked[i] for i in tensors],
                             [tensors.index(o) for o in self.out_idx])
            outs = [args[i] for i in self.out_idx]
        else:
            return self._count_error(args)
        fn = self.load()
        full = [checked[i] for i in range(n_all)]
        if self.device == "cuda":
            fn(*full, symbols=symbols)
        else:
            fn(*full)
        if not self.out_idx:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _count_error(self, args: tuple) -> Any:
        n_in, n_all = len(self.in_idx), len(self.params)
        names = ", ".join(self.params[i].name for i in self.in_idx)
        raise TypeError(f"kernel {self.entry}: expected {n_in} input argument(s) ({names})"
                        + (f" or all {n_all} including outputs" if self.out_idx else "")
                        + f", got {len(args)}")

    def __call__(self, *args: Any) -> Any:
        if self._bound:
            return self._call_bound(args)
        n_in, n_all = len(self.in_idx), len(self.params)
        if len(args) == n_in:
            args = tuple(self.check_arg(self.params[i], a) for i, a in zip(self.in_idx, args))  # before allocating
            outs = self.alloc_outputs(args[0].device if args and self.device == "cuda" else None)
            full: list[Any] = [None] * n_all
            for i, a in zip(self.in_idx, args):
                full[i] = a
            for i, o in zip(self.out_idx, outs):
                full[i] = o
            checked = full  # inputs checked above, outputs freshly allocated to spec
        elif len(args) == n_all and self.out_idx:
            checked = [self.check_arg(spec, a) for spec, a in zip(self.params, args)]
            check_no_overlap(self.params, checked, self.out_idx)
            outs = [args[i] for i in self.out_idx]  # the caller's own objects, as given
        else:
            names = ", ".join(self.params[i].name for i in self.in_idx)
            raise TypeError(f"kernel {self.entry}: expected {n_in} input tensor(s) ({names})"
                            + (f" or all {n_all} including outputs" if self.out_idx else "")
                            + f", got {len(args)}")
        fn = self.load()
        fn(*checked)
        if not self.out_idx:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def make_inputs(self, seed: int = 0) -> list[Any]:
        """Random inputs of the right shapes and dtypes (normal floats, small ints)."""
        import torch

        g = torch.Generator().manual_seed(seed)
        out = []
        sizes = {d: 33 for p in self.params for d in p.shape if isinstance(d, str)}  # symbolic sizes: one example
        for i in self.in_idx:
            p = self.params[i]
            if p.kind == "scalar":
                x = float(torch.rand((), generator=g)) + 0.5
                out.append(int(x * 4) if p.dtype.startswith(("int", "uint")) else (x > 1 if p.dtype == "bool" else x))
                continue
            shape = [eval_size(d, sizes) for d in p.shape]
            if p.dtype.startswith(("float", "bfloat")):
                out.append(torch.randn(shape, generator=g).to(torch_dtype(p.dtype)))
            elif p.dtype == "bool":
                out.append(torch.rand(shape, generator=g) > 0.5)
            else:
                out.append(torch.randint(0, 8, shape, generator=g).to(torch_dtype(p.dtype)))
        return [t.to(self.device) if hasattr(t, "to") else t for t in out]

    def __repr__(self) -> str:
        ins = ", ".join(repr(self.params[i]) for i in self.in_idx)
        outs = ", ".join(repr(self.params[i]) for i in self.out_idx) or "none"
        cfg = ", ".join(f"{k}={v}" for k, v in self.config.items())
        return (f"<exported kernel {self.name}({cfg}) target={self.target.get('kind')} "
                f"({self.target.get('mcpu') or self.target.get('arch', '')}) inputs=[{ins}] outputs=[{outs}]>")


def self_test(kernel: ExportedKernel) -> int:
    """``python <module>.py``: run on random inputs, compare with the recorded reference, time it."""
    import torch

    inputs = kernel.make_inputs()
    out = kernel(*inputs)
    t0 = time.perf_counter()
    runs = 0
    while time.perf_counter() - t0 < 0.2 or runs < 3:
        kernel(*inputs)
        runs += 1
    ms = (time.perf_counter() - t0) / runs * 1e3
    print(f"{kernel!r}\nran on random inputs: {ms:.3f} ms per call ({runs} runs)")
    ref = kernel.meta.get("reference")
    if not ref:
        return 0
    env = {"torch": torch, **{kernel.params[i].name: t for i, t in zip(kernel.in_idx, inputs)}}
    try:
        expected = eval(ref, env)  # the --ref expression recorded at export time
    except Exception as e:  # noqa: BLE001
        print(f"reference {ref!r} could not be evaluated here ({type(e).__name__}: {e}); skipped")
        return 0
    outs = out if isinstance(out, tuple) else (out,)
    refs = expected if isinstance(expected, (tuple, list)) else (expected,)
    tol = kernel.meta.get("tolerance") or 1e-4
    ok = all(torch.allclose(o.double(), torch.as_tensor(r).double(), rtol=tol, atol=tol) for o, r in zip(outs, refs))
    print(f"reference {ref}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1
