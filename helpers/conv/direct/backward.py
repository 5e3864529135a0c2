"""Direct convolution's weight gradient as a split reduction, and the plan of its ``dx``.

``dw[k, c, r, s]`` sums ``x[n, c, p*sh + r*dh - ph, q*sw + s*dw - pw] * dy[n, k, p, q]`` over
the N*P*Q output positions: K x (C*R*S) outputs, each a sum of 12,800 to 2 million terms at the
study's Table I layers (batch 128).
:func:`dw_kernel` splits it: grid (chunks of N*P*Q, tap tiles, filter tiles); per step of one
image's output tile a block stages dy and the input patch in shared memory, and each thread
accumulates FK filters x FT taps (FK + FT shared loads per FK * FT multiply-adds per pixel).
Each chunk writes its partial sums to a workspace that :func:`direct_dw_reduce_kernel` adds up
in chunk order: deterministic, no atomics. ``dx`` runs the forward kernel (:mod:`.forward`).
Shapes (cuDNN paper): x (N, C, H, W), dy (N, K, P, Q), dw (K, C, R, S), flat float32 views.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

from numba import cuda, float32, int32, uint32, uint64

from helpers.conv.config import ConvConfig
from helpers.conv.direct.forward import (MAX_SHARED_BYTES, FwdLaunch, filter_groups,
                                         forward_launch, pixel_tile)

__all__ = ["LANES", "TARGET_BLOCKS", "MAX_WORKSPACE_BYTES", "REDUCE_THREADS", "DwKey",
           "DwLaunch", "dw_kernel", "direct_dw_reduce_kernel", "dw_launch", "dx_launch"]

LANES = 32                          #: threads of a filter group: one warp, one tap each
PIXELS = 128                        #: output pixels per step (the tile); half with lk
TQ_RANGE = (16, 32)                 #: tile columns: wide enough for coalesced dy rows,
                                    #: narrow enough to unroll
TARGET_BLOCKS = 1024                #: blocks the split aims at (132 SMs x ~8)
MAX_WORKSPACE_BYTES = 64 * 2 ** 20  #: the most partial sums the split may hold
REDUCE_THREADS = 256                #: threads per block of the reduction
REDUCE_PER_THREAD = 4               #: the most elements of dw one of its threads sums
REDUCE_MIN_BLOCKS = 264             #: blocks it keeps while each thread sums one (2 per SM)


@dataclasses.dataclass(frozen=True)
class DwKey:
    """The compile-time constants of one weight-gradient kernel (all ints).

    r, s, sh, sw, dh, dw: filter size, stride, dilation. tp, tq: output tile per step.
    fk: filters per thread. kg: warps per block. ft: taps per thread. cbx: input channels its
    patch holds. lk: 0, a warp's lanes take different taps (32 * ft consecutive (c, r, s) a
    block) and its filters are the warp's (fk * kg a block); 1 (few taps, C*R*S < 64, more
    filters): the lanes take different filters (32 * fk a block), the taps are the warp's.
    """

    r: int
    s: int
    sh: int
    sw: int
    dh: int
    dw: int
    tp: int
    tq: int
    fk: int
    kg: int
    ft: int
    cbx: int
    lk: int = 0

    @property
    def name(self) -> str:
        return _PREFIX + "_".join(str(v) for v in dataclasses.astuple(self))

    @property
    def patch(self) -> tuple[int, int]:
        """(rows, columns) of the input patch one output tile reads, halo included."""
        return ((self.tp - 1) * self.sh + (self.r - 1) * self.dh + 1,
                (self.tq - 1) * self.sw + (self.s - 1) * self.dw + 1)

    @property
    def smem_bytes(self) -> int:
        """Static shared memory per block: the input patch and the dy tile."""
        rows, cols = self.patch
        return 4 * (self.cbx * rows * cols + self.dy_pitch * self.tp * self.tq)

    @property
    def filters(self) -> int:
        """Filters per block: 32 * fk with lk, else fk * kg."""
        return LANES * self.fk if self.lk else self.fk * self.kg

    @property
    def taps(self) -> int:
        """Taps (c, r, s) per block: kg * ft with lk, else 32 * ft."""
        return self.kg * self.ft if self.lk else LANES * self.ft

    @property
    def dy_pitch(self) -> int:
        """With lk, floats per output pixel of the staged dy: the block's filters, made odd so
        that the staging's stores hit 32 banks; else the block's filters (it is staged filter by
        filter)."""
        return self.filters | 1 if self.lk else self.filters


_PREFIX = "direct_dw_kernel__"


def _make(key: DwKey):
    """The ``@cuda.jit`` kernel for ``key``: every name below is a compile-time constant."""
    R, S, SH, SW, DH, DW = key.r, key.s, key.sh, key.sw, key.dh, key.dw
    TP, TQ, FK, KG, FT, CBX = key.tp, key.tq, key.fk, key.kg, key.ft, key.cbx
    LK = key.lk
    THREADS = LANES * KG
    BT, BK = key.taps, key.filters       # taps, filters per block
    ROWS, COLS = key.patch
    PLANE, RS, NPIX = ROWS * COLS, R * S, TP * TQ
    DP = key.dy_pitch                    # lk: dy staged (pixel, filter), pitch DP; else
    XS, DS = CBX * PLANE, DP * NPIX      # (filter, pixel). Shared floats: patch, dy tile
    ROW_STEP = SH * COLS                 # patch offset of one output row
    T_STEP, K_STEP = (1, LANES) if LK else (LANES, 1)  # a thread's taps, filters: j, i apart
    DY_I = LANES if LK else NPIX         # staged-dy offset of the thread's next filter

    def kernel(x, dy, part, cin, hin, win, kout, pout, qout, ph, pw, tiles_q, tiles, spc,
               steps):
        xs = cuda.shared.array(XS, float32)              # x[n, c_lo:c_lo+CBX, patch]
        ds = cuda.shared.array(DS, float32)              # dy[n, k0:k0+BK, tile]
        acc = cuda.local.array((FK, FT), float32)        # the thread's sums, in registers
        toff = cuda.local.array(FT, uint64)               # its taps' offsets in the patch
        xv = cuda.local.array(FT, float32)
        tid = cuda.threadIdx.x
        kg = tid // LANES
        lane = tid - kg * LANES
        t0, k0 = cuda.blockIdx.y * BT, cuda.blockIdx.z * BK
        if LK:          # lanes: filters k1 + 32 i; the warp: taps t1 + j (x loads broadcast)
            t1, k1 = t0 + kg * FT, k0 + lane
        else:           # lanes: taps t1 + 32 j; the warp: filters k1 + i (dy loads broadcast)
            t1, k1 = t0 + lane, k0 + kg * FK
        taps = cin * RS
        c_lo = t0 // RS
        for j in range(FT):
            t = t1 + j * T_STEP
            c = t // RS
            r = (t - c * RS) // S
            toff[j] = uint64((c - c_lo) * PLANE + r * DH * COLS + (t - c * RS - r * S) * DW
                             if t < taps else 0)
            for i in range(FK):
                acc[i, j] = float32(0.0)
        busy = k1 < kout and t1 < taps                   # else only copy and wait
        dbase = lane if LK else kg * FK * NPIX
        step = cuda.blockIdx.x * spc                     # this chunk's first step
        last = min(step + spc, steps)
        n = int32(uint32(step) // uint32(tiles))         # step = (image, tile): walked below
        tile = step - n * tiles
        while step < last:
            tile_p = int32(uint32(tile) // uint32(tiles_q))
            p0, q0 = tile_p * TP, (tile - tile_p * tiles_q) * TQ
            h0, w0 = p0 * SH - ph, q0 * SW - pw
            e = tid
            while e < XS:                                # the patch, zeros outside the input
                cc = e // PLANE
                a = (e - cc * PLANE) // COLS
                hi, wi = h0 + a, w0 + (e - cc * PLANE - a * COLS)
                v = float32(0.0)
                if c_lo + cc < cin and 0 <= hi < hin and 0 <= wi < win:
                    v = x[uint64(((n * cin + c_lo + cc) * hin + hi) * win + wi)]
                xs[uint64(e)] = v
                e += THREADS
            e = tid
            while e < DS:                                # dy, zeros past K, P or Q
                kk = e // NPIX
                pp = (e - kk * NPIX) // TQ
                p, q = p0 + pp, q0 + (e - kk * NPIX - pp * TQ)
                v = float32(0.0)
                if k0 + kk < kout and p < pout and q < qout:
                    v = dy[uint64(((n * kout + k0 + kk) * pout + p) * qout + q)]
                if LK:
                    ds[uint64((e - kk * NPIX) * DP + kk)] = v
                else:
                    ds[uint64(e)] = v
                e += THREADS
            cuda.syncthreads()                           # 1: patch and dy staged
            if busy:
                for pp in range(TP):
                    if p0 + pp < pout:                   # block-uniform: rows past P skipped
                        for qq in range(TQ):
                            if q0 + qq < qout:
                                xs_at = uint64(pp * ROW_STEP + qq * SW)  # unsigned: no
                                pix = pp * TQ + qq                       # wraparound code
                                ds_at = uint64(dbase + (pix * DP if LK else pix))
                                for j in range(FT):
                                    xv[j] = xs[toff[j] + xs_at]
                                for i in range(FK):
                                    d = ds[ds_at + uint64(i * DY_I)]
                                    for j in range(FT):
                                        acc[i, j] += d * xv[j]
            cuda.syncthreads()                           # 2: all read before the next step
            step += 1
            tile += 1
            if tile == tiles:
                tile = 0
                n += 1
        for i in range(FK):
            k = k1 + i * K_STEP
            for j in range(FT):
                t = t1 + j * T_STEP
                if k < kout and t < taps:
                    part[uint64((cuda.blockIdx.x * kout + k) * taps + t)] = acc[i, j]

    kernel.__name__ = kernel.__qualname__ = key.name
    kernel.__doc__ = (f"direct-convolution weight gradient, {R}x{S} filters, stride ({SH}, "
                      f"{SW}), {BK} filters x {BT} taps per block; see "
                      f"helpers.conv.direct.backward.")
    return kernel


@functools.lru_cache(maxsize=None)
def dw_kernel(key: DwKey):
    """The ``@cuda.jit`` weight-gradient kernel for ``key`` (built once, then cached).

    Launch: grid (chunks, ceil(C*R*S / BT), ceil(K / BK)) with BT taps and BK filters a block
    (:attr:`DwKey.taps`, :attr:`DwKey.filters`), 32*kg threads; arguments x, dy, part (flat
    float32 views of (N, C, H, W), (N, K, P, Q) and (chunks, K, C*R*S), the partial sums),
    then cin, hin, win, kout, pout, qout, ph, pw, tiles_q, tiles, spc, steps (int64: C, H, W, K, P, Q, padding, output tiles
    along Q and per image, steps per chunk, N * tiles, below 2**31). A step is one tp x tq
    output tile of one image; block ``(ch, tb, kb)`` sums steps ch*spc ... ch*spc + spc - 1 for
    its BK filters x BT taps and writes them to part[ch]. Thread ``tid``, lane l = tid % 32,
    warp g = tid // 32: filters ``kb*BK + g*fk + i`` (i < fk) at taps ``tb*BT + l + 32*j``
    (j < ft, (c, r, s) flattened): a warp shares its filters (dy loads are broadcasts), its
    lanes read their own taps. With lk, filters ``kb*BK + l + 32*i`` at taps ``tb*BT + g*ft +
    j``: the lanes read their own filters' dy, a warp shares its taps (patch loads broadcast).

    Why: per output pixel a thread does fk * ft FMAs for fk + ft shared loads (8 x 4: 32 per
    12). Per step a block loads cbx patches and BK x tp*tq of dy, e.g. 3 x 3 filters on an
    11 x 11 output with 16 channels in the patch: 6,576 floats for 32 x 128 x 121 = 495,616
    FMAs, 0.05 bytes per FMA. The first kernel, ``direct_dw_kernel``, ran K*C*R*S threads
    (2,592 for 96 filters of 3 x 3 x 3) each summing N*P*Q terms alone; here the chunks of
    N*P*Q give each layer about :data:`TARGET_BLOCKS` blocks.
    """
    fn = _make(key)
    fn.__module__ = __name__
    return cuda.jit(fn)


def __getattr__(name: str):
    """Every weight-gradient kernel is a module attribute under its :attr:`DwKey.name`, so
    that the real compiler's child process (:mod:`helpers.compiled`) can rebuild it."""
    m = re.fullmatch(_PREFIX + r"(\d+(?:_\d+)*)", name)
    if m is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return dw_kernel(DwKey(*(int(v) for v in m.group(1).split("_"))))


