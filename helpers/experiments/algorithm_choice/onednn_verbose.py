"""oneDNN's verbose mode, read: which implementation torch's CPU convolution ran.

:func:`capture_fd` captures what oneDNN prints on file descriptor 1 (C's stdout, not Python's),
:func:`parse_onednn` reads its ``exec`` lines (every format version) and :func:`family_of_onednn`
maps an implementation name (``jit:avx2``, ``gemm:jit``, ``jit_wino_4x3``...) to an algorithm
family. Used by :mod:`helpers.experiments.algorithm_choice`, which re-exports all three.

Source: oneDNN's documentation of its verbose mode (``ONEDNN_VERBOSE``) and the implementation
names in its ``src/cpu``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import types
from collections.abc import Iterator

__all__ = ["capture_fd", "family_of_onednn", "parse_onednn"]


def family_of_onednn(impl: str) -> str:
    """The algorithm family of a oneDNN convolution implementation, by the names oneDNN gives
    them (``JIT_IMPL_NAME_HELPER`` in its ``src/cpu``) and prints in verbose mode: ``jit:avx2``,
    ``jit_1x1:avx2``, ``jit_dw:avx2`` (seen here), ``brg_conv_fwd:avx512_core``, ``brgconv_bwd_w``
    (BRGEMM micro-kernels in the direct loop nest) and ``ref:any`` are ``direct``; ``gemm:jit``,
    ``gemm:blas``, ``indirect_gemm:acl`` are ``gemm`` (im2col + GEMM); ``jit_wino_4x3:...``,
    ``wino:acl`` are ``winograd``; anything else is ``other``. Raises ValueError if ``impl``
    is not a str."""
    if not isinstance(impl, str):
        raise ValueError(f"impl must be a str, got {impl!r}")
    s = impl.strip().lower()
    if "wino" in s:
        return "winograd"
    if "gemm" in s and not s.startswith("brg"):
        return "gemm"
    return "direct" if s.startswith(("jit", "ref", "brg")) else "other"


_PROP_PASS = {"forward_training": "forward", "forward_inference": "forward",
              "backward_data": "backward-data", "backward_weights": "backward-filter"}


def parse_onednn(text: str) -> list[dict]:
    """The primitives executed, from oneDNN (DNNL, MKL-DNN) verbose output: the ``exec`` lines
    of every format version, ``onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,
    forward_training,...,alg:convolution_direct,mb1_ic3oc96_...,14.239`` (oneDNN 3),
    ``dnnl_verbose,exec,cpu,...`` and ``mkldnn_verbose,exec,convolution,...`` (no engine).

    Returns:
        One dict per line, in order: ``primitive`` (``convolution``, ``reorder``...), ``impl``,
        ``prop_kind``, ``pass`` (``forward``, ``backward-data``, ``backward-filter``, or the
        prop_kind), ``alg``
        (``convolution_direct``... or ""), ``problem``, ``ms`` (oneDNN's time, or None).
    """
    calls = []
    for line in text.splitlines():
        parts = line.strip().split(",")
        if not parts[0].endswith("_verbose") or "exec" not in parts:
            continue
        rest = parts[parts.index("exec") + 1:]
        rest = rest[1:] if rest and rest[0] in ("cpu", "gpu") else rest
        if len(rest) < 3:
            continue
        try:
            ms = float(rest[-1])
        except ValueError:
            ms = None
        calls.append({"primitive": rest[0], "impl": rest[1], "prop_kind": rest[2],
                      "pass": _PROP_PASS.get(rest[2], rest[2]),
                      "alg": next((p[4:] for p in rest if p.startswith("alg:")), ""),
                      "problem": rest[-2] if ms is not None else rest[-1], "ms": ms})
    return calls


def _flush() -> None:
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library (Windows)
        ctypes.CDLL(None).fflush(None)  # the C library's buffered stdout (oneDNN uses printf)


@contextlib.contextmanager
def capture_fd(fd: int = 1) -> Iterator[types.SimpleNamespace]:
    """Capture what is written to file descriptor ``fd`` (1: the C-level stdout, where oneDNN
    prints) inside the block: ``with capture_fd() as cap: ...`` then ``cap.text`` (str). The
    descriptor points at a temporary file until the block ends, also when it raises.

    Raises:
        ValueError: ``fd`` is not an open descriptor (before anything is redirected).
    """
    try:
        saved = os.dup(fd)
    except (OSError, TypeError) as exc:
        raise ValueError(f"fd must be an open file descriptor, got {fd!r}") from exc
    cap = types.SimpleNamespace(text="")
    _flush()
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield cap
        finally:
            _flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            cap.text = tmp.read().decode(errors="replace")
