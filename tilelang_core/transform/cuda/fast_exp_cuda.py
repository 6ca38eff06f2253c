"""Pass: float32 ``exp2`` / ``exp`` on CUDA as one ``ex2.approx.ftz.f32`` (the SFU instruction).

Without fast-math, nvcc compiles ``exp2f`` into the SFU's ``ex2.approx`` plus scaling instructions that keep
subnormal results, and ``expf`` into a longer range-reduced sequence. In flash attention's online softmax there is
one exponential per score, so those extra instructions are a visible share of the loop. ``tl::fast_exp2`` is the
bare instruction (relative error about 2^-22, results below 2^-126 flush to zero — the same contract as the CPU's
``tl.FastExpCPU``); ``exp(x)`` becomes ``fast_exp2(x * log2(e))``. float64 and half types are left alone.
"""

from __future__ import annotations

import math
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from ...language._ir import dtype_of

_LOG2E = 1.0 / math.log(2)


def fast_exp_cuda(func: tirx.PrimFunc) -> tirx.PrimFunc:
    def rewrite(c: Any) -> Any:
        if not isinstance(c.op, tvm.ir.Op) or dtype_of(c) != "float32":
            return c
        name = str(c.op.name)
        if name == "tirx.exp2":
            return tirx.call_extern("float32", "tl::fast_exp2", c.args[0])
        if name == "tirx.exp":
            return tirx.call_extern("float32", "tl::fast_exp2", c.args[0] * tirx.const(_LOG2E, "float32"))
        return c

    return func.with_body(tvm_ffi.structural_map(func.body, [(tvm.ir.Call, rewrite)]))
