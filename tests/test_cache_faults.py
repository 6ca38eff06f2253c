"""The disk kernel cache under faults: many processes filling it at once, damaged entries (every file an entry
holds), an entry replaced by a file or a link, a damaged runtime shim object, a compile killed mid-way, cache
folders that cannot be used (a file, read-only, another user's, missing), a missing C compiler, the disk cache
turned off, and the cache folder deleted under a live kernel. Every case ends in a correct kernel (or a clear
error) and a cache that heals, never a raw ``OSError`` or a state that fails every later compile."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
from kernel_cache import entries

import tilelang_core as tilelang
import tilelang_core.language as T
from tilelang_core.jit import cache

REPO = Path(__file__).resolve().parent.parent
ENTRY_FILES = ["kernel.so", "meta.json", "kernel.ll", "kernel.s", "lowered.tir.py", cache.CHECKSUMS]

KERNEL_SOURCE = '''
import tilelang_core.language as T


def scale_kernel(N, alpha):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * alpha

    return main
'''


def scale_kernel(N, alpha):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 64)) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] * alpha

    return main


def check_scale(kernel, n: int, alpha: float) -> None:
    x = torch.randn(n)
    torch.testing.assert_close(kernel(x), x * alpha, rtol=0, atol=0)


def compile_scale(n: int, alpha: float):
    return tilelang.jit(out_idx=[-1])(scale_kernel)(n, alpha)


def stats_delta(before: dict[str, int]) -> dict[str, int]:
    now = tilelang.cache_stats()
    return {k: now[k] - before[k] for k in now if now[k] != before[k]}


def cache_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, cache.CacheWarning)]


def leftovers(cache_root: Path) -> list[str]:
    """Build folders, locks, trash and temporary shim files: none may outlive the compiles that made them."""
    names = [p.name for p in (cache_root / "kernels").iterdir()] if (cache_root / "kernels").is_dir() else []
    names += [p.name for p in cache_root.iterdir()] if cache_root.is_dir() else []
    return sorted(n for n in names if n.startswith((".tmp-", ".trash-", ".cpu_backend_shim")) or n.endswith(".lock"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A cache holding one sound entry (scale_kernel(192, 1.5)) and the runtime shim, built once for the module."""
    root = tmp_path_factory.mktemp("pristine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILELANG_CORE_CACHE_DIR", str(root))
        compile_scale(192, 1.5)
    return root


def seed(cache_dir: Path, pristine: Path) -> Path:
    """Copy the pristine cache into the test's empty one; returns the entry folder."""
    shutil.copytree(pristine, cache_dir)
    (entry,) = entries(cache_dir)
    return entry


# -- many processes ---------------------------------------------------------------------------------------------

FILL_FROM_FORKED_PROCESSES = KERNEL_SOURCE + """
import os, signal, sys
from pathlib import Path
import torch
import tvm  # noqa: F401  (imported once before the fork: the 8 processes then pay only for their compiles)
import tilelang_core as tilelang
from tilelang_core.jit import cache

out = Path(sys.argv[1])
go_read, go_write = os.pipe()
pids = []
for child in range(8):
    pid = os.fork()
    if pid == 0:
        signal.alarm(240)  # a hung child dies (and fails the test) instead of hanging it
        os.close(go_write)
        os.read(go_read, 1)  # released together
        lines = []
        try:
            import warnings

            warnings.simplefilter("error")  # a cache warning here would be a fault
            for n, alpha in ((320, -0.75), (384, 2.5)):
                k = tilelang.jit(out_idx=[-1])(scale_kernel)(n, alpha)
                x = torch.randn(n)
                torch.testing.assert_close(k(x), x * alpha, rtol=0, atol=0)
                lines.append(f"{k.cache_status} {k.artifact.path.name} {cache.compiler_digest()}")
        except BaseException as e:  # noqa: BLE001
            lines.append(f"FAILED {e!r}")
        (out / f"child-{child}.txt").write_text("\\n".join(lines))
        os._exit(0 if not lines[-1].startswith("FAILED") else 1)
    pids.append(pid)
os.close(go_read)
os.write(go_write, b"x" * 8)
codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids]
print(codes)
sys.exit(0 if codes == [0] * 8 else 1)
"""


