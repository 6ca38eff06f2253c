"""``tilelang_core.tvm`` is Apache TVM itself (TileLang's ``tilelang.tvm`` is its bundled TVM): ``from
tilelang_core import tvm`` or ``import tilelang_core.tvm`` give the ``tvm`` package this compiler runs on."""

import sys

import tvm as _tvm

sys.modules[__name__] = _tvm
