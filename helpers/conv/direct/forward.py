"""The register-blocked direct-convolution kernel: ``direct-tiled``'s forward, and its ``dx``.

A block computes BK filters x one output tile of one image; each thread a register tile of FK
filters x FP output pixels (8 x 4, or up to 4 x 8). Per stage of CB channels the block copies the
input patch (halo included) and the BK x CB x R x S filter slice into shared memory; then every
(c, r, s) step is FK + FP shared loads for FK * FP fused multiply-adds. R, S, strides, dilations,
tile sizes are compile-time constants (:func:`forward_kernel` builds one per :class:`FwdKey`).
The same kernel computes ``dx`` as a stride-1 correlation of dy with the filters transposed
and flipped (``flip``), dy read as if upsampled by the stride (``uh``, ``uw``).
Shapes (cuDNN paper): x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q), flat float32 views.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

from numba import cuda, float32, int32, uint32, uint64

__all__ = ["THREADS", "WARP", "MAX_SHARED_BYTES", "FwdKey", "FwdLaunch", "forward_kernel",
           "forward_launch", "filter_groups", "pixel_tile"]

THREADS = 128                 #: threads per block
WARP = 32                     #: threads of a warp
MAX_SHARED_BYTES = 48 * 1024  #: static shared memory a block may declare
STAGE_FLOATS = 3072           #: shared floats a stage aims at (12 KB): sets CB


@dataclasses.dataclass(frozen=True)
class FwdKey:
    """The compile-time constants of one forward kernel (all ints).

    r, s: filter rows and columns. sh, sw, dh, dw: the kernel's stride and dilation.
    uh, uw: the input is read as if upsampled by them (zeros between its rows and columns; the
    ``dx`` of a strided layer); 1 for a forward pass. flip: 1 reads w (K, C, R, S) as the
    transposed, flipped bank (C, K, R, S) that ``dx`` correlates dy with; 0 as it is.
    tp, tq: output tile rows and columns per block. fk: filters per thread. kg: filter groups
    per block (4 / kg warps each). fp: output pixels per thread. cb: channels per stage.
    """

    r: int
    s: int
    sh: int
    sw: int
    dh: int
    dw: int
    uh: int
    uw: int
    flip: int
    tp: int
    tq: int
    fk: int
    kg: int
    fp: int
    cb: int

    @property
    def name(self) -> str:
        """The kernel's name, which encodes the key (module attribute of that name)."""
        return _PREFIX + "_".join(str(v) for v in dataclasses.astuple(self))

    @property
    def patch(self) -> tuple[int, int]:
        """(rows, columns) of the input patch one output tile reads, halo included."""
        return ((self.tp - 1) * self.sh + (self.r - 1) * self.dh + 1,
                (self.tq - 1) * self.sw + (self.s - 1) * self.dw + 1)

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block: the patch and the filter slice of CB channels."""
        rows, cols = self.patch
        return 4 * self.cb * (rows * cols + self.fk * self.kg * self.r * self.s)


_PREFIX = "direct_fwd_kernel__"


def _make(key: FwdKey):
    """The ``@cuda.jit`` kernel for ``key``: every name below is a compile-time constant."""
    R, S, SH, SW, DH, DW = key.r, key.s, key.sh, key.sw, key.dh, key.dw
    UH, UW, FLIP = key.uh, key.uw, key.flip
    TP, TQ, FK, KG, FP, CB = key.tp, key.tq, key.fk, key.kg, key.fp, key.cb
    NPT = THREADS // KG                  # pixel threads per filter group (a whole number of warps)
    BK = FK * KG                         # filters per block
    NPIX = TP * TQ                       # output pixels per tile (<= NPT * FP)
    WSLOTS = WARP * FP                   # pixel slots of one warp
    ROWS, COLS = key.patch
    PLANE = ROWS * COLS
    RS = R * S
    WTILE = CB * RS                      # taps of one filter in one stage
    XS, WS = CB * PLANE, BK * WTILE      # shared floats: patch, filter slice
    ROW_STEP = DH * COLS                 # patch offset of one filter row

    def kernel(x, w, y, cin, hin, win, kout, hout, wout, ph, pw, tiles_q):
        xs = cuda.shared.array(XS, float32)              # x[n, c0:c0+CB, patch]
        ws = cuda.shared.array(WS, float32)              # w[k0:k0+BK, c0:c0+CB, :, :]
        acc = cuda.local.array((FK, FP), float32)        # the thread's outputs, in registers
        xoff = cuda.local.array(FP, uint64)               # its pixels' offsets in the patch
        xv = cuda.local.array(FP, float32)
        tid = cuda.threadIdx.x
        kg = tid // NPT                                  # warp-uniform: w loads are broadcasts
        tpix = tid - kg * NPT
        tile_p = uint32(cuda.blockIdx.x) // uint32(tiles_q)
        p0 = int32(tile_p) * TP
        q0 = (cuda.blockIdx.x - int32(tile_p) * tiles_q) * TQ
        k0, n = cuda.blockIdx.y * BK, cuda.blockIdx.z
        h0, w0 = p0 * SH - ph, q0 * SW - pw              # the patch's corner (upsampled coords)
        hv, wv = (hin - 1) * UH + 1, (win - 1) * UW + 1  # the input's extent (upsampled)
        wslot = (tpix // WARP) * WSLOTS                  # the warp's first pixel slot
        slot0 = wslot + tpix % WARP                      # the thread's: slot0 + 32 j (a warp's
        for j in range(FP):                              # 32 FP slots, lanes side by side)
            slot = slot0 + j * WARP
            pp = slot // TQ
            xoff[j] = uint64((pp * SH) * COLS + (slot - pp * TQ) * SW if slot < NPIX else 0)
            for i in range(FK):
                acc[i, j] = float32(0.0)
        kbase = kg * FK
        busy = k0 + kbase < kout and wslot < NPIX        # warp-uniform; else copy and wait
        wbase = kbase * WTILE
        c0 = 0
        while c0 < cin:
            e = tid
            while e < XS:                                # the patch, zeros outside the input
                cc = e // PLANE
                a = (e - cc * PLANE) // COLS
                hi, wi = h0 + a, w0 + (e - cc * PLANE - a * COLS)
                v = float32(0.0)
                if (c0 + cc < cin and 0 <= hi < hv and 0 <= wi < wv
                        and hi % UH == 0 and wi % UW == 0):
                    v = x[uint64(((n * cin + c0 + cc) * hin + hi // UH) * win + wi // UW)]
                xs[uint64(e)] = v
                e += THREADS
            e = tid
            while e < WS:                                # the filter slice, zeros past K or C
                kk = e // WTILE
                cc = (e - kk * WTILE) // RS
                rs = e - kk * WTILE - cc * RS
                f, c = k0 + kk, c0 + cc
                v = float32(0.0)
                if f < kout and c < cin:
                    if FLIP:                             # w (cin, kout, R, S), flipped
                        v = w[uint64((c * kout + f) * RS + RS - 1 - rs)]
                    else:                                # w (kout, cin, R, S)
                        v = w[uint64((f * cin + c) * RS + rs)]
                ws[uint64(e)] = v
                e += THREADS
            cuda.syncthreads()                           # 1: patch and filters staged
            if busy:
                for cc in range(CB):
                    if c0 + cc < cin:
                        for r in range(R):
                            xrow = cc * PLANE + r * ROW_STEP
                            wrow = wbase + cc * RS + r * S
                            for s in range(S):
                                xs_at = uint64(xrow + s * DW)    # unsigned indices: no
                                ws_at = uint64(wrow + s)         # negative-index wraparound
                                for j in range(FP):
                                    xv[j] = xs[xoff[j] + xs_at]
                                for i in range(FK):
                                    wt = ws[ws_at + uint64(i * WTILE)]
                                    for j in range(FP):
                                        acc[i, j] += wt * xv[j]
            cuda.syncthreads()                           # 2: all read before the next stage
            c0 += CB
        for j in range(FP):
            slot = slot0 + j * WARP
            pp = slot // TQ
            p, q = p0 + pp, q0 + slot - pp * TQ
            if slot < NPIX and p < hout and q < wout:
                for i in range(FK):
                    f = k0 + kbase + i
                    if f < kout:
                        y[uint64(((n * kout + f) * hout + p) * wout + q)] = acc[i, j]

    kernel.__name__ = kernel.__qualname__ = key.name
    kernel.__doc__ = (f"direct-convolution forward, {R}x{S} filters, stride ({SH}, {SW}), "
                      f"dilation ({DH}, {DW}), {TP}x{TQ} output tile x {BK} filters per block; "
                      f"see helpers.conv.direct.forward.")
    return kernel


@functools.lru_cache(maxsize=None)
def forward_kernel(key: FwdKey):
    """The ``@cuda.jit`` forward kernel for ``key`` (built once, then cached).

    Launch: grid (tiles of the output, ceil(kout / BK), N) with BK = fk * kg filters a block,
    :data:`THREADS` threads; arguments x, w, y (flat float32 views of (N, cin, hin, win),
    (kout, cin, R, S) and (N, kout, hout, wout)), then cin, hin, win, kout, hout, wout, ph, pw,
    tiles_q (int64; ph, pw may be negative; tiles_q: tiles along the output's columns).
    Block ``(t, kb, n)`` computes filters kb*BK ... of image n on output tile t (tp x tq
    pixels). Thread ``tid``, with u = tid % (128/kg): filters ``kb*BK + (tid // (128/kg))*fk +
    i`` (i < fk) at the tile's pixels ``(u // 32)*32*fp + u % 32 + 32*j`` (j < fp), row-major:
    a warp's lanes take neighbouring pixels (its patch loads are consecutive words) and share
    their filters (its filter loads are broadcasts).

    Why: a (c, r, s) step is fk + fp shared loads for fk * fp FMAs (8 x 4: 32 per 12, 2.7 per
    load, against 1 per 2 global loads in ``direct_naive_kernel``). Per stage of cb channels a
    block loads cb * (patch + BK*R*S) floats from global memory for BK * tp*tq * cb*R*S FMAs:
    with 32 filters, an 11 x 11 output tile and 3 x 3 filters, 34,848 FMAs per 457 floats, 0.05
    bytes per FMA. Compile-time R, S, strides and tile turn the patch offsets into constants.
    """
    fn = _make(key)
    fn.__module__ = __name__
    return cuda.jit(fn)


def __getattr__(name: str):
    """Every forward kernel is a module attribute under its :attr:`FwdKey.name`, so that the
    real compiler's child process (:mod:`helpers.compiled`) can rebuild it by name."""
    m = re.fullmatch(_PREFIX + r"(\d+(?:_\d+)*)", name)
    if m is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return forward_kernel(FwdKey(*(int(v) for v in m.group(1).split("_"))))


def filter_groups(kout: int) -> tuple[int, int, int]:
    """(fk, kg, fp): 4 groups of up to 8 filters, 4 pixels a thread; for 16 filters or fewer,
    fewer groups, and 8 pixels a thread where it holds 4 filters or fewer."""
    kg = 1 if kout <= 8 else 2 if kout <= 16 else 4
    fk = min(8, math.ceil(kout / kg))
    return fk, kg, 8 if fk <= 4 else 4


def pixel_tile(hout: int, wout: int, slots: int, fits, patch, tq_range=(1, None),
               warp_slots: int | None = None) -> tuple[int, int]:
    """The (rows, columns) output tile of at most ``slots`` pixels (and columns in
    ``tq_range``, as far as ``wout`` allows) that wastes the fewest pixel slots over the whole
    ``hout x wout`` output (counted in warps of ``warp_slots``, default all ``slots``), then has
    the fewest patch elements ``patch(tp, tq)`` per output, then is the wider; among those
    ``fits(tp, tq)`` accepts. A 10 x 10 or 11 x 11 output is one tile.

    Raises:
        ValueError: no tile fits (the caller's shared-memory limit).
    """
    best, warp_slots = None, warp_slots or slots
    for tq in range(min(wout, tq_range[0]), min(wout, slots, tq_range[1] or slots) + 1):
        tp = min(hout, slots // tq)
        while tp > 1 and not fits(tp, tq):              # fewer rows where the patch is too big
            tp //= 2
        if not fits(tp, tq):
            continue
        busy = math.ceil(tp * tq / warp_slots) * warp_slots   # slots of the warps with work
        cost = (math.ceil(hout / tp) * math.ceil(wout / tq) * busy, patch(tp, tq) / (tp * tq),
                -tq)
        if best is None or cost < best[0]:
            best = (cost, (tp, tq))
    if best is None:
        raise ValueError(f"no output tile of {slots} pixels fits in shared memory")
    return best[1]


@dataclasses.dataclass(frozen=True)
class FwdLaunch:
    """One launch of a forward kernel: its key, grid (x, y, z), threads per block and the
    kernel's int64 arguments after x, w, y."""

    key: FwdKey
    grid: tuple[int, int, int]
    threads: int
    args: tuple[int, ...]

    @property
    def kernel(self):
        return forward_kernel(self.key)


def forward_launch(n: int, cin: int, hin: int, win: int, kout: int, hout: int, wout: int,
                   r: int, s: int, stride=(1, 1), dilation=(1, 1), padding=(0, 0),
                   up=(1, 1), flip: bool = False) -> FwdLaunch:
    """How to launch the forward kernel on one layer (no limits checked but shared memory).

    Args:
        n, cin, hin, win: images, channels, input rows and columns (before any upsampling).
        kout, hout, wout: filters, output rows and columns. r, s: filter size.
        stride, dilation, padding: (h, w) pairs (padding may be negative: ``dx`` crops).
        up: read the input as if upsampled (``dx`` of a strided layer). flip: w is (cin, kout,
            R, S) and is read transposed and flipped (``dx``).

    Raises:
        ValueError: no output tile fits the shared memory (a window wider than the kernels
            take, which :func:`helpers.conv.direct.tiled_supports` refuses first).
    """
    fk, kg, fp = filter_groups(kout)
    base = dict(r=r, s=s, sh=stride[0], sw=stride[1], dh=dilation[0], dw=dilation[1],
                uh=up[0], uw=up[1], flip=int(flip), fk=fk, kg=kg, fp=fp)

    def key(tp, tq, cb=1):
        return FwdKey(tp=tp, tq=tq, cb=cb, **base)

    tp, tq = pixel_tile(hout, wout, fp * THREADS // kg,
                        lambda tp, tq: key(tp, tq).smem_bytes <= MAX_SHARED_BYTES,
                        lambda tp, tq: math.prod(key(tp, tq).patch), warp_slots=fp * WARP)
    one = key(tp, tq).smem_bytes // 4
    tiles_q = math.ceil(wout / tq)
    grid = (math.ceil(hout / tp) * tiles_q, math.ceil(kout / (fk * kg)), n)
    cb = max(1, min(cin, 16, STAGE_FLOATS // one))
    return FwdLaunch(key(tp, tq, cb), grid, THREADS,
                     (cin, hin, win, kout, hout, wout, padding[0], padding[1], tiles_q))
