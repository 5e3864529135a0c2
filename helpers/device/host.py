"""The host machine: CPU cores, RAM and CPU utilisation, from psutil where it is installed.

A bare GPU server may lack psutil; every function here then falls back to the standard library
and Linux's ``/proc`` files, and returns None for what neither can tell.
"""

from __future__ import annotations

import glob
import os
import re
import time

try:
    import psutil
except ImportError:  # psutil is optional: the standard library and /proc stand in
    psutil = None

__all__ = [
    "CpuUtilisation",
    "FreeCores",
    "cpu_count",
    "cpu_freq_max_hz",
    "largest_cache_bytes",
    "proc_cpuinfo",
    "ram_available_bytes",
    "ram_total_bytes",
    "rss_bytes",
]


def _meminfo_kib(field: str) -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_count(logical: bool = True) -> int | None:
    """Logical CPUs (``logical=True``) or physical cores; None where it cannot be told."""
    if psutil is not None:
        return psutil.cpu_count(logical=logical)
    return os.cpu_count() if logical else None


def _field(lines: list[str], names: tuple[str, ...], text: bool = False) -> str | None:
    """The value of the first line of ``/proc/cpuinfo`` whose field is one of ``names`` (case
    ignored) and whose value is not empty (nor a bare number, with ``text``)."""
    wanted = {n.lower() for n in names}
    for line in lines:
        left, sep, right = line.partition(":")
        right = right.strip()
        if sep and left.strip().lower() in wanted and right and not (text and right.isdigit()):
            return right
    return None


def _brand_hz(brand: str) -> float | None:
    """The clock a CPU's brand string names (``... @ 2.40GHz``), in Hz, or None."""
    found = re.search(r"([\d.]+)\s*([GM])Hz\s*$", brand.split("@")[-1].strip(),
                      re.IGNORECASE)
    if not found:
        return None
    try:
        value = float(found.group(1))
    except ValueError:
        return None
    return value * (1e9 if found.group(2).upper() == "G" else 1e6) or None


def proc_cpuinfo(path: str = "/proc/cpuinfo") -> tuple[str | None, frozenset[str], int | None]:
    """The CPU's model name, feature flags and clock (Hz) from Linux's ``/proc/cpuinfo``:
    (None, frozenset(), None) where the file is absent (macOS, Windows), and None for a field it
    lacks (many Arm boards name no model or clock there).

    The fields are those py-cpuinfo reads first on Linux (``model name``, ``flags`` or
    ``Features``, ``cpu MHz``; the clock in the model name, ``... @ 2.40GHz``, before
    ``cpu MHz``), read here without the child process ``cpuinfo.get_cpu_info()`` starts each
    time (about a second of CPU in every new process that reports its machine).
    """
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None, frozenset(), None
    brand = _field(lines, ("model name", "cpu", "processor", "uarch"), text=True)
    flags = frozenset((_field(lines, ("flags", "Features", "ASEs implemented")) or "").split())
    hz = _brand_hz(brand) if brand and "hz" in brand.lower() else None
    if hz is None:
        mhz = _field(lines, ("cpu MHz", "cpu speed", "clock", "cpu MHz dynamic", "cpu MHz static"))
        try:
            hz = float(re.sub(r"(?i)\s*mhz$", "", mhz)) * 1e6 if mhz else None
        except ValueError:
            hz = None
    return brand, flags, round(hz) if hz else None


def cpu_freq_max_hz() -> float | None:
    """The CPU's maximum clock in Hz (psutil), or None."""
    if psutil is None:
        return None
    freq = psutil.cpu_freq()
    return freq.max * 1e6 if freq and freq.max else None


def largest_cache_bytes() -> int | None:
    """The largest CPU cache of cpu0 in bytes (Linux's sysfs), or None where unreadable."""
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as fh:
                found = re.fullmatch(r"(\d+)([KMG]?)", fh.read().strip())
        except OSError:
            continue
        if found:
            sizes.append(int(found.group(1)) * units[found.group(2)])
    return max(sizes) if sizes else None


