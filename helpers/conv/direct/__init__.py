"""Direct convolution: slide the filter over the input, a dot product at every output position.

The study's first strategy (cuda-convnet2, its Section II-B). CUDA ``direct-naive``: one thread
per output element (:mod:`.teaching`, with the tiled kernel notebooks 03 and 07 teach from).
CUDA ``direct-tiled``: the register-blocked kernel of :mod:`.forward` (32 filters x an output
tile per block, input patch and filters in shared memory, 8 filters x 4 pixels per thread).
Backward, shared by both: ``dx`` by the same kernel on dy with the filters flipped, ``dw`` as a
split reduction over N*P*Q (:mod:`.backward`); windows beyond MAX_KERNEL or strides beyond
MAX_STRIDE fall back to the first one-thread-per-element kernels. CPU: Numba loops (:mod:`.cpu`).
``python -m helpers.kernels`` shows each kernel's registers and occupancy.
Shapes (cuDNN paper): x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q); float32 tensors from
:mod:`helpers.device.arrays` (zero-copy views handed to the kernels).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from helpers.conv import depthwise
from helpers.conv.config import ConvConfig
from helpers.conv.direct import backward, forward
from helpers.conv.direct.backward import DwLaunch, direct_dw_reduce_kernel, dw_launch, dx_launch
from helpers.conv.direct.cpu import _forward_cpu  # noqa: F401  (notebook 03 shows it)
from helpers.conv.direct.cpu import backward_cpu, forward_cpu
from helpers.conv.direct.forward import FwdLaunch, forward_launch
from helpers.conv.direct.teaching import (
    IN_TILE, MAX_KERNEL, MAX_STRIDE, THREADS, TILE, TILED_SHARED_BYTES, TileTraffic,
    _naive_grids, _tiled_grid, direct_dw_kernel, direct_dx_kernel, direct_naive_kernel,
    direct_naive_kernel_float64, direct_tiled_kernel, direct_tiled_kernel_first, tile_traffic,
    window_reads)
from helpers.conv.phases import phase
from helpers.device.arrays import cuda_device, grid_refusal, kernel_array, poisoned

__all__ = ["TILE", "MAX_KERNEL", "MAX_STRIDE", "IN_TILE", "THREADS", "TILED_SHARED_BYTES",
           "forward_cpu", "backward_cpu", "forward_naive", "forward_tiled",
           "forward_tiled_teaching", "backward_cuda", "backward_dx_cuda", "backward_dw_cuda",
           "backward_first_cuda", "naive_supports", "tiled_supports", "launches",
           "launch_every_kernel", "dw_workspace_bytes", "window_reads", "TileTraffic",
           "tile_traffic",
           "direct_naive_kernel", "direct_tiled_kernel", "direct_dx_kernel", "direct_dw_kernel",
           "direct_dw_reduce_kernel", "direct_tiled_kernel_first", "direct_naive_kernel_float64",
           "forward", "backward", "FwdLaunch", "DwLaunch", "EXAMPLE_LAUNCHES"]


# ------------------------------------------------------------------------------ the launches


def _blocked_refusal(cfg: ConvConfig) -> str | None:
    """Why the register-blocked kernels do not take ``cfg`` (their shared tiles are sized for
    windows up to MAX_KERNEL and strides up to MAX_STRIDE), or None."""
    if cfg.r_extent > MAX_KERNEL or cfg.s_extent > MAX_KERNEL:
        spans = (f" dilated by {cfg.dil_h, cfg.dil_w}, spanning {cfg.r_extent}x{cfg.s_extent}"
                 if (cfg.dil_h, cfg.dil_w) != (1, 1) else "")
        return (f"direct-tiled sizes its shared input tile for filters spanning up to "
                f"{MAX_KERNEL}x{MAX_KERNEL}; this kernel is {cfg.r}x{cfg.s}{spans}")
    if cfg.stride_h > MAX_STRIDE or cfg.stride_w > MAX_STRIDE:
        return (f"direct-tiled sizes its shared input tile for strides up to {MAX_STRIDE}; "
                f"this stride is {cfg.stride_h, cfg.stride_w}")
    return None


def _forward_launch(cfg: ConvConfig) -> FwdLaunch:
    return forward_launch(cfg.n, cfg.c, cfg.h, cfg.w, cfg.k, cfg.p, cfg.q, cfg.r, cfg.s,
                          (cfg.stride_h, cfg.stride_w), (cfg.dil_h, cfg.dil_w),
                          (cfg.pad_h, cfg.pad_w))


@functools.lru_cache(maxsize=256)
def launches(cfg: ConvConfig) -> dict:
    """The launches the CUDA path makes for ``cfg`` (one group, not depthwise): ``"forward"``
    (``direct-tiled``'s, a :class:`~helpers.conv.direct.forward.FwdLaunch`), ``"dx"`` (the
    same kernel's, on dy) and ``"dw"`` (a :class:`~helpers.conv.direct.backward.DwLaunch`).
    All None where the register-blocked kernels refuse ``cfg``; ``"dx"`` and ``"dw"`` None too
    where their grids would pass the CUDA limits (more than 65,535 images): the first kernels
    run the backward then. Cached: do not change the dict."""
    if _blocked_refusal(cfg):
        return {"forward": None, "dx": None, "dw": None}
    dx, dw = dx_launch(cfg), dw_launch(cfg)
    if (grid_refusal(dx.grid, "dx") or grid_refusal(dw.grid, "dw")
            or grid_refusal(dw.reduce_grid, "reduce")):
        dx = dw = None
    return {"forward": _forward_launch(cfg), "dx": dx, "dw": dw}


def _backward_refusal(cfg: ConvConfig) -> str | None:
    """None if every launch of the backward fits the CUDA grid limits, else the reason (the
    register-blocked kernels' always fit: :func:`launches` leaves them out where not)."""
    if launches(cfg)["dx"] is not None:
        return None
    grids = _naive_grids(cfg)
    return (grid_refusal(grids["direct_dx_kernel"], "direct_dx_kernel")
            or grid_refusal(grids["direct_dw_kernel"], "direct_dw_kernel"))


def naive_supports(cfg: ConvConfig) -> str | None:
    """None if every launch of ``direct-naive`` (its 1-D forward and the backward both direct
    strategies share) fits the CUDA grid limits, else the reason; a depthwise layer is
    answered by :func:`helpers.conv.depthwise.naive_supports`."""
    if depthwise.is_depthwise(cfg):
        return depthwise.naive_supports(cfg)
    return (grid_refusal(_naive_grids(cfg)["direct_naive_kernel"], "direct_naive_kernel")
            or _backward_refusal(cfg))


def tiled_supports(cfg: ConvConfig) -> str | None:
    """None if the register-blocked kernel takes ``cfg`` (windows spanning up to MAX_KERNEL x
    MAX_KERNEL, strides up to MAX_STRIDE: its shared tiles and unrolled loops are sized for
    them) and its grid (tiles, K / filters per block, N: N at most 65,535 on grid z) and the
    backward's fit the CUDA limits, else the reason; a depthwise layer is answered by
    :func:`helpers.conv.depthwise.tiled_supports`."""
    if depthwise.is_depthwise(cfg):
        return depthwise.tiled_supports(cfg)
    reason = _blocked_refusal(cfg)
    if reason:
        return reason
    fwd = _forward_launch(cfg)
    bk = fwd.key.fk * fwd.key.kg
    return (grid_refusal(fwd.grid, f"direct-tiled's kernel (grid: output tiles, filter tiles of "
                                   f"{bk}, N)") or _backward_refusal(cfg))


def dw_workspace_bytes(cfg: ConvConfig) -> int:
    """Extra GPU memory of the backward, in bytes: the weight gradient's partial sums,
    4 * chunks * K*C*R*S for ``cfg`` (one group; 0 with one chunk or the first kernels).
    The chunks: :func:`helpers.conv.direct.backward.dw_launch`."""
    plan = launches(cfg)["dw"]
    return 0 if plan is None else plan.workspace_bytes


# ------------------------------------------------------------------------------- host code


def _args(cfg):
    return tuple(np.int64(v) for v in (cfg.stride_h, cfg.stride_w, cfg.pad_h, cfg.pad_w,
                                       cfg.dil_h, cfg.dil_w))


def _refuse(reason: str | None) -> None:
    if reason:
        raise ValueError(reason)


def _run(launch, a, b, out) -> None:
    launch.kernel[launch.grid, launch.threads](
        kernel_array(a.reshape(-1)), kernel_array(b.reshape(-1)), kernel_array(out.reshape(-1)),
        *(np.int64(v) for v in launch.args))


def forward_naive(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """``direct-naive`` forward on the CUDA path (GPU or simulator); tensors on cuda_device():
    x (N, C, H, W), w (K, C, R, S) float32 in, y (N, K, P, Q) float32 out. One thread per output
    element (:func:`direct_naive_kernel`, 1-D grid of 128-thread blocks).

    Raises:
        ValueError: a launch beyond the CUDA grid limits (:func:`naive_supports`).
    """
    if depthwise.is_depthwise(cfg):  # groups = C: the depthwise kernels
        return depthwise.forward_naive(x, w, cfg)
    _refuse(naive_supports(cfg))
    y = poisoned(cfg.y_shape, cuda_device())
    with phase("direct (y)"):
        direct_naive_kernel[_naive_grids(cfg)["direct_naive_kernel"], THREADS](
            kernel_array(x), kernel_array(w), kernel_array(y), *_args(cfg))
    return y


def forward_tiled(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """``direct-tiled`` forward on the CUDA path: the register-blocked kernel of
    :mod:`helpers.conv.direct.forward` (launch: :func:`launches`); tensors as
    :func:`forward_naive`.

    Raises:
        ValueError: a configuration :func:`tiled_supports` refuses, with its reason.
    """
    if depthwise.is_depthwise(cfg):  # groups = C: the depthwise kernels
        return depthwise.forward_tiled(x, w, cfg)
    _refuse(tiled_supports(cfg))
    y = poisoned(cfg.y_shape, cuda_device())
    with phase("direct tiled (y)"):
        _run(_forward_launch(cfg), x, w, y)
    return y


def forward_tiled_teaching(x: torch.Tensor, w: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """The forward by :func:`direct_tiled_kernel`, the tiled kernel notebooks 03 and 07 teach
    from (one filter and a TILE x TILE output tile per block, grid (tiles, K, N)); tensors as
    :func:`forward_naive`. No strategy runs it.

    Raises:
        ValueError: a window or stride beyond its shared tile, or K or N beyond 65,535.
    """
    _refuse(_blocked_refusal(cfg) or grid_refusal(_tiled_grid(cfg), "direct_tiled_kernel "
                                                  "(grid: tiles, K, N)"))
    y = poisoned(cfg.y_shape, cuda_device())
    dims = (cfg.c, cfg.h, cfg.w, cfg.k, cfg.r, cfg.s, cfg.p, cfg.q)
    with phase("direct tiled (y)"):
        direct_tiled_kernel[_tiled_grid(cfg), (TILE, TILE)](
            kernel_array(x.reshape(-1)), kernel_array(w.reshape(-1)), kernel_array(y.reshape(-1)),
            *(np.int64(d) for d in dims), *_args(cfg))
    return y


def backward_dx_cuda(w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """dx (N, C, H, W) float32 on cuda_device() from w (K, C, R, S) and dy (N, K, P, Q), for a
    one-group layer: the forward kernel on dy with the filters flipped
    (:func:`helpers.conv.direct.backward.dx_launch`), or :func:`direct_dx_kernel` where the
    register-blocked kernels refuse ``cfg``. Phase ``direct (dx)``.

    Raises:
        ValueError: a depthwise layer (:func:`helpers.conv.depthwise.backward_cuda`), or a
            launch beyond the CUDA grid limits.
    """
    _one_group(cfg)
    _refuse(_backward_refusal(cfg))
    dx = poisoned(cfg.x_shape, cuda_device())
    plan = launches(cfg)["dx"]
    with phase("direct (dx)"):
        if plan is None:
            direct_dx_kernel[_naive_grids(cfg)["direct_dx_kernel"], THREADS](
                kernel_array(w), kernel_array(dy), kernel_array(dx), *_args(cfg))
        else:
            _run(plan, dy, w, dx)
    return dx


def backward_dw_cuda(x: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig) -> torch.Tensor:
    """dw (K, C, R, S) float32 on cuda_device() from x (N, C, H, W) and dy (N, K, P, Q), for a
    one-group layer: the split reduction, then the sum of its partials in chunk order
    (:func:`helpers.conv.direct.backward.dw_launch`; workspace :func:`dw_workspace_bytes`),
    or :func:`direct_dw_kernel` where the register-blocked kernels refuse ``cfg``. Phase
    ``direct (dw)``.

    Raises:
        ValueError: as :func:`backward_dx_cuda`.
    """
    _one_group(cfg)
    _refuse(_backward_refusal(cfg))
    dw = poisoned(cfg.w_shape, cuda_device())
    plan = launches(cfg)["dw"]
    with phase("direct (dw)"):
        if plan is None:
            direct_dw_kernel[_naive_grids(cfg)["direct_dw_kernel"], THREADS](
                kernel_array(x), kernel_array(dy), kernel_array(dw), *_args(cfg))
        elif plan.chunks == 1:
            _run(plan, x, dy, dw)
        else:
            total = dw.numel()
            part = poisoned((plan.chunks * total,), cuda_device())
            _run(plan, x, dy, part)
            direct_dw_reduce_kernel[plan.reduce_grid, backward.REDUCE_THREADS](
                kernel_array(part), kernel_array(dw.reshape(-1)), np.int64(plan.chunks),
                np.int64(total))
    return dw


def backward_cuda(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, cfg: ConvConfig):
    """(dx, dw) on the CUDA path (shared by both direct strategies): :func:`backward_dx_cuda`
    and :func:`backward_dw_cuda`; a depthwise layer by its own kernels.

    Raises:
        ValueError: a launch beyond the CUDA grid limits (:func:`naive_supports`).
    """
    if depthwise.is_depthwise(cfg):  # groups = C: the depthwise kernels
        return depthwise.backward_cuda(x, w, dy, cfg)
    return backward_dx_cuda(w, dy, cfg), backward_dw_cuda(x, dy, cfg)


def backward_first_cuda(x, w, dy, cfg: ConvConfig, which: str = "both"):
    """The first backward kernels, kept to compare with: :func:`direct_dx_kernel` (one thread
    per input element) and :func:`direct_dw_kernel` (one thread per filter element). Returns
    dx, dw or (dx, dw) for ``which`` = "dx", "dw" or "both"; tensors as :func:`backward_cuda`.

    Raises:
        ValueError: another ``which``, a depthwise layer, or a grid beyond the CUDA limits.
    """
    if which not in ("dx", "dw", "both"):
        raise ValueError(f"which must be 'dx', 'dw' or 'both', got {which!r}")
    _one_group(cfg)
    grids = _naive_grids(cfg)
    out = {}
    for part, name, kernel, a, b, shape in (
            ("dx", "direct_dx_kernel", direct_dx_kernel, w, dy, cfg.x_shape),
            ("dw", "direct_dw_kernel", direct_dw_kernel, x, dy, cfg.w_shape)):
        if which in (part, "both"):
            _refuse(grid_refusal(grids[name], name))
            out[part] = poisoned(shape, cuda_device())
            with phase(f"direct (first {part})"):
                kernel[grids[name], THREADS](
                    kernel_array(a), kernel_array(b), kernel_array(out[part]), *_args(cfg))
    return out[which] if which != "both" else (out["dx"], out["dw"])


def _one_group(cfg: ConvConfig) -> None:
    if depthwise.is_depthwise(cfg) or cfg.groups != 1:
        raise ValueError(f"the direct backward kernels take one group (groups = 1), got groups "
                         f"= {cfg.groups}; a depthwise layer runs "
                         f"helpers.conv.depthwise.backward_cuda")


# ------------------------------------------------ the kernels the compiler's table reports


def _examples() -> dict:
    """Layers with 96 filters: 3 x 3 on 64 channels (stride 1 and 2) and on 3 (dw's lanes then
    take filters), 11 x 11 on 3: the register-blocked kernels as they launch them."""
    k3 = ConvConfig.from_shapes((32, 64, 58, 58), (96, 64, 3, 3))
    k11 = ConvConfig.from_shapes((32, 3, 64, 64), (96, 3, 11, 11))
    s2 = ConvConfig.from_shapes((32, 64, 57, 57), (96, 64, 3, 3), stride=2)
    rgb = ConvConfig.from_shapes((32, 3, 64, 64), (96, 3, 3, 3))
    return {"direct_forward_3x3_kernel": _forward_launch(k3),
            "direct_forward_11x11_kernel": _forward_launch(k11),
            "direct_dx_3x3_kernel": dx_launch(k3),
            "direct_dx_3x3_s2_kernel": dx_launch(s2),
            "direct_dw_3x3_kernel": dw_launch(k3),
            "direct_dw_3x3_c3_kernel": dw_launch(rgb),
            "direct_dw_11x11_kernel": dw_launch(k11)}


def _tiny(launch) -> tuple:
    """(grid, arrays, int64 arguments) of ``launch``'s kernel on a small layer its constants
    fit: one image of 2 channels, 3 filters, windows plus 2 rows and columns, no padding."""
    k = launch.key
    ext_r, ext_s = (k.r - 1) * k.dh + 1, (k.s - 1) * k.dw + 1
    hin, win = ext_r + 2, ext_s + 2
    hout, wout = (hin - ext_r) // k.sh + 1, (win - ext_s) // k.sw + 1
    dev = cuda_device()
    image = torch.zeros(2 * hin * win, device=dev)            # x (1, 2, hin, win)
    filters = torch.zeros(3 * 2 * k.r * k.s, device=dev)      # w, or dw's one chunk
    out = torch.zeros(3 * hout * wout, device=dev)            # y, or dy (1, 3, hout, wout)
    tiles_q = -(-wout // k.tq)
    if isinstance(launch, FwdLaunch):
        return ((-(-hout // k.tp) * tiles_q, 1, 1), (image, filters, out),
                (2, hin, win, 3, hout, wout, 0, 0, tiles_q))
    tiles = -(-hout // k.tp) * tiles_q
    return ((1, -(-2 * k.r * k.s // k.taps), 1), (image, out, filters),
            (2, hin, win, 3, hout, wout, 0, 0, tiles_q, tiles, tiles, tiles))


def launch_every_kernel() -> int:
    """Launch each CUDA kernel of this package that :data:`helpers.kernels.KERNELS` lists once,
    on a small layer, so that a GPU compiles each with the argument types its launches use
    (``helpers.experiments.kernel_resources`` then reads their registers): the first kernels
    through their host code, the register-blocked ones of :data:`EXAMPLE_LAUNCHES` with the
    compile-time constants they carry. Returns the number of launches."""
    dev = cuda_device()
    cfg = ConvConfig.from_shapes((1, 2, 8, 8), (2, 2, 3, 3), padding=1)
    x, w = torch.zeros(cfg.x_shape, device=dev), torch.zeros(cfg.w_shape, device=dev)
    dy = torch.zeros(cfg.y_shape, device=dev)
    forward_naive(x, w, cfg)
    forward_tiled_teaching(x, w, cfg)
    backward_first_cuda(x, w, dy, cfg)
    for launch in EXAMPLE_LAUNCHES.values():
        grid, arrays, args = _tiny(launch)
        launch.kernel[grid, launch.threads](*(kernel_array(a) for a in arrays),
                                            *(np.int64(v) for v in args))
    part, dw = torch.zeros(8, device=dev), poisoned((4,), dev)
    direct_dw_reduce_kernel[1, backward.REDUCE_THREADS](kernel_array(part), kernel_array(dw),
                                                         np.int64(2), np.int64(4))
    return 4 + len(EXAMPLE_LAUNCHES)


#: Readable names for some of the register-blocked kernels (each one of the specialisations
#: :func:`launches` picks) and their launches: ``python -m helpers.kernels`` reports them.
EXAMPLE_LAUNCHES: dict = _examples()
direct_forward_3x3_kernel = EXAMPLE_LAUNCHES["direct_forward_3x3_kernel"].kernel
direct_forward_11x11_kernel = EXAMPLE_LAUNCHES["direct_forward_11x11_kernel"].kernel
direct_dx_3x3_kernel = EXAMPLE_LAUNCHES["direct_dx_3x3_kernel"].kernel
direct_dx_3x3_s2_kernel = EXAMPLE_LAUNCHES["direct_dx_3x3_s2_kernel"].kernel
direct_dw_3x3_kernel = EXAMPLE_LAUNCHES["direct_dw_3x3_kernel"].kernel
direct_dw_3x3_c3_kernel = EXAMPLE_LAUNCHES["direct_dw_3x3_c3_kernel"].kernel
direct_dw_11x11_kernel = EXAMPLE_LAUNCHES["direct_dw_11x11_kernel"].kernel