@cuda.jit
def direct_dw_reduce_kernel(part, dw, chunks, total):
    """dw[i] = the sum of part[ch * total + i] over ch = 0 .. chunks - 1, in that order.

    part: the (chunks, K*C*R*S) partial sums of :func:`dw_kernel`, flat; dw: (K*C*R*S,).
    A 1-D grid of :data:`REDUCE_THREADS`-thread blocks, each thread summing elements i, i + G,
    ... (G = the grid's threads; at most :data:`REDUCE_PER_THREAD` of them, one where that
    leaves fewer than :data:`REDUCE_MIN_BLOCKS` blocks): neighbouring threads read neighbouring
    partials, and the order of each sum is fixed (deterministic).
    """
    i = cuda.grid(1)
    for _ in range(REDUCE_PER_THREAD):   # a fixed count: a while loop's would be divided out
        if i < total:
            acc = float32(0.0)
            j = i
            for _ in range(chunks):
                acc += part[uint64(j)]
                j += total
            dw[uint64(i)] = acc
        i += cuda.gridsize(1)


@dataclasses.dataclass(frozen=True)
class DwLaunch:
    """The weight gradient's launches on one layer: the split kernel's key, grid, threads and
    int64 arguments; ``chunks`` (1: it writes dw itself, no reduction); the reduction's grid;
    ``workspace_bytes``: the partial sums, 4 * chunks * K*C*R*S (0 for one chunk)."""

    key: DwKey
    grid: tuple[int, int, int]
    threads: int
    args: tuple[int, ...]
    chunks: int
    reduce_grid: int
    workspace_bytes: int

    @property
    def kernel(self):
        return dw_kernel(self.key)


