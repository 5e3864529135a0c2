"""Rung 7 of the GEMM ladder: rung 6 with the next tiles' loads in flight, at the tile sizes
this GPU runs fastest.

Rung 6 waits for each tile's global loads before its FMAs. :func:`make_prefetch_kernel` issues
the next tiles' float4 loads into registers right after the barrier and only then computes on
the tiles in shared memory, so the loads' latency hides behind 512 FMAs (register double
buffering; a few more registers). The best tile sizes depend on the GPU and the matrix:
:data:`CANDIDATES` lists tile sizes with and without prefetch, :func:`autotune` times each on
the GPU (CUDA events, warm-up, median of several launches) and remembers the fastest, which
:func:`chosen` returns for that size (or the nearest tuned). Without a GPU, or before any
tuning: :data:`DEFAULT`. Edge tiles run rung 6's guarded kernel at the same tile sizes.

Source: Boehm (2022), kernels 9 ("autotuning") and 11 (double buffering); CUTLASS's profiler
searches tile configurations per GPU and shape in the same way.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from numba import config, cuda, float32

from helpers.conv.gemm.rung6_vectorized import Config, make_kernel, tiles
from helpers.conv.gemm.vector import ALIGN, ldg4, lds4, stg4, sts4
from helpers.device import backend

__all__ = ["CANDIDATES", "DEFAULT", "autotune", "chosen", "kernel_for", "kernel_name", "launches",
           "make_prefetch_kernel", "gemm_autotuned_kernel", "gemm_autotuned_edges_kernel"]

#: Rung 7's default: rung 6's tile sizes with prefetch.
DEFAULT = Config(128, 128, 8, 8, 8, prefetch=True)

#: The tile sizes searched, DEFAULT first: seven tile shapes with prefetch, and one without
#: (rung 6 measures its own default without).
CANDIDATES: tuple[Config, ...] = (
    DEFAULT,
    Config(128, 128, 16, 8, 8, prefetch=True),
    Config(128, 128, 16, 8, 8),
    Config(128, 64, 16, 8, 4, prefetch=True),
    Config(64, 128, 16, 4, 8, prefetch=True),
    Config(64, 64, 16, 4, 4, prefetch=True),
    Config(64, 256, 16, 8, 8, prefetch=True),
    Config(256, 64, 16, 8, 8, prefetch=True),
)


def make_prefetch_kernel(cfg: Config = DEFAULT, name: str = "gemm_autotuned_kernel",
                         module: str = __name__):
    """Rung 6's fast kernel (whole tiles, float4, no bounds checks) with the next tiles' global
    loads issued before this tile's FMAs: ``kernel(a, b, c, m, n, k, by0, bx0)``, launched as
    rung 6's (:func:`helpers.conv.gemm.rung6_vectorized.tiles` plans whole tiles and edges).

    Raises:
        ValueError: ``cfg`` is not valid.
    """
    if (reason := cfg.problem()) is not None:
        raise ValueError(f"cfg: {reason}")
    BM, BN, BK, TM, TN = cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    NT = cfg.threads
    A_TILE, B_TILE = BM * BK, BK * BN
    A_VEC, B_VEC = A_TILE // (4 * NT), B_TILE // (4 * NT)
    A_NEXT, B_NEXT = 4 * A_VEC, 4 * B_VEC            # registers for the next tiles
    COLS, MQ, NQ = BN // TN, TM // 4, TN // 4
    MS, NS = BM // MQ, BN // NQ

    def gemm_prefetch_kernel(a, b, c, m, n, k, by0, bx0):
        a_s = cuda.shared.array(A_TILE, float32, alignment=ALIGN)   # (BK, BM): A transposed
        b_s = cuda.shared.array(B_TILE, float32, alignment=ALIGN)   # (BK, BN)
        t = cuda.threadIdx.x
        row0 = (cuda.blockIdx.y + by0) * BM
        col0 = (cuda.blockIdx.x + bx0) * BN
        ty = (t // COLS) * 4
        tx = (t % COLS) * 4
        acc = cuda.local.array((TM, TN), float32)
        a_r = cuda.local.array(TM, float32)
        b_r = cuda.local.array(TN, float32)
        a_next = cuda.local.array(A_NEXT, float32)      # the next tiles, in registers
        b_next = cuda.local.array(B_NEXT, float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = float32(0.0)
        for l in range(A_VEC):                           # the first tiles' loads
            e = t + l * NT
            r, q = e // (BK // 4), (e % (BK // 4)) * 4
            v0, v1, v2, v3 = ldg4(a, (row0 + r) * k + q)
            a_next[4 * l], a_next[4 * l + 1], a_next[4 * l + 2], a_next[4 * l + 3] = \
                v0, v1, v2, v3
        for l in range(B_VEC):
            e = t + l * NT
            r, q = e // (BN // 4), (e % (BN // 4)) * 4
            v0, v1, v2, v3 = ldg4(b, r * n + col0 + q)
            b_next[4 * l], b_next[4 * l + 1], b_next[4 * l + 2], b_next[4 * l + 3] = \
                v0, v1, v2, v3
        for k0 in range(0, k, BK):
            for l in range(A_VEC):                       # registers -> shared memory
                e = t + l * NT
                r, q = e // (BK // 4), (e % (BK // 4)) * 4
                for j in range(4):
                    a_s[(q + j) * BM + r] = a_next[4 * l + j]
            for l in range(B_VEC):
                e = t + l * NT
                r, q = e // (BN // 4), (e % (BN // 4)) * 4
                sts4(b_s, r * BN + q, b_next[4 * l], b_next[4 * l + 1], b_next[4 * l + 2],
                     b_next[4 * l + 3])
            cuda.syncthreads()
            if k0 + BK < k:                              # the next tiles: in flight during
                for l in range(A_VEC):                   # the FMAs below
                    e = t + l * NT
                    r, q = e // (BK // 4), (e % (BK // 4)) * 4
                    v0, v1, v2, v3 = ldg4(a, (row0 + r) * k + k0 + BK + q)
                    a_next[4 * l], a_next[4 * l + 1], a_next[4 * l + 2], a_next[4 * l + 3] = \
                        v0, v1, v2, v3
                for l in range(B_VEC):
                    e = t + l * NT
                    r, q = e // (BN // 4), (e % (BN // 4)) * 4
                    v0, v1, v2, v3 = ldg4(b, (k0 + BK + r) * n + col0 + q)
                    b_next[4 * l], b_next[4 * l + 1], b_next[4 * l + 2], b_next[4 * l + 3] = \
                        v0, v1, v2, v3
            for d in range(BK):
                for g in range(MQ):
                    v0, v1, v2, v3 = lds4(a_s, d * BM + g * MS + ty)
                    a_r[4 * g], a_r[4 * g + 1], a_r[4 * g + 2], a_r[4 * g + 3] = v0, v1, v2, v3
                for g in range(NQ):
                    v0, v1, v2, v3 = lds4(b_s, d * BN + g * NS + tx)
                    b_r[4 * g], b_r[4 * g + 1], b_r[4 * g + 2], b_r[4 * g + 3] = v0, v1, v2, v3
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_r[i] * b_r[j]
            cuda.syncthreads()                           # all read before the next stores
        for i in range(TM):
            row = row0 + (i // 4) * MS + ty + i % 4
            for g in range(NQ):
                stg4(c, row * n + col0 + g * NS + tx, acc[i, 4 * g], acc[i, 4 * g + 1],
                     acc[i, 4 * g + 2], acc[i, 4 * g + 3])

    gemm_prefetch_kernel.__name__ = gemm_prefetch_kernel.__qualname__ = name
    gemm_prefetch_kernel.__module__ = module
    bounds = {} if config.ENABLE_CUDASIM else {"launch_bounds": (NT,)}
    return cuda.jit(**bounds)(gemm_prefetch_kernel)


def kernel_name(cfg: Config, guarded: bool = False) -> str:
    """The module-level name of the kernel for ``cfg``: ``gemm_autotuned_kernel`` (and
    ``..._edges_kernel``) for :data:`DEFAULT`, else e.g. ``gemm_tiles_128x64x16_8x4_kernel``
    (``_prefetch`` when it prefetches)."""
    if cfg == DEFAULT:
        return "gemm_autotuned_edges_kernel" if guarded else "gemm_autotuned_kernel"
    pre = "_prefetch" if cfg.prefetch and not guarded else ""
    edges = "_edges" if guarded else ""
    return f"gemm_tiles_{cfg.bm}x{cfg.bn}x{cfg.bk}_{cfg.tm}x{cfg.tn}{pre}{edges}_kernel"


def _make(cfg: Config, guarded: bool, name: str):
    if cfg.prefetch and not guarded:
        return make_prefetch_kernel(cfg, name, __name__)
    return make_kernel(Config(cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn), guarded, name, __name__)


#: The kernels at :data:`DEFAULT` (what :func:`chosen` gives before tuning): whole tiles with
#: prefetch, and the edges with bounds checks (rung 6's guarded code).
gemm_autotuned_kernel = _make(DEFAULT, False, "gemm_autotuned_kernel")
gemm_autotuned_edges_kernel = _make(DEFAULT, True, "gemm_autotuned_edges_kernel")

# The other candidates' two kernels, kept at the top of this module too (each compiled on its
# first launch), so that helpers.compiled can find them by name and check each.
for _cfg in CANDIDATES[1:]:
    for _guarded in (False, True):
        _name = kernel_name(_cfg, _guarded)
        if _name not in globals():
            globals()[_name] = _make(_cfg, _guarded, _name)
del _cfg, _guarded, _name


def kernel_for(cfg: Config, guarded: bool = False):
    """The ``@cuda.jit`` kernel for tile sizes ``cfg``, whole tiles or (``guarded``) the edges;
    made on first use for a configuration that is not a candidate."""
    name = kernel_name(cfg, guarded)
    if name not in globals():
        globals()[name] = _make(cfg, guarded, name)
    return globals()[name]


def launches(cfg: Config, a, b, c, m: int, n: int, k: int, vec: bool):
    """The kernel launches of C = A @ B at tile sizes ``cfg``, each ``(kernel[grid, block],
    args)``; a, b, c are the flat kernel arrays (:func:`helpers.conv.gemm.rung6_vectorized.tiles`
    plans the whole tiles and the edges)."""
    out = []
    for guarded, grid, (by0, bx0) in tiles(cfg, m, n, k, vec):
        out.append((kernel_for(cfg, guarded)[grid, cfg.threads],
                    (a, b, c, np.int64(m), np.int64(n), np.int64(k), np.int64(by0),
                     np.int64(bx0))))
    return out


#: (device, m, n, k) -> the fastest configuration timed there.
_CHOSEN: dict[tuple[str, int, int, int], Config] = {}


def chosen(m: int, n: int, k: int) -> Config:
    """The tile sizes for an (M, K) x (K, N) GEMM: the fastest :func:`autotune` found on
    this GPU at that size, else at the nearest tuned size (by log-distance), else DEFAULT."""
    if backend.MODE != "gpu":
        return DEFAULT
    label = backend.info().device_label
    tuned = {key[1:]: cfg for key, cfg in _CHOSEN.items() if key[0] == label}
    if not tuned:
        return DEFAULT
    near = min(tuned, key=lambda s: sum(abs(math.log(a / b)) for a, b in zip(s, (m, n, k))))
    return tuned[near]


def autotune(m: int, n: int, k: int, repeats: int = 10) -> list[tuple[Config, float]]:
    """Time every candidate at an (M, K) x (K, N) GEMM on this GPU; remember the fastest.

    Args:
        m, n, k: the GEMM's size, each >= 1. repeats: timed launches per candidate (>= 1),
            after one untimed launch that also compiles the kernel.

    Returns:
        (config, median milliseconds per launch) for every candidate, fastest first.

    Raises:
        RuntimeError: no GPU (the simulator's timings mean nothing).
        ValueError: a size < 1 or repeats < 1.
    """
    if backend.MODE != "gpu":
        raise RuntimeError("autotune times kernels on a GPU; here kernels run in the simulator")
    if min(m, n, k) < 1 or repeats < 1:
        raise ValueError(f"m, n, k and repeats must be >= 1, got {m, n, k, repeats}")
    import torch
    from numba import cuda

    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((m, k), device="cuda", generator=gen)
    b = torch.randn((k, n), device="cuda", generator=gen)
    c = torch.empty((m, n), device="cuda")
    vec = k % 4 == 0 and n % 4 == 0
    flat = [cuda.as_cuda_array(t.reshape(-1)) for t in (a, b, c)]
    timed = []
    for cfg in CANDIDATES:
        calls = launches(cfg, *flat, m, n, k, vec)
        for fn, args in calls:                  # compiles, and warms up
            fn(*args)
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for fn, args in calls:
                fn(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        timed.append((cfg, statistics.median(times)))
    timed.sort(key=lambda pair: pair[1])
    _CHOSEN[(backend.info().device_label, int(m), int(n), int(k))] = timed[0][0]
    return timed
