#!/usr/bin/env bash
# The GPU test suite, run in-process on the GPU host: every kernel compiled through @jit(target="cuda") here.
#
#   bash bench/gpu/test_suite.sh                         # tests/gpu + the GPU tests of the CUDA modules
#   bash bench/gpu/test_suite.sh -k "w4a16 or flash"     # arguments go to pytest
#   bash bench/gpu/test_suite.sh --sanitizer racecheck -k flash   # under compute-sanitizer (memcheck, racecheck,
#                                                                 # synccheck, initcheck); slow: pick kernels
#
# TVM: used from the environment if it imports, else unpacked from .gpu/tvm_site.tar.xz (made by
# ../shared/tools/tvm-gpu-bundle.sh) into /tmp/site. The kernel cache starts empty (a fresh TILELANG_CORE_CACHE_DIR)
# so every kernel is compiled, unless TILELANG_CORE_CACHE_DIR is set. Prints "N passed, N failed, N skipped" last;
# the exit status is pytest's. With $OUT set (the device tool), the log and a JUnit report are written there.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

sanitizer=""
if [ "${1:-}" = "--sanitizer" ]; then
    sanitizer="${2:?--sanitizer needs a tool: memcheck, racecheck, synccheck or initcheck}"
    shift 2
fi

if ! python3 -c "import tvm" >/dev/null 2>&1; then
    if [ ! -d /tmp/site/tvm ]; then
        [ -f .gpu/tvm_site.tar.xz ] || { echo "[gpu-suite] TVM does not import and .gpu/tvm_site.tar.xz is missing" >&2; exit 2; }
        echo "[gpu-suite] unpacking TVM into /tmp/site"
        mkdir -p /tmp/site && tar -xJf .gpu/tvm_site.tar.xz -C /tmp/site
    fi
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ -z "${TILELANG_CORE_CACHE_DIR:-}" ]; then
    TILELANG_CORE_CACHE_DIR="$(mktemp -d /tmp/tilelang_core_gpu_cache.XXXXXX)"
    export TILELANG_CORE_CACHE_DIR
fi
report="${OUT:-/tmp}/gpu-suite-junit.xml"
log="${OUT:-/tmp}/gpu-suite.log"

# a hung kernel (a producer waiting on a barrier nobody arrives at) stops its test after 120 s, with the test named,
# instead of the whole call (2026-12-02: one hang cost a 600 s device call); pytest-timeout is on the GPU host
watchdog=()
if python3 -c "import pytest_timeout" >/dev/null 2>&1; then
    watchdog=(--timeout "${GPU_TEST_TIMEOUT:-120}" --timeout-method=thread)
fi
cmd=(python3 -m pytest -q -p no:cacheprovider -o addopts="" --junitxml="$report" "${watchdog[@]}" tests/gpu
     tests/test_cuda_gpu.py tests/test_export_cuda.py "$@")
if [ -n "$sanitizer" ]; then
    # host API errors are cuda-bindings probing driver entry points (cuGetProcAddress), not kernel faults
    cmd=(compute-sanitizer --tool "$sanitizer" --target-processes all --report-api-errors no --error-exitcode 99
         "${cmd[@]}")
fi
echo "[gpu-suite] $(python3 -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")') | $(nvcc --version 2>/dev/null | tail -1)"
echo "[gpu-suite] ${cmd[*]}"
"${cmd[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
python3 - "$report" <<'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    print(f"0 passed, 1 failed (no report: {e})")
    raise SystemExit(0)
suites = [root] if root.tag == "testsuite" else list(root)
n = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(f"{n - failed - skipped} passed, {failed} failed, {skipped} skipped")
EOF
exit "$rc"
