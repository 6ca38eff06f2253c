"""``tl.HoistInvariantReadsCUDA``: register loads of read-only global data that no iteration changes leave the loop.

The dequantising gemm decoded into fragments reads its per-channel scale once per K step after the step's barrier;
the pass moves those loads before the pipelined loop. Checked on the lowered IR and the generated CUDA (the scale
loads sit before the loop; per-group scales, which change with k, and loads of tensors the kernel writes stay in
it; on hand-built TIR, registers of a tensor the loop writes, or read at the iteration's address, stay), in the
emulator (the same values as torch and bit for bit those of the unhoisted kernel), and the key
``tl.cuda.hoist_invariant_reads`` (off by default) switching it on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import tvm
from tvm import tirx

import tilelang_core as tilelang
from tilelang_core.backend.cuda import codegen
from tilelang_core.pass_config import resolve
from tilelang_core.transform.cuda.hoist_invariant_reads_cuda import hoist_invariant_reads_cuda

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))

import dequant_variants as dv  # noqa: E402
from cuda_emulator import emulate  # noqa: E402

FRAGMENTS = {"tl.cuda.dequant_fragments": True, "tl.cuda.fuse_dequant": False, "tl.cuda.hoist_invariant_reads": True}
OFF = {**FRAGMENTS, "tl.cuda.hoist_invariant_reads": False}


def _variant(name: str) -> dv.Variant:
    return next(v for v in dv.VARIANTS if v.name == name)


def _loop_parts(name: str, configs: dict) -> tuple[str, str]:
    """The lowered kernel's text before and inside its pipelined K loop."""
    v = _variant(name)
    text = str(codegen.lower(dv.program(v, 16, 256, 1024, 16, 64, 256, 3, 128), None, "sm_90a", configs)["main"])
    i = text.index("for k in range(")
    return text[:i], text[i:]


def test_a_per_channel_scale_is_read_before_the_k_loop_and_the_key_turns_that_off():
    before, inside = _loop_parts("hi_first", FRAGMENTS)
    assert "= S[" in before and "= S[" not in inside  # every step's scale registers, filled once
    before, inside = _loop_parts("hi_first", OFF)
    assert "= S[" not in before and "= S[" in inside


def test_a_per_group_scale_changes_with_k_and_stays_in_the_loop():
    before, inside = _loop_parts("g128", FRAGMENTS)
    assert "= S[" in inside and "= S[" not in before


def _loop(extent: int = 4) -> tuple[Any, dict[str, Any]]:
    """A serial loop filling three registers from global tensors: R (which the loop writes), G (read-only, the
    same every iteration) and W (read-only, at the iteration's element); then R[0] = r + g + w."""
    bufs = {n: tirx.decl_buffer((4,), "float32", n) for n in "RGW"}
    regs = {n: tirx.decl_buffer((1,), "float32", n.lower(), scope="local") for n in "RGW"}
    k, z = tvm.ir.Var("k", "int32"), tirx.IntImm("int32", 0)
    body = []
    for n, at in (("R", z), ("G", z), ("W", k)):
        body += [tirx.AllocBuffer(regs[n]), tirx.BufferStore(regs[n], tirx.BufferLoad(bufs[n], [at]), [z])]
    total = tirx.BufferLoad(regs["R"], [z]) + tirx.BufferLoad(regs["G"], [z]) + tirx.BufferLoad(regs["W"], [z])
    body.append(tirx.BufferStore(bufs["R"], total, [z]))
    loop = tirx.For(k, z, tirx.IntImm("int32", extent), tirx.ForKind.SERIAL, tirx.SeqStmt(body))
    return tirx.PrimFunc(list(bufs.values()), loop), bufs


def test_only_the_register_of_a_read_only_tensor_at_a_fixed_address_leaves_the_loop():
    func, _ = _loop()
    text = str(hoist_invariant_reads_cuda(func))
    before, inside = text.split("for k in range(4):")
    assert "g: T.float32 = G[0]" in before  # read-only, the same address every iteration: moved
    assert "r: T.float32 = R_1[0]" in inside  # R is written by the loop: stays
    assert "w: T.float32 = W[k]" in inside  # another address every iteration: stays
    assert str(hoist_invariant_reads_cuda(func, enabled=False)) == str(func)


def test_a_loop_that_may_not_run_keeps_its_loads():
    func, _ = _loop(extent=0)
    assert str(hoist_invariant_reads_cuda(func)) == str(func)


@pytest.mark.parametrize("name,M,N", [("hi_first", 16, 128), ("int8", 7, 64), ("bf16", 5, 96)])
def test_hoisted_kernels_match_torch_and_the_unhoisted_kernel_bit_for_bit_in_the_emulator(name, M, N):
    v = _variant(name)
    K = 512
    args = dv.inputs(v, M, N, K, device="cpu", seed=3)

    @tilelang.jit(out_idx=[-1])
    def prog(M, N, K):
        return dv.program(v, M, N, K, 16, 64, 256, 3, 128)

    (on,) = emulate(prog, (M, N, K), {}, args, arch="sm_90a", pass_configs=FRAGMENTS)
    (off,) = emulate(prog, (M, N, K), {}, args, arch="sm_90a", pass_configs=OFF)
    assert torch.equal(on, off)
    ref = dv.reference(v, args[0], *args[1:])
    rtol = 1e-2 if v.dtype == "bfloat16" else 2e-3
    torch.testing.assert_close(on.double(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


def test_the_key_is_off_by_default_validated_and_in_the_cache_key():
    assert resolve(None)["tl.cuda.hoist_invariant_reads"] is False  # not faster on the H200 (docs/cuda.md)
    assert resolve(OFF).key() != resolve(FRAGMENTS).key()
    with pytest.raises(ValueError, match="tl.cuda.hoist_invariant_reads"):
        resolve({"tl.cuda.hoist_invariant_reads": "yes"})
