"""Host side of the GEMM ladder: each rung's launch shape, one way to launch any rung, split-K.

:data:`RUNGS` lists the ladder in order; :func:`launcher` converts the operands once and returns
a call that only launches (what a benchmark times); :func:`gemm` is the one-call form with
checks; :func:`gemm_nt` is C = A @ B^T by split-K. Shapes: a (M, K), b (K, N), c (M, N),
float32; cuBLAS-free: every product here is one of our kernels.

Source: Boehm (2022) and siboehm/SGEMM_CUDA (one runner timing every kernel the same way).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from helpers.conv.gemm import rung6_vectorized as r6
from helpers.conv.gemm import rung7_autotuned as r7
from helpers.conv.gemm import splitk
from helpers.conv.gemm.rung1_uncoalesced import BLOCK as UNCOALESCED_BLOCK
from helpers.conv.gemm.rung1_uncoalesced import gemm_uncoalesced_kernel
from helpers.conv.gemm.rung2_naive import gemm_naive_kernel
from helpers.conv.gemm.rung3_tiled import TILE, gemm_tiled_kernel
from helpers.conv.gemm.rung4_blocktile_1d import gemm_blocktile_1d_kernel
from helpers.conv.gemm.rung4_blocktile_1d import BK as BK4, BM as BM4, BN as BN4
from helpers.conv.gemm.rung4_blocktile_1d import THREADS as THREADS4
from helpers.conv.gemm.rung5_blocktile_2d import gemm_blocktile_2d_kernel
from helpers.conv.gemm.rung5_blocktile_2d import BK as BK5, BM as BM5, BN as BN5
from helpers.conv.gemm.rung5_blocktile_2d import THREADS as THREADS5
from helpers.device import backend
from helpers.device.arrays import cuda_device, kernel_array, launch, poisoned, to_torch

__all__ = ["Rung", "RUNGS", "KERNELS", "SIMULATOR_MAX_THREADS", "rung", "launch_config",
           "rung_launch", "launcher", "simulator_refusal", "gemm", "gemm_flops", "gemm_nt",
           "splitk_plan", "WORKLOG_A6000"]


@dataclasses.dataclass(frozen=True)
class Rung:
    """One rung of the GEMM ladder.

    Attributes:
        number: 1..7, in the order of the ladder. name: short name (``gemm(kernel=...)``).
        title: a few words. idea: what this rung changes, in one sentence.
        module: where its kernel lives. kernel_name: the kernel's name there.
        flat: the kernel takes flat arrays and ``(m, n, k[, vec])`` instead of 2-D arrays.
        tile: (rows, columns) of C a block computes. threads: the block's shape.
        sim_threads_per_s: rough simulator speed, threads a second per unit of K (for refusals).
        tile_fmas: FMAs one thread does per step of its block along K (one tile of A and B
            loaded), or None for the naive rungs, which load per FMA.
    """

    number: int
    name: str
    title: str
    idea: str
    module: str
    kernel_name: str
    flat: bool
    tile: tuple[int, int]
    threads: tuple[int, ...]
    sim_threads_per_s: float
    tile_fmas: int | None = None

    @property
    def kernel(self):
        """The ``@cuda.jit`` kernel (for ``autotuned``: at the tile sizes chosen so far)."""
        import importlib

        return getattr(importlib.import_module(self.module), self.kernel_name)


_P = "helpers.conv.gemm."
_V = r6.DEFAULT

#: The GEMM ladder, in order.
RUNGS: tuple[Rung, ...] = (
    Rung(1, "uncoalesced", "naive, threads along rows",
         "one thread per element of C, warps along the rows: every access uncoalesced",
         _P + "rung1_uncoalesced", "gemm_uncoalesced_kernel", False, UNCOALESCED_BLOCK,
         UNCOALESCED_BLOCK, 3_000),
    Rung(2, "naive", "naive, coalesced",
         "the same kernel with warps along the columns: loads of B and stores of C coalesce",
         _P + "rung2_naive", "gemm_naive_kernel", False, (TILE, TILE), (TILE, TILE), 3_000),
    Rung(3, "tiled", "shared-memory tiles",
         "16 x 16 tiles of A and B staged in shared memory: 16x fewer global loads",
         _P + "rung3_tiled", "gemm_tiled_kernel", False, (TILE, TILE), (TILE, TILE), 60, TILE),
    Rung(4, "blocktile-1d", "1-D blocktiling",
         "8 results of C per thread: one shared load of B serves 8 FMAs",
         _P + "rung4_blocktile_1d", "gemm_blocktile_1d_kernel", True, (BM4, BN4),
         (THREADS4,), 40, BM4 * BN4 * BK4 // THREADS4),
    Rung(5, "blocktile-2d", "2-D blocktiling",
         "an 8 x 8 register tile per thread: 64 FMAs per 16 shared loads",
         _P + "rung5_blocktile_2d", "gemm_blocktile_2d_kernel", True, (BM5, BN5),
         (THREADS5,), 15, BM5 * BN5 * BK5 // THREADS5),
    Rung(6, "vectorized", "128-bit loads",
         "float4 global and shared loads, A transposed in shared memory: 64 FMAs per 4 loads",
         _P + "rung6_vectorized", "gemm_vectorized_kernel", True, (_V.bm, _V.bn),
         (_V.threads,), 15, _V.bm * _V.bn * _V.bk // _V.threads),
    Rung(7, "autotuned", "autotuned tiles",
         "rung 6 at the block and thread tile sizes this GPU runs fastest",
         _P + "rung7_autotuned", "gemm_autotuned_kernel", True, (_V.bm, _V.bn),
         (_V.threads,), 15, _V.bm * _V.bn * _V.bk // _V.threads),
)

#: The names :func:`gemm` takes.
KERNELS = tuple(r.name for r in RUNGS)

#: Each rung's throughput as a fraction of cuBLAS on an RTX A6000 at 4096 x 4096, FP32, as
#: reported in S. Boehm, "How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a
#: Worklog" (2022), table at its top (kernels 1-6 and 9; his kernel 10, warptiling, 93.7 %).
WORKLOG_A6000: dict[str, float] = {"uncoalesced": 0.013, "naive": 0.085, "tiled": 0.128,
                                   "blocktile-1d": 0.365, "blocktile-2d": 0.687,
                                   "vectorized": 0.784, "autotuned": 0.848}

#: Without a GPU, the most threads (C's elements rounded up to whole blocks) :func:`gemm`
#: launches on the simulator.
SIMULATOR_MAX_THREADS = 20_000


def rung(key) -> Rung:
    """The rung named ``key`` (a name of :data:`KERNELS`) or numbered ``key`` (1..7).

    Raises:
        ValueError: no such rung.
    """
    for r in RUNGS:
        if key == r.name or (isinstance(key, (int, np.integer)) and not isinstance(key, bool)
                             and int(key) == r.number):
            return r
    raise ValueError(f"kernel must be one of {KERNELS} or a rung number 1..{len(RUNGS)}, "
                     f"got {key!r}")


def _check_mn(m, n) -> None:
    for name, v in (("m", m), ("n", n)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")


def launch_config(m: int, n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Grid and block of rungs 2 and 3 (one thread per element of C, TILE x TILE blocks).

    Returns:
        ``((ceil(n / TILE), ceil(m / TILE)), (TILE, TILE))``, CUDA's (x, y) order: x along
        the columns of C, so that a warp's 32 threads read consecutive elements of a row of B
        and write consecutive elements of C (coalesced). The last blocks may reach past C.

    Raises:
        ValueError: m or n not an integer >= 1, or a grid beyond the CUDA limits (y, along
            the rows, at most 65,535 blocks: M at most 65,535 * TILE).
    """
    _check_mn(m, n)
    return launch((int(n), int(m)), (TILE, TILE), f"a GEMM with C of {m:,} x {n:,}")


