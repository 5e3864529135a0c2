"""The recording commands of notebooks 02, 07, 08 and 09 (hotspots, kernel_resources,
memory_access, transfers, training_throughput) on a bare GPU server: they import and run
without psutil, tqdm, nvidia-ml-py (pynvml) or torchvision."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Modules of these commands (and what they import of ours that the others do not).
MODULES = ("helpers.experiments.hotspots", "helpers.experiments.kernel_resources",
           "helpers.experiments.memory_access", "helpers.experiments.transfers",
           "helpers.experiments.transfers.streams", "helpers.experiments.training",
           "helpers.experiments.training.records", "helpers.experiments.training.throughput",
           "helpers.experiments.training.utilisation", "helpers.networks.figure2")

#: A meta-path finder under which ``import psutil`` (tqdm, pynvml, torchvision) raises
#: ImportError. It answers ``find_spec`` with a spec whose loader refuses, rather than raising
#: there: torch._dynamo probes third-party packages with ``importlib.util.find_spec``, which
#: for a package that is really missing returns None instead of raising.
BLOCKER = textwrap.dedent("""
    import importlib.abc, importlib.machinery, sys
    BLOCKED = ("psutil", "tqdm", "pynvml", "torchvision")

    class Block(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                return importlib.machinery.ModuleSpec(name, self)
            return None

        def create_module(self, spec):
            raise ImportError(f"No module named {spec.name!r} (blocked: a bare GPU server)")

        def exec_module(self, module):
            raise ImportError(module.__name__)

    sys.meta_path.insert(0, Block())
    for name in BLOCKED:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise AssertionError(f"{name} was not blocked")
""")


def _run(script: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_ENABLE_CUDASIM="1")
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(script)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout,
                          check=False)


@pytest.mark.slow
def test_the_modules_import_without_psutil_tqdm_pynvml_or_torchvision():
    proc = _run(f"""
        import importlib, time
        for name in {MODULES!r}:
            importlib.import_module(name)
        from helpers.device import host, progress
        from helpers.experiments.training import utilisation as tu
        from helpers.networks import figure2
        assert host.psutil is None and progress._tqdm is None and tu.pynvml is None
        assert figure2.missing_requirement("vgg16") == "torchvision is not installed"
        assert figure2.missing_requirement("overfeat") is None
        with tu.UtilisationSampler(interval_s=0.02, gpu=False) as sampler:
            time.sleep(0.2)  # releases the GIL: the sampler's thread takes its samples
        assert sampler.samples
        assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        print("imported", len({MODULES!r}))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"imported {len(MODULES)}" in proc.stdout


@pytest.mark.slow
def test_hotspots_and_training_run_on_a_bare_server(tmp_path):
    proc = _run(f"""
        from helpers.experiments import hotspots
        from helpers.experiments.training import throughput as training_throughput
        code = hotspots.main(["--model", "all", "--batch", "1", "--input", "71",
                              "--iterations", "1", "--threads", "1", "--time-limit", "120"])
        print("hotspots exit", code)
        code = training_throughput.main(["--quick", "--experiment", "utilisation",
                                         "--image-size", "16", "--save",
                                         "--out", {str(tmp_path)!r}])
        print("training exit", code)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for name in ("AlexNet", "GoogLeNet", "VGG-16"):
        assert f"{name}: skipped: torchvision is not installed" in out
    assert "profiling OverFeat (fast)" in out and "hotspots exit 0" in out
    assert "training exit 0" in out
    names = sorted(p.name for p in tmp_path.glob("training_*.csv"))
    assert len(names) == 2 and any(n.startswith("training_utilisation_") for n in names)
