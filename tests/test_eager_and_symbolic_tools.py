"""The workbench magic and the autotuner with TileLang's eager spelling (``T.const`` sizes, ``T.empty`` outputs) and
with symbolic sizes (``T.symbolic`` / ``T.dynamic``), issue 18. Before: ``%%tilekernel`` refused ``--shapes N=...``
for a ``T.const`` size and could not draw inputs for a symbolic one; ``tune`` called an eager function (which runs
it) instead of compiling it; a symbolic kernel's measurement multiplied its shape's text."""

from __future__ import annotations

import pytest
import torch

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.autotune import tune

pytest.importorskip("IPython", reason="the workbench needs the notebook extras: pip install -e '.[notebook]'")

from IPython.core.error import UsageError  # noqa: E402

FAST = dict(workers=0, progress=False, warmup=1.0, rep=2.0, db=None)

EAGER_CELL = '''\
@tilelang.jit
def scale(X, alpha=2.0, block=64):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] * alpha
    return Y
'''

SYMBOLIC_CELL = '''\
def addv(block=64):
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return main
'''

EAGER_DYNAMIC_CELL = '''\
@tilelang.jit
def addv2(A, B, block=64):
    n = T.dynamic("n")
    A: T.Tensor((n,), "float32")
    B: T.Tensor((n,), "float32")
    C = T.empty((n,), "float32")
    with T.Kernel(T.ceildiv(n, block)) as bx:
        for i in T.Parallel(block):
            C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return C
'''


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "workbench")
    return shell


def tilekernel(ip, line: str, cell: str):
    ip.run_cell_magic("tilekernel", line, cell)
    return ip.user_ns[line.split()[0]]


# -- the magic -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("decorated", [True, False], ids=["jit", "plain"])
def test_magic_compiles_and_checks_an_eager_function_with_its_T_const_size_from_shapes(ip, cache_dir, decorated):
    cell = EAGER_CELL if decorated else EAGER_CELL.replace("@tilelang.jit\n", "")
    wk = tilekernel(ip, "scale --shapes N=192,alpha=1.5 --ref 'X * 1.5' --target cpu --no-bench -q", cell)
    assert wk.passed is True
    assert wk.config["N"] == 192 and wk.config["alpha"] == 1.5
    assert wk.out_idx == [1]  # its T.empty output
    x = torch.randn(192)
    torch.testing.assert_close(wk(x), x * 1.5, rtol=0, atol=0)


def test_magic_eager_function_without_its_size_is_a_usage_error_naming_it(ip, cache_dir):
    with pytest.raises(UsageError, match=r"--shapes: give N=\.\.\. \(the T\.const size"):
        tilekernel(ip, "scale --ref 'X * 2.0' --target cpu -q", EAGER_CELL)
    with pytest.raises(UsageError, match=r"--out-idx: an eager @jit function's outputs are the tensors it declares"):
        tilekernel(ip, "scale --shapes N=64 --out-idx 0 --target cpu -q", EAGER_CELL)


def test_magic_sizes_a_symbolic_kernels_inputs_from_shapes_for_the_check_and_the_timing(ip, cache_dir):
    wk = tilekernel(ip, "addv --shapes n=300,block=32 --ref 'A + B' --target cpu -q", SYMBOLIC_CELL)
    assert wk.passed is True and wk.sizes == {"n": 300} and wk.config["block"] == 32
    assert wk.timing is not None and wk.timing.bytes == 3 * 300 * 4  # A, B, C at n = 300
    a, b = torch.randn(77), torch.randn(77)  # one kernel for every n
    torch.testing.assert_close(wk(a, b), a + b, rtol=0, atol=0)


def test_magic_eager_function_with_a_dynamic_size(ip, cache_dir):
    wk = tilekernel(ip, "addv2 --shapes n=130 --ref 'A + B' --target cpu --no-bench -q", EAGER_DYNAMIC_CELL)
    assert wk.passed is True and wk.out_idx == [2]


def test_magic_symbolic_size_without_a_value_or_an_unknown_name_is_a_usage_error(ip, cache_dir):
    with pytest.raises(UsageError, match=r"the kernel has the symbolic size\(s\) n: give a value for each"):
        tilekernel(ip, "addv --ref 'A + B' --target cpu -q", SYMBOLIC_CELL)
    with pytest.raises(UsageError, match=r"has no parameter\(s\) m; the kernel's symbolic sizes are n"):
        tilekernel(ip, "addv --shapes m=3 --ref 'A + B' --target cpu -q", SYMBOLIC_CELL)
    # nothing to draw inputs for: compiling alone needs no value
    wk = tilekernel(ip, "addv --target cpu --no-bench -q", SYMBOLIC_CELL)
    assert wk.check is None and wk.timing is None


# -- the autotuner -------------------------------------------------------------------------------------------------

@tilelang.jit
def scale_eager(X, alpha=2.0, block=64):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] * alpha
    return Y


@tilelang.jit(out_idx=[-1])
def add_symbolic(block=64):
    n = T.symbolic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block)) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


def test_tune_compiles_an_eager_function_with_its_T_const_size(cache_dir):
    result = tune(scale_eager, {"block": [32, 64]}, args=dict(N=256, alpha=-3.0), ref=lambda X: X * -3.0, **FAST)
    assert [m.status for m in result.measurements] == ["ok", "ok"], result.table()
    assert all(m.config["N"] == 256 and m.shapes[0] == [256] for m in result.measurements)
    x = torch.randn(256)
    torch.testing.assert_close(result.best_kernel(x), x * -3.0, rtol=0, atol=0)


def test_autotune_decorator_on_an_eager_function_called_with_tensors_returns_its_outputs(cache_dir):
    tuned = tilelang.autotune(configs={"block": [32, 64]}, ref=lambda X: X * 2.0, **FAST)(scale_eager)
    x = torch.randn(320)
    torch.testing.assert_close(tuned(x), x * 2.0, rtol=0, atol=0)
    assert tuned.result is not None and {m.config["N"] for m in tuned.result.measurements} == {320}
    y = torch.randn(320)
    torch.testing.assert_close(tuned(y), y * 2.0, rtol=0, atol=0)  # same problem: no second sweep
    assert len(tuned.results) == 1


def test_tune_a_symbolic_kernel_on_given_inputs_and_refuse_to_guess_them(cache_dir):
    a, b = torch.randn(300), torch.randn(300)
    result = tune(add_symbolic, {"block": [32, 64]}, ref=lambda A, B: A + B, inputs=[a, b], **FAST)
    assert [m.status for m in result.measurements] == ["ok", "ok"], result.table()
    assert all(m.bytes == 3 * 300 * 4 and m.shapes == [[300]] * 3 for m in result.measurements)
    with pytest.raises(ValueError, match=r"symbolic size\(s\) n, so its inputs cannot be drawn; pass the tensors"):
        tune(add_symbolic, {"block": [32, 64]}, ref=lambda A, B: A + B, **FAST)


def test_profiler_draws_inputs_for_symbolic_sizes_it_is_given(cache_dir):
    prof = add_symbolic(64).get_profiler()
    a, b = prof.inputs(dynamic_symbolic_constraints={"n": 70})
    assert a.shape == (70,) and b.shape == (70,) and not torch.equal(a, b)
    assert float(prof.do_bench(dynamic_symbolic_constraints={"n": 70}, n_warmup=1, n_repeat=2)) > 0
    with pytest.raises(ValueError, match=r"dynamic_symbolic_constraints: expected size name -> int >= 0"):
        prof.inputs(dynamic_symbolic_constraints={"n": -1})
