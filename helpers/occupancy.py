"""The CUDA occupancy calculation: how many warps an SM can keep resident, and what limits it.

An SM holds the registers and shared memory of every block resident on it. A kernel's
resources per block (threads, registers per thread, shared memory per block) therefore decide
how many blocks fit at once, and the *theoretical occupancy* is the resident warps over the
SM's maximum. Four limits apply (blocks, warps, registers, shared memory; see
:func:`occupancy`), and the smallest wins. :func:`warps_limited_by_registers` works the study's
example: cuda-convnet2's 116 registers per thread on the K40c leave 16 active warps of 64
(the study, dividing the whole register file, reports 17). Per-SM limits by compute capability
are in :data:`SM_LIMITS`. Units: registers are 32-bit registers, shared memory is bytes.

Source: Li et al., ICPP 2016, Section V-C, Figure 6 and Table II; NVIDIA CUDA C Programming
Guide, "Compute Capabilities" (technical specifications) and the CUDA Occupancy Calculator.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import reprlib

__all__ = ["SmLimits", "SM_LIMITS", "GPU_ARCH", "Occupancy", "occupancy", "limits_for",
           "warps_limited_by_registers", "launch_refusal"]

@dataclasses.dataclass(frozen=True)
class SmLimits:
    """Per-SM resource limits of one compute capability.

    Attributes:
        cc: compute capability, e.g. ``"3.5"``. arch: architecture name.
        max_warps: resident warps per SM. max_blocks: resident blocks per SM.
        max_threads_per_block: largest block.
        regs_per_sm: 32-bit registers per SM. max_regs_per_block: per block.
        max_regs_per_thread: per thread. reg_alloc_unit: registers are allocated per warp in
            units of this many.
        smem_per_sm: bytes of shared memory per SM (largest carve-out).
        max_smem_per_block: bytes one block may use. smem_alloc_unit: allocation unit in bytes.
        smem_reserved_per_block: bytes the system reserves per block (1 KB from CC 8.0).
        reg_sub_partitions: the register file is split evenly among this many sub-partitions
            (one per warp scheduler; 4 from CC 3.0), and a warp's registers come from one.
    """

    cc: str
    arch: str
    max_warps: int
    max_blocks: int
    max_threads_per_block: int
    regs_per_sm: int
    max_regs_per_block: int
    max_regs_per_thread: int
    reg_alloc_unit: int
    smem_per_sm: int
    max_smem_per_block: int
    smem_alloc_unit: int
    smem_reserved_per_block: int = 0
    reg_sub_partitions: int = 4


_KB = 1024

#: Limits by compute capability (the GPUs of :data:`helpers.device.backend.KNOWN_GPUS`), per
#: SM, as NVIDIA's CUDA Occupancy Calculator and the CUDA C Programming Guide's table of
#: technical specifications give them (shared memory: the largest carve-out).
SM_LIMITS: dict[str, SmLimits] = {
    "3.5": SmLimits("3.5", "Kepler", 64, 16, 1024, 65536, 65536, 255, 256, 48 * _KB, 48 * _KB,
                    256),
    "7.0": SmLimits("7.0", "Volta", 64, 32, 1024, 65536, 65536, 255, 256, 96 * _KB, 96 * _KB,
                    256),
    "7.5": SmLimits("7.5", "Turing", 32, 16, 1024, 65536, 65536, 255, 256, 64 * _KB, 64 * _KB,
                    256),
    "8.0": SmLimits("8.0", "Ampere", 64, 32, 1024, 65536, 65536, 255, 256, 164 * _KB,
                    163 * _KB, 128, 1 * _KB),
    "8.9": SmLimits("8.9", "Ada", 48, 24, 1024, 65536, 65536, 255, 256, 100 * _KB, 99 * _KB,
                    128, 1 * _KB),
    "9.0": SmLimits("9.0", "Hopper", 64, 32, 1024, 65536, 65536, 255, 256, 228 * _KB,
                    227 * _KB, 128, 1 * _KB),
}

#: The GPUs the workbook names, by their compute capability.
GPU_ARCH: dict[str, str] = {"K40c": "3.5", "V100": "7.0", "T4": "7.5", "A100": "8.0",
                            "L4": "8.9", "H100": "9.0", "H200": "9.0"}


def _shown(value: object) -> str:
    """A short repr for an error message (a huge list or string is cut, not copied)."""
    return reprlib.repr(value)


def _whole(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """``value`` as an int in ``lo..hi`` (no upper limit if ``hi`` is None): TypeError for a
    bool, a float, a str, None...; ValueError outside the range. The message names it."""
    what = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer {what}, got {_shown(value)}")
    if value < lo or (hi is not None and value > hi):
        raise ValueError(f"{name} must be {what}, got {value}")
    return int(value)


def limits_for(gpu: str) -> SmLimits:
    """The :class:`SmLimits` of a GPU name from :data:`GPU_ARCH` or a compute capability.

    Raises:
        TypeError: ``gpu`` is not a str.
        ValueError: neither a known name nor a known compute capability.
    """
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a GPU name from {sorted(GPU_ARCH)} or a compute "
                        f"capability in {sorted(SM_LIMITS)}, as a str; got {_shown(gpu)}")
    cc = GPU_ARCH.get(gpu, gpu)
    if cc not in SM_LIMITS:
        raise ValueError(f"gpu must be one of {sorted(GPU_ARCH)} or a compute capability in "
                         f"{sorted(SM_LIMITS)}, got {gpu!r}")
    return SM_LIMITS[cc]


@dataclasses.dataclass(frozen=True)
class Occupancy:
    """Result of :func:`occupancy`.

    Attributes:
        gpu: the GPU or compute capability asked for. limits: its :class:`SmLimits`.
        threads_per_block, regs_per_thread, smem_per_block: the inputs.
        warps_per_block: ceil(threads / 32).
        blocks_by: resident blocks each resource allows, keyed ``"blocks"``, ``"warps"``,
            ``"registers"``, ``"shared memory"``.
        active_blocks: the smallest of them. active_warps: active_blocks * warps_per_block.
        occupancy: active_warps / max_warps (0..1).
        limiter: the resource(s) that set active_blocks, joined by " and " (shared memory
            only if the kernel uses some).
    """

    gpu: str
    limits: SmLimits
    threads_per_block: int
    regs_per_thread: int
    smem_per_block: int
    warps_per_block: int
    blocks_by: dict[str, int]
    active_blocks: int
    active_warps: int
    occupancy: float
    limiter: str

    def __str__(self) -> str:
        return (f"{self.gpu}: {self.active_blocks} blocks x {self.warps_per_block} warps = "
                f"{self.active_warps} of {self.limits.max_warps} warps "
                f"({self.occupancy:.1%}), limited by {self.limiter}")


def _round_up(value: int, unit: int) -> int:
    return math.ceil(value / unit) * unit


def _warps_by_registers(lim: SmLimits, regs_per_warp: int) -> int:
    """Warps one SM's register file holds: each sub-partition holds whole warps."""
    per_partition = lim.regs_per_sm // lim.reg_sub_partitions
    return (per_partition // regs_per_warp) * lim.reg_sub_partitions


def warps_limited_by_registers(gpu: str, regs_per_thread: int) -> int:
    """Warps per SM that the register file alone allows, capped at the SM's maximum warps.

    A warp needs ``ceil(regs * 32 / unit) * unit`` registers, all from one of the SM's
    ``reg_sub_partitions`` equal parts of the register file, so each part holds
    ``floor((regs_per_sm / parts) / per_warp)`` warps (the CUDA Occupancy Calculator's rule).

    The study's example (Section V-C, Table II): cuda-convnet2's kernel uses 116 registers per
    thread on the K40c. A warp then needs ``ceil(116 * 32 / 256) * 256 = 3,840`` registers. The
    study divides the whole file, ``65536 / 116 = 564`` threads, and reports 17 active warps;
    each of the 4 sub-partitions of 16,384 registers holds ``floor(16384 / 3840) = 4`` such
    warps, so the SM holds 16 of 64: a theoretical occupancy of 25 % at best. The study measured
    14-22 % (Figure 6) and relates it mainly to cuda-convnet2's use of registers and shared
    memory.

    Raises:
        TypeError: ``gpu`` not a str, or ``regs_per_thread`` not an integer (bool included).
        ValueError: unknown GPU, or registers outside 1..max_regs_per_thread.
    """
    lim = limits_for(gpu)
    regs_per_thread = _whole("regs_per_thread", regs_per_thread, 1, lim.max_regs_per_thread)
    per_warp = _round_up(regs_per_thread * 32, lim.reg_alloc_unit)
    return min(_warps_by_registers(lim, per_warp), lim.max_warps)


def occupancy(gpu: str, threads_per_block: int, regs_per_thread: int,
              smem_per_block: int = 0) -> Occupancy:
    """Theoretical occupancy of a kernel launch on one SM, and the resource that limits it.

    Four limits apply, and the smallest wins:

    1. **blocks**: at most ``max_blocks`` resident blocks per SM;
    2. **warps** (threads): at most ``max_warps`` resident warps, a block of T threads taking
       ``ceil(T / 32)`` warps;
    3. **registers**: each warp's registers are allocated in units of ``reg_alloc_unit``
       (``ceil(regs * 32 / 256) * 256``) from one of ``reg_sub_partitions`` equal parts of the
       ``regs_per_sm`` register file, so the SM holds :func:`warps_limited_by_registers` warps;
       a block may not ask for more than ``max_regs_per_block``, counted with its warps
       rounded up to a multiple of the sub-partitions (the hardware's check);
    4. **shared memory**: each block's shared memory (plus a per-block reservation on compute
       capability 8.0 and later) is allocated in units of ``smem_alloc_unit``, from
       ``smem_per_sm`` bytes.

    Args:
        gpu: a name from :data:`GPU_ARCH` (``"K40c"``, ``"H100"``...) or a compute capability.
        threads_per_block: 1..max_threads_per_block.
        regs_per_thread: 32-bit registers per thread, 1..max_regs_per_thread (the compiler's
            report; Numba: ``kernel.get_regs_per_thread()`` on a GPU).
        smem_per_block: bytes of static plus dynamic shared memory per block, >= 0.

    Returns:
        An :class:`Occupancy`. A block that exceeds a per-block limit (registers or shared
        memory per block) gets 0 active blocks, limited by that resource: such a launch fails.

    Raises:
        TypeError: ``gpu`` not a str, or a count that is not an integer (a bool, a float, a
            str, None...); the message names it.
        ValueError: unknown GPU, or an argument outside its range (the message names it).

    Source: the CUDA Occupancy Calculator's method; study Section V-C (achieved occupancy
    under 30 %, Figure 6) and Table II (registers and shared memory per kernel).
    """
    lim = limits_for(gpu)
    threads_per_block = _whole("threads_per_block", threads_per_block, 1,
                               lim.max_threads_per_block)
    regs_per_thread = _whole("regs_per_thread", regs_per_thread, 1, lim.max_regs_per_thread)
    if isinstance(smem_per_block, numbers.Integral) and not isinstance(smem_per_block, bool) \
            and smem_per_block < 0:
        raise ValueError(f"smem_per_block must be >= 0 bytes, got {smem_per_block}")
    smem_per_block = _whole("smem_per_block (bytes)", smem_per_block, 0)
    warps = math.ceil(threads_per_block / 32)
    regs_per_warp = _round_up(regs_per_thread * 32, lim.reg_alloc_unit)
    if regs_per_warp * _round_up(warps, lim.reg_sub_partitions) > lim.max_regs_per_block:
        by_regs = 0
    else:
        by_regs = _warps_by_registers(lim, regs_per_warp) // warps
    if smem_per_block > lim.max_smem_per_block:
        by_smem = 0
    elif smem_per_block == 0:
        by_smem = lim.max_blocks
    else:
        unit = _round_up(smem_per_block + lim.smem_reserved_per_block, lim.smem_alloc_unit)
        by_smem = lim.smem_per_sm // unit
    blocks_by = {"blocks": lim.max_blocks, "warps": lim.max_warps // warps,
                 "registers": by_regs, "shared memory": by_smem}
    active = min(blocks_by.values())
    # a kernel without shared memory is never limited by it, even where its count ties
    limiter = " and ".join(k for k, v in blocks_by.items()
                           if v == active and not (k == "shared memory" and smem_per_block == 0))
    return Occupancy(gpu, lim, threads_per_block, regs_per_thread, smem_per_block, warps,
                     blocks_by, active, active * warps, active * warps / lim.max_warps, limiter)


def launch_refusal(r: Occupancy, gpu: str) -> str:
    """Why a block of ``r`` (an :func:`occupancy` result with no active block) cannot run on
    an SM of ``gpu`` (a display name), in a sentence that names the limit and the fix.

    Raises:
        TypeError: ``r`` not an :class:`Occupancy`, or ``gpu`` not a str.
        ValueError: ``gpu`` empty, or ``r`` has active blocks (such a launch runs).
    """
    if not isinstance(r, Occupancy):
        raise TypeError(f"r must be an Occupancy (a result of occupancy()), got {_shown(r)}")
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be the GPU's display name (a str), got {_shown(gpu)}")
    if not gpu.strip():
        raise ValueError(f"gpu must be the GPU's display name, got {_shown(gpu)}")
    if r.active_blocks:
        raise ValueError(f"r must be a launch with no active block, got {r.active_blocks} "
                         "active blocks (it runs)")
    lim = r.limits
    counted = _round_up(r.warps_per_block, lim.reg_sub_partitions)
    regs_block = _round_up(r.regs_per_thread * 32, lim.reg_alloc_unit) * counted
    if r.blocks_by["registers"] == 0:
        rounded = (f" (counted as {counted}, a multiple of the {lim.reg_sub_partitions} "
                   f"register sub-partitions)" if counted != r.warps_per_block else "")
        return (f"This block cannot launch on {gpu}: {r.warps_per_block} warps{rounded} x "
                f"{r.regs_per_thread} registers per thread need {regs_block:,} registers, "
                f"but a block may have at most {lim.max_regs_per_block:,}. Use fewer threads "
                f"per block or fewer registers per thread.")
    if r.blocks_by["shared memory"] == 0:
        return (f"This block cannot launch on {gpu}: it asks for {r.smem_per_block:,} bytes "
                f"of shared memory, but a block may use at most {lim.max_smem_per_block:,} "
                f"bytes ({lim.max_smem_per_block / 1024:g} KB) on compute capability "
                f"{lim.cc}.")
    return f"No block fits on an SM of {gpu} ({r})."