def test_eight_processes_filling_one_empty_cache_at_once_all_get_correct_kernels(cache_dir, tmp_path):
    """8 processes (forked from one that imported torch and TVM, so the test pays for compiles, not 8 imports)
    compile the same two kernels into one empty cache at the same moment."""
    script = tmp_path / "fill.py"
    script.write_text(FILL_FROM_FORKED_PROCESSES)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                          timeout=600)
    reports = {p.name: p.read_text() for p in sorted(tmp_path.glob("child-*.txt"))}
    assert proc.returncode == 0 and len(reports) == 8, (proc.stdout, proc.stderr[-3000:], reports)
    names, digests = set(), set()
    for child, text in reports.items():
        lines = text.splitlines()
        assert len(lines) == 2, (child, text)
        for line in lines:
            status, name, digest = line.split()
            assert status in ("compiled", "disk"), (child, line)
            names.add(name)
            digests.add(digest)
    # one entry per kernel (per version of the compiler's sources, should the shared tree change meanwhile)
    assert {p.name for p in entries(cache_dir)} == names
    assert len(names) == 2 * len(digests)
    for entry in entries(cache_dir):
        cache.load_entry(entry)  # every entry verifies
    assert len(list(cache_dir.glob("cpu_backend_shim-*.o"))) == 1
    assert leftovers(cache_dir) == []


# -- damaged entries --------------------------------------------------------------------------------------------

def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _garbage(f: Path) -> None:
    f.write_bytes(os.urandom(max(64, f.stat().st_size)))


def _delete(f: Path) -> None:
    f.unlink()


@pytest.mark.parametrize("damage", [_truncate, _garbage, _delete], ids=["truncated", "garbage", "deleted"])
@pytest.mark.parametrize("name", ENTRY_FILES)
def test_a_damaged_entry_file_is_discarded_with_a_warning_and_recompiled(cache_dir, pristine, name, damage):
    entry = seed(cache_dir, pristine)
    damage(entry / name)
    before = tilelang.cache_stats()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        kernel = compile_scale(192, 1.5)
    assert stats_delta(before) == {"corrupt_rebuilt": 1, "compiles": 1}
    assert len(cache_warnings(record)) == 1 and str(entry) in cache_warnings(record)[0]
    check_scale(kernel, 192, 1.5)
    cache.load_entry(entry)  # the rebuilt entry is sound
    assert compile_scale(192, 1.5).cache_status == "disk"