def _config(r: Rung, m: int, n: int, k: int) -> r6.Config | None:
    if r.name == "autotuned":
        return r7.chosen(m, n, k)
    if r.name == "vectorized":
        return r6.DEFAULT
    return None


def rung_launch(r: Rung, m: int, n: int, k: int = 1):
    """(grid, block) of rung ``r`` for C of m x n (k picks rung 7's tile sizes).

    Raises:
        ValueError: m or n not an integer >= 1; a grid beyond the CUDA limits.
    """
    _check_mn(m, n)
    what = f"the {r.name} GEMM kernel with C of {m:,} x {n:,}"
    if r.name == "uncoalesced":
        return launch((int(m), int(n)), r.threads, what)
    if not r.flat:
        return launch_config(m, n)
    cfg = _config(r, m, n, k)
    bm, bn, threads = (cfg.bm, cfg.bn, cfg.threads) if cfg else (*r.tile, r.threads[0])
    grid, _ = launch((math.ceil(n / bn), math.ceil(m / bm)), (1, 1), what)
    return grid, threads


def simulator_refusal(m: int, k: int, n: int, kernel: str = "tiled") -> str | None:
    """Without a GPU, why an (M, K) x (K, N) GEMM by ``kernel`` is too slow for the CUDA
    simulator (more than :data:`SIMULATOR_MAX_THREADS` threads, M*N rounded up to whole
    blocks; the reason gives the estimated seconds), else None. Always None on a GPU.

    Raises:
        ValueError: as :func:`rung_launch`; an unknown kernel.
    """
    r = rung(kernel)
    grid, block = rung_launch(r, m, n, k)
    blocks = math.prod(grid) if isinstance(grid, tuple) else grid
    threads = blocks * (math.prod(block) if isinstance(block, tuple) else block)
    if backend.MODE != "simulator" or threads <= SIMULATOR_MAX_THREADS:
        return None
    seconds = threads * max(1, k // 16) / r.sim_threads_per_s
    return (f"C is {m} x {n}: {threads:,} threads ({blocks} blocks) would take the CUDA "
            f"simulator about {seconds:,.0f} s with the {r.name} kernel. Without a GPU keep "
            f"M*N, rounded up to whole blocks, at most {SIMULATOR_MAX_THREADS:,}.")


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of an (M, K) @ (K, N) product: ``2 * M * N * K``.

    Each of the M*N elements of C takes K multiplies and K adds (a fused multiply-add counts
    as 2).
    """
    return 2 * int(m) * int(n) * int(k)


def _aligned(*tensors: torch.Tensor) -> bool:
    """Whether every tensor's data starts on a 16-byte boundary (float4 loads need it)."""
    return all(t.data_ptr() % 16 == 0 for t in tensors)


def launcher(kernel, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor):
    """A call that launches rung ``kernel`` for c = a @ b and does nothing else.

    The operands are converted to kernel arrays once, here, so that a benchmark timing the
    returned call times the kernel launch alone (no conversion, allocation or poisoning).

    Args:
        kernel: a rung name or number (:func:`rung`).
        a, b, c: contiguous float32 tensors on :func:`cuda_device`, (M, K), (K, N), (M, N).

    Returns:
        A function of no arguments that launches the kernel (asynchronously on a GPU).

    Raises:
        ValueError: an unknown rung; shapes that do not match; a grid beyond the CUDA limits.
    """
    r = rung(kernel)
    m, k = a.shape
    if b.shape[0] != k or tuple(c.shape) != (m, b.shape[1]):
        raise ValueError(f"shapes do not match: a {tuple(a.shape)}, b {tuple(b.shape)}, "
                         f"c {tuple(c.shape)}; need (M, K), (K, N), (M, N)")
    n = b.shape[1]
    grid, block = rung_launch(r, m, n, k)
    if not r.flat:
        fn = r.kernel[grid, block]
        args = (kernel_array(a), kernel_array(b), kernel_array(c))
        return lambda: fn(*args)
    flat = (kernel_array(a.reshape(-1)), kernel_array(b.reshape(-1)),
            kernel_array(c.reshape(-1)))
    cfg = _config(r, m, n, k)
    if cfg is None:
        fn = r.kernel[grid, block]
        args = (*flat, np.int64(m), np.int64(n), np.int64(k))
        return lambda: fn(*args)
    vec = k % 4 == 0 and n % 4 == 0 and _aligned(a, b, c)
    if r.name == "autotuned":
        calls = r7.launches(cfg, *flat, m, n, k, vec)
    else:
        calls = [((r6.gemm_vectorized_edges_kernel if guarded else r6.gemm_vectorized_kernel)
                  [g, cfg.threads], (*flat, np.int64(m), np.int64(n), np.int64(k),
                                     np.int64(by0), np.int64(bx0)))
                 for guarded, g, (by0, bx0) in r6.tiles(cfg, m, n, k, vec)]

    def run():
        for fn, args in calls:
            fn(*args)

    return run


def _check_operand(name: str, x) -> None:
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise TypeError(f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}"
                        "; for Numba device arrays launch the kernel directly")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(x.shape)}")
    if 0 in tuple(x.shape):
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")
    floating = x.dtype.is_floating_point if isinstance(x, torch.Tensor) else x.dtype.kind == "f"
    if not floating:
        raise ValueError(f"{name} must be floating point, got {x.dtype}")


