"""The shape of one convolution, validated: the arithmetic every strategy shares.

Symbols as in the cuDNN paper: input ``x: (N, C, H, W)``, filters ``w: (K, C/G, R, S)`` for
``G`` groups, output ``y: (N, K, P, Q)`` with ``P = (H + 2*pad_h - dil_h*(R - 1) - 1) // stride_h
+ 1`` (likewise Q). Cross-correlation, as torch computes it: for filter k of group
``g = k // (K/G)``, ``y[n, k, p, q] = sum_{c, r, s} x_padded[n, g*C/G + c, p*stride_h + r*dil_h,
q*stride_w + s*dil_w] * w[k, c, r, s]``.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
import torch

__all__ = ["ConvConfig", "pair", "same_padding", "MAX_STRIDE_OR_PADDING"]


#: The largest stride or padding accepted: 2**31 - 1, the range of the 32-bit index
#: arithmetic in cuDNN and in the workbook's CUDA kernels.
MAX_STRIDE_OR_PADDING = 2**31 - 1


def _array_or_tensor(value) -> bool:
    """Whether ``value`` is a NumPy array or a torch tensor. Python numbers, tuples and lists
    are answered without reading ``torch.Tensor``: the compiler's process imports this module
    (through the kernels' modules) with torch deferred until first used
    (:mod:`helpers.deferred_import`), and these checks run at import for the example launches."""
    if isinstance(value, (int, float, tuple, list, np.generic, np.ndarray)):
        return isinstance(value, np.ndarray)
    return isinstance(value, torch.Tensor)


def _integer(value, name: str, what: str) -> int:
    """``value`` as an int if it is an integer (Python, NumPy or a 0-d integer array/tensor),
    else a ValueError naming ``name``; a bool or a float with no fractional part is refused."""
    if _array_or_tensor(value):
        if value.ndim != 0:
            raise ValueError(f"{name} must be {what}, got an array of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    return operator.index(value)


def pair(value, name: str, minimum: int, maximum: int = MAX_STRIDE_OR_PADDING) -> tuple[int, int]:
    """An int or an (h, w) pair of ints, each in ``[minimum, maximum]``, as a pair.

    Accepts Python and NumPy integers, a pair as a tuple, a list, a 2-element NumPy array or
    tensor, and 0-d arrays or tensors.

    Raises:
        ValueError: naming ``name`` and the valid range (a non-integer, a bool, a pair of the
            wrong length, a value out of range).
    """
    if _array_or_tensor(value) and value.ndim == 1:
        value = tuple(value.tolist())
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or an (h, w) pair, got {value!r}")
        h, w = value
    else:
        h = w = value
    out = []
    for v in (h, w):
        v = _integer(v, name, f"an integer >= {minimum} or an (h, w) pair of them")
        if v < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
        if v > maximum:
            raise ValueError(f"{name} must be at most {maximum:,} (32-bit index arithmetic), "
                             f"got {value!r}")
        out.append(v)
    return out[0], out[1]


def _shape(shape, name: str, symbols: str) -> tuple[int, int, int, int]:
    if not isinstance(shape, (tuple, list)):   # torch.Size is a tuple
        raise ValueError(f"{name} must be 4-D {symbols}: its shape must be a tuple of 4 "
                         f"integers, got {shape!r} ({type(shape).__name__})")
    if len(shape) != 4:
        raise ValueError(f"{name} must be 4-D {symbols}, got shape {tuple(shape)}")
    return tuple(_integer(v, f"{name}'s shape", "integers") for v in shape)


def same_padding(r: int, s: int, dilation, stride) -> tuple[tuple[int, int], tuple[int, int]]:
    """``padding='same'`` as torch applies it: the symmetric padding (h, w) and the extra row
    and column (0 or 1) added at the bottom and right when the total, ``dil*(R - 1)``, is odd.

    Raises:
        ValueError: a stride other than 1 ('same' keeps the size only at stride 1, and torch
            refuses it too), naming the parameter.
    """
    if pair(stride, "stride", 1) != (1, 1):
        raise ValueError(f"padding='same' needs stride 1 (as in torch), got stride {stride!r}")
    dh, dw = pair(dilation, "dilation", 1)
    th, tw = dh * (r - 1), dw * (s - 1)
    return (th // 2, tw // 2), (th % 2, tw % 2)


@dataclasses.dataclass(frozen=True)
class ConvConfig:
    """One convolution's sizes (all ints): N, C, H, W, K, R, S, strides, paddings, dilations
    and groups (C and K are the totals; each filter sees C/groups channels).

    The workbook's only layer-shape type. Build it with :meth:`from_shapes` (cuDNN symbols) or
    :meth:`from_study` (the study's (b, i, f, k, s)), which validate; ``P`` and ``Q`` are
    derived. ``name`` labels a layer (e.g. ``"Conv1"`` of Table I) and is not compared.
    """

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1
    name: str = dataclasses.field(default="", compare=False)

    @property
    def r_extent(self) -> int:
        """Rows of input one window spans: dil_h*(R - 1) + 1 (R without dilation)."""
        return self.dil_h * (self.r - 1) + 1

    @property
    def s_extent(self) -> int:
        """Columns of input one window spans: dil_w*(S - 1) + 1."""
        return self.dil_w * (self.s - 1) + 1

    @property
    def p(self) -> int:
        """Output height: (H + 2*pad_h - dil_h*(R - 1) - 1) // stride_h + 1."""
        return (self.h + 2 * self.pad_h - self.r_extent) // self.stride_h + 1

    @property
    def q(self) -> int:
        """Output width: (W + 2*pad_w - dil_w*(S - 1) - 1) // stride_w + 1."""
        return (self.w + 2 * self.pad_w - self.s_extent) // self.stride_w + 1

    @property
    def kwargs(self) -> dict:
        """stride, padding, dilation and groups as keyword arguments of
        :func:`helpers.conv.conv2d` (and of ``torch.nn.functional.conv2d``)."""
        return {"stride": (self.stride_h, self.stride_w), "padding": (self.pad_h, self.pad_w),
                "dilation": (self.dil_h, self.dil_w), "groups": self.groups}

    @property
    def dense(self) -> bool:
        """True for one group and no dilation: the study's layers."""
        return self.groups == 1 and self.dil_h == 1 and self.dil_w == 1

    def group(self) -> "ConvConfig":
        """The convolution of one group: C/groups channels, K/groups filters, groups = 1."""
        return dataclasses.replace(self, c=self.c // self.groups, k=self.k // self.groups,
                                   groups=1)

    @property
    def x_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def w_shape(self) -> tuple[int, int, int, int]:
        return (self.k, self.c // self.groups, self.r, self.s)

    @property
    def y_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.k, self.p, self.q)

    @property
    def flops(self) -> int:
        """Forward FLOPs, multiply-adds x 2: 2 * N * K * P * Q * (C/groups) * R * S."""
        return 2 * self.n * self.k * self.p * self.q * (self.c // self.groups) * self.r * self.s

    @property
    def study(self) -> tuple[int, int, int, int, int]:
        """The study's (b, i, f, k, s) = (N, H, K, R, stride_h): batch, input size, filters,
        kernel size, stride (the study's layers are square: H = W, R = S)."""
        return (self.n, self.h, self.k, self.r, self.stride_h)

    def with_batch(self, n: int) -> "ConvConfig":
        """The same layer with batch N = ``n``.

        Raises:
            ValueError: n < 1.
        """
        if isinstance(n, bool) or not hasattr(n, "__index__") or operator.index(n) < 1:
            raise ValueError(f"batch n must be an integer >= 1, got {n!r}")
        return dataclasses.replace(self, n=operator.index(n))

    @classmethod
    def from_study(cls, b: int, i: int, f: int, k: int, s: int, c: int = 1, padding: int = 0,
                   name: str = "") -> "ConvConfig":
        """A square layer in the study's symbols: batch ``b``, input ``i`` x ``i`` with ``c``
        channels, ``f`` filters of ``k`` x ``k``, stride ``s``, zero ``padding``.

        Source: Li et al., ICPP 2016, Section IV-B (the 5-tuple (b, i, f, k, s)) and Table I.

        Raises:
            ValueError: naming the study's symbol: b, i, f, k or c not an integer >= 1, s < 1,
                padding < 0, or the kernel larger than the padded input.
        """
        for symbol, value, what in (("b", b, "batch"), ("i", i, "input size"),
                                    ("f", f, "filters"), ("k", k, "kernel size"),
                                    ("s", s, "stride"), ("c", c, "input channels")):
            if isinstance(value, bool) or not hasattr(value, "__index__") or value < 1:
                raise ValueError(f"{symbol} ({what}) must be an integer >= 1, got {value!r}")
        if isinstance(padding, bool) or not hasattr(padding, "__index__") or padding < 0:
            raise ValueError(f"padding must be an integer >= 0, got {padding!r}")
        if k > i + 2 * padding:
            raise ValueError(f"k = {k} (kernel size) is larger than the padded input "
                             f"i + 2 * padding = {i + 2 * padding}")
        cfg = cls.from_shapes((b, c, i, i), (f, c, k, k), s, padding)
        return dataclasses.replace(cfg, name=name) if name else cfg

    @classmethod
    def from_shapes(cls, x_shape, w_shape, stride=1, padding=0, dilation=1,
                    groups=1) -> "ConvConfig":
        """Validate shapes and hyper-parameters and return the config.

        Args:
            x_shape, w_shape: tuples (or lists, torch.Size) of 4 integers, NCHW and
                (K, C/groups, R, S).
            stride, padding, dilation: as :func:`pair` (stride >= 1, padding >= 0, dilation
                >= 1). ``padding='same'`` or ``'valid'`` are resolved by the caller
                (:func:`same_padding`); here padding is symmetric.
            groups: an integer >= 1 dividing both C and K.

        Raises:
            ValueError: x or w not 4-D or not integers; an empty dimension (batch, channels,
                filters, sizes); groups not dividing C or K; w's channels not C/groups;
                stride < 1; padding < 0; dilation < 1; stride, padding or dilation over
                :data:`MAX_STRIDE_OR_PADDING`; the (dilated) kernel larger than the padded
                input.
        """
        x_shape = _shape(x_shape, "x", "(N, C, H, W)")
        w_shape = _shape(w_shape, "w", "(K, C/groups, R, S)")
        n, c, h, w = x_shape
        k, c2, r, s = w_shape
        for name, v in (("batch N", n), ("channels C", c), ("height H", h), ("width W", w),
                        ("filters K", k), ("kernel height R", r), ("kernel width S", s)):
            if v < 1:
                raise ValueError(f"{name} must be >= 1, got {v} (x {x_shape}, w {w_shape})")
        g = _integer(groups, "groups", "an integer >= 1")
        if g < 1:
            raise ValueError(f"groups must be an integer >= 1, got {groups!r}")
        if c % g or k % g:
            raise ValueError(f"groups = {g} must divide the channels C = {c} and the filters "
                             f"K = {k} (x {x_shape}, w {w_shape})")
        if c2 * g != c:
            raise ValueError(f"channel mismatch: x has C={c} channels and groups={g}, so w "
                             f"must have C/groups = {c // g} channels per filter, got {c2} "
                             f"(x {x_shape}, w {w_shape})" if g > 1 else
                             f"channel mismatch: x has C={c} channels but w expects {c2} "
                             f"(x {x_shape}, w {w_shape})")
        sh, sw = pair(stride, "stride", 1)
        ph, pw = pair(padding, "padding", 0)
        dh, dw = pair(dilation, "dilation", 1)
        re, se = dh * (r - 1) + 1, dw * (s - 1) + 1
        if re > h + 2 * ph or se > w + 2 * pw:
            what = f"kernel {r}x{s}" + (f" dilated by {dh, dw} (spanning {re}x{se})"
                                        if (dh, dw) != (1, 1) else "")
            raise ValueError(
                f"{what} is larger than the padded input {h + 2 * ph}x{w + 2 * pw} "
                f"(x {x_shape}, w {w_shape}, padding {ph, pw}); it must be at most the padded "
                f"input size")
        return cls(n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, g)
