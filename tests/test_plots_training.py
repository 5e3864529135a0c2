"""The training-throughput notebook's charts (helpers.figures.nb09_training): they draw live
rows and results/ rows (flags as strings), name the device, and degrade to a message."""

import helpers  # noqa: F401  (decides the backend first)

import math

import numpy as np
import pytest

from helpers.experiments import training
from helpers.figures import nb09_training


def _row(**kw):
    base = dict(experiment="batch", dataset="lfw_subset", model="small", depth=5,
                device_kind="cpu", device="CPU: test (2 cores)", batch_size=8, workers=0,
                augment=True, image_size=32, channels=3, precision="fp32", channels_last=False,
                steps=4, images=32, total_s=0.1, wait_s=0.01, compute_s=0.09,
                images_per_s=320.0, wait_share=0.1, gpu_util_mean=math.nan,
                cpu_util_mean=math.nan, status="ok")
    base.update(kw)
    return base


def test_labelled_images_figure_is_a_small_greyscale_mosaic():
    fig = nb09_training.labelled_images_figure(np.random.default_rng(0).random((3, 25, 25)), [0, 1, 0],
                                       ("face", "non-face"), "lfw_subset", cols=2)
    z = np.asarray(fig.data[0].z)
    assert z.dtype == np.uint8 and z.shape == (2 * 27, 2 * 27)
    assert [a.text for a in fig.layout.annotations] == ["face", "non-face", "face"]
    assert fig.layout.yaxis.autorange == "reversed"
    with pytest.raises(ValueError, match="labels"):
        nb09_training.labelled_images_figure(np.zeros((2, 5, 5)), [0], ("a", "b"), "t")
    with pytest.raises(ValueError, match="images"):
        nb09_training.labelled_images_figure(np.zeros((2, 200, 200)), [0, 1], ("a", "b"), "t")


def test_training_loss_figure_names_device_and_accuracy():
    res = training.TrainResult("small", "lfw_subset", "CPU: test", 2, 4, [1.0, 0.5, 0.4, 0.2],
                               [0.75, 0.3], 1.0, 0.96, 1.5, 16)
    fig = nb09_training.training_loss_figure(res, 0.9)
    assert "CPU: test" in fig.layout.title.text and "96%" in fig.layout.title.text
    assert len(fig.data) == 2


def test_throughput_charts_draw_live_and_reference_rows():
    rows = [_row(batch_size=b, images_per_s=100.0 * b) for b in (8, 32)]
    refs = [_row(batch_size=b, device_kind="cuda", device="GPU: H100, 2026-01-01",
                 source="training_h100", augment="True") for b in (8, 32)]
    refs.append(_row(device_kind="cuda", status="not measured: no GPU", images_per_s=math.nan))
    fig = nb09_training.images_per_s_figure(rows + refs)
    assert len(fig.data) == 2 and "(results/)" in fig.data[1].name
    assert fig.layout.xaxis.type == "log"
    workers = [_row(workers=w, augment=a) for a in (False, "True") for w in (0, 1)]
    fig = nb09_training.wait_compute_figure(workers)
    assert [t.name for t in fig.data[:2]] == ["waiting for data", "computing"]
    assert list(fig.data[0].x[0]) == ["augmentation off"] * 2 + ["augmentation on"] * 2
    assert "1 worker" in list(fig.data[0].x[1])
    depth = [_row(model=m, depth=d) for m, d in (("resnet20", 20), ("small", 5))]
    fig = nb09_training.depth_figure(depth)
    assert list(fig.layout.xaxis.categoryarray) == ["small (5 layers)", "resnet20 (20 layers)"]


def test_utilisation_figure_and_empty_inputs():
    samples = [dict(t_s=0.1 * i, gpu_util=math.nan, cpu_util=50.0) for i in range(5)]
    fig = nb09_training.utilisation_figure(samples, "CPU: test", "no GPU here")
    assert len(fig.data) == 1 and "no GPU here" in fig.layout.title.text
    for fig in (nb09_training.utilisation_figure([], "x", "no GPU"), nb09_training.images_per_s_figure([]),
                nb09_training.wait_compute_figure([]), nb09_training.depth_figure([])):
        assert len(fig.layout.annotations) == 1 and not fig.data
