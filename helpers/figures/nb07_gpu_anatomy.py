"""Notebook 07's picture of the GPU itself: SMs, warp slots, registers, shared memory (in banks),
L2 and device memory, drawn to scale from the table or the device's own properties.

:class:`GpuAnatomy` holds the figures and their sources; :func:`anatomy_from_table` builds it
from :data:`helpers.occupancy.SM_LIMITS`, :func:`helpers.device.backend.lookup_gpu` and
:data:`PUBLISHED`, :func:`anatomy_from_properties` from what CUDA reports, :func:`gpu_anatomy`
from this GPU or a fallback; :func:`gpu_anatomy_figure` draws it, with the warps a kernel's
registers, threads and shared memory leave resident. Sizes in bytes, bandwidth in bytes/s.

Source: NVIDIA H100 Tensor Core GPU Architecture whitepaper; NVIDIA Kepler GK110 architecture
whitepaper; the datasheets of :data:`helpers.device.backend.KNOWN_GPUS`.
"""

from __future__ import annotations

import dataclasses
import math

import plotly.graph_objects as go

from helpers import occupancy as occ_mod
from helpers.access_kernels import BANKS, WARP
from helpers.device import backend
from helpers.figures.style import COLORS

#: Published figures that neither :data:`helpers.occupancy.SM_LIMITS` nor
#: :data:`helpers.device.backend.KNOWN_GPUS` holds, with their source. Not measured here.
PUBLISHED: dict[str, dict] = {
    "H100": {"datasheet_name": "H100 SXM", "l2_bytes": 50 * 2**20, "memory_kind": "HBM3",
             "source": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: "
                       "50 MB L2 cache, HBM3)"},
    "K40c": {"datasheet_name": "Tesla K40c", "l2_bytes": 1536 * 2**10, "memory_kind": "GDDR5",
             "source": "NVIDIA Kepler GK110 architecture whitepaper (1,536 KB L2 cache); "
                       "Tesla K40 board specification (GDDR5)"},
}


@dataclasses.dataclass(frozen=True)
class GpuAnatomy:
    """The numbers :func:`gpu_anatomy_figure` draws, for one GPU.

    Attributes:
        device: the GPU's name. origin: where the numbers come from, in words (the CUDA
            driver of the GPU in use, or NVIDIA's published tables). cc: compute capability
            (``"9.0"``) or None. sms: streaming multiprocessors. warp_size: threads per warp.
        max_warps_per_sm: resident warps per SM. regs_per_sm: 32-bit registers per SM.
        smem_per_sm: bytes of shared memory per SM (largest carve-out).
        l2_bytes: bytes of L2 cache, or None. memory_bytes: bytes of device memory, or None.
        bandwidth_bytes_s: peak device-memory bandwidth in bytes/s, or None.
        memory_kind: e.g. ``"HBM3"``. sources: {quantity: source} for each number.
    """

    device: str
    origin: str
    cc: str | None
    sms: int
    warp_size: int
    max_warps_per_sm: int
    regs_per_sm: int
    smem_per_sm: int
    l2_bytes: int | None
    memory_bytes: int | None
    bandwidth_bytes_s: float | None
    memory_kind: str
    sources: dict


def anatomy_from_table(gpu: str = "H100") -> GpuAnatomy:
    """An H100's (or the study's K40c's) numbers from the workbook's tables, no GPU needed.

    Per-SM limits come from :func:`helpers.occupancy.limits_for`, SM count, memory size and
    bandwidth from the datasheet figures of :func:`helpers.device.backend.lookup_gpu`, and the
    L2 size and memory kind from :data:`PUBLISHED` (NVIDIA's whitepapers). None is measured.

    Args:
        gpu: ``"H100"`` (an H100 SXM) or ``"K40c"``.

    Raises:
        ValueError: another name.
    """
    if gpu not in PUBLISHED:
        raise ValueError(f"gpu must be one of {sorted(PUBLISHED)}, got {gpu!r}")
    pub = PUBLISHED[gpu]
    lim = occ_mod.limits_for(gpu)
    spec = backend.lookup_gpu(pub["datasheet_name"])
    table = "helpers.occupancy (CUDA C Programming Guide, compute capability " + lim.cc + ")"
    return GpuAnatomy(
        device=f"NVIDIA {spec.name}", cc=lim.cc,
        origin=f"NVIDIA's published figures for the {spec.name}, not measured here",
        sms=spec.sms, warp_size=WARP, max_warps_per_sm=lim.max_warps,
        regs_per_sm=lim.regs_per_sm, smem_per_sm=lim.smem_per_sm, l2_bytes=pub["l2_bytes"],
        memory_bytes=spec.memory_bytes, bandwidth_bytes_s=spec.bandwidth_bytes_s,
        memory_kind=pub["memory_kind"],
        sources={"sms": spec.source, "memory": spec.source, "bandwidth": spec.source,
                 "warps": table, "registers": table, "shared memory": table,
                 "L2": pub["source"]})


