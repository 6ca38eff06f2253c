"""The names the tile language offers, and "did you mean" suggestions for a misspelt one.

Why this module exists: ``T.alloc_fragmnt`` or ``T.reduce_summ`` should not end in a bare "no attribute" error: the
user wants the name they meant. The vocabulary is the language's own names (``T.copy``, ``T.gemm`` ...), its dtype
names (``T.float16`` ...) and TVMScript's TIR names that ``T`` falls through to; our own names are offered first.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def _tvmscript_names() -> list[str]:
    from tvm.script import tirx

    return [n for n in dir(tirx) if not n.startswith("_")]


def suggestions(name: str, own: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` close spellings of ``name``: the language's names (``own``) first, then dtypes and TVMScript's."""
    from .dtypes import DTYPES

    own = list(own)
    found = difflib.get_close_matches(name, own, n=n, cutoff=0.7)
    if len(found) < n:
        rest = sorted(set(DTYPES) | set(_tvmscript_names()) - set(own))
        found += [m for m in difflib.get_close_matches(name, rest, n=n, cutoff=0.75) if m not in found]
    if not found:  # a case slip (T.Copy) or a missing underscore (T.allocshared) is far in edit distance
        folded = {o.lower().replace("_", ""): o for o in own}
        hit = folded.get(name.lower().replace("_", ""))
        found = [hit] if hit else []
    return found[:n]


def did_you_mean(name: str, own: Iterable[str]) -> str:
    """``"; did you mean T.copy?"`` (or ``""`` when nothing is close)."""
    found = suggestions(name, own)
    if not found:
        return ""
    return "; did you mean " + " or ".join(f"T.{f}" for f in found) + "?"


__all__ = ["suggestions", "did_you_mean"]
