"""Where the workbook's kernels run, decided once: a real CUDA GPU or the Numba CUDA simulator.

Importing this module (``import helpers`` does) makes the decision before ``numba.cuda`` is
imported anywhere in the workbook, and records it in :data:`MODE`:

* ``gpu``: a CUDA driver answers and reports at least one device. Numba kernels and torch's
  CUDA code run on that GPU, and timings are meaningful.
* ``simulator``: no usable GPU. Numba CUDA kernels run in Numba's CUDA simulator
  (``NUMBA_ENABLE_CUDASIM=1``), a Python interpreter of the kernel that checks correctness on
  tiny shapes; everything else (NumPy, torch) runs on the CPU. Simulator timings mean nothing.

A user's ``NUMBA_ENABLE_CUDASIM`` is respected (:func:`_decide`). Importing it also installs
numba-cuda's fixes (numpy 2.5; in the simulator, race-free shared arrays and a block manager that
lets its threads run). :func:`describe` and :func:`info` report the choice, with datasheet
peaks from :data:`KNOWN_GPUS` (:mod:`helpers.device.gpus`, re-exported here).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import importlib.metadata
import importlib.util
import os
import platform
import sys
import warnings

from helpers.device import host, numpy_compat, simulator_blocks, simulator_shared
from helpers.device.gpus import KNOWN_GPUS, GpuSpec, lookup_gpu  # the GPU table, re-exported

numpy_compat.install()  # before numba.cuda loads: numba-cuda 0.30 under numpy 2.5 (inert below)

__all__ = ["KNOWN_GPUS", "MODE", "MODE_REASON", "BackendInfo", "BackendWarning", "GpuSpec",
           "describe", "in_colab", "info", "lookup_gpu", "timings_meaningful"]


class BackendWarning(UserWarning):
    """The backend could not be chosen as intended (e.g. ``numba.cuda`` imported too early)."""


# --------------------------------------------------------------------------------------------
# The decision, made once at import.
# --------------------------------------------------------------------------------------------

_ENV = "NUMBA_ENABLE_CUDASIM"


def _cuda_driver() -> ctypes.CDLL | None:
    names = ["libcuda.so.1", "libcuda.so"] if sys.platform != "win32" else ["nvcuda.dll"]
    found = ctypes.util.find_library("cuda")
    if found:
        names.append(found)
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _probe_gpu() -> tuple[bool, str, int | None]:
    """Ask the CUDA driver directly (without importing numba.cuda or torch) for a usable device.

    Returns (usable, reason, driver CUDA version as an int like 12040 or None).
    """
    lib = _cuda_driver()
    if lib is None:
        return False, "no CUDA driver library (libcuda) on this machine", None
    try:
        rc = lib.cuInit(0)
        if rc != 0:
            return False, f"the CUDA driver failed to initialise (cuInit error {rc})", None
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return False, "the CUDA driver reports no GPU", None
        version = ctypes.c_int(0)
        lib.cuDriverGetVersion(ctypes.byref(version))
        return True, f"{count.value} CUDA device(s) found", version.value or None
    except (AttributeError, OSError) as exc:  # a broken or foreign libcuda
        return False, f"the CUDA driver could not be queried ({exc})", None


def _simulator_active() -> bool:
    """Whether the imported numba.cuda is the simulator."""
    cuda = sys.modules.get("numba.cuda")
    return cuda is not None and "simulator" in getattr(cuda.jit, "__module__", "")


def _user_stacklevel() -> int:
    """The stacklevel that makes a warning point at the user's import, not at the workbook or
    the import machinery."""
    frame, level = sys._getframe(1), 1
    here = os.path.dirname(os.path.abspath(__file__))
    while frame is not None:
        name = frame.f_code.co_filename
        if not (os.path.abspath(name).startswith(here) or name.startswith("<frozen")):
            return level
        frame, level = frame.f_back, level + 1
    return 1


def _decide() -> tuple[str, str, int | None]:
    """(mode, reason, driver CUDA version): where kernels run, chosen before numba.cuda loads.

    A value of ``NUMBA_ENABLE_CUDASIM`` that the user set before importing the workbook is
    respected (``0`` on a machine without a usable GPU gives ``"unavailable"``, with a
    :class:`BackendWarning`). If ``numba.cuda`` was imported before this module, the choice
    can no longer be made: the mode found is reported and a :class:`BackendWarning` says so.
    """
    usable, probe, driver_version = _probe_gpu()
    user_value = os.environ.get(_ENV)
    if "numba.cuda" in sys.modules:
        mode = "simulator" if _simulator_active() else ("gpu" if usable else "unavailable")
        warnings.warn(
            "numba.cuda was imported before helpers.device.backend, so the workbook could not "
            f"choose where kernels run; it found mode '{mode}'. Import helpers (or "
            "helpers.device.backend) "
            "before numba, or restart the kernel and import helpers first.",
            BackendWarning,
            stacklevel=_user_stacklevel(),
        )
        return mode, f"numba.cuda imported early; {probe}", driver_version
    if user_value is not None and user_value.strip() not in ("", "0"):
        mode, reason = "simulator", f"{_ENV}={user_value} was set by the user ({probe})"
    elif user_value is not None and user_value.strip() == "0":
        if usable:
            mode, reason = "gpu", f"{_ENV}=0 was set by the user; {probe}"
        else:
            mode = "unavailable"
            reason = (f"{_ENV}=0 was set by the user but {probe}: CUDA kernels cannot run. "
                      f"Unset {_ENV} to use the simulator.")
            warnings.warn(reason, BackendWarning, stacklevel=_user_stacklevel())
    elif usable:
        os.environ[_ENV] = "0"
        mode, reason = "gpu", probe
    else:
        os.environ[_ENV] = "1"
        mode, reason = "simulator", probe
    # Numba reads its configuration when numba is first imported; re-read it if that already
    # happened, so numba.cuda (imported later) sees the choice.
    if "numba" in sys.modules:
        sys.modules["numba"].config.reload_config()
    return mode, reason, driver_version


# Low-occupancy warnings from tiny teaching launches are noise in a notebook.
os.environ.setdefault("NUMBA_DISABLE_PERFORMANCE_WARNINGS", "1")
# torch's profiler (Kineto) otherwise writes "USDT:" lines to stderr, into notebook outputs.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

#: ``"gpu"``, ``"simulator"``, or ``"unavailable"`` (the user forced NUMBA_ENABLE_CUDASIM=0 on a
#: machine with no usable GPU).
MODE, MODE_REASON, _DRIVER_CUDA_VERSION = _decide()
if MODE == "simulator":
    simulator_shared.install()   # before numba.cuda's simulator loads, or at once if it has
    simulator_blocks.install()


def timings_meaningful() -> bool:
    """True only on a real GPU: simulator timings measure a Python interpreter, not a GPU."""
    return MODE == "gpu"


def in_colab() -> bool:
    """True when running inside Google Colab."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ or (
        importlib.util.find_spec("google") is not None
        and importlib.util.find_spec("google.colab") is not None
    )


