"""helpers.device.backend: the simulator/GPU decision, the environment report, the GPU table."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from helpers.device import backend
from conftest import simulator_only

# ------------------------------------------------------------------------- this process


def test_mode_is_one_of_the_documented_values_and_matches_the_environment_variable():
    assert backend.MODE in ("gpu", "simulator")  # never "unavailable" in the test process
    expected = {"gpu": "0", "simulator": "1"}[backend.MODE]
    assert os.environ["NUMBA_ENABLE_CUDASIM"] == expected
    assert backend.timings_meaningful() is (backend.MODE == "gpu")


@simulator_only
def test_simulator_mode_here():
    assert backend.MODE == "simulator"
    assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
    assert backend.timings_meaningful() is False
    from numba import cuda

    assert "simulator" in cuda.jit.__module__


@simulator_only
def test_describe_names_mode_cpu_and_versions():
    text = backend.describe()
    info = backend.info()
    assert text.splitlines()[0].startswith("mode")
    assert "simulator" in text
    assert info.cpu_model and info.cpu_model in text
    assert "NO:" in text  # timings flagged as not meaningful
    for package in ("numpy", "numba", "torch"):
        assert package in info.versions
        assert info.versions[package] in text
    assert platform.python_version() in text
    assert info.mode == "simulator"
    assert info.gpu_name is None and info.gpu_peak_fp32_flops is None
    assert info.device_label == "Numba CUDA simulator (correctness only)"
    assert info.cpu_label.startswith("CPU: " + info.cpu_model)
    assert info.ram_bytes > 2**28
    html = info._repr_html_()
    assert html.startswith("<table>") and "mode" in html


X86 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
cpu MHz\t\t: 1200.000
flags\t\t: fpu sse avx avx2 fma
processor\t: 1
model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
flags\t\t: fpu sse avx avx2 fma avx512f
"""
#: An Arm board: no model name and no clock in the file.
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm\nCPU part\t: 0xd0c\n"


@pytest.mark.parametrize("text, want", [
    (X86, ("Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", {"fpu", "sse", "avx", "avx2", "fma"},
           2_400_000_000)),   # the clock in the name, not cpu MHz (the current, idle clock)
    (X86.replace(" @ 2.40GHz", ""),
     ("Intel(R) Xeon(R) CPU E5-2680 v4", {"fpu", "sse", "avx", "avx2", "fma"}, 1_200_000_000)),
    (ARM, (None, {"fp", "asimd", "evtstrm"}, None)),
])
def test_proc_cpuinfo_reads_the_model_flags_and_clock_as_py_cpuinfo_does(tmp_path, text, want):
    from helpers.device import host

    path = tmp_path / "cpuinfo"
    path.write_text(text)
    brand, flags, hz = host.proc_cpuinfo(str(path))
    assert (brand, set(flags), hz) == want
    assert host.proc_cpuinfo(str(tmp_path / "absent")) == (None, frozenset(), None)


def test_the_cpu_report_asks_py_cpuinfo_only_for_what_proc_cpuinfo_lacks(monkeypatch):
    """py-cpuinfo's get_cpu_info() starts a Python process (about a second of CPU) each call:
    where /proc/cpuinfo names the model and clock it is not called; where not, it fills in."""
    import cpuinfo

    from helpers.device import host

    calls = []

    def get_cpu_info():
        calls.append(1)
        return {"brand_raw": "Example Arm CPU", "hz_advertised": [2_000_000_000, 0],
                "flags": ["asimd"]}

    monkeypatch.setattr(cpuinfo, "get_cpu_info", get_cpu_info)
    monkeypatch.setattr(host, "cpu_count", lambda logical=True: 4)
    monkeypatch.setattr(host, "proc_cpuinfo", lambda: ("Intel(R) Xeon(R) CPU @ 2.40GHz",
                                                       frozenset({"avx2", "fma"}), 2_400_000_000))
    assert backend._cpu() == ("Intel(R) Xeon(R) CPU @ 2.40GHz", 4 * 2.4e9 * 32,
                              "4 cores x 2.40 GHz x 32 FLOP/cycle (AVX2 + FMA, 2 FMA units)")
    assert calls == []
    monkeypatch.setattr(host, "proc_cpuinfo", lambda: (None, frozenset({"asimd"}), None))
    neon = "4 cores x 2.00 GHz x 16 FLOP/cycle (NEON, assumed 2 x 128-bit FMA units)"
    assert backend._cpu() == ("Example Arm CPU", 4 * 2e9 * 16, neon)
    assert calls == [1]


