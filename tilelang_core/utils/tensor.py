"""TileLang's tensor helpers: how a profiler fills a kernel's inputs (:class:`TensorSupplyType`), and the
mismatch-tolerant comparison TileLang's tests use (:func:`torch_assert_close`).

Why: TileLang programs pick their test inputs by name (``kernel.get_profiler(tensor_supply_type=
tilelang.TensorSupplyType.Integer)``) and compare with a budget of mismatched elements; the same spelling has to
mean the same here. torch is imported when a tensor is made, not when this module is imported.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


class TensorSupplyType(enum.Enum):
    """How inputs are generated (TileLang's values): ``Integer`` small integers (-2..2; 0..2 unsigned; random
    bytes for float8), ``Uniform`` U(-1, 1), ``Normal`` N(-1, 1) (TileLang's mean), ``Randn`` N(0, 1), ``Zero``,
    ``One``, ``Auto`` (U(-1, 1) for float16/bfloat16/float32, else as ``Integer``)."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def supply_type(value: Any) -> TensorSupplyType:
    """``value`` as a :class:`TensorSupplyType`: a member, its name (any case) or its number."""
    if isinstance(value, TensorSupplyType):
        return value
    if isinstance(value, str):
        for member in TensorSupplyType:
            if member.name.lower() == value.lower():
                return member
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return TensorSupplyType(value)
        except ValueError:
            pass
    names = ", ".join(f"TensorSupplyType.{m.name}" for m in TensorSupplyType)
    raise ValueError(f"tensor_supply_type: expected one of {names} (or its name), got {value!r}")


def is_float8_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` (a torch dtype or a name) is an 8-bit float."""
    return str(dtype).replace("torch.", "") in _FLOAT8


def fp8_remove_negative_zeros_(tensor: Any) -> Any:
    """Replace -0.0 by +0.0 in a float8 tensor, in place (TileLang's helper: byte-wise comparisons of float8
    results then do not trip over the sign of zero)."""
    import torch

    if not is_float8_dtype(tensor.dtype):
        raise TypeError(f"fp8_remove_negative_zeros_: expected a float8 tensor, got {tensor.dtype}")
    bits = tensor.view(torch.uint8)
    bits[tensor == 0] = 0
    return tensor


def make_tensor(shape: Sequence[int], dtype: str, kind: TensorSupplyType, generator: Any = None,
                device: str = "cpu") -> Any:
    """One input of ``shape`` and ``dtype`` (a dtype name) filled as ``kind`` says."""
    import torch

    from ..runtime.call import torch_dtype

    tdt = torch_dtype(dtype)
    shape = tuple(int(s) for s in shape)
    unsigned, boolean, fp8 = dtype.startswith("uint"), dtype == "bool", is_float8_dtype(dtype)
    floating = dtype.startswith(("float", "bfloat"))

    def integers() -> Any:
        if unsigned:
            return torch.randint(0, 3, shape, generator=generator, dtype=torch.int64).to(tdt)
        if fp8:  # every bit pattern but NaN, as TileLang draws them (random bytes)
            t = torch.randint(-128, 128, shape, generator=generator, dtype=torch.int64).to(torch.int8).to(tdt)
            return t.masked_fill(t.isnan(), 0)
        if boolean:
            return torch.randint(0, 2, shape, generator=generator, dtype=torch.int64).to(torch.bool)
        return torch.randint(-2, 3, shape, generator=generator, dtype=torch.int64).to(tdt)

    if kind is TensorSupplyType.Auto:
        t = (torch.empty(shape).uniform_(-1.0, 1.0, generator=generator).to(tdt)
             if dtype in ("float16", "bfloat16", "float32") else integers())
    elif kind is TensorSupplyType.Integer:
        t = integers()
    elif kind in (TensorSupplyType.Uniform, TensorSupplyType.Normal) and dtype == "int8":
        t = torch.ones(shape, dtype=tdt)  # TileLang's choice for int8 under Uniform/Normal
    elif kind is TensorSupplyType.Uniform:
        t = torch.empty(shape).uniform_(-1.0, 1.0, generator=generator).to(tdt)
    elif kind is TensorSupplyType.Normal:
        t = torch.empty(shape).normal_(-1.0, 1.0, generator=generator).to(tdt)
    elif kind is TensorSupplyType.Randn:
        t = torch.randn(shape, generator=generator).to(tdt) if floating or fp8 else integers()
    elif kind is TensorSupplyType.Zero:
        t = torch.zeros(shape, dtype=tdt)
    else:
        t = torch.ones(shape, dtype=tdt)
    return t.to(device)


def get_tensor_supply(kind: Any = TensorSupplyType.Integer) -> Callable[[Any], Any]:
    """TileLang's factory: a function from a parameter (with ``.shape`` and ``.dtype``) to a fresh tensor."""
    kind = supply_type(kind)

    def supply(param: Any) -> Any:
        return make_tensor(param.shape, str(param.dtype), kind)

    return supply


def torch_assert_close(tensor_a: Any, tensor_b: Any, rtol: float = 1e-2, atol: float = 1e-3,
                       max_mismatched_ratio: float = 0.001, verbose: bool = False, equal_nan: bool = True,
                       check_device: bool = True, check_dtype: bool = True, check_layout: bool = True,
                       check_stride: bool = False, base_name: str = "LHS", ref_name: str = "RHS") -> bool:
    """Assert ``tensor_a`` and ``tensor_b`` are close, allowing ``max_mismatched_ratio`` of the elements (rounded
    down) outside ``atol + rtol * |b|`` (TileLang's semantics, its defaults). Shapes must match, and devices /
    dtypes / layouts / strides unless their ``check_*`` is False; values are compared in the promoted dtype.
    Raises ``AssertionError`` with the count, the first mismatch and the largest differences; returns True."""
    import torch

    a, b = torch.as_tensor(tensor_a), torch.as_tensor(tensor_b)
    if a.shape != b.shape:
        raise AssertionError(f"{base_name} and {ref_name} differ in shape: {tuple(a.shape)} != {tuple(b.shape)}")
    for check, what, x, y in ((check_device, "device", a.device, b.device), (check_dtype, "dtype", a.dtype, b.dtype),
                              (check_layout, "layout", a.layout, b.layout)):
        if check and x != y:
            raise AssertionError(f"{base_name} and {ref_name} differ in {what}: {x} != {y}")
    if check_stride and a.layout == torch.strided and a.stride() != b.stride():
        raise AssertionError(f"{base_name} and {ref_name} differ in stride: {a.stride()} != {b.stride()}")
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.layout != torch.strided:
        a = a.to_dense()
    if b.layout != torch.strided:
        b = b.to_dense()
    if is_float8_dtype(a.dtype) or is_float8_dtype(b.dtype) or a.dtype != b.dtype:
        wide = {torch.uint16: torch.int64, torch.uint32: torch.int64, torch.uint64: torch.int64}
        da, db = wide.get(a.dtype, a.dtype), wide.get(b.dtype, b.dtype)
        common = torch.float32 if is_float8_dtype(da) or is_float8_dtype(db) else torch.promote_types(da, db)
        a, b = a.to(common), b.to(common)
    mismatched = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    n_bad, total = int(mismatched.sum()), a.numel()
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"Number of mismatched elements: {n_bad} / {total} (allowed: {allowed})")
    if n_bad <= allowed:
        return True
    import numpy as np

    flat = int(torch.argmax(mismatched.reshape(-1).int()))
    idx = [int(i) for i in np.unravel_index(flat, tuple(a.shape))] if a.dim() else []
    av, bv = a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()
    diff = (a.double() - b.double()).abs()
    raise AssertionError(
        f"Too many mismatched elements: {n_bad} > {allowed} ({max_mismatched_ratio * 100:.2f}% allowed, got "
        f"{n_bad / max(total, 1) * 100:.2f}%).\nFirst mismatch at index {idx}: {base_name}={av}, {ref_name}={bv}\n"
        f"Greatest absolute difference: {float(diff.max())}, greatest relative difference: "
        f"{float((diff / (b.double().abs() + 1e-12)).max())}")
