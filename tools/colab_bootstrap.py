"""Install what the workbook needs in Google Colab, planned before anything is installed.

The first cell of every notebook runs :func:`bootstrap` in Colab, by file path and before any
dependency is importable, so this module uses the standard library (and ``packaging``) only.
Colab's torch and torchvision are built for Colab's GPU driver, and a PyPI build for a newer CUDA
would lose the GPU, so they are never installed or upgraded; nor are the Jupyter pieces Colab's
front end runs on. numba-cuda gets the extra of the driver's CUDA major version (``cu12`` for a
12.x driver, whose CUDA 13 code it rejects). :func:`plan` is a pure function of the driver's CUDA
version, the installed packages and the platform; :func:`bootstrap` probes them and runs it.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tomllib
from typing import NamedTuple

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name as _canonical
    from packaging.version import InvalidVersion
except ImportError:  # a runtime without packaging still has pip's copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name as _canonical
    from pip._vendor.packaging.version import InvalidVersion

__all__ = ["KEEP", "FLOOR_ONLY", "NUMBA_CUDA", "TORCH_FLOOR", "GPU_HINT", "Plan", "plan",
           "driver_cuda_version", "activate_numba_cuda", "installed_packages",
           "read_requirements", "bootstrap"]

#: Never installed or upgraded in Colab, whatever version is there: torch and torchvision
#: (built for Colab's driver), and Colab's own kernel and Jupyter packages. The notebooks do
#: not import the last five (``make run``, ``make book`` and the tests do).
KEEP = ("torch", "torchvision", "ipykernel", "jupyterlab", "nbclient", "nbconvert", "nbformat",
        "kaleido")
#: Kept in Colab if installed at or above their floor: their upper bound in pyproject.toml is for
#: the installs we make (numpy < 2.5 while numba-cuda needs it). A runtime's numpy is what its
#: other packages were built against and is already imported; helpers.device.numpy_compat lets
#: numba-cuda compile under numpy 2.5.
FLOOR_ONLY = ("numpy",)
#: The package whose extra follows the driver.
NUMBA_CUDA = "numba-cuda"
#: The oldest torch whose API the workbook's code relies on (pyproject.toml says why).
TORCH_FLOOR = (2, 6)
WORKBOOK = "gpu-cnn-workbook"
GPU_HINT = ("No GPU in this runtime: CUDA kernels run in Numba's CUDA simulator and every notebook "
            "still runs. For a GPU: Runtime > Change runtime type > T4 GPU, then run this cell "
            "again.")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


class Plan(NamedTuple):
    """What :func:`bootstrap` will run (``commands``: full argument lists) and the one line it
    prints (``summary``)."""
    commands: list[list[str]]
    summary: str


def _extra(driver_cuda: tuple[int, int] | None) -> str:
    """numba-cuda's CUDA extra for the driver: cu12 up to a 12.x driver, cu13 from 13.x (newer
    drivers run older CUDA code, not the other way round); cu13 without a GPU, for the compiler
    that notebook 07 uses."""
    return "cu12" if driver_cuda is not None and driver_cuda[0] <= 12 else "cu13"


def _has_extra(installed: dict[str, str], extra: str) -> bool:
    """Whether numba-cuda's CUDA pieces for ``extra`` are installed: cuda-bindings and the
    cuda-toolkit components (NVVM, NVRTC) of that major version, and its nvJitLink."""
    major = int(extra[2:])
    jitlink = "nvidia-nvjitlink-cu12" if major == 12 else "nvidia-nvjitlink"
    return (all(_version_tuple(installed.get(name, "0"))[:1] == (major,)
                for name in ("cuda-bindings", "cuda-toolkit")) and jitlink in installed)


def _satisfies(req, version: str | None) -> bool:
    """Whether an installed ``version`` (None: not installed) meets ``req``'s specifier; a
    version that is not PEP 440 does not."""
    if version is None:
        return False
    try:
        return req.specifier.contains(version.split("+")[0], prereleases=True)
    except InvalidVersion:
        return False


def _install_spec(req, extras: tuple[str, ...] | None = None) -> str:
    """``req`` as pip takes it: without its marker (already evaluated) and, where ``extras``
    is given, with those extras instead of its own."""
    req = Requirement(str(req))
    req.marker = None
    if extras is not None:
        req.extras = set(extras)
    return str(req)


def plan(driver_cuda: tuple[int, int] | None, installed: dict[str, str], platform: str = "linux",
         requirements: list[str] | None = None, root: str = "/content/gpu-cnn-workbook",
         python: str = "python") -> Plan:
    """Plan the installs for a Colab runtime.

    Args:
        driver_cuda: the CUDA version the GPU driver supports, (major, minor), e.g. (12, 4);
            None without a GPU.
        installed: {distribution name: version} of what is installed (any spelling of a name).
        platform: ``sys.platform`` of the runtime (for the requirements' markers).
        requirements: the workbook's dependencies as in pyproject.toml (default: read there).
        root: the workbook's folder; python: the interpreter that runs pip.

    Returns:
        A :class:`Plan`: at most one ``pip install`` of the missing or too old requirements
        (never one named in :data:`KEEP`; numba-cuda with the extra of :func:`_extra`), and one
        ``pip install --no-deps -e root`` if the workbook itself is not installed.

    Raises:
        ValueError: if ``driver_cuda`` is not a (major, minor) pair of integers.
        packaging.requirements.InvalidRequirement: for a requirement pip could not read either.
    """
    if driver_cuda is not None and not (isinstance(driver_cuda, tuple) and len(driver_cuda) == 2
                                        and all(isinstance(v, int) for v in driver_cuda)):
        raise ValueError(f"driver_cuda: expected (major, minor) or None, got {driver_cuda!r}")
    have = {_canonical(k): v for k, v in installed.items()}
    environment = dict(default_environment(), sys_platform=platform,
                       platform_system={"linux": "Linux", "darwin": "Darwin",
                                        "win32": "Windows"}.get(platform, platform))
    reqs = requirements if requirements is not None else read_requirements(root)
    extra = _extra(driver_cuda) if platform == "linux" else None
    wanted = []
    for text in reqs:
        req = Requirement(text)
        name = _canonical(req.name)
        if req.marker is not None and not req.marker.evaluate(environment):
            continue
        if name in KEEP:
            continue
        if name == NUMBA_CUDA:
            if not _satisfies(req, have.get(name)) or (extra and not _has_extra(have, extra)):
                spec = _install_spec(req, (extra,) if extra else ())  # the driver's extra
                wanted = [w for w in wanted if not w.startswith(NUMBA_CUDA)] + [spec]
            continue
        if name in FLOOR_ONLY and have.get(name) is not None:
            floor = Requirement(str(req))
            floor.specifier = SpecifierSet(",".join(str(s) for s in req.specifier
                                                    if s.operator in (">=", ">", "==", "~=")))
            if _satisfies(floor, have[name]):
                continue
        if not _satisfies(req, have.get(name)):
            wanted.append(_install_spec(req))
    commands = []
    if wanted:
        commands.append([python, "-m", "pip", "install", "-q", *wanted])
    if _canonical(WORKBOOK) not in have:
        commands.append([python, "-m", "pip", "install", "-q", "--no-deps", "-e", root])

    driver = ("no GPU" if driver_cuda is None
              else f"GPU driver for CUDA {driver_cuda[0]}.{driver_cuda[1]}")
    parts = [f"Colab setup ({driver}):"]
    parts.append(f"installing {', '.join(wanted)}" if wanted else "nothing to install")
    if extra and any(w.startswith(NUMBA_CUDA) for w in wanted):
        parts[-1] += f" ({extra}: the driver's CUDA line)" if driver_cuda else \
            " (cu13: the compiler notebook 07 reads)"
    torch = have.get("torch")
    parts[-1] += ";"
    if torch is None:
        parts.append("torch is missing, which a Colab runtime has: install torch for this "
                     "runtime's driver first;")
    else:
        old = _version_tuple(torch)[:2] < TORCH_FLOOR
        parts.append(f"keeping Colab's torch {torch}"
                     + (f" and torchvision {have['torchvision']}" if "torchvision" in have else "")
                     + (f" (older than the {TORCH_FLOOR[0]}.{TORCH_FLOOR[1]} the workbook needs:"
                        " some cells may fail)" if old else "") + ";")
    parts.append("the workbook itself without its dependencies." if commands and
                 commands[-1][-3:] == ["--no-deps", "-e", root] else "the workbook is installed.")
    return Plan(commands, " ".join(parts))


def read_requirements(root: str) -> list[str]:
    """The workbook's dependencies: ``[project] dependencies`` of ``root/pyproject.toml``.

    Raises:
        FileNotFoundError: if ``root`` has no pyproject.toml.
    """
    with open(pathlib.Path(root) / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def driver_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the GPU driver supports, from libcuda's ``cuDriverGetVersion`` (no GPU
    context is created), or None where there is no driver."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        try:
            if lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
                return None
        except (AttributeError, OSError):
            return None
        return version.value // 1000, (version.value % 1000) // 10
    return None


def installed_packages() -> dict[str, str]:
    """{canonical distribution name: version} of what this interpreter has installed."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_canonical(name), dist.version)
    return found


def _pip(command: list[str]) -> str:
    """Run one pip command, its output captured (pip's notes and its report on conflicts among
    other installed packages would bury the one line); on failure print that output and raise
    :class:`subprocess.CalledProcessError`. Returns the output."""
    done = subprocess.run(command, capture_output=True, text=True)
    output = (done.stdout or "") + (done.stderr or "")
    if done.returncode != 0:
        print(output.strip())
        raise subprocess.CalledProcessError(done.returncode, command, output)
    return output


def activate_numba_cuda() -> str | None:
    """Make a numba-cuda installed in this running interpreter take over ``numba.cuda``, as its
    ``.pth`` file does at start-up (Python reads .pth files only then): without this, the
    notebook would get numba's own, older CUDA target until the session restarts.

    Returns:
        None when done (or when there is no numba-cuda), or a sentence saying to restart the
        session when ``numba.cuda`` was imported already.
    """
    importlib.invalidate_caches()
    if "numba.cuda" in sys.modules:
        return ("numba.cuda was imported before numba-cuda was installed: restart the session "
                "(Runtime > Restart session) and run this cell again.")
    try:
        import _numba_cuda_redirector  # noqa: F401  (installs numba-cuda's import redirect)
    except ImportError:
        pass
    return None


def bootstrap(root: str | pathlib.Path, run=None) -> Plan:
    """Probe the runtime, plan, run the plan's commands and print the plan's summary line,
    preceded by :data:`GPU_HINT` on a runtime without a GPU.

    Args:
        root: the workbook's folder (its pyproject.toml lists the dependencies).
        run: runs one command and returns its output; default: pip's output captured, shown
            only if it fails.

    Returns:
        The :class:`Plan` that ran.

    Raises:
        subprocess.CalledProcessError: if a command fails (the notebook then stops there).
        FileNotFoundError: if ``root`` has no pyproject.toml.
    """
    run = run or _pip
    driver = driver_cuda_version()
    the_plan = plan(driver, installed_packages(), sys.platform, read_requirements(str(root)),
                    str(root), sys.executable)
    if driver is None:
        print(GPU_HINT)
    output = "".join(run(command) or "" for command in the_plan.commands)
    summary = the_plan.summary
    if any(a.startswith(NUMBA_CUDA) for c in the_plan.commands for a in c):
        restart = activate_numba_cuda()
        summary += f" {restart}" if restart else ""
    conflicted = sorted(set(re.findall(r"^(\S+) \S+ requires ", output, re.M)))
    if conflicted:
        summary += (f" pip: {', '.join(conflicted)} now find other versions of their "
                    f"dependencies than they ask for (`pip check` lists them).")
    print(summary)
    return the_plan
