"""Long loops: progress bars (tqdm's where it is installed, else one line every few seconds)
and time limits (:func:`time_up`, and the status of a row a time limit left unmeasured).

Every long loop of the workbook reports through :func:`progress`, so that the recording
commands also run on a bare GPU server without tqdm.
"""

from __future__ import annotations

import sys
import time

try:
    from tqdm.auto import tqdm as _tqdm
except ImportError:  # tqdm is optional
    _tqdm = None

__all__ = ["progress", "time_limit_status", "time_up"]


class _Lines:
    """The fallback bar: ``desc: n/total`` on stderr at most every ``every_s`` seconds."""

    def __init__(self, iterable=None, total=None, desc="", disable=False, every_s=5.0, **_):
        self.iterable, self.desc, self.disable, self.every_s = iterable, desc, disable, every_s
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total, self.n, self.postfix = total, 0, ""
        self._start = self._shown = time.monotonic()

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update()
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _show(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.disable or (not force and now - self._shown < self.every_s):
            return
        self._shown = now
        of = f"/{self.total}" if self.total else ""
        tail = f" ({self.postfix})" if self.postfix else ""
        print(f"{self.desc}: {self.n}{of} in {now - self._start:.0f} s{tail}", file=sys.stderr,
              flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        self._show()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        self._show(force=True)
        self.disable = True


def progress(iterable=None, *, total: int | None = None, desc: str = "",
             disable: bool = False, **kw):
    """A progress bar over ``iterable`` (or updated by hand): tqdm's if installed, else
    :class:`_Lines`. Both have ``update(n)``, ``set_postfix_str(text)`` and ``close()``.
    Other keywords (``unit``, ``leave``) go to tqdm."""
    if _tqdm is not None:
        return _tqdm(iterable, total=total, desc=desc, disable=disable, **kw)
    return _Lines(iterable, total=total, desc=desc, disable=disable)


def time_up(deadline: float | None) -> bool:
    """Whether ``deadline`` (a :func:`time.monotonic` value, or None for none) has passed."""
    return deadline is not None and time.monotonic() >= deadline


def time_limit_status(time_limit: float | None) -> str:
    """The ``status`` of a row not measured because the command's ``--time-limit`` (seconds)
    was reached: ``"skipped: time limit of 60 s reached"``."""
    limit = "" if time_limit is None else f" of {time_limit:g} s"
    return f"skipped: time limit{limit} reached"