def test_info_is_json_serialisable():
    d = backend.info().as_dict()
    assert json.loads(json.dumps(d))["mode"] == backend.MODE


# ------------------------------------------------------------------------------ GPU table


@pytest.mark.parametrize("device_name, board", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("Tesla V100-SXM2-16GB", "Tesla V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "Tesla V100 PCIe"),
    ("Tesla T4", "Tesla T4"),
    ("NVIDIA L4", "L4"),
    ("Tesla K40c", "Tesla K40c"),
])
def test_lookup_gpu_maps_cuda_device_names(device_name, board):
    spec = backend.lookup_gpu(device_name)
    assert spec is not None, device_name
    assert spec.name == board
    assert spec.fp32_flops > 1e12 and spec.bandwidth_bytes_s > 1e11


@pytest.mark.parametrize("device_name", [
    "NVIDIA L40S", "NVIDIA L40", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090",
    "Quadro RTX 8000", "NVIDIA GH200 480GB", "NVIDIA A10", "Tesla K80", "NVIDIA T400", "",
])
def test_lookup_gpu_does_not_match_other_boards(device_name):
    assert backend.lookup_gpu(device_name) is None


def test_k40c_has_the_studys_figures():
    spec = backend.lookup_gpu("Tesla K40c")
    assert spec.fp32_flops == pytest.approx(4.29e12)
    assert spec.bandwidth_bytes_s == pytest.approx(288e9)
    assert spec.fp16_tensor_flops is None  # Kepler has no tensor cores


def test_known_gpus_table_is_consistent():
    for patterns, spec in backend.KNOWN_GPUS:
        assert patterns and all(p == p.lower() for p in patterns)
        assert spec.sms > 0 and spec.memory_bytes > 2**30 and spec.source
        # the table's own board name must find itself (or a more specific earlier entry)
        found = backend.lookup_gpu(spec.name)
        assert found is not None, spec.name
    # a variant's more specific entry must come before its generic one
    names = [spec.name for _, spec in backend.KNOWN_GPUS]
    assert names.index("H100 PCIe") < names.index("H100 SXM")
    assert names.index("A100 80GB PCIe") < names.index("A100 80GB SXM") < names.index("A100 40GB")


# -------------------------------------------------------- import order, in fresh processes
#
# Each scenario is a fresh interpreter with no NUMBA_* variable except the one it sets. They are
# started together, so that their imports of numba overlap.

_PRELUDE = """
import json, os, warnings
warnings.simplefilter("always")
caught = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
{imports}
    import helpers.device.backend as b
report = {
    "mode": b.MODE, "reason": b.MODE_REASON, "meaningful": b.timings_meaningful(),
    "env": os.environ.get("NUMBA_ENABLE_CUDASIM"),
    "warnings": [(w.category.__module__ + "." + w.category.__name__, str(w.message))
                 for w in caught],
}
"""

_NUMBA_STATE = """
import numba
from numba import cuda
report["config"] = int(numba.config.ENABLE_CUDASIM)
report["jit_module"] = cuda.jit.__module__
"""

_RELU = """
import numpy as np
from helpers import elementwise as ew
report["relu"] = ew.relu(np.array([-1.5, 2.0, 0.25, -3.0], np.float32), 32).tolist()
"""

_PRINT = """
print("REPORT " + json.dumps(report))
"""


def _script(imports: str = "", *extra: str) -> str:
    body = "\n".join("    " + ln for ln in imports.splitlines()) if imports else "    pass"
    return _PRELUDE.replace("{imports}", body) + "".join(extra) + _PRINT


