"""A measurement carries its CUDA kernel's resources (registers, spills, shared memory, occupancy) into the tuning
database, and a database made before the field existed gains it. CUDA kernels compile here without a GPU."""

from __future__ import annotations

import sqlite3

import pytest

import tilelang_core as tl
import tilelang_core.language as T
from tilelang_core.autotune import Measurement, TuningDB
from tilelang_core.autotune import db as dbmod
from tilelang_core.autotune.measure import describe_problem
from tilelang_core.backend.cuda import find_nvcc
from tilelang_core.backend.cuda.nvcc import nvrtc_available


def scale(M, N, block_M=32, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
            A_s = T.alloc_shared((block_M, N), dtype)
            T.copy(A[bx * block_M, 0], A_s)
            for i, j in T.Parallel(block_M, N):
                B[bx * block_M + i, j] = A_s[i, j] * 2
    return main


@pytest.mark.skipif(find_nvcc() is None and not nvrtc_available(), reason="no nvcc or NVRTC here")
def test_a_cuda_measurement_stores_its_resources_and_reads_them_back(tmp_path):
    k = tl.compile(scale(256, 64, block_M=64), target="cuda")
    m = Measurement(kernel="scale", config={"M": 256, "N": 64, "block_M": 64})
    describe_problem(m, k)
    r = k.resources()
    assert m.resources["registers"] == r.registers > 0
    assert m.resources["dynamic_smem"] + m.resources["static_smem"] == r.smem >= 64 * 64 * 2
    assert m.resources["blocks_per_sm"] == r.occupancy.blocks_per_sm
    db = TuningDB(tmp_path / "t.sqlite3")
    db.record(m)
    (back,) = db.query("scale", device=None)
    assert back.resources == m.resources


def test_a_cpu_measurement_has_no_resources(tmp_path):
    k = tl.compile(scale(64, 32, dtype="float32"), target="cpu")
    m = Measurement(kernel="scale_cpu", config={})
    describe_problem(m, k)
    assert m.resources == {}
    db = TuningDB(tmp_path / "t.sqlite3")
    db.record(m)
    assert db.query("scale_cpu", device=None)[0].resources == {}


def test_a_database_without_the_resources_column_gains_it(tmp_path):
    path = tmp_path / "old.sqlite3"
    old_schema = dbmod._SCHEMA.replace(", resources TEXT", "")
    assert old_schema != dbmod._SCHEMA
    conn = sqlite3.connect(path)
    conn.executescript(old_schema)
    conn.close()
    db = TuningDB(path)
    m = Measurement(kernel="k", config={"block_M": 64}, resources={"registers": 40, "spill_stores": 8})
    db.record(m)
    assert db.query("k", device=None)[0].resources == {"registers": 40, "spill_stores": 8}
