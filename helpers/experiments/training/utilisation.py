"""How busy are the GPU and the CPU while a model trains? Sampled in a background thread.

:class:`UtilisationSampler` reads, every ``interval_s`` seconds, the GPU utilisation (percent)
and memory in use (bytes) from NVML (``pynvml``, from nvidia-ml-py, optional) and the CPU
utilisation of all cores (percent, :class:`helpers.device.host.CpuUtilisation`), while the code
it surrounds runs. Without a GPU or NVML only the CPU is sampled and the sampler says why.
:func:`helpers.experiments.training.throughput.utilisation_trace` runs it around a training
measurement.

Sources: NVML ``nvmlDeviceGetUtilizationRates`` (what ``nvidia-smi`` shows as GPU-Util: percent
of time over the past sample period, between 1/6 s and 1 s, during which a kernel ran), as the
V100 review read utilisation; psutil ``cpu_percent`` or Linux's ``/proc/stat``.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import torch

from helpers.device.host import CpuUtilisation
from helpers.experiments.training.learning import gpu_reason

try:
    import pynvml
except ImportError:  # nvidia-ml-py is optional: without it the GPU is not sampled
    pynvml = None

__all__ = ["NVML_MISSING", "UtilisationSampler"]

#: Why the GPU is not sampled when nvidia-ml-py is missing.
NVML_MISSING = "GPU utilisation not sampled: NVML is not installed (pip install nvidia-ml-py)"


class UtilisationSampler:
    """Samples GPU utilisation (NVML) and CPU utilisation (all cores) in a background thread.

    Use as a context manager around training::

        with UtilisationSampler(interval_s=0.1) as sampler:
            ...  # train
        sampler.samples  # [{"t_s", "gpu_util", "gpu_mem_bytes", "cpu_util"}, ...]

    Args:
        interval_s: seconds between samples, in [0.01, 10].
        gpu: sample the GPU (needs a CUDA GPU and NVML, from nvidia-ml-py); False samples the
            CPU only.

    Attributes:
        samples: one dict per sample: ``t_s`` (seconds since the sampler started), ``gpu_util``
            (percent of the last NVML sample period, 1/6 s to 1 s depending on the GPU, in which a
            kernel ran; NaN without a GPU), ``gpu_mem_bytes`` (device memory in use, NaN without),
            ``cpu_util`` (percent of all CPU cores busy since the previous sample, every process
            on the machine counted; NaN where it cannot be read).
        gpu_reason: None if the GPU was sampled, else why not (:data:`NVML_MISSING` without
            nvidia-ml-py).

    Raises:
        ValueError: ``interval_s`` outside its range.

    Source: NVML ``nvmlDeviceGetUtilizationRates`` (what ``nvidia-smi`` shows as GPU-Util), as
    the V100 review read utilisation; :class:`helpers.device.host.CpuUtilisation`.
    """

    def __init__(self, interval_s: float = 0.1, gpu: bool = True):
        if not 0.01 <= interval_s <= 10:
            raise ValueError(f"interval_s must be in [0.01, 10] seconds, got {interval_s!r}")
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self.gpu_reason: str | None = gpu_reason() if gpu else (
            gpu_reason() or "GPU not sampled: the training ran on the CPU")
        self._handle = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._cpu: CpuUtilisation | None = None

    def _open_nvml(self) -> None:
        if self.gpu_reason:
            return
        if pynvml is None:
            self.gpu_reason = NVML_MISSING
            return
        try:
            pynvml.nvmlInit()
            try:  # NVML numbers GPUs differently from CUDA when CUDA_VISIBLE_DEVICES is set
                index = torch.cuda._get_nvml_device_index(torch.cuda.current_device())
            except Exception:  # noqa: BLE001  (private torch helper; fall back to CUDA's index)
                index = torch.cuda.current_device()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:  # noqa: BLE001  (NVMLError, no driver: report, do not fail)
            self.gpu_reason = f"GPU utilisation not sampled: NVML unavailable ({exc})"

    def _sample(self) -> dict:
        util = mem = math.nan
        if self._handle is not None:
            try:
                util = float(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                mem = float(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            except Exception:  # noqa: BLE001  (a failed read is a gap, not a crash)
                pass
        cpu = self._cpu.read() if self._cpu is not None else None
        return {"t_s": time.perf_counter() - self._t0, "gpu_util": util, "gpu_mem_bytes": mem,
                "cpu_util": math.nan if cpu is None else float(cpu)}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(self._sample())

    def since_start(self, perf_counter_value: float) -> float:
        """A ``time.perf_counter()`` value as seconds since the sampler started (the clock of
        ``samples``' ``t_s``)."""
        return perf_counter_value - self._t0

    def __enter__(self) -> UtilisationSampler:
        self._open_nvml()
        self._cpu = CpuUtilisation()  # counts from here: the first sample covers one interval
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="utilisation-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._handle is not None:
            try:
                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
            self._handle = None

    def mean(self, key: str, t_from: float = 0.0, t_to: float = math.inf) -> float:
        """Mean of ``key`` (``"gpu_util"`` or ``"cpu_util"``, percent) over samples taken in
        ``[t_from, t_to]`` seconds; NaN when there is none."""
        vals = [s[key] for s in self.samples
                if t_from <= s["t_s"] <= t_to and not math.isnan(s[key])]
        return float(np.mean(vals)) if vals else math.nan