#: name -> (NUMBA_ENABLE_CUDASIM or None, python code)
SCENARIOS = {
    "fresh": (None, _script("", _NUMBA_STATE)),
    # the one-liner the README gives for checking an installation
    "describe": (None, "import helpers.device.backend as b; print(b.describe())"),
    "user_sim": ("1", _script("", _NUMBA_STATE)),
    "numba_cuda_first": (None, _script("import numba.cuda", _NUMBA_STATE)),
    "numba_first": (None, _script("import numba", _NUMBA_STATE, _RELU)),
    "forced_cuda": ("0", _script("")),
}


def _start_scenarios() -> dict[str, subprocess.Popen]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    procs = {}
    for name, (value, code) in SCENARIOS.items():
        env = dict(base) if value is None else dict(base, NUMBA_ENABLE_CUDASIM=value)
        procs[name] = subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return procs


@pytest.fixture(scope="module")
def scenarios():
    """Every scenario's ``(return code, stdout, stderr)``. The interpreters start together,
    when the first test of this module needs them: only in the test process that runs this
    module (each worker of ``pytest -n`` imports every test module, and six interpreters that
    import numba and helpers cost seconds of CPU each). The tests that read them are marked
    ``slow``, as the tests that start processes are: about 9 s on two busy cores, which
    ``make test-fast`` leaves to ``make test``."""
    done = {}
    for name, proc in _start_scenarios().items():
        out, err = proc.communicate(timeout=120)
        done[name] = (proc.returncode, out, err)
    return done


def _report(scenarios, name) -> dict:
    rc, out, err = scenarios[name]
    assert rc == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("REPORT ")]
    assert len(lines) == 1, out + err
    return json.loads(lines[0][len("REPORT "):])


def _backend_warnings(report) -> list[str]:
    return [msg for cat, msg in report["warnings"] if cat == "helpers.device.backend.BackendWarning"]


@pytest.mark.slow
def test_fresh_process_makes_the_same_choice_as_this_one(scenarios):
    r = _report(scenarios, "fresh")
    assert r["mode"] == backend.MODE
    assert _backend_warnings(r) == []
    if r["mode"] == "simulator":
        assert r["env"] == "1" and r["config"] == 1 and "simulator" in r["jit_module"]
    else:
        assert r["env"] == "0" and r["config"] == 0 and "simulator" not in r["jit_module"]


@pytest.mark.slow
def test_user_set_simulator_is_respected(scenarios):
    r = _report(scenarios, "user_sim")
    assert r["mode"] == "simulator"
    assert r["meaningful"] is False
    assert "set by the user" in r["reason"]
    assert r["env"] == "1" and r["config"] == 1
    assert "simulator" in r["jit_module"]
    assert _backend_warnings(r) == []


@pytest.mark.slow
def test_numba_cuda_imported_first_warns(scenarios):
    r = _report(scenarios, "numba_cuda_first")
    msgs = _backend_warnings(r)
    assert len(msgs) == 1
    assert "numba.cuda" in msgs[0]
    assert "imported early" in r["reason"]
    # numba.cuda was imported without the simulator, so the choice was not made for it
    assert "simulator" not in r["jit_module"]
    assert r["mode"] in ("gpu", "unavailable")


@simulator_only
@pytest.mark.slow
def test_numba_without_cuda_imported_first_still_gives_simulator(scenarios):
    r = _report(scenarios, "numba_first")
    assert r["mode"] == "simulator"
    assert r["env"] == "1"
    assert r["config"] == 1  # numba's configuration was re-read after the decision
    assert "simulator" in r["jit_module"]
    assert _backend_warnings(r) == []
    assert r["relu"] == [0.0, 2.0, 0.25, 0.0]  # and kernels run in it


@simulator_only
@pytest.mark.slow
def test_forcing_cuda_without_a_gpu_gives_unavailable_with_warning(scenarios):
    r = _report(scenarios, "forced_cuda")
    assert r["mode"] == "unavailable"
    assert r["meaningful"] is False
    msgs = _backend_warnings(r)
    assert len(msgs) == 1
    assert "NUMBA_ENABLE_CUDASIM=0" in msgs[0] and "simulator" in msgs[0]


@pytest.mark.slow
def test_describe_from_the_command_line(scenarios):
    rc, out, err = scenarios["describe"]
    assert rc == 0, err
    assert out.startswith("mode")
    assert backend.MODE in out.splitlines()[0]
    assert "CPU" in out and "numpy" in out and "torch" in out
