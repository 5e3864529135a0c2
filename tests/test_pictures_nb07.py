"""Notebook 07's picture of the GPU itself (helpers.figures.nb07_gpu_anatomy)."""

import dataclasses
from types import SimpleNamespace

import pytest
from conftest import simulator_only

import helpers  # noqa: F401  (decides simulator vs GPU before numba.cuda is imported)
from helpers import occupancy
from helpers.device import backend
from helpers.figures import nb07_gpu_anatomy as anatomy


def _props(**changes):
    """An object shaped like torch.cuda.get_device_properties(0) of an H100 SXM."""
    base = dict(name="NVIDIA H100 80GB HBM3", major=9, minor=0, multi_processor_count=132,
                total_memory=85_030_633_472, warp_size=32, max_threads_per_multi_processor=2048,
                regs_per_multiprocessor=65536, shared_memory_per_multiprocessor=233_472,
                L2_cache_size=52_428_800, memory_clock_rate=2_619_000, memory_bus_width=5120)
    base.update(changes)
    return SimpleNamespace(**base)


def _named(fig, name):
    return [s for s in fig.layout.shapes if s.name == name]


def test_the_h100_numbers_come_from_the_tables_and_say_so():
    a = anatomy.anatomy_from_table("H100")
    spec = backend.lookup_gpu("H100 SXM")
    lim = occupancy.limits_for("H100")
    assert (a.sms, a.memory_bytes, a.bandwidth_bytes_s) == (spec.sms, spec.memory_bytes,
                                                            spec.bandwidth_bytes_s)
    assert (a.regs_per_sm, a.smem_per_sm, a.max_warps_per_sm) == (lim.regs_per_sm,
                                                                  lim.smem_per_sm, lim.max_warps)
    assert a.l2_bytes == 50 * 2**20 and a.memory_kind == "HBM3"
    assert "whitepaper" in a.sources["L2"] and "datasheet" in a.sources["bandwidth"]
    assert "not measured" in a.origin
    k40 = anatomy.anatomy_from_table("K40c")
    assert (k40.sms, k40.smem_per_sm, k40.l2_bytes) == (15, 48 * 1024, 1536 * 1024)
    with pytest.raises(ValueError, match="gpu must be one of"):
        anatomy.anatomy_from_table("H300")


def test_the_driver_numbers_are_used_as_reported():
    a = anatomy.anatomy_from_properties(_props())
    assert (a.device, a.cc, a.sms, a.max_warps_per_sm) == ("NVIDIA H100 80GB HBM3", "9.0", 132,
                                                           64)
    assert a.bandwidth_bytes_s == pytest.approx(3.352e12, rel=1e-3)  # 2 x 2619 MHz x 640 B
    assert a.memory_kind == "HBM3" and a.l2_bytes == 52_428_800
    assert all("driver" in a.sources[k] for k in ("sms", "warps", "registers", "L2"))
    # a planted small GPU: every number drawn follows its properties, none is an H100's
    small = anatomy.anatomy_from_properties(_props(
        name="Planted GPU", multi_processor_count=7, max_threads_per_multi_processor=1024,
        L2_cache_size=0, memory_clock_rate=None), backend.lookup_gpu("Tesla T4"))
    assert (small.sms, small.max_warps_per_sm, small.l2_bytes) == (7, 32, None)
    assert small.bandwidth_bytes_s == backend.lookup_gpu("Tesla T4").bandwidth_bytes_s
    assert small.memory_kind == "DRAM"


def test_missing_per_sm_numbers_fall_back_to_the_table_or_refuse():
    old = _props()
    del old.regs_per_multiprocessor
    a = anatomy.anatomy_from_properties(old)
    assert a.regs_per_sm == 65536 and "helpers.occupancy" in a.sources["registers"]
    unknown = _props(major=12, minor=1)
    del unknown.regs_per_multiprocessor
    with pytest.raises(ValueError, match="registers per SM"):
        anatomy.anatomy_from_properties(unknown)


@simulator_only
def test_without_a_gpu_the_picture_is_an_h100_from_the_tables():
    assert anatomy.gpu_anatomy() == anatomy.anatomy_from_table("H100")


def test_the_picture_draws_the_data():
    a = anatomy.anatomy_from_table("H100")
    fig = anatomy.gpu_anatomy_figure(a)
    assert a.device in fig.layout.title.text and "not measured" in fig.layout.title.text
    assert len(_named(fig, "SM")) == 132
    assert len(_named(fig, "warp slot")) == 64 and not _named(fig, "warp resident")
    assert len(_named(fig, "bank")) == 32
    text = " ".join(x.text for x in fig.layout.annotations)
    assert "50 MB" in text and "80 GB" in text and "3.35 TB/s" in text and "228 KB" in text
    planted = anatomy.gpu_anatomy_figure(dataclasses.replace(a, sms=7, device="Planted GPU"))
    assert len(_named(planted, "SM")) == 7 and "Planted GPU" in planted.layout.title.text


@pytest.mark.parametrize("gpu,threads,smem", [("H100", None, 0), ("K40c", None, 0),
                                              ("K40c", 128, 16 * 1024), ("H100", 128, 0)])
def test_the_resident_warps_follow_the_occupancy_rules(gpu, threads, smem):
    a = anatomy.anatomy_from_table(gpu)
    fig = anatomy.gpu_anatomy_figure(a, 116, threads, smem)
    if threads is None:
        expected = occupancy.warps_limited_by_registers(gpu, 116)
    else:
        expected = occupancy.occupancy(gpu, threads, 116, smem).active_warps
    resident = _named(fig, "warp resident")
    assert len(resident) == expected
    assert len(resident) + len(_named(fig, "warp slot")) == a.max_warps_per_sm
    assert len(_named(fig, "registers of a resident warp")) == expected
    assert f"{expected} of 64" in fig.layout.title.text


def test_the_study_example_holds_16_warps_then_and_now():
    for gpu in ("K40c", "H100"):
        fig = anatomy.gpu_anatomy_figure(anatomy.anatomy_from_table(gpu), regs_per_thread=116)
        assert len(_named(fig, "warp resident")) == 16


def test_an_unknown_architecture_draws_no_kernel_and_says_why():
    a = anatomy.anatomy_from_properties(_props(major=12, minor=1))
    fig = anatomy.gpu_anatomy_figure(a, 116)
    assert not _named(fig, "warp resident") and "not in" in fig.layout.title.text
    with pytest.raises(ValueError, match="regs_per_thread"):
        anatomy.gpu_anatomy_figure(anatomy.anatomy_from_table("H100"), 300)