def _operands(a, b, transposed_b: bool = False):
    _check_operand("a", a)
    _check_operand("b", b)
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray):
        raise TypeError(f"a and b must both be NumPy arrays or both torch tensors, got "
                        f"{type(a).__name__} and {type(b).__name__}")
    inner = b.shape[1] if transposed_b else b.shape[0]
    if a.shape[1] != inner:
        side = "columns" if transposed_b else "rows"
        raise ValueError(f"inner dimensions differ: a is {tuple(a.shape)} and b is "
                         f"{tuple(b.shape)}; a's columns must equal b's {side}")


def gemm(a, b, kernel: str = "tiled"):
    """C = A @ B with one of the ladder's kernels.

    Args:
        a: (M, K), b: (K, N); both NumPy arrays or both torch tensors, of any floating dtype
            and any strides. They are handed to the kernel as contiguous float32 tensors on
            :func:`helpers.device.arrays.cuda_device` (no copy when they already are).
        kernel: a rung name of :data:`KERNELS` (default ``"tiled"``, rung 3) or number.

    Returns:
        C, (M, N) float32: a NumPy array if the inputs are NumPy, else a tensor on ``a``'s
        device. C starts filled with NaN, so an element no thread wrote would show as NaN.

    Raises:
        TypeError: an input that is neither a NumPy array nor a torch tensor, or one of each.
        ValueError: an unknown kernel, an input that is not 2-D, is empty or is not floating
            point, inner dimensions that differ (the message names both shapes), or, without a
            GPU, more than :data:`SIMULATOR_MAX_THREADS` threads (M*N rounded up to whole
            blocks; the message gives the simulator's estimated time).
    """
    r = rung(kernel)
    _operands(a, b)
    m, k, n = int(a.shape[0]), int(a.shape[1]), int(b.shape[1])
    rung_launch(r, m, n, k)
    reason = simulator_refusal(m, k, n, r.name)
    if reason:
        raise ValueError(reason)
    dev = cuda_device()
    ta, tb = to_torch(a, dev), to_torch(b, dev)  # contiguous float32: no copy if already so
    c = poisoned((m, n), dev)
    launcher(r.name, ta, tb, c)()               # writes into c
    if isinstance(a, np.ndarray):
        return c.cpu().numpy()
    return c.to(a.device)