def test_an_edited_meta_json_that_is_still_valid_json_is_detected(cache_dir, pristine):
    """A hand-edited shape would make the kernel check calls against the wrong size (and read past buffers)."""
    entry = seed(cache_dir, pristine)
    meta = json.loads((entry / "meta.json").read_text())
    meta["params"][0]["shape"] = [1 << 20]
    (entry / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    before = tilelang.cache_stats()
    with pytest.warns(cache.CacheWarning, match="meta.json"):
        kernel = compile_scale(192, 1.5)
    assert stats_delta(before) == {"corrupt_rebuilt": 1, "compiles": 1}
    assert kernel.params[0].shape == (192,)
    check_scale(kernel, 192, 1.5)


def _replace_by_file(entry: Path) -> None:
    shutil.rmtree(entry)
    entry.write_text("not a cache entry")


def _replace_by_dangling_link(entry: Path) -> None:
    shutil.rmtree(entry)
    entry.symlink_to(entry.parent / "no-such-folder")


def _replace_by_link_to_a_file(entry: Path) -> None:
    shutil.rmtree(entry)
    (entry.parent / "stray-file").write_text("x")
    entry.symlink_to(entry.parent / "stray-file")


@pytest.mark.parametrize("replace", [_replace_by_file, _replace_by_dangling_link, _replace_by_link_to_a_file])
def test_an_entry_replaced_by_a_file_or_a_link_heals_on_the_next_compile(cache_dir, pristine, replace):
    entry = seed(cache_dir, pristine)
    replace(entry)
    with pytest.warns(cache.CacheWarning, match="broken kernel cache entry"):
        kernel = compile_scale(192, 1.5)
    check_scale(kernel, 192, 1.5)
    assert entry.is_dir() and not entry.is_symlink()
    cache.load_entry(entry)
    assert compile_scale(192, 1.5).cache_status == "disk"


@pytest.mark.parametrize("damage", [_truncate, _garbage], ids=["truncated", "garbage"])
def test_a_damaged_runtime_shim_object_is_rebuilt_instead_of_failing_every_link(cache_dir, pristine, damage):
    seed(cache_dir, pristine)
    (shim,) = cache_dir.glob("cpu_backend_shim-*.o")
    damage(shim)
    with pytest.warns(RuntimeWarning, match="damaged CPU runtime shim"):
        kernel = compile_scale(448, 0.25)  # a new kernel: it must link against the shim
    check_scale(kernel, 448, 0.25)
    (rebuilt,) = cache_dir.glob("cpu_backend_shim-*.o")
    assert rebuilt.read_bytes() != b"" and compile_scale(512, 0.5)(torch.ones(512)).eq(0.5).all()


# -- a compile killed mid-way -----------------------------------------------------------------------------------

HOLD_A_BUILD = '''
import sys
from tilelang_core.jit import cache
build = cache.new_build_dir()
(build.path / "half-written").write_text("x")
print(build.path, flush=True)
sys.stdin.read()  # held until the test is done
'''


def test_a_compile_killed_mid_way_leaves_a_folder_the_next_process_removes_but_live_builds_stay(cache_dir,
                                                                                              tmp_path):
    killer = tmp_path / "cc-that-kills-its-caller"
    killer.write_text("#!/bin/sh\nkill -9 $PPID\nsleep 30\n")
    killer.chmod(0o755)
    script = tmp_path / "killed.py"
    script.write_text(KERNEL_SOURCE + "\nimport tilelang_core as tilelang\n"
                      "tilelang.jit(out_idx=[-1])(scale_kernel)(128, 2.0)\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_BUILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:
        live = Path(holder.stdout.readline().strip())
        env = dict(os.environ, CC=str(killer))
        killed = subprocess.run([sys.executable, str(script)], env=env, cwd=REPO, capture_output=True, timeout=300)
        assert killed.returncode == -9, killed.stderr[-2000:]
        stale = [p for p in (cache_dir / "kernels").iterdir() if p.name.startswith(".tmp-") and p.is_dir()
                 and p != live]
        assert len(stale) == 1 and live.is_dir()
        kernel = compile_scale(128, 2.0)  # this process's first build in the folder sweeps it
        check_scale(kernel, 128, 2.0)
        assert not stale[0].exists(), "the killed compile's folder was not removed"
        assert live.is_dir(), "a live build's folder was removed"
    finally:
        holder.communicate(input="", timeout=60)
    assert len(entries(cache_dir)) == 1


# -- cache folders that cannot be used --------------------------------------------------------------------------

def test_a_cache_dir_that_is_a_file_warns_once_and_compiles_into_a_private_folder(tmp_path, monkeypatch):
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("in the way")
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(blocker))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = compile_scale(128, 3.0)
        second = compile_scale(256, -1.0)
        again = compile_scale(128, 3.0)  # a new factory: found in this process's private cache
    (message,) = cache_warnings(record)
    assert str(blocker) in message and "TILELANG_CORE_CACHE_DIR" in message
    check_scale(first, 128, 3.0)
    check_scale(second, 256, -1.0)
    assert again.cache_status == "disk"
    assert blocker.read_text() == "in the way"
    assert str(cache.private_dir()) in str(first.artifact.path)


def test_a_missing_cache_dir_is_created_with_its_parents(tmp_path, monkeypatch):
    target = tmp_path / "not" / "yet" / "there"
    monkeypatch.setenv("TILELANG_CORE_CACHE_DIR", str(target))
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        check_scale(compile_scale(128, 0.5), 128, 0.5)
    assert len(entries(target)) == 1


UNPRIVILEGED_CHECK = KERNEL_SOURCE + """
import json, os, sys, warnings
import torch
import tilelang_core as tilelang

report = {"uid": os.getuid()}
for folder in sys.argv[1:]:
    os.environ["TILELANG_CORE_CACHE_DIR"] = folder
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        kernels = [(tilelang.jit(out_idx=[-1])(scale_kernel)(n, a), n, a) for n, a in ((128, 2.0), (256, -3.0))]
    for k, n, a in kernels:
        x = torch.randn(n)
        torch.testing.assert_close(k(x), x * a, rtol=0, atol=0)
    report[folder] = [str(w.message) for w in record if w.category.__name__ == "CacheWarning"]
print(json.dumps(report))
"""

NOBODY = 65534


def _run_unprivileged(folders: list[Path], work: Path) -> dict:
    """Run UNPRIVILEGED_CHECK with the cache at each of ``folders`` in turn, in one child process: as user nobody
    (through ``setpriv``) when the tests run as root (for root, permissions do not bite), else as this user."""
    script = work / "check.py"
    script.write_text(UNPRIVILEGED_CHECK)
    env = dict(os.environ, HOME=str(work))
    env.pop("TILELANG_CORE_DISABLE_CACHE", None)
    cmd = [sys.executable, str(script), *map(str, folders)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and no setpriv to drop to an unprivileged user")
        cmd = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def shared_work():
    """A work folder outside pytest's private tmp tree (user nobody must reach it when the tests run as root)."""
    work = Path(tempfile.mkdtemp(prefix="tilelang_core_faults-"))
    work.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(work, NOBODY, NOBODY)
    yield work
    shutil.rmtree(work, ignore_errors=True)


def test_read_only_and_another_users_cache_dirs_warn_once_each_and_kernels_still_compile_and_run(shared_work):
    read_only = shared_work / "readonly-cache"
    read_only.mkdir()
    if os.geteuid() == 0:
        os.chown(read_only, NOBODY, NOBODY)  # nobody's own folder, made read-only
        others = Path(tempfile.mkdtemp(prefix="tilelang_core_root_owned-"))  # root's, mode 0755: not nobody's
        others.chmod(0o755)
    else:
        others = Path("/")  # root's
        if os.access(others, os.W_OK):
            pytest.skip("no folder of another user that this user cannot write")
    read_only.chmod(0o555)
    try:
        result = _run_unprivileged([read_only, others], shared_work)
        for folder in (read_only, others):
            messages = result[str(folder)]
            assert len(messages) == 1 and str(folder) in messages[0], result
            assert not (folder / "kernels").exists()
        assert list(read_only.iterdir()) == []
    finally:
        read_only.chmod(0o755)
        if others != Path("/"):
            shutil.rmtree(others, ignore_errors=True)


# -- no compiler, no disk cache, no cache folder ----------------------------------------------------------------

def test_a_missing_c_compiler_is_a_clear_error_naming_cc(cache_dir, monkeypatch):
    monkeypatch.setenv("CC", "/no/such/dir/gcc-404")
    with pytest.raises(tilelang.TileLangCompileError) as info:
        compile_scale(64, 2.0)
    text = str(info.value)
    assert "/no/such/dir/gcc-404" in text and "$CC" in text and "set CC" in text
    assert leftovers(cache_dir) == [] and entries(cache_dir) == []


@pytest.mark.parametrize("how", ["environment", "without_disk_cache"])
def test_uncached_compiles_write_nothing_to_the_cache_and_leave_no_build_folder(cache_dir, monkeypatch, how):
    builds = cache.private_dir() / "builds"
    before = set(builds.iterdir()) if builds.is_dir() else set()
    if how == "environment":
        monkeypatch.setenv("TILELANG_CORE_DISABLE_CACHE", "1")
        kernel = compile_scale(576, 1.25)
    else:
        with tilelang.without_disk_cache():
            kernel = compile_scale(576, 1.25)
    assert kernel.cache_status == "compiled"
    check_scale(kernel, 576, 1.25)
    assert not cache_dir.exists(), "an uncached compile wrote into the cache folder (the runtime shim?)"
    assert set(builds.iterdir()) - before, "the live kernel's library folder is gone"
    del kernel
    gc.collect()
    assert set(builds.iterdir()) == before, "the build folder outlived its kernel"


def test_kernel_sources_stay_readable_after_the_cache_folder_is_deleted(cache_dir):
    kernel = compile_scale(640, 0.5)
    expected = {kind: kernel.get_kernel_source(kind) for kind in ("llvm", "asm", "tir")}
    shutil.rmtree(cache_dir)
    for kind, text in expected.items():
        assert kernel.get_kernel_source(kind) == text and text
    assert kernel.sources["llvm"].text == expected["llvm"]
    check_scale(kernel, 640, 0.5)  # the loaded library keeps working too
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        check_scale(compile_scale(704, 0.5), 704, 0.5)  # and the next compile makes the folder again
    assert len(entries(cache_dir)) == 1
