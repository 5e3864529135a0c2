"""Peak memory of one call, above what was in use before it, with the method named.

* GPU (``device="cuda"`` on a real GPU): torch's caching allocator records its own peak
  (``torch.cuda.max_memory_allocated``), but Numba allocates device memory outside it; so the
  device's used memory is also sampled through NVML during the call, and the larger of the
  two increases is reported.
* CPU: Python's ``tracemalloc`` does not see torch's or NumPy's C allocations, so the peak of
  the process's resident set (RSS) is used. On Linux the kernel keeps that peak exactly
  (``VmHWM``) and lets a process reset it (``/proc/self/clear_refs``); elsewhere RSS is sampled
  by a thread during the call, which can miss a peak shorter than the sampling interval.
  Before the call, memory the C allocator holds unused is handed back to the OS (glibc's
  ``malloc_trim``), so memory the call reuses from earlier calls is counted as growth too.

The strategies' *analytic* workspace (e.g. the im2col buffer) is computed separately, so a
learner can compare the two.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import Any

from helpers.device import backend, host
from helpers.device.timing import device_label

__all__ = ["MemoryResult", "available_bytes", "peak_memory"]


@dataclasses.dataclass(frozen=True)
class MemoryResult:
    """The result of :func:`peak_memory`.

    Attributes:
        peak_bytes: peak memory in use during the call minus the baseline before it, in bytes
            (never negative).
        baseline_bytes: memory in use just before the call, in bytes.
        method: how the peak was measured.
        device: where, e.g. ``"CPU: ..."`` or ``"GPU: ..."``.
        value: what the call returned.
    """

    peak_bytes: int
    baseline_bytes: int
    method: str
    device: str
    value: Any = dataclasses.field(repr=False, default=None)

    @property
    def peak_mib(self) -> float:
        """Peak in MiB (2**20 bytes)."""
        return self.peak_bytes / 2**20


def peak_memory(fn: Callable[..., Any], *args: Any, device: str = "cpu",
                interval_s: float = 0.0005, **kwargs: Any) -> MemoryResult:
    """Call ``fn(*args, **kwargs)`` once and measure its peak memory above the baseline.

    Args:
        fn: the call to measure. Its return value is kept alive until the measurement ends,
            so memory it returns counts towards the peak.
        device: ``"cpu"`` (process RSS) or ``"cuda"`` (GPU allocators; under the Numba CUDA
            simulator the CUDA "device" is host memory, so RSS is used and the method says so).
        interval_s: sampling interval in seconds where a peak has to be sampled.

    Returns:
        A :class:`MemoryResult` (bytes), with the measuring method named in ``method``.

    Raises:
        ValueError: unknown device or a non-positive interval.
    """

    label = device_label(device)
    if not interval_s > 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s}")
    if device == "cuda" and backend.MODE == "gpu":
        return _gpu_peak(fn, args, kwargs, label, interval_s)
    result = _cpu_peak(fn, args, kwargs, label, interval_s)
    if device == "cuda":
        result = dataclasses.replace(
            result, method=result.method + "; the CUDA simulator keeps device arrays in host memory")
    return result


def available_bytes(device: str = "cpu") -> int:
    """Bytes that new tensors may still take on ``device``.

    On a GPU (``device="cuda"``, real GPU): the memory the driver reports free
    (``torch.cuda.mem_get_info``) plus what torch's caching allocator keeps reserved from
    earlier work but no tensor uses; the driver counts that as used, but this process's next
    tensors reuse it. On the CPU, and for the CUDA simulator (whose device arrays are host
    memory): the host RAM available (:func:`helpers.device.host.ram_available_bytes`).
    """
    if device == "cuda" and backend.MODE == "gpu":
        import torch

        free, _ = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    return host.ram_available_bytes()


# ---------------------------------------------------------------------------------------- CPU


def _read_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    """Reset the kernel's peak-RSS counter (Linux); True if it worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    hwm, rss = _read_status_kib("VmHWM"), _read_status_kib("VmRSS")
    # After a reset the peak equals the current RSS (give or take pages touched since).
    return hwm is not None and rss is not None and hwm <= rss + 1024


class _Sampler(threading.Thread):
    def __init__(self, read: Callable[[], int], interval_s: float):
        super().__init__(daemon=True)
        self.read, self.interval_s = read, interval_s
        self.peak = read()
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self.peak = max(self.peak, self.read())

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        self.peak = max(self.peak, self.read())
        return self.peak


def _release_free_heap() -> bool:
    """Hand memory the C allocator holds but does not use back to the OS (glibc's
    ``malloc_trim``); True if it ran. Without it, a call that reuses blocks freed by an earlier
    call (its own warm-up, say) adds nothing to the resident set, and its peak reads as 0."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def _cpu_peak(fn, args, kwargs, label, interval_s) -> MemoryResult:
    trimmed = _release_free_heap()
    if _reset_hwm():
        baseline = _read_status_kib("VmRSS") * 1024
        value = fn(*args, **kwargs)
        peak = _read_status_kib("VmHWM") * 1024
        method = "process peak RSS (Linux VmHWM, reset before the call)"
    else:
        baseline = host.rss_bytes() or 0
        sampler = _Sampler(lambda: host.rss_bytes() or 0, interval_s)
        sampler.start()
        try:
            value = fn(*args, **kwargs)
        finally:
            peak = sampler.stop()
        method = f"process RSS sampled every {interval_s * 1e3:g} ms"
    if trimmed:
        method += ", free heap released first (malloc_trim)"
    return MemoryResult(max(0, peak - baseline), baseline, method, label, value)


# ---------------------------------------------------------------------------------------- GPU


def _nvml_index() -> int:
    """NVML's index of the current CUDA device: NVML numbers every GPU of the machine, CUDA
    only those CUDA_VISIBLE_DEVICES shows (a shared server's GPU may be CUDA's 0 and NVML's 3)."""
    import torch

    try:
        return torch.cuda._get_nvml_device_index(torch.cuda.current_device())
    except Exception:  # noqa: BLE001  (a private torch helper: fall back to CUDA's index)
        return torch.cuda.current_device()


def _gpu_peak(fn, args, kwargs, label, interval_s) -> MemoryResult:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch_base = torch.cuda.memory_allocated()
    sampler = None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index())
        sampler = _Sampler(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used, interval_s)
        device_base = sampler.peak
        sampler.start()
    except Exception:  # noqa: BLE001 - NVML missing: the torch figure alone
        sampler = None
    try:
        value = fn(*args, **kwargs)
        torch.cuda.synchronize()
    finally:
        device_peak = sampler.stop() if sampler else None
    torch_peak = torch.cuda.max_memory_allocated() - torch_base
    method = "torch.cuda.max_memory_allocated"
    peak = torch_peak
    if device_peak is not None:
        method += (" and device used memory sampled with NVML every "
                   f"{interval_s * 1e3:g} ms (sees Numba's allocations); the larger")
        peak = max(torch_peak, device_peak - device_base)
    return MemoryResult(max(0, int(peak)), int(torch_base), method, label, value)