#: Split-K: enough blocks for every SM several times over, and no chunk shorter than this.
SPLITK_MIN_CHUNK = 256
SPLITK_TARGET_BLOCKS = 1024


def splitk_plan(m: int, n: int, kd: int) -> tuple[int, int]:
    """(splits, chunk) for C (M, N) = A (M, Kd) @ B (N, Kd)^T: about
    :data:`SPLITK_TARGET_BLOCKS` blocks in all, chunks a multiple of ``splitk.BK`` and at
    least :data:`SPLITK_MIN_CHUNK` long (one split when Kd is short), at most 65,535 splits."""
    tiles = math.ceil(m / splitk.BM) * math.ceil(n / splitk.BN)
    want = max(1, min(SPLITK_TARGET_BLOCKS // tiles, kd // SPLITK_MIN_CHUNK, 65_535))
    chunk = math.ceil(math.ceil(kd / want) / splitk.BK) * splitk.BK
    return math.ceil(kd / chunk), chunk


def gemm_nt(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B^T by split-K (:mod:`helpers.conv.gemm.splitk`), for a long inner dimension.

    Args:
        a: (M, Kd), b: (N, Kd); contiguous float32 tensors on :func:`cuda_device` (others are
            converted).

    Returns:
        C, (M, N) float32 tensor on :func:`cuda_device`, NaN-poisoned before the kernels write.

    Raises:
        TypeError, ValueError: as :func:`gemm` (b's columns must equal a's columns).
    """
    _operands(a, b, transposed_b=True)
    dev = cuda_device()
    ta, tb = to_torch(a, dev), to_torch(b, dev)
    m, kd, n = int(ta.shape[0]), int(ta.shape[1]), int(tb.shape[0])
    splits, chunk = splitk_plan(m, n, kd)
    grid, _ = launch((math.ceil(n / splitk.BN), math.ceil(m / splitk.BM), splits), (1, 1, 1),
                     "gemm_nt_splitk_kernel")
    part = poisoned((splits * m * n,), dev)
    c = poisoned((m, n), dev)
    splitk.gemm_nt_splitk_kernel[grid, splitk.THREADS](
        kernel_array(ta.reshape(-1)), kernel_array(tb.reshape(-1)), kernel_array(part),
        np.int64(m), np.int64(n), np.int64(kd), np.int64(chunk))
    rgrid, rblock = launch(m * n, 256, "gemm_splitk_reduce_kernel")
    splitk.gemm_splitk_reduce_kernel[rgrid, rblock](
        kernel_array(part), kernel_array(c.reshape(-1)), np.int64(m * n), np.int64(splits))
    return c
