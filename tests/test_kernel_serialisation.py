"""Pickling or copying a compiled kernel raises a clear TypeError (it used to segfault the interpreter while
serialising the TVM program); the kernel keeps working afterwards. The checks run in a child process (one for
the three)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T


@tilelang.jit(out_idx=[-1])
def scale(N, factor):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * factor

    return main


def _check_refused(action, what: str) -> None:
    kernel = scale(256, 3.0)
    with pytest.raises(TypeError, match=f"JITKernel cannot be {what}.*@jit factory"):
        action(kernel)
    x = torch.randn(256)
    torch.testing.assert_close(kernel(x), x * 3.0)


def check_pickle_refused() -> None:
    _check_refused(pickle.dumps, "pickled")
    _check_refused(lambda k: pickle.dumps({"kernels": [k]}), "pickled")  # inside a container too


def check_deepcopy_refused() -> None:
    _check_refused(copy.deepcopy, "deep-copied")
    _check_refused(lambda k: copy.deepcopy({"k": k}), "deep-copied")


def check_copy_refused() -> None:
    _check_refused(copy.copy, "pickled or copied")


CHECKS = [check_pickle_refused, check_deepcopy_refused, check_copy_refused]


@pytest.fixture(scope="module")
def child_results(run_isolated_together):
    """The three checks in one child interpreter (a crash fails the checks it stopped, not the run)."""
    return run_isolated_together(CHECKS)


@pytest.mark.parametrize("check", CHECKS, ids=["pickle", "deepcopy", "copy"])
def test_pickling_or_copying_a_kernel_raises_type_error_not_a_crash(child_results, check):
    child_results.check(check)
