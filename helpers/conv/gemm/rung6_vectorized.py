"""Rung 6 of the GEMM ladder: 128-bit loads and stores, and a conflict-free register tile.

Three changes to rung 5, all about moving data in fewer, wider instructions. (1) Global loads
of A and B are ``ld.global.v4.f32`` (:mod:`helpers.conv.gemm.vector`): four floats a thread per
instruction. (2) A's tile is stored transposed, (BK, BM), so that a thread's TM values of A for
one step along K are adjacent and, like B's TN values, come in ``ld.shared.v4.f32`` loads:
64 FMAs per 4 shared loads for 8 x 8, four times rung 5. (3) A thread's 8 columns are two
groups of 4 at ``tx * 4`` and ``BN / 2 + tx * 4``: eight neighbouring threads then read eight
consecutive 16-byte words, 128 bytes that touch each of the 32 banks once. Tiles at the edges of C, and matrices
whose rows are not multiples of 4 floats, go to a second build of the same code with bounds
checks (:func:`tiles` plans the launches); :func:`make_kernel` builds either at other tile
sizes. Shapes: flat row-major float32 a (M*K,), b (K*N,), c (M*N,); m, n, k, by0, bx0 int64.

Source: Boehm (2022), kernel 6 ("vectorize SMEM and GMEM accesses"); CUDA C++ Programming Guide,
"Shared Memory" (32 banks of 4 bytes).
"""

from __future__ import annotations

import dataclasses

from numba import config, cuda, float32

from helpers.conv.gemm.vector import ALIGN, ldg4, lds4, stg4, sts4

__all__ = ["Config", "DEFAULT", "make_kernel", "tiles", "gemm_vectorized_kernel",
           "gemm_vectorized_edges_kernel"]


@dataclasses.dataclass(frozen=True)
class Config:
    """Tile sizes of the vectorised kernel: block tile bm x bn, K step bk, thread tile tm x tn.

    Attributes:
        bm, bn, bk, tm, tn: ints; tm and tn multiples of 4; see :meth:`problem`.
        prefetch: rung 7's variant that loads the next tiles while computing on these
            (:func:`helpers.conv.gemm.rung7_autotuned.make_prefetch_kernel`); rung 6 has none.
    """

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    prefetch: bool = False

    @property
    def threads(self) -> int:
        """Threads a block: (bm / tm) * (bn / tn)."""
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        """Static shared memory a block: A's and B's tiles, float32."""
        return 4 * self.bk * (self.bm + self.bn)

    def problem(self) -> str | None:
        """Why this is not a valid configuration, or None."""
        sizes = (self.bm, self.bn, self.bk, self.tm, self.tn)
        if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in sizes):
            return f"every tile size must be an int >= 1, got {self}"
        if self.tm % 4 or self.tn % 4 or self.bm % self.tm or self.bn % self.tn:
            return f"tm and tn must be multiples of 4 dividing bm and bn, got {self}"
        if self.bk % 4:
            return f"bk must be a multiple of 4 (one 16-byte load of A per 4 steps), got {self}"
        if not 32 <= self.threads <= 1024:
            return f"{self.threads} threads a block: must be 32..1024 ({self})"
        for name, elements in (("A", self.bm * self.bk), ("B", self.bk * self.bn)):
            if elements % (4 * self.threads):
                return (f"{name}'s tile ({elements} floats) must be a whole number of float4 "
                        f"loads per thread ({self.threads} threads): {self}")
        return None


#: Boehm's tile sizes: 128 x 128 blocks, 8 steps of K, 8 x 8 results per thread, 256 threads.
DEFAULT = Config(128, 128, 8, 8, 8)


