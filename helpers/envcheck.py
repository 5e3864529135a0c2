"""Does the workbook's stack work here? Small real runs of each piece, for notebook 00.

Each check runs something real (a convolution in torch, AlexNet built by torchvision, a Numba
CUDA kernel checked against NumPy, a chart and a widget) and reports ok or the error, so a
broken install shows up before a learner is deep inside a notebook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np


__all__ = ["Check", "run_checks"]


@dataclasses.dataclass(frozen=True)
class Check:
    """One check: what was tried, whether it worked, and a detail (the result or the error)."""

    name: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{'ok    ' if self.ok else 'FAILED'}  {self.name}: {self.detail}"


def _torch_conv() -> str:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 9, 9, generator=g, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 3, generator=g, dtype=torch.float64)
    y = torch.nn.functional.conv2d(x, w)
    # One output element by hand: the sum over the 3 x 3 x 3 window.
    by_hand = float((x[1, :, 2:5, 4:7] * w[3]).sum())
    if abs(float(y[1, 3, 2, 4]) - by_hand) > 1e-9:
        raise AssertionError("conv2d disagrees with the sum computed by hand")
    return f"conv2d output {tuple(y.shape)} matches a hand-computed element"


def _alexnet() -> str:
    import torch
    import torchvision

    model = torchvision.models.alexnet(weights=None).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 224, 224))
    params = sum(p.numel() for p in model.parameters())
    return f"AlexNet ({params:,} parameters) maps a 224 x 224 image to {out.shape[1]} classes"


def _numba_kernel() -> str:
    # Imported here, as torch and torchvision are above: a broken Numba or torch install must
    # be reported by run_checks, not stop `import helpers.envcheck`.
    from helpers import elementwise

    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    if not np.array_equal(elementwise.relu(x, threads_per_block=128), np.maximum(x, 0)):
        raise AssertionError("the ReLU kernel disagrees with NumPy")
    return "ReLU kernel on 1,000 elements matches NumPy"


def _charts() -> str:
    import ipywidgets
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    ipywidgets.IntSlider(value=1)
    return f"plotly {len(fig.data)} trace figure and an ipywidgets slider built"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("torch", _torch_conv),
    ("torchvision", _alexnet),
    ("Numba CUDA", _numba_kernel),
    ("plotly + ipywidgets", _charts),
]


def run_checks() -> list[Check]:
    """Run every check; never raises (a failure is a :class:`Check` with ``ok=False``)."""
    out = []
    for name, fn in CHECKS:
        try:
            out.append(Check(name, True, fn()))
        except Exception as exc:  # noqa: BLE001 - report, do not stop
            out.append(Check(name, False, f"{type(exc).__name__}: {exc}"))
    return out
