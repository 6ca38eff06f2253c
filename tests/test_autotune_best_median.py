"""``best()`` answers with the median it ranked the winner by (not the newest run's latency), per kernel source."""

from __future__ import annotations

import statistics

from tilelang_core.autotune import Measurement, TuningDB, best


def _row(latency: float, block: int, source_hash: str, stamp: float) -> Measurement:
    return Measurement(kernel="matmul_relu", config={"M": 64, "block_M": block}, latency_ms=latency, passed=True,
                       source_hash=source_hash, shapes=[[64, 64]], dtypes=["float32"], target="cpu",
                       device="dev A", flops=2 * 64**3, timestamp=stamp)


def test_best_shows_the_median_it_ranked_by_for_one_source(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite3")
    for i, ms in enumerate((2.0, 2.1, 9.0)):  # block 32: median 2.1; its newest run is slow (9.0)
        db.record(_row(ms, 32, "aaaa", 100.0 + i))
    for i, ms in enumerate((3.0, 3.2)):  # block 64: median 3.1
        db.record(_row(ms, 64, "aaaa", 200.0 + i))
    db.record(_row(0.5, 128, "bbbb", 300.0))  # another factory of the same name
    got = best("matmul_relu", {"M": 64}, "cpu", device="dev A", db=db, source_hash="aaaa")
    assert got.config["block_M"] == 32 and got.latency_ms == 9.0  # the newest run of the winner ...
    assert got.ranked_ms == statistics.median([2.0, 2.1, 9.0]) and got.ranked_runs == 3  # ... and its median
    text = got.describe()
    assert "median 2.1000 ms of 3 measurement(s)" in text and "9.0000" not in text, text
    assert all(m.ranked_ms is None for m in db.query(source_hash="aaaa", device="dev A"))  # rows stay plain