# --------------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BackendInfo:
    """The environment the workbook runs in (see :func:`info`).

    Memory is in bytes, peaks in FLOP/s and bytes/s; ``None`` where not known or not applicable.
    """

    mode: str
    mode_reason: str
    timings_meaningful: bool
    gpu_name: str | None
    gpu_sm_count: int | None
    gpu_memory_bytes: int | None
    gpu_compute_capability: str | None
    driver_version: str | None
    driver_cuda_version: str | None
    torch_cuda_version: str | None
    gpu_peak_fp32_flops: float | None
    gpu_peak_fp16_tensor_flops: float | None
    gpu_peak_bandwidth_bytes_s: float | None
    gpu_peak_source: str | None
    cpu_model: str
    cpu_physical_cores: int | None
    cpu_logical_cores: int | None
    cpu_peak_fp32_flops_estimate: float | None
    cpu_peak_source: str
    ram_bytes: int | None
    in_colab: bool
    python: str
    versions: dict[str, str]

    @property
    def device_label(self) -> str:
        """One line naming where kernels run, for chart legends and titles."""
        if self.mode == "gpu":
            return f"GPU: {self.gpu_name}"
        if self.mode == "simulator":
            return "Numba CUDA simulator (correctness only)"
        return "no CUDA device"

    @property
    def cpu_label(self) -> str:
        """One line naming the CPU, e.g. ``"CPU: AMD EPYC 7B13 (2 cores)"``."""
        cores = self.cpu_logical_cores or self.cpu_physical_cores or "?"
        return f"CPU: {self.cpu_model} ({cores} cores)"

    def as_dict(self) -> dict:
        """Plain dict (JSON-serialisable), for result metadata."""
        return dataclasses.asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """(item, value) rows of the readable report."""
        meaning = (
            "yes: kernels run on a real GPU"
            if self.timings_meaningful
            else "NO: CUDA kernels run in the Numba simulator, which checks correctness only; "
            "CPU timings (NumPy, torch) are real"
        )
        rows = [
            ("mode", f"{self.mode} ({self.mode_reason})"),
            ("GPU timings meaningful", meaning),
        ]
        if self.mode == "gpu":
            rows += [
                ("GPU", self.gpu_name or "?"),
                ("streaming multiprocessors", _fmt(self.gpu_sm_count)),
                ("GPU memory", _fmt_bytes(self.gpu_memory_bytes)),
                ("compute capability", _fmt(self.gpu_compute_capability)),
                ("driver", _fmt(self.driver_version)),
                ("CUDA (driver supports / torch built for)",
                 f"{_fmt(self.driver_cuda_version)} / {_fmt(self.torch_cuda_version)}"),
                ("peak FP32", _fmt_rate(self.gpu_peak_fp32_flops, "FLOP/s")),
                ("peak FP16 tensor cores", _fmt_rate(self.gpu_peak_fp16_tensor_flops, "FLOP/s")),
                ("peak memory bandwidth", _fmt_rate(self.gpu_peak_bandwidth_bytes_s, "B/s")),
                ("peaks from", _fmt(self.gpu_peak_source)),
            ]
        rows += [
            ("CPU", self.cpu_model),
            ("CPU cores (physical / logical)",
             f"{_fmt(self.cpu_physical_cores)} / {_fmt(self.cpu_logical_cores)}"),
            ("CPU peak FP32 (estimate)",
             f"{_fmt_rate(self.cpu_peak_fp32_flops_estimate, 'FLOP/s')} ({self.cpu_peak_source})"),
            ("RAM", _fmt_bytes(self.ram_bytes)),
            ("Google Colab", "yes" if self.in_colab else "no"),
            ("Python", self.python),
        ]
        rows += [(name, version) for name, version in self.versions.items()]
        return rows

    def __str__(self) -> str:
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def _repr_html_(self) -> str:
        import html

        body = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in self.rows()
        )
        return f"<table>{body}</table>"


