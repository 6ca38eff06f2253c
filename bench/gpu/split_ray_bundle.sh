#!/usr/bin/env bash
# Pack Ray for the GPU host (Python 3.12, no internet, no Ray) into three parts of ~28 MB in .gpu3/, .gpu4/, .gpu5/
# (git-ignored), so that it travels in three device calls while the machine stays warm — each small enough to ride
# along with one of TVM's two parts (bench/gpu/split_tvm_bundle.sh: ~31 MB each; a call carries 64 MiB in all):
#
#   call 1, carry [".gpu1", ".gpu3"]: mkdir -p /tmp/rayparts && cp .gpu3/raypart.* /tmp/rayparts/   (+ TVM's part 1)
#   call 2, carry [".gpu2", ".gpu4"]: cp .gpu4/raypart.* /tmp/rayparts/                             (+ TVM's part 2)
#   call 3, carry [".gpu5"]:          cp .gpu5/raypart.* /tmp/rayparts/ && python3 bench/gpu/ray_sweep.py
#
# bench/gpu/ray_sweep.py joins the parts and installs the wheels into /tmp/raysite itself when Ray does not import.
# What is packed: the ray wheel of the version in this checkout's venv (cp312, manylinux2014 x86_64, ~79 MB) and
# the wheels of its required dependencies (click, jsonschema + attrs/referencing/rpds-py/jsonschema-specifications,
# msgpack, packaging, protobuf, pyyaml, requests + certifi/charset-normalizer/idna/urllib3; ~3 MB), minus filelock
# and typing-extensions, which torch brings on the host. Needs pip and the network here (not on the GPU host).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=.venv/bin/python
version=$("$py" -c "import importlib.metadata as m; print(m.version('ray'))")
whl=.gpu/ray_wheels
mkdir -p "$whl"
fetch=(--python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
       --platform manylinux_2_28_x86_64 -d "$whl")
"$py" -m pip download -q "ray==$version" --no-deps "${fetch[@]}"
"$py" -m pip download -q "click>=7.0" jsonschema "msgpack>=1.0.0,<2.0.0" "packaging>=24.2" "protobuf>=3.20.3" \
    pyyaml requests "${fetch[@]}"
rm -f "$whl"/filelock-*.whl "$whl"/typing_extensions-*.whl
ls -l "$whl"
tar -cf /tmp/ray_bundle.tar -C "$whl" .
size=$(stat -c %s /tmp/ray_bundle.tar)
part=$(( (size + 2) / 3 ))
rm -f /tmp/raypart.* && split -b "$part" -a 1 /tmp/ray_bundle.tar /tmp/raypart.
rm -rf .gpu3 .gpu4 .gpu5 && mkdir -p .gpu3 .gpu4 .gpu5
mv /tmp/raypart.a .gpu3/ && mv /tmp/raypart.b .gpu4/ && mv /tmp/raypart.c .gpu5/
rm -f /tmp/ray_bundle.tar
for d in .gpu3 .gpu4 .gpu5; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
echo "ray $version: $size bytes in 3 parts of <= $part bytes"
ls -l .gpu3 .gpu4 .gpu5