def anatomy_from_properties(props, datasheet: backend.GpuSpec | None = None) -> GpuAnatomy:
    """The numbers of the GPU in use, as the CUDA driver reports them.

    Args:
        props: ``torch.cuda.get_device_properties(i)`` (or any object with its attributes:
            ``name, major, minor, multi_processor_count, total_memory`` and, where the torch
            version has them, ``warp_size, max_threads_per_multi_processor,
            regs_per_multiprocessor, shared_memory_per_multiprocessor, L2_cache_size,
            memory_clock_rate`` (kHz), ``memory_bus_width`` (bits)).
        datasheet: :func:`helpers.device.backend.lookup_gpu` of the name; its bandwidth is used
            where the driver gives no memory clock or bus width.

    Bandwidth is the theoretical peak 2 x memory clock x bus width / 8 (two transfers per
    clock), a figure the driver reports, not a measurement. Per-SM figures missing from
    ``props`` come from :func:`helpers.occupancy.limits_for` of its compute capability.

    Raises:
        ValueError: a per-SM figure is neither in ``props`` nor in the occupancy table.
    """
    cc = f"{props.major}.{props.minor}"
    lim = occ_mod.SM_LIMITS.get(cc)
    driver = "the CUDA driver (torch.cuda.get_device_properties)"
    table = f"helpers.occupancy (compute capability {cc})"
    sources = {"sms": driver, "memory": driver}
    warp = getattr(props, "warp_size", None) or WARP
    threads = getattr(props, "max_threads_per_multi_processor", None)
    got = {"warps": threads // warp if threads else None,
           "registers": getattr(props, "regs_per_multiprocessor", None),
           "shared memory": getattr(props, "shared_memory_per_multiprocessor", None)}
    fallback = {"warps": "max_warps", "registers": "regs_per_sm", "shared memory": "smem_per_sm"}
    for key, reported in got.items():
        if reported:
            sources[key] = driver
        elif lim is not None:
            got[key], sources[key] = getattr(lim, fallback[key]), table
        else:
            raise ValueError(f"the {key} per SM of {props.name!r} (compute capability {cc}) "
                             "are neither reported by the driver nor in helpers.occupancy")
    l2 = getattr(props, "L2_cache_size", None) or None
    if l2:
        sources["L2"] = driver
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    bandwidth = None
    if clock_khz and bus_bits:
        bandwidth = 2 * clock_khz * 1e3 * bus_bits / 8
        sources["bandwidth"] = (f"{driver}: 2 x memory clock ({clock_khz / 1e3:,.0f} MHz) x "
                                f"bus width ({bus_bits} bits) / 8, a theoretical peak")
    elif datasheet is not None:
        bandwidth, sources["bandwidth"] = datasheet.bandwidth_bytes_s, datasheet.source
    kind = next((w for w in props.name.split() if w.upper().startswith("HBM")), "DRAM")
    return GpuAnatomy(
        device=props.name, cc=cc, origin="the GPU in use, as its CUDA driver reports it",
        sms=props.multi_processor_count, warp_size=warp, max_warps_per_sm=got["warps"],
        regs_per_sm=got["registers"], smem_per_sm=got["shared memory"], l2_bytes=l2,
        memory_bytes=props.total_memory, bandwidth_bytes_s=bandwidth, memory_kind=kind,
        sources=sources)


def gpu_anatomy(fallback: str = "H100") -> GpuAnatomy:
    """The numbers of the GPU in use where kernels run on one (:func:`anatomy_from_properties`),
    otherwise those of ``fallback`` from the tables (:func:`anatomy_from_table`)."""
    if backend.MODE == "gpu":
        try:
            import torch

            props = torch.cuda.get_device_properties(0)
            return anatomy_from_properties(props, backend.lookup_gpu(props.name))
        except (ImportError, RuntimeError, AssertionError, ValueError):
            pass  # torch without CUDA, or a GPU the tables do not know: draw the fallback
    return anatomy_from_table(fallback)


def _size(n: float) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.3g} {unit}"
    return f"{n:,.0f} B"


def _box(shapes: list, x0, y0, x1, y1, fill, name, line="#555555", width=1) -> None:
    x0, y0, x1, y1 = (round(v, 2) for v in (x0, y0, x1, y1))   # keeps the stored JSON small
    shapes.append(dict(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, fillcolor=fill, name=name,
                       line=dict(color=line, width=width), layer="below"))


