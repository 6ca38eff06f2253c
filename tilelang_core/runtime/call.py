"""Calling a loaded kernel with torch tensors (or numpy arrays): validation, output allocation, launch.

Inputs are passed zero-copy (DLPack through ``apache-tvm-ffi``). Every input is checked before the launch and a
mismatch raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (rank, shape, device, layout) naming the
parameter, what was expected and what was given — a kernel must never read past a too-small tensor.
"""

from __future__ import annotations

from typing import Any

from ..errors import TileLangRuntimeError
from .artifact import Artifact, ParamSpec

_TORCH_DTYPES: dict[str, Any] = {}


def torch_dtype(name: str) -> Any:
    import torch

    if not _TORCH_DTYPES:
        _TORCH_DTYPES.update({
            "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
            "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
            "uint16": getattr(torch, "uint16", None), "uint32": getattr(torch, "uint32", None),
            "uint64": getattr(torch, "uint64", None),
        })
    return _TORCH_DTYPES[name]


def _dtype_name(t: Any) -> str:
    return str(t.dtype).replace("torch.", "")


def force_backend_hooks(library: Any) -> None:
    """Point the library's parallel-launch and workspace hooks at our OpenMP shim, whoever loaded it (TVM's runtime,
    when imported, installs its own one-thread-on-small-VMs pool). Libraries built before the shim had this entry
    point are left as they are."""
    import ctypes

    try:
        fn = ctypes.CDLL(str(library)).tl_force_backend_hooks
    except (OSError, AttributeError):
        return
    fn.restype = None
    fn()


class KernelCallable:
    """Validates arguments, allocates outputs and launches a CPU kernel library."""

    def __init__(self, artifact: Artifact):
        import tvm_ffi

        self.artifact = artifact
        try:
            self._module = tvm_ffi.load_module(str(artifact.library_path))
            self._fn = self._module[artifact.entry]
            force_backend_hooks(artifact.library_path)
        except Exception as e:  # noqa: BLE001
            raise TileLangRuntimeError(f"could not load kernel library {artifact.library_path}: {e}") from e
        n = len(artifact.params)
        self.out_idx = sorted(i % n for i in artifact.out_idx)
        self.in_idx = [i for i in range(n) if i not in self.out_idx]
        self.device = "cpu"

    @property
    def params(self) -> list[ParamSpec]:
        return self.artifact.params

    def check_args(self, values: list[Any]) -> list[Any]:
        """All arguments checked: a fast path for the common case (a contiguous CPU torch tensor of exactly the
        expected dtype and shape), the detailed check — and its error message — otherwise."""
        fast = getattr(self, "_fast", None)
        if fast is None:
            import torch

            fast = self._fast = (torch.Tensor, [(torch_dtype(p.dtype), tuple(p.shape)) for p in self.params])
        tensor_type, expected = fast
        out = list(values)
        for i, (v, (dt, shape)) in enumerate(zip(values, expected)):
            if not (type(v) is tensor_type and v.dtype is dt and v.shape == shape and v.device.type == self.device
                    and v.is_contiguous()):
                out[i] = self.check_arg(self.params[i], v)
        return out

    def check_arg(self, spec: ParamSpec, value: Any) -> Any:
        import torch

        if not isinstance(value, torch.Tensor):
            if type(value).__module__ == "numpy" and hasattr(value, "__array_interface__"):
                value = torch.from_numpy(value)  # zero-copy
            else:
                raise TypeError(f"argument {spec.name!r}: expected a torch.Tensor of {spec.dtype} with shape "
                                f"{list(spec.shape)}, got {type(value).__name__}")
        got = _dtype_name(value)
        if got != spec.dtype:
            raise TypeError(f"argument {spec.name!r}: expected dtype {spec.dtype}, got {got}")
        if value.dim() != len(spec.shape):
            raise ValueError(f"argument {spec.name!r}: expected a rank-{len(spec.shape)} tensor of shape "
                             f"{list(spec.shape)}, got rank {value.dim()} with shape {list(value.shape)}")
        if tuple(value.shape) != tuple(spec.shape):
            raise ValueError(f"argument {spec.name!r}: expected shape {list(spec.shape)}, got {list(value.shape)}")
        if value.device.type != self.device:
            raise ValueError(f"argument {spec.name!r}: expected a tensor on {self.device}, got one on {value.device}")
        if not value.is_contiguous():
            raise ValueError(f"argument {spec.name!r}: expected a contiguous tensor, got strides {list(value.stride())}"
                             f" for shape {list(value.shape)} (call .contiguous() first)")
        return value

    def alloc_outputs(self) -> list[Any]:
        import torch

        return [torch.empty(self.params[i].shape, dtype=torch_dtype(self.params[i].dtype)) for i in self.out_idx]

    def __call__(self, *args: Any) -> Any:
        n_in = len(self.in_idx)
        n_all = len(self.params)
        if len(args) == n_in:
            outs = self.alloc_outputs()
            full: list[Any] = [None] * n_all
            for i, a in zip(self.in_idx, args):
                full[i] = a
            for i, o in zip(self.out_idx, outs):
                full[i] = o
        elif len(args) == n_all and self.out_idx:
            full = list(args)
            outs = [full[i] for i in self.out_idx]
        else:
            names = ", ".join(self.params[i].name for i in self.in_idx)
            raise TypeError(f"kernel {self.artifact.entry}: expected {n_in} input tensor(s) ({names})"
                            + (f" or all {n_all} including outputs" if self.out_idx else "")
                            + f", got {len(args)}")
        checked = self.check_args(full)
        self._fn(*checked)
        if not self.out_idx:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)
