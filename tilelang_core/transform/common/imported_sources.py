"""Pass: lift the program's ``T.import_source`` texts into the function attribute ``tl.import_source``.

Why a pass: the text is a statement while the program is built (TVMScript gives a language function no other place
to put it), but it is not code of the kernel body: the CUDA code generator emits it at file scope, after our
headers and before the kernel (backend/cuda/codegen.py), and the CPU has no use for it (the CPU check of
``T.call_extern`` names it in its message). Texts keep their order; a text given twice is kept once.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from .rewriter import tile_op_name

ATTR_IMPORTED = "tl.import_source"  # list of str: the user's device code, in program order


def imported_sources(func: Any) -> list[str]:
    """The texts ``func`` imports (after this pass), in order."""
    attrs = getattr(func, "attrs", None)
    if attrs is None or ATTR_IMPORTED not in attrs:
        return []
    return [str(x) for x in attrs[ATTR_IMPORTED]]


def collect_imported_sources(func: tirx.PrimFunc) -> tirx.PrimFunc:
    texts: list[str] = []

    def ev(s: Any) -> Any:
        if tile_op_name(s) != "tl.import_source":
            return s
        texts.append(str(s.value.args[0].value))
        return tirx.Evaluate(tirx.IntImm("int32", 0), span=s.span)

    body = tvm_ffi.structural_map(func.body, [(tirx.Evaluate, ev)])
    if not texts:
        return func
    merged = list(dict.fromkeys([*imported_sources(func), *texts]))
    return func.with_body(body).with_attr(ATTR_IMPORTED, merged)
