"""Checks of the explorers' arguments, run before any widget is built or anything measured.

Each returns the value (as a plain Python int, float, bool or str) or raises TypeError (wrong
type: bool is not a number here, a float is not an integer) or ValueError (out of range), with
a message that names the parameter and its valid values. Bad values are shown shortened
(:func:`shown`), so that a huge list or string costs no memory to report.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable

import numpy as np

__all__ = ["choice", "flag", "names", "optional_flag", "seconds", "shown", "whole"]

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6

_INTEGERS = (int, np.integer)
_NUMBERS = (int, float, np.integer, np.floating)


def shown(value: object) -> str:
    """A short repr of ``value`` for an error message (at most about 60 characters)."""
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001  (a repr that fails still gets a message)
        return f"a {type(value).__name__}"


def whole(name: str, value: object, lo: int, hi: int, note: str = "") -> int:
    """``value`` as an int in ``lo..hi``. TypeError: not an integer (bool, float, str, None...);
    ValueError: outside the range. ``note`` (e.g. what the symbol means) goes in the message."""
    what = f" ({note})" if note else ""
    text = f"{name}{what} must be an integer between {lo:,} and {hi:,}, got {shown(value)}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _INTEGERS):
        raise TypeError(text)
    if not lo <= value <= hi:
        raise ValueError(text)
    return int(value)


def seconds(name: str, value: object, hi: float) -> float:
    """``value`` as a float number of seconds, > 0 and <= ``hi``. TypeError: not a real
    number; ValueError: zero, negative, NaN, infinite or above ``hi``."""
    text = f"{name} must be a number of seconds > 0 and <= {hi:g}, got {shown(value)}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _NUMBERS):
        raise TypeError(text)
    if not (value > 0 and value <= hi):  # also False for NaN; no float() of a huge int first
        raise ValueError(text)
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(text)
    return out


def flag(name: str, value: object) -> bool:
    """``value`` as a bool; TypeError for anything but True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def optional_flag(name: str, value: object) -> bool | None:
    """``value`` as a bool, or None; TypeError otherwise."""
    if value is None:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True, False or None, got {shown(value)}")
    return bool(value)


def choice(name: str, value: object, options: Iterable[str]) -> str:
    """``value``, one of ``options`` (strings). TypeError: not a str; ValueError: not one of
    them."""
    options = list(options)
    text = f"{name} must be one of {options}, got {shown(value)}"
    if not isinstance(value, str):
        raise TypeError(text)
    if value not in options:
        raise ValueError(text)
    return value


def names(name: str, value: object, options: Iterable[str]) -> list[str]:
    """A new list of the names in ``value`` (a list or tuple of strings, each one of
    ``options``); ``value`` itself is not changed. TypeError: not a list or tuple of
    strings; ValueError: a name not in ``options``."""
    options = list(options)
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of names from {options}, got {shown(value)}")
    out = []
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{name} must be a list of names from {options}, got an item "
                            f"{shown(item)}")
        if item not in options:
            raise ValueError(f"unknown {name} {shown(item)}; choose from {options}")
        out.append(item)
    return out
