#!/usr/bin/env bash
# The owed H200 measurements of docs/gpu_owed.md in one device call (about 6-7 minutes), each step with its own
# time limit so one slow step cannot eat the others; every step's output goes to $OUT/<step>.txt (the device tool
# brings $OUT back) and its last lines to stdout.
#
#   cd snap && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 && bash bench/gpu/owed_run.sh
#
# Steps: the GPU suite; gemm_shapes.py fp16 twice (its first row per shape is the shipped default: the 8192³
# variance of item 2); decode_gemm.py's 16-row tiles without split (item 1); dequant_variants.py --space at the decode
# shape for the example, fp4 and int8 (the tuning space's new tiles, item 4); decode_gemm.py --tma-mma (item 1:
# tl.cuda.tma_mma_tiles, built 2026-12-03 without a GPU). STEPS="suite shapes" picks some.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/owed}"
mkdir -p "$OUT"
STEPS="${STEPS:-suite shapes decode tma space}"

step() {  # name, time limit (s), command...
    local name="$1" limit="$2"
    shift 2
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    echo "== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    echo "   exit $? ; last lines:"
    tail -n 6 "$OUT/$name.txt" | sed 's/^/   /'
}

step suite 240 bash bench/gpu/test_suite.sh -n 14 --timeout 90 -q -rf --tb=short
step shapes 150 bash -c "python bench/gpu/gemm_shapes.py --dtypes float16 && python bench/gpu/gemm_shapes.py --dtypes float16"
step decode 90 python bench/gpu/decode_gemm.py --mma-only --splits 0 --dtypes float16 bfloat16
step tma 120 python bench/gpu/decode_gemm.py --tma-mma --splits 0 --dtypes float16 --no-triton
step space 150 python bench/gpu/dequant_variants.py --shapes 16x8192x8192 --space --only example_bk256 fp4_e2m1_g32 int8
