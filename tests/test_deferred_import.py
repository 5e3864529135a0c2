"""Deferred imports (helpers.deferred_import), as the compiler's child uses them for torch:
importing binds stand-ins and loads nothing; the first attribute read loads the real package,
and from then on every stand-in reads through to its real module. A small package stands in
for torch here (test_compiler_process checks the child with torch itself)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from helpers import deferred_import

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Two packages with a submodule each, and two modules that import them as the workbook's
# modules import torch: the second also reads a name with ``from ... import``.
_FILES = {
    "pkg_a/__init__.py": "DTYPE = 'float32'\nimport sys\nsys.modules[__name__].ran = True\n",
    "pkg_a/nn/__init__.py": "",
    "pkg_a/nn/functional.py": "def conv2d():\n    return 'conv2d'\n",
    "pkg_b/__init__.py": "class Tensor:\n    pass\n",
    "uses_a.py": "import pkg_a\nimport pkg_a.nn.functional as F\nimport pkg_a\n",
    "uses_b.py": "import pkg_b\nfrom pkg_b import Tensor\n",
}

_SCRIPT = """\
import json, sys
sys.path.insert(0, sys.argv[1])
from helpers import deferred_import
answers = {}
deferred_import.defer("pkg_a")
import uses_a
answers["a_after_import"] = [deferred_import.loaded("pkg_a"), "pkg_a.nn.functional" in sys.modules
                             and deferred_import.loaded("pkg_a.nn.functional")]
dtype = uses_a.pkg_a.DTYPE                  # the first read: pkg_a loads
import pkg_a, pkg_a.nn.functional           # the real modules from now on
answers["a_after_read"] = [deferred_import.loaded("pkg_a"), getattr(pkg_a, "ran", False)]
answers["a_reads_through"] = [dtype == "float32", uses_a.F.conv2d is pkg_a.nn.functional.conv2d,
                              uses_a.pkg_a.nn.functional.conv2d() == "conv2d"]
deferred_import.defer("pkg_b")
import uses_b                               # from pkg_b import Tensor reads it at once
answers["b_after_import"] = [deferred_import.loaded("pkg_b"), uses_b.Tensor is uses_b.pkg_b.Tensor]
print(json.dumps(answers))
"""


@pytest.mark.each_python
def test_a_package_loads_at_its_first_read_not_at_import(tmp_path):
    """``import p``, ``import p.nn.functional as F`` and ``import p`` again load nothing; the
    first read loads it, and the stand-ins give the real objects afterwards. ``from p import
    Tensor`` reads an attribute, so it is itself the first read."""
    for name, text in _FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    answers = json.loads(proc.stdout)
    assert answers == {"a_after_import": [False, False], "a_after_read": [True, True],
                       "a_reads_through": [True, True, True],
                       "b_after_import": [True, True]}, answers


def test_a_name_that_is_not_a_top_level_package_is_refused():
    for bad in ("torch.nn", "", "1torch"):
        with pytest.raises(ValueError, match="packages must be top-level package names"):
            deferred_import.defer(bad)