def _fmt(value) -> str:
    return "n/a" if value is None else str(value)


def _fmt_bytes(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**30:.1f} GiB"


def _fmt_rate(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


_PACKAGES = ("numpy", "numba", "numba-cuda", "torch", "torchvision", "plotly", "ipywidgets")


def _versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _cpu() -> tuple[str, float | None, str]:
    """CPU model, estimated FP32 peak FLOP/s, and how the estimate was made."""
    model, flags, hz = host.proc_cpuinfo()   # Linux: the file py-cpuinfo reads first there
    if not (model and hz):   # elsewhere, or a file without them: py-cpuinfo's other sources
        try:
            import cpuinfo

            data = cpuinfo.get_cpu_info()
            model = model or data.get("brand_raw")
            flags = flags or frozenset(data.get("flags", []))
            hz = hz or (data.get("hz_advertised") or data.get("hz_actual") or (None,))[0]
        except Exception:  # noqa: BLE001 - the CPU report is informative only
            pass
    model = model or platform.processor() or platform.machine()
    cores = host.cpu_count(logical=False) or host.cpu_count() or 1
    hz = hz or host.cpu_freq_max_hz()
    # FP32 FLOPs per cycle per core: 2 FMA units x lanes x 2 (multiply + add).
    if "avx512f" in flags:
        per_cycle, isa = 64, "AVX-512, 2 FMA units"
    elif "avx2" in flags and "fma" in flags:
        per_cycle, isa = 32, "AVX2 + FMA, 2 FMA units"
    elif "avx" in flags:
        per_cycle, isa = 16, "AVX"
    elif "asimd" in flags or platform.machine() in ("arm64", "aarch64"):
        per_cycle, isa = 16, "NEON, assumed 2 x 128-bit FMA units"
    else:
        per_cycle, isa = 8, "SSE"
    if not hz:
        return model, None, "clock unknown"
    peak = cores * hz * per_cycle
    return model, peak, f"{cores} cores x {hz / 1e9:.2f} GHz x {per_cycle} FLOP/cycle ({isa})"


def _gpu_details() -> dict:
    """GPU figures from torch and NVML; only called in gpu mode."""
    out: dict = {}
    try:
        import torch

        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu_name=props.name,
            gpu_sm_count=props.multi_processor_count,
            gpu_memory_bytes=props.total_memory,
            gpu_compute_capability=f"{props.major}.{props.minor}",
            torch_cuda_version=torch.version.cuda,
        )
    except Exception as exc:  # noqa: BLE001 - report what is known
        out["gpu_name"] = f"(torch could not query the GPU: {exc})"
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        out["driver_version"] = version.decode() if isinstance(version, bytes) else version
        if "gpu_name" not in out:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            out["gpu_name"] = name.decode() if isinstance(name, bytes) else name
    except Exception:  # noqa: BLE001 - NVML is optional
        pass
    return out


