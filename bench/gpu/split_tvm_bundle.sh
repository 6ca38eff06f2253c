#!/usr/bin/env bash
# Split .gpu/tvm_site.tar.xz (made by ../shared/tools/tvm-gpu-bundle.sh, ~62 MiB) into .gpu1/ and .gpu2/ (~32 MiB
# each): with the repository's own files the whole bundle no longer fits in one device call (64 MiB), so it
# travels in two calls while the machine stays warm (30 s):
#   call 1, carry [".gpu1"]: mkdir -p /tmp/tvmparts && cp .gpu1/tvmpart.aa /tmp/tvmparts/
#   call 2, carry [".gpu2"]: cat /tmp/tvmparts/tvmpart.aa .gpu2/tvmpart.ab | tar -xJ -C /tmp/site  (mkdir first)
# then bench/gpu/test_suite.sh finds TVM in /tmp/site. Both folders are git-ignored (.git/info/exclude).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -f .gpu/tvm_site.tar.xz ] || { echo "missing .gpu/tvm_site.tar.xz: bash ../shared/tools/tvm-gpu-bundle.sh .gpu" >&2; exit 2; }
rm -rf .gpu1 .gpu2 && mkdir -p .gpu1 .gpu2
half=$(( ($(stat -c %s .gpu/tvm_site.tar.xz) + 1) / 2 ))
split -b "$half" .gpu/tvm_site.tar.xz /tmp/tvmpart.
mv /tmp/tvmpart.aa .gpu1/ && mv /tmp/tvmpart.ab .gpu2/
for d in .gpu1 .gpu2; do grep -qx "$d/" .git/info/exclude 2>/dev/null || echo "$d/" >> .git/info/exclude; done
ls -l .gpu1 .gpu2
