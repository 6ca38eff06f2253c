"""The sweep's progress bar: tqdm's terminal bar in a terminal, its widget in a notebook, nothing when disabled.

Why this module exists: a sweep takes minutes and must say how far it is, in whatever front end runs it.
``tqdm.auto`` picks the right bar for the environment; this module only adds the "disabled" case with the same
interface, so the tuner never branches on it.
"""

from __future__ import annotations

from typing import Any


class _NoBar:
    """tqdm's interface, doing nothing."""

    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_description(self, desc: str, refresh: bool = True) -> None:
        return None

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        return None

    def reset(self, total: int | None = None) -> None:
        self.n = 0

    def close(self) -> None:
        return None


def progress_bar(total: int, desc: str, enable: bool = True) -> Any:
    """A tqdm bar (``tqdm.auto``: terminal or notebook widget), or a silent stand-in when ``enable`` is False."""
    if not enable:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="config", leave=True, dynamic_ncols=True)


__all__ = ["progress_bar"]