@functools.lru_cache(maxsize=1)
def info() -> BackendInfo:
    """The environment report, computed once.

    Returns:
        A :class:`BackendInfo`. In ``gpu`` mode it names the GPU (SM count, memory, compute
        capability, driver and CUDA versions) and its datasheet peaks from :data:`KNOWN_GPUS`;
        in every mode it names the CPU (model, cores, an estimated FP32 peak), RAM, whether this
        is Google Colab, and the versions of the workbook's main libraries. psutil, py-cpuinfo
        (where ``/proc/cpuinfo`` does not name the CPU and its clock) and pynvml are used where
        installed; what cannot be told without them is None.
    """
    gpu = _gpu_details() if MODE == "gpu" else {}
    spec = lookup_gpu(gpu["gpu_name"]) if gpu.get("gpu_name") else None
    cpu_model, cpu_peak, cpu_source = _cpu()
    driver_cuda = None
    if _DRIVER_CUDA_VERSION:
        driver_cuda = f"{_DRIVER_CUDA_VERSION // 1000}.{_DRIVER_CUDA_VERSION % 1000 // 10}"
    return BackendInfo(
        mode=MODE,
        mode_reason=MODE_REASON,
        timings_meaningful=timings_meaningful(),
        gpu_name=gpu.get("gpu_name"),
        gpu_sm_count=gpu.get("gpu_sm_count"),
        gpu_memory_bytes=gpu.get("gpu_memory_bytes"),
        gpu_compute_capability=gpu.get("gpu_compute_capability"),
        driver_version=gpu.get("driver_version"),
        driver_cuda_version=driver_cuda if MODE == "gpu" else None,
        torch_cuda_version=gpu.get("torch_cuda_version"),
        gpu_peak_fp32_flops=spec.fp32_flops if spec else None,
        gpu_peak_fp16_tensor_flops=spec.fp16_tensor_flops if spec else None,
        gpu_peak_bandwidth_bytes_s=spec.bandwidth_bytes_s if spec else None,
        gpu_peak_source=(spec.source if spec else
                         ("not in the table of known GPUs" if MODE == "gpu" else None)),
        cpu_model=cpu_model,
        cpu_physical_cores=host.cpu_count(logical=False),
        cpu_logical_cores=host.cpu_count(logical=True),
        cpu_peak_fp32_flops_estimate=cpu_peak,
        cpu_peak_source=cpu_source,
        ram_bytes=host.ram_total_bytes(),
        in_colab=in_colab(),
        python=platform.python_version(),
        versions=_versions(),
    )


def describe() -> str:
    """The environment report as aligned text (see :func:`info`)."""
    return str(info())


# --------------------------------------------------------------------------------------------
# A driver older than the CUDA that Numba compiles for (numba-cuda#120, seen in Colab).
# --------------------------------------------------------------------------------------------

#: The driver error a too-new PTX gives at link time.
PTX_ERROR_TEXT = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"

__all__ += ["PTX_ERROR_TEXT", "ptx_check"]


def _launch_trivial_kernel() -> None:
    """Compile and launch a one-thread kernel, so compile and link errors surface here."""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def _add_one(a):
        a[0] += 1

    out = cuda.to_device(np.zeros(1, dtype=np.float32))
    _add_one[1, 1](out)
    cuda.synchronize()


def _driver_cuda_label() -> tuple[str, str]:
    """(``"12.4"``, ``"cu12"``) for the driver's CUDA version, or ("unknown", "cu12") if unknown."""
    v = _DRIVER_CUDA_VERSION
    if not v:
        return "unknown", "cu12"
    return f"{v // 1000}.{(v % 1000) // 10}", f"cu{v // 1000}"


def ptx_check() -> str | None:
    """On a GPU, compile and launch a trivial kernel; explain a too-old driver if that fails.

    Numba compiles kernels to PTX for the CUDA version of its compiler wheels; a driver older
    than that rejects the PTX with ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION`` (numba-cuda#120, seen
    in Google Colab). Checking once, up front, lets a learner see the fix instead of a linker
    traceback deep inside the first kernel launch.

    Returns:
        None without a GPU (simulator), or when the launch works. Otherwise a message: for the
        PTX error, what it means and how to fix it; for any other failure, the error itself.
    """
    if MODE != "gpu":
        return None
    try:
        _launch_trivial_kernel()
    except Exception as exc:  # noqa: BLE001 - any failure here is reported, not raised
        text = f"{type(exc).__name__}: {exc}"
        if PTX_ERROR_TEXT not in text:
            return f"A trivial Numba CUDA kernel failed to run on this GPU:\n{text}"
        cuda_version, extra = _driver_cuda_label()
        return (
            f"Numba CUDA kernels cannot run here: the GPU driver (supports CUDA {cuda_version}) "
            f"is older than the CUDA that Numba compiles for, so it rejects the compiled code "
            f"({PTX_ERROR_TEXT}, numba-cuda issue #120).\n"
            f"Fix: install the numba-cuda wheels for your driver's CUDA major version, then "
            f"restart the kernel (in Colab: Runtime > Restart session) and run the notebook "
            f"again:\n"
            f'    pip install "numba-cuda[{extra}]"\n'
            f"or, on your own machine, update the NVIDIA driver.\n"
            f"(Error was: {text.splitlines()[0]})"
        )
    return None
