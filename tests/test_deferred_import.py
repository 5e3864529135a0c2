"""Deferred imports (helpers.deferred_import), as the compiler's child uses them for torch:
importing binds stand-ins and loads nothing; the first attribute read loads the real package,
and from then on every stand-in reads through to its real module."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from helpers import deferred_import

ROOT = pathlib.Path(__file__).resolve().parent.parent

# A module that imports torch the three ways the workbook's modules do, and reads nothing.
_MODULE = """\
import torch
import torch.nn.functional as F
from torch import Tensor
"""

_SCRIPT = """\
import json, sys
from helpers import deferred_import
deferred_import.defer("torch")
sys.path.insert(0, sys.argv[1])
import uses_torch
after_import = deferred_import.loaded("torch"), "torch._C" in sys.modules
dtype = uses_torch.torch.float32            # the first read: torch loads
import torch                                # the real module from now on
import torch.nn.functional
print(json.dumps({
    "after_import": after_import,
    "after_read": [deferred_import.loaded("torch"), "torch._C" in sys.modules],
    "dtype_is_real": dtype is torch.float32,
    "functional_reads_through": uses_torch.F.conv2d is torch.nn.functional.conv2d,
    "nn_reads_through": uses_torch.torch.nn.Conv2d is torch.nn.Conv2d,
    "import_gives_real": type(torch) is type(json),
}))
"""


@pytest.mark.each_python
def test_torch_loads_at_its_first_read_not_at_import(tmp_path):
    """``from torch import Tensor`` reads an attribute, so it is the first use in this module;
    the two imports before it load nothing."""
    (tmp_path / "uses_torch.py").write_text(_MODULE.replace("from torch import Tensor\n", ""))
    (tmp_path / "with_from").mkdir()
    (tmp_path / "with_from" / "uses_torch.py").write_text(_MODULE)
    answers = {}
    for folder in (tmp_path, tmp_path / "with_from"):
        proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(folder)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        answers[folder.name] = json.loads(proc.stdout)
    deferred = answers[tmp_path.name]
    assert deferred.pop("after_import") == [False, False]
    assert deferred.pop("after_read") == [True, True]
    assert all(deferred.values()), deferred
    assert answers["with_from"]["after_import"] == [True, True]


def test_a_name_that_is_not_a_top_level_package_is_refused():
    for bad in ("torch.nn", "", "1torch"):
        with pytest.raises(ValueError, match="packages must be top-level package names"):
            deferred_import.defer(bad)