def dw_launch(cfg: ConvConfig) -> DwLaunch:
    """How the weight gradient of ``cfg`` (one group) is split.

    Filter groups and taps: up to 4 warps of up to 8 filters (fewer for K <= 16), 32 lanes of
    up to 4 taps; where C*R*S < 64 and K is larger, 32 lanes of up to 4 filters and up to 4
    warps of up to 8 taps (:class:`DwKey`'s ``lk``). Output tile per step: at most 128 pixels
    (64 with lk), 16 to 32 wide (or Q), the fewest wasted
    (:func:`helpers.conv.direct.forward.pixel_tile`). Chunks: the N * tiles steps split so the
    grid holds about :data:`TARGET_BLOCKS` blocks, at most one chunk per step and at most
    :data:`MAX_WORKSPACE_BYTES` of partial sums; the same for every GPU (deterministic).

    Raises:
        ValueError: no output tile fits the shared memory.
    """
    rs, taps = cfg.r * cfg.s, cfg.c * cfg.r * cfg.s
    if taps < 64 and cfg.k > taps:            # lanes over filters: few taps, more filters
        lk, fk, kg = 1, min(4, math.ceil(cfg.k / LANES)), min(4, taps)
        ft = min(8, math.ceil(taps / kg))
    else:                                      # lanes over taps
        lk, (fk, kg, _) = 0, filter_groups(cfg.k)
        ft = min(4, math.ceil(taps / LANES))
    bt = kg * ft if lk else LANES * ft
    base = dict(r=cfg.r, s=cfg.s, sh=cfg.stride_h, sw=cfg.stride_w, dh=cfg.dil_h,
                dw=cfg.dil_w, fk=fk, kg=kg, ft=ft, cbx=min(cfg.c, (bt + rs - 2) // rs + 1),
                lk=lk)
    slots = PIXELS // 2 if lk else PIXELS   # lk stages dy for 32 * fk filters: a smaller tile
    while True:
        try:
            tp, tq = pixel_tile(
                cfg.p, cfg.q, slots,
                lambda tp, tq: DwKey(tp=tp, tq=tq, **base).smem_bytes <= MAX_SHARED_BYTES,
                lambda tp, tq: math.prod(DwKey(tp=tp, tq=tq, **base).patch), TQ_RANGE)
            break
        except ValueError:
            if slots == 1:
                raise
            slots //= 2
    key = DwKey(tp=tp, tq=tq, **base)
    tiles_q = math.ceil(cfg.q / tq)
    tiles = math.ceil(cfg.p / tp) * tiles_q
    steps = cfg.n * tiles
    out_tiles = math.ceil(taps / bt) * math.ceil(cfg.k / key.filters)
    room = max(1, MAX_WORKSPACE_BYTES // (4 * cfg.k * taps))
    chunks = max(1, min(steps, math.ceil(TARGET_BLOCKS / out_tiles), room))
    spc = math.ceil(steps / chunks)
    chunks = math.ceil(steps / spc)
    grid = (chunks, math.ceil(taps / bt), math.ceil(cfg.k / key.filters))
    args = (cfg.c, cfg.h, cfg.w, cfg.k, cfg.p, cfg.q, cfg.pad_h, cfg.pad_w, tiles_q, tiles,
            spc, steps)
    total = cfg.k * taps
    reduce_grid = max(math.ceil(total / (REDUCE_THREADS * REDUCE_PER_THREAD)),
                      min(math.ceil(total / REDUCE_THREADS), REDUCE_MIN_BLOCKS))
    return DwLaunch(key, grid, LANES * kg, args, chunks, reduce_grid,
                    4 * chunks * total if chunks > 1 else 0)


def dx_launch(cfg: ConvConfig) -> FwdLaunch:
    """``dx`` of ``cfg`` (one group) as the forward kernel's launch: a stride-1 correlation of
    dy, read as if upsampled by the stride (zeros between its elements), with the filters
    transposed to (C, K, R, S) and flipped, padded by dil*(R - 1) - pad (negative: cropped),
    dilation kept. Each dy element staged in shared memory is read for up to 8 channels c held
    in registers (the forward kernel's filters). At stride > 1, (sh*sw - 1) / (sh*sw) of its
    multiply-adds are by inserted zeros.

    Raises:
        ValueError: as :func:`helpers.conv.direct.forward.forward_launch`.
    """
    crop = ((cfg.r - 1) * cfg.dil_h - cfg.pad_h, (cfg.s - 1) * cfg.dil_w - cfg.pad_w)
    return forward_launch(cfg.n, cfg.k, cfg.p, cfg.q, cfg.c, cfg.h, cfg.w, cfg.r, cfg.s,
                          (1, 1), (cfg.dil_h, cfg.dil_w), crop, up=(cfg.stride_h, cfg.stride_w),
                          flip=True)