def make_kernel(cfg: Config = DEFAULT, guarded: bool = False,
                name: str = "gemm_vectorized_kernel", module: str = __name__):
    """The vectorised GEMM kernel for tile sizes ``cfg``: ``kernel(a, b, c, m, n, k, by0, bx0)``.

    Launch it on a grid of blocks of ``cfg.threads`` threads (1-D); block (x, y) computes the
    tile of C whose first row is ``(y + by0) * bm`` and first column ``(x + bx0) * bn``.
    ``guarded=False`` (the fast kernel) assumes whole tiles: M, N and K multiples of bm, bn, bk
    covered, rows of A, B and C that start on 16 bytes (K and N multiples of 4, aligned
    arrays); it loads and stores with float4 and checks no bounds. ``guarded=True`` compiles
    the same code with bounds checks and scalar loads instead, for the tiles at the edges of C
    (or a whole C that is not aligned): the two are separate kernels, so the checks cost the
    fast kernel no registers. ``name`` and ``module`` say where the kernel is kept, so that
    :mod:`helpers.compiled` can find it again in a child process.

    Raises:
        ValueError: ``cfg`` is not valid (:meth:`Config.problem`).
    """
    if (reason := cfg.problem()) is not None:
        raise ValueError(f"cfg: {reason}")
    if cfg.prefetch:
        raise ValueError("cfg: prefetch is rung 7's kernel (rung7_autotuned.make_prefetch_kernel)")
    BM, BN, BK, TM, TN = cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    NT = cfg.threads
    A_TILE, B_TILE = BM * BK, BK * BN
    A_VEC, B_VEC = A_TILE // (4 * NT), B_TILE // (4 * NT)  # float4 loads per thread
    A_ONE, B_ONE = A_TILE // NT, B_TILE // NT              # scalar loads per thread (edges)
    COLS = BN // TN                  # threads along a row of the block tile
    MQ, NQ = TM // 4, TN // 4        # groups of 4 rows / columns per thread
    MS, NS = BM // MQ, BN // NQ      # distance between a thread's groups
    GUARDED = bool(guarded)          # a compile-time constant: the other branch is not compiled

    def gemm_vectorized_kernel(a, b, c, m, n, k, by0, bx0):
        a_s = cuda.shared.array(A_TILE, float32, alignment=ALIGN)   # (BK, BM): A transposed
        b_s = cuda.shared.array(B_TILE, float32, alignment=ALIGN)   # (BK, BN)
        t = cuda.threadIdx.x
        row0 = (cuda.blockIdx.y + by0) * BM
        col0 = (cuda.blockIdx.x + bx0) * BN
        ty = (t // COLS) * 4           # first row of this thread's first group of 4
        tx = (t % COLS) * 4            # first column of its first group of 4
        acc = cuda.local.array((TM, TN), float32)
        a_r = cuda.local.array(TM, float32)
        b_r = cuda.local.array(TN, float32)
        for i in range(TM):
            for j in range(TN):
                acc[i, j] = float32(0.0)
        for k0 in range(0, k, BK):
            if not GUARDED:                                    # whole tiles: float4 loads
                for l in range(A_VEC):
                    e = t + l * NT
                    r, q = e // (BK // 4), (e % (BK // 4)) * 4
                    v0, v1, v2, v3 = ldg4(a, (row0 + r) * k + k0 + q)
                    a_s[q * BM + r] = v0       # transposed: column q of A's tile is a row
                    a_s[(q + 1) * BM + r] = v1
                    a_s[(q + 2) * BM + r] = v2
                    a_s[(q + 3) * BM + r] = v3
                for l in range(B_VEC):
                    e = t + l * NT
                    r, q = e // (BN // 4), (e % (BN // 4)) * 4
                    v0, v1, v2, v3 = ldg4(b, (k0 + r) * n + col0 + q)
                    sts4(b_s, r * BN + q, v0, v1, v2, v3)
            else:                                              # the edges: bounds checks
                for l in range(A_ONE):
                    e = t + l * NT
                    r, q = e // BK, e % BK
                    v = float32(0.0)
                    if row0 + r < m and k0 + q < k:
                        v = a[(row0 + r) * k + k0 + q]
                    a_s[q * BM + r] = v
                for l in range(B_ONE):
                    e = t + l * NT
                    r, q = e // BN, e % BN
                    v = float32(0.0)
                    if k0 + r < k and col0 + q < n:
                        v = b[(k0 + r) * n + col0 + q]
                    b_s[e] = v
            cuda.syncthreads()
            for d in range(BK):
                for g in range(MQ):                            # TM values of A: MQ float4
                    v0, v1, v2, v3 = lds4(a_s, d * BM + g * MS + ty)
                    a_r[4 * g], a_r[4 * g + 1], a_r[4 * g + 2], a_r[4 * g + 3] = v0, v1, v2, v3
                for g in range(NQ):                            # TN values of B: NQ float4
                    v0, v1, v2, v3 = lds4(b_s, d * BN + g * NS + tx)
                    b_r[4 * g], b_r[4 * g + 1], b_r[4 * g + 2], b_r[4 * g + 3] = v0, v1, v2, v3
                for i in range(TM):
                    for j in range(TN):
                        acc[i, j] += a_r[i] * b_r[j]
            cuda.syncthreads()
        for i in range(TM):
            row = row0 + (i // 4) * MS + ty + i % 4
            for g in range(NQ):
                col = col0 + g * NS + tx
                if not GUARDED:
                    stg4(c, row * n + col, acc[i, 4 * g], acc[i, 4 * g + 1],
                         acc[i, 4 * g + 2], acc[i, 4 * g + 3])
                else:
                    for j in range(4):
                        if row < m and col + j < n:
                            c[row * n + col + j] = acc[i, 4 * g + j]

    gemm_vectorized_kernel.__name__ = gemm_vectorized_kernel.__qualname__ = name
    gemm_vectorized_kernel.__module__ = module
    # the most threads a block: the compiler keeps the registers a block needs within an SM's
    bounds = {} if config.ENABLE_CUDASIM else {"launch_bounds": (NT,)}
    return cuda.jit(**bounds)(gemm_vectorized_kernel)


#: The fast kernel (whole tiles) at :data:`DEFAULT` tile sizes, and the same with bounds checks.
gemm_vectorized_kernel = make_kernel(DEFAULT)
gemm_vectorized_edges_kernel = make_kernel(DEFAULT, True, "gemm_vectorized_edges_kernel")


def tiles(cfg: Config, m: int, n: int, k: int, vec: bool) -> list[tuple[bool, tuple, tuple]]:
    """The launches that cover C (m x n) with tile sizes ``cfg``: ``(guarded, grid, (by0,
    bx0))`` each. The whole tiles go to the fast kernel when every row is 16-byte aligned
    (``vec``) and K is a multiple of bk; the right and bottom strips, or everything when not
    aligned, to the guarded one. Grids are (x, y) = (columns, rows) of tiles."""
    full_m, full_n = m // cfg.bm, n // cfg.bn
    all_m, all_n = -(-m // cfg.bm), -(-n // cfg.bn)
    if not (vec and k % cfg.bk == 0 and full_m and full_n):
        return [(True, (all_n, all_m), (0, 0))]
    out = [(False, (full_n, full_m), (0, 0))]
    if full_n < all_n:                      # the right strip, beside the whole tiles
        out.append((True, (1, full_m), (0, full_n)))
    if full_m < all_m:                      # the bottom strip, the corner included
        out.append((True, (all_n, 1), (full_m, 0)))
    return out