def ram_total_bytes() -> int | None:
    """Installed RAM in bytes, or None."""
    if psutil is not None:
        return int(psutil.virtual_memory().total)
    kib = _meminfo_kib("MemTotal")
    if kib is not None:
        return kib * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def ram_available_bytes() -> int:
    """RAM available to a new allocation without swapping, in bytes.

    psutil's figure, else Linux's ``MemAvailable``, else the free pages (``os.sysconf``).

    Raises:
        RuntimeError: none of the three can be read (a refusal then cannot be computed).
    """
    if psutil is not None:
        return int(psutil.virtual_memory().available)
    kib = _meminfo_kib("MemAvailable")
    if kib is not None:
        return kib * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError) as exc:
        raise RuntimeError("cannot read the available RAM: install psutil") from exc


def rss_bytes() -> int | None:
    """This process's resident set size in bytes, or None."""
    if psutil is not None:
        return int(psutil.Process().memory_info().rss)
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class CpuUtilisation:
    """CPU utilisation of all cores, in percent, since the previous :meth:`read`.

    psutil's ``cpu_percent``, else the busy share of Linux's ``/proc/stat`` counters; None from
    :meth:`read` where neither exists.
    """

    def __init__(self) -> None:
        self._last = self._counters()
        if psutil is not None:
            psutil.cpu_percent(interval=None)  # the first call only starts psutil's interval

    @staticmethod
    def _counters() -> tuple[float, float] | None:
        if psutil is not None:
            return None
        try:
            with open("/proc/stat") as fh:
                values = [float(v) for v in fh.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = values[3] + (values[4] if len(values) > 4 else 0.0)
        return sum(values), idle

    def read(self) -> float | None:
        """Percent busy since the last call (0..100), or None."""
        if psutil is not None:
            return float(psutil.cpu_percent(interval=None))
        now = self._counters()
        last, self._last = self._last, now
        if now is None or last is None or now[0] <= last[0]:
            return None
        total, idle = now[0] - last[0], now[1] - last[1]
        return 100.0 * (1.0 - idle / total)



def _busy_seconds() -> tuple[float, float] | None:
    """(CPU seconds all processes were busy, CPU seconds of this process), cumulative."""
    own = os.times()
    mine = own.user + own.system
    if psutil is not None:
        t = psutil.cpu_times()
        idle = t.idle + sum(getattr(t, f, 0.0) for f in ("iowait", "guest", "guest_nice"))
        return sum(t) - idle, mine  # (guest time is counted in user time already)
    try:
        with open("/proc/stat") as fh:
            values = [float(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return (sum(values) - values[3] - (values[4] if len(values) > 4 else 0.0)) / tick, mine


class FreeCores:
    """How many of this process's cores other processes left free, since the last :meth:`read`.

    Each :meth:`read` compares the busy CPU time of the whole machine with this process's own
    since the previous read (the first read samples ``first_sample_s`` seconds): the cores the
    others used (a core counts from 70 % busy) are taken from those this process may run on;
    at least 1 is left.

    Args:
        first_sample_s: seconds the first read samples (> 0).
    """

    def __init__(self, first_sample_s: float = 0.05):
        if not first_sample_s > 0:
            raise ValueError(f"first_sample_s must be > 0 seconds, got {first_sample_s!r}")
        self.first_sample_s = first_sample_s
        self.cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                      else (os.cpu_count() or 1))
        self._last: tuple[float, float, float] | None = None

    def read(self) -> int:
        """Cores free for this process now (1 ... :attr:`cores`); all of them when the
        machine's counters cannot be read."""
        if self._last is None:
            self._last = self._sample()
            time.sleep(self.first_sample_s)
        now, last = self._sample(), self._last
        self._last = now
        if now is None or last is None or now[0] <= last[0]:
            return self.cores
        wall = now[0] - last[0]
        others = ((now[1] - last[1]) - (now[2] - last[2])) / wall
        taken = int(max(others, 0.0) + 0.3)  # a core counts as taken from 70 % busy
        return max(1, min(self.cores, self.cores - taken))

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        busy = _busy_seconds()
        return None if busy is None else (time.monotonic(), *busy)
