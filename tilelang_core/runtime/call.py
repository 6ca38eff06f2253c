"""Calling a loaded kernel with torch tensors (or numpy arrays): validation, output allocation, launch.

Inputs are passed zero-copy (DLPack through ``apache-tvm-ffi``). Every input is checked before the launch and a
mismatch raises ``TypeError`` (wrong kind or dtype) or ``ValueError`` (rank, shape, device, layout) naming the
parameter, what was expected and what was given — a kernel must never read past a too-small tensor.
"""

from __future__ import annotations

from typing import Any

from ..errors import TileLangRuntimeError
from .artifact import Artifact, ParamSpec
from .exported import (
    bind_arguments,
    check_no_overlap,
    check_tensor,
    force_backend_hooks,
    has_symbols,
    is_scalar,
    new_output,
    output_shape,
    torch_dtype,
)

__all__ = ["KernelCallable", "check_tensor", "force_backend_hooks", "torch_dtype"]

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
        self.bound = has_symbols(artifact.params)  # scalar parameters or symbolic sizes: see bind()

    @property
    def params(self) -> list[ParamSpec]:
        return self.artifact.params

    def check_args(self, values: list[Any]) -> list[Any]:
        """All arguments checked: a fast path for the common case (a contiguous CPU torch tensor of exactly the
        expected dtype and shape, for a plain ``T.Tensor``), the detailed check — and its error message — otherwise."""
        fast = getattr(self, "_fast", None)
        if fast is None:
            import torch

            fast = self._fast = (torch.Tensor, [(torch_dtype(p.dtype), tuple(p.shape), not getattr(p, "strides", None))
                                                for p in self.params])
        tensor_type, expected = fast
        out = list(values)
        for i, (v, (dt, shape, plain)) in enumerate(zip(values, expected)):  # plain: not a T.StridedTensor
            if not (plain and type(v) is tensor_type and v.dtype is dt and v.shape == shape
                    and v.device.type == self.device and v.is_contiguous() and not v.is_neg()):
                out[i] = self.check_arg(self.params[i], v)
        return out

    def check_arg(self, spec: ParamSpec, value: Any) -> Any:
        return check_tensor(spec, value, self.device)

    def alloc_outputs(self) -> list[Any]:
        return [new_output(self.params[i], self.params[i].shape, "cpu") for i in self.out_idx]

    def bind(self, args: tuple) -> tuple[list[Any], list[Any], dict[str, int]] | None:
        """Arguments of a kernel with scalar parameters or symbolic sizes: every one checked (scalars as Python
        numbers, each symbolic size bound from the first tensor that has it and checked against the others),
        outputs allocated to the bound shapes. Returns (all arguments, outputs, symbols), or None for a wrong
        argument count."""
        import torch

        n_all = len(self.params)
        if len(args) == len(self.in_idx) and (len(args) != n_all or not self.out_idx):
            checked, symbols = bind_arguments(self.params, dict(zip(self.in_idx, args)), self.device)
            dev: Any = "cpu"
            if self.device == "cuda":
                dev = next((v.device for v in checked.values() if hasattr(v, "device")),
                           torch.device("cuda", torch.cuda.current_device()))
            outs = [new_output(self.params[i], output_shape(self.params[i], symbols), dev) for i in self.out_idx]
            checked.update(zip(self.out_idx, outs))
        elif len(args) == n_all and self.out_idx:
            checked, symbols = bind_arguments(self.params, dict(enumerate(args)), self.device)
            tensors = [i for i in range(n_all) if not is_scalar(self.params[i])]
            check_no_overlap([self.params[i] for i in tensors], [checked[i] for i in tensors],
                             [tensors.index(o) for o in self.out_idx])
            outs = [args[i] for i in self.out_idx]
        else:
            return None
        return [checked[i] for i in range(n_all)], outs, symbols

    def _count_error(self, n_args: int) -> TypeError:
        n_in, n_all = len(self.in_idx), len(self.params)
        names = ", ".join(self.params[i].name for i in self.in_idx)
        what = "input argument(s)" if self.bound else "input tensor(s)"
        return TypeError(f"kernel {self.artifact.entry}: expected {n_in} {what} ({names})"
                         + (f" or all {n_all} including outputs" if self.out_idx else "")
                         + f", got {n_args}")

    def __call__(self, *args: Any) -> Any:
        n_in = len(self.in_idx)
        n_all = len(self.params)
        if self.bound:
            bound = self.bind(args)
            if bound is None:
                raise self._count_error(len(args))
            full, outs, _ = bound
            self._fn(*full)
            return None if not self.out_idx else (outs[0] if len(outs) == 1 else tuple(outs))
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
            raise self._count_error(len(args))
        checked = self.check_args(full)
        if len(args) == n_all:  # the caller's own outputs: refuse any that share memory with another argument
            check_no_overlap(self.params, checked, self.out_idx)
        self._fn(*checked)
        if not self.out_idx:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)