def _label(notes: list, x, y, text, size=12, anchor="left") -> None:
    notes.append(dict(x=x, y=y, text=text, showarrow=False, xanchor=anchor, yanchor="bottom",
                      font=dict(size=size)))


def gpu_anatomy_figure(a: GpuAnatomy, regs_per_thread: int | None = None,
                       threads_per_block: int | None = None,
                       smem_per_block: int = 0) -> go.Figure:
    """The GPU drawn from its numbers: the chip's SMs, one SM's warp slots, register file and
    shared memory (its 32 banks), the L2 cache all SMs share, and device memory with its
    bandwidth. Boxes are not to scale; every count drawn (SMs, warp slots, banks) is the data's.

    Args:
        a: a :class:`GpuAnatomy` (:func:`gpu_anatomy`).
        regs_per_thread: if given, colour the warps a kernel with this many registers per thread
            keeps resident on one SM, and its registers in the register file; with
            ``threads_per_block`` (and ``smem_per_block``, bytes) by the full rules of
            :func:`helpers.occupancy.occupancy`, else by the register file alone
            (:func:`helpers.occupancy.warps_limited_by_registers`). Needs ``a.cc`` in
            :data:`helpers.occupancy.SM_LIMITS`; otherwise the subtitle says so.

    Raises:
        ValueError: arguments outside the ranges of :mod:`helpers.occupancy`.

    Source: NVIDIA CUDA C Programming Guide (hardware model); the numbers' sources are in
    ``a.sources`` and in the hover text.
    """
    shapes, notes = [], []  # built as lists: add_shape one by one is quadratic
    resident, per_warp, blocks, note = 0, 0, 0, ""
    if regs_per_thread is not None:
        if a.cc not in occ_mod.SM_LIMITS:
            note = (f"<br>occupancy rules for compute capability {a.cc} are not in "
                    "helpers.occupancy's table: no kernel drawn")
        else:
            lim = occ_mod.limits_for(a.cc)
            per_warp = math.ceil(regs_per_thread * 32 / lim.reg_alloc_unit) * lim.reg_alloc_unit
            if threads_per_block is None:
                resident = occ_mod.warps_limited_by_registers(a.cc, regs_per_thread)
                note = (f"<br>coloured: the warps the register file holds at {regs_per_thread} "
                        f"registers per thread ({per_warp:,} a warp): {resident} of "
                        f"{a.max_warps_per_sm}")
            else:
                r = occ_mod.occupancy(a.cc, threads_per_block, regs_per_thread, smem_per_block)
                resident, blocks = r.active_warps, r.active_blocks
                note = (f"<br>coloured: {regs_per_thread} registers per thread, blocks of "
                        f"{threads_per_block} threads, {smem_per_block:,} B shared: {blocks} "
                        f"blocks, {resident} of {a.max_warps_per_sm} warps (limited by "
                        f"{r.limiter})")
    on, off, hot = COLORS["torch"], "#e8eef4", COLORS["direct-naive"]
    hover = []  # (x, y, text) of each part, shown on hover

    # the chip: one square per SM
    cols = math.ceil(math.sqrt(a.sms))
    rows = math.ceil(a.sms / cols)
    cw, ch = 36 / cols, 35 / rows
    zoomed = min(cols, a.sms) - 1                      # the top-right SM, drawn enlarged
    for i in range(a.sms):
        x0, y0 = (i % cols) * cw, 58 - (i // cols + 1) * ch
        _box(shapes, x0 + 0.1 * cw, y0 + 0.1 * ch, x0 + 0.9 * cw, y0 + 0.9 * ch,
             hot if i == zoomed else "#cfd8e3", "SM", line="#8899aa")
    _label(notes, 0, 58.5, f"<b>the chip: {a.sms} SMs</b>")
    chip_regs = a.sms * a.regs_per_sm * 4
    hover.append((18, 40, f"{a.sms} streaming multiprocessors ({a.sources['sms']}); together "
                  f"{_size(chip_regs)} of registers and {_size(a.sms * a.smem_per_sm)} of "
                  "shared memory"))
    right = (zoomed + 0.9) * cw
    for y0, y1 in ((58 - 0.1 * ch, 58), (58 - 0.9 * ch, 23)):
        shapes.append(dict(type="line", x0=right, y0=y0, x1=42, y1=y1, name="zoom",
                           line=dict(color=hot, dash="dot")))

    # one SM
    _box(shapes, 42, 23, 100, 58, "white", "one SM", line=hot, width=2)
    _label(notes, 42, 58.5, "<b>one SM</b> (the highlighted one; all are alike)")
    per_row = 16
    slot_rows = math.ceil(a.max_warps_per_sm / per_row)
    sw, sh = 54 / per_row, 7 / slot_rows
    for i in range(a.max_warps_per_sm):
        x0, y0 = 44 + (i % per_row) * sw, 55 - (i // per_row + 1) * sh
        _box(shapes, x0 + 0.08 * sw, y0 + 0.1 * sh, x0 + 0.92 * sw, y0 + 0.9 * sh,
             on if i < resident else "white", "warp resident" if i < resident else "warp slot",
             line="#8899aa")
    _label(notes, 44, 55.2, f"{a.max_warps_per_sm} warp slots: up to "
                          f"{a.max_warps_per_sm * a.warp_size:,} resident threads, "
                          f"{a.warp_size} to a warp", size=11)
    hover.append((71, 51.5, f"{a.max_warps_per_sm} resident warps per SM ({a.sources['warps']})"))

    # register file, carved into the resident warps' allocations
    _box(shapes, 44, 37, 98, 42, off, "register file")
    if resident:
        unit = 54 * per_warp / a.regs_per_sm
        for i in range(resident):
            _box(shapes, 44 + i * unit, 37, 44 + (i + 1) * unit, 42,
                 on if i % 2 == 0 else "#56B4E9", "registers of a resident warp", line="white")
    used = (f"; {resident} warps x {per_warp:,} = {resident * per_warp:,} in use"
            if resident else "")
    _label(notes, 44, 42.2, f"register file: {a.regs_per_sm:,} x 32-bit registers = "
                          f"{_size(a.regs_per_sm * 4)}, private to each thread{used}", size=11)
    hover.append((71, 39.5, f"{a.regs_per_sm:,} registers per SM ({a.sources['registers']})"))

    # shared memory, as its banks
    bw = 54 / BANKS
    for b in range(BANKS):
        _box(shapes, 44 + b * bw, 26, 44 + (b + 1) * bw, 33, "#f3e3c3" if b % 2 else "#f7edd9",
             "bank", line="#d9c39a")
    if blocks and smem_per_block:
        used = min(1.0, blocks * smem_per_block / a.smem_per_sm)
        _box(shapes, 44, 26, 44 + 54 * used, 27.5, COLORS["numpy"], "shared memory in use")
    _label(notes, 44, 33.2, f"shared memory: {_size(a.smem_per_sm)}, in {BANKS} banks of 4 bytes, "
                          "shared by a block's threads", size=11)
    hover.append((71, 29.5, f"{_size(a.smem_per_sm)} shared memory per SM "
                  f"({a.sources['shared memory']}); word k sits in bank k % {BANKS}"))

    # L2 and device memory
    l2 = _size(a.l2_bytes) if a.l2_bytes else "size not known"
    _box(shapes, 0, 12, 100, 18, "#d8ecd8", "L2 cache")
    _label(notes, 50, 13.6, f"<b>L2 cache</b>: {l2}, shared by all {a.sms} SMs", anchor="center")
    hover.append((50, 15, f"L2: {l2} ({a.sources.get('L2', 'not reported')})"))
    mem = _size(a.memory_bytes) if a.memory_bytes else "size not known"
    bw_text = (f"{a.bandwidth_bytes_s / 1e12:,.3g} TB/s peak" if a.bandwidth_bytes_s
               else "bandwidth not known")
    _box(shapes, 0, 1, 100, 7, "#e6e0ef", "device memory")
    _label(notes, 50, 2.6, f"<b>device memory ({a.memory_kind})</b>: {mem}, {bw_text}",
           anchor="center")
    hover.append((50, 4, f"{mem} of {a.memory_kind} ({a.sources['memory']}); {bw_text} "
                  f"({a.sources.get('bandwidth', 'not reported')})"))
    for x, y0, y1 in ((18, 18, 23), (71, 18, 23), (50, 7, 12)):   # the paths between levels
        notes.append(dict(x=x, y=y0, ax=x, ay=y1, xref="x", yref="y", axref="x", ayref="y",
                          showarrow=True, arrowhead=2, arrowside="end+start", text=""))
    x, y, text = zip(*hover)
    fig = go.Figure(go.Scatter(x=x, y=y, mode="markers", hovertext=text, hoverinfo="text",
                               marker=dict(size=28, opacity=0), showlegend=False))
    fig.update_layout(
        shapes=shapes, annotations=notes,
        title=(f"Inside the GPU: {a.device}<br><sup>numbers: {a.origin}; boxes not to "
               f"scale{note}</sup>"),
        template="plotly_white", height=600, margin=dict(l=20, r=20, t=110, b=20),
        plot_bgcolor="white")
    fig.update_xaxes(visible=False, range=[-1, 101])
    fig.update_yaxes(visible=False, range=[0, 62])
    return fig
