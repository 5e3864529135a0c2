import helpers  # noqa: F401  (decides the backend first)

import plotly.graph_objects as go
import pytest
import torch
from conftest import simulator_only

from helpers import results
from helpers.conv import STRATEGIES, ConvConfig
from helpers.device import backend
from helpers.experiments import precision as P
from helpers.experiments.precision import support
from helpers.figures import nb10_precision

SMALL = ConvConfig.from_study(b=2, i=10, f=4, k=3, s=1, c=3, name="tiny")


@pytest.fixture(scope="module")
def cpu_rows():
    return P.measure(device="cpu", sizes=[64], layers=[SMALL], min_run_time=0.01,
                     strategies=["reference", "im2col-gemm", "direct-tiled"])


# ------------------------------------------------------------------ the TF32 flags


def _flags():
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("start", [(False, True), (True, False), (False, False)])
def test_tf32_mode_sets_both_flags_and_restores_them(start):
    saved = _flags()
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = start
        with P.tf32_mode(True):
            assert _flags() == (True, True)
        assert _flags() == start
        with P.tf32_mode(False):
            assert _flags() == (False, False)
        assert _flags() == start
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_tf32_mode_restores_the_flags_after_an_exception():
    before = _flags()
    with pytest.raises(RuntimeError, match="inside"):
        with P.tf32_mode(not before[0]):
            assert _flags() == (not before[0],) * 2
            raise RuntimeError("inside")
    assert _flags() == before


def test_precision_mode_turns_tf32_on_only_for_tf32():
    before = _flags()
    for precision in P.PRECISIONS:
        with P.precision_mode(precision):
            assert _flags() == (precision == "tf32",) * 2
    assert _flags() == before


def test_tf32_mode_refuses_a_non_bool_before_changing_anything():
    before = _flags()
    with pytest.raises(ValueError, match="enabled"):
        P.tf32_mode(1)
    with pytest.raises(ValueError, match="precision"):
        P.precision_mode("fp8")
    assert _flags() == before


# ------------------------------------------------------------------ what runs where


def test_supports_on_the_cpu():
    assert P.supports("float32", "gemm", "cpu") is None
    assert "tensor cores" in P.supports("tf32", "gemm", "cpu")
    assert "8.0" in P.supports("tf32", "conv", "cpu")
    # bfloat16 and float16 run on this CPU (emulated if it lacks the instructions)
    assert P.supports("bfloat16", "gemm", "cpu") is None
    assert P.supports("float16", "conv", "cpu") is None


@simulator_only
def test_supports_cuda_without_a_gpu_says_why():
    for precision in P.PRECISIONS:
        assert P.supports(precision, "gemm", "cuda").startswith("no CUDA GPU here")
    assert P.native("float16", "cuda") is None
    assert P.arithmetic("float16", "cuda") == "no CUDA GPU"


@pytest.mark.parametrize("kwargs,name", [
    (dict(precision="fp8"), "precision"), (dict(precision="float32", op="fft"), "op"),
    (dict(precision="float32", device="tpu"), "device")])
def test_supports_refuses_bad_names(kwargs, name):
    with pytest.raises(ValueError, match=name):
        P.supports(**kwargs)


def test_a_missing_kernel_is_found_by_a_tiny_call_and_cached(monkeypatch):
    calls = []

    def broken(dt, dev):
        calls.append(dt)
        raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'')

    support._kernel_reason.cache_clear()
    monkeypatch.setitem(support._PROBES, "gemm", (broken, 4.0))
    try:
        first = P.supports("float16", "gemm", "cpu")
        assert first.startswith("torch has no float16 gemm kernel on the CPU")
        assert "not implemented" in first
        assert P.supports("float16", "gemm", "cpu") == first
        assert len(calls) == 1  # tried once, then cached
        assert P.supports("float32", "gemm", "cpu") is None  # float32 needs no probe
    finally:
        support._kernel_reason.cache_clear()


def test_a_kernel_that_gives_a_wrong_answer_is_refused(monkeypatch):
    support._kernel_reason.cache_clear()
    monkeypatch.setitem(support._PROBES, "conv", (lambda dt, dev: torch.zeros(1, 3, 2, 2), 18.0))
    try:
        assert "wrong result" in P.supports("bfloat16", "conv", "cpu")
    finally:
        support._kernel_reason.cache_clear()


def test_native_follows_the_cpu_flags():
    assert P.native("bfloat16", "cpu", flags={"avx2", "avx512_bf16"}) is True
    assert P.native("bfloat16", "cpu", flags={"avx2", "avx512f"}) is False
    assert P.native("float16", "cpu", flags={"avx512_bf16"}) is False
    assert P.native("float16", "cpu", flags={"AVX512_FP16"}) is True
    assert P.native("bfloat16", "cpu", flags={"amx_bf16"}) is True
    assert P.native("float32", "cpu", flags=()) is True
    assert P.native("tf32", "cpu", flags={"avx512_bf16", "amx_bf16"}) is False


def test_cpu_labels_say_native_or_emulated():
    for precision in ("bfloat16", "float16"):
        label = P.arithmetic(precision, "cpu")
        if P.native(precision, "cpu"):
            assert label.startswith(f"native {precision}")
        else:
            assert label.startswith("emulated") and precision in label
    assert P.arithmetic("float32", "cpu") == "native float32"


def test_strategy_reason():
    assert P.strategy_reason("reference", "float16") is None
    assert P.strategy_reason("im2col-gemm", "tf32") is None
    assert P.strategy_reason("fft", "float32") is None
    assert "computes in float32" in P.strategy_reason("im2col-gemm", "bfloat16")
    assert "Numba" in P.strategy_reason("direct-tiled", "tf32")
    with pytest.raises(ValueError, match="strategy"):
        P.strategy_reason("winograd-magic", "float32")


# ------------------------------------------------------------------ the error


def test_every_strategy_has_its_precisions():
    """A strategy added to helpers.conv gets rows (or reasons), never a KeyError."""
    assert set(P.STRATEGY_PRECISIONS) == set(STRATEGIES)
    for name in STRATEGIES:
        if STRATEGIES[name].precision == "float32":
            assert P.strategy_reason(name, "float32") is None
        else:  # reference-tf32: the library in TF32, whose float32 row is reference's
            assert "not applicable" in P.strategy_reason(name, "float32")
            assert P.strategy_reason(name, STRATEGIES[name].precision) is None
    assert P.strategy_reason("winograd", "tf32") is None  # its GEMMs are cuBLAS
    assert "float32" in P.strategy_reason("winograd", "float16")


def test_relative_errors_by_hand():
    ref = torch.tensor([[1.0, -2.0], [4.0, 0.5]], dtype=torch.float64)
    assert P.relative_errors(ref.clone(), ref) == (0.0, 0.0)  # a planted self-comparison
    got = ref.clone()
    got[1, 0] = 4.2  # error 0.2 at the largest element
    max_rel, rms_rel = P.relative_errors(got, ref)
    assert max_rel == pytest.approx(0.2 / 4.0)
    rms_ref = (ref.pow(2).mean().sqrt()).item()
    assert rms_rel == pytest.approx((0.2**2 / 4) ** 0.5 / rms_ref)
    with pytest.raises(ValueError, match="same non-empty shape"):
        P.relative_errors(got[:1], ref)


def test_gemm_errors_are_ordered_by_mantissa_bits():
    err = {p: P.error_vs_float64("gemm", p, n=128, seed=3) for p in P.PRECISIONS}
    assert err["tf32"]["max_rel_error"] is None and "tensor cores" in err["tf32"]["status"]
    e = {p: err[p]["max_rel_error"] for p in ("float32", "float16", "bfloat16")}
    rms = {p: err[p]["rms_rel_error"] for p in ("float32", "float16", "bfloat16")}
    # 8 bits of mantissa (bfloat16) < 11 (float16) < 24 (float32)
    assert e["bfloat16"] > e["float16"] > e["float32"] > 0
    assert rms["bfloat16"] > rms["float16"] > rms["float32"] > 0
    assert e["float32"] < 1e-5
    # not zero (a float32-to-itself comparison) and of the dtype's order: unit roundoff
    # 2^-11 ~ 4.9e-4 (float16), 2^-8 ~ 3.9e-3 (bfloat16)
    assert 1e-4 < e["float16"] < 1e-2 and 1e-3 < e["bfloat16"] < 5e-2
    assert e["bfloat16"] / e["float16"] > 3


def test_the_same_seed_gives_the_same_error_and_another_seed_another():
    a = P.error_vs_float64("gemm", "bfloat16", n=64, seed=1)["max_rel_error"]
    assert P.error_vs_float64("gemm", "bfloat16", n=64, seed=1)["max_rel_error"] == a
    assert P.error_vs_float64("gemm", "bfloat16", n=64, seed=2)["max_rel_error"] != a


def test_conv_errors_by_strategy_and_precision():
    fp32 = P.error_vs_float64("conv", "float32", layer=SMALL, strategy="im2col-gemm")
    assert fp32["status"] == "ok" and 0 < fp32["max_rel_error"] < 1e-5
    ref16 = P.error_vs_float64("conv", "float16", layer=SMALL, strategy="reference")
    assert ref16["status"] == "ok" and ref16["max_rel_error"] > 10 * fp32["max_rel_error"]
    na = P.error_vs_float64("conv", "bfloat16", layer=SMALL, strategy="im2col-gemm")
    assert na["max_rel_error"] is None and na["status"].startswith("not applicable")
    tiled = P.error_vs_float64("conv", "float32", layer=SMALL, strategy="direct-tiled")
    assert tiled["max_rel_error"] is None and "no cpu implementation" in tiled["status"]


def test_error_vs_float64_refuses_bad_input():
    with pytest.raises(ValueError, match="n \\(GEMM size\\)"):
        P.error_vs_float64("gemm", "float32", n=0)
    with pytest.raises(ValueError, match="layer"):
        P.error_vs_float64("conv", "float32", layer="Conv9")
    with pytest.raises(ValueError, match="strategy"):
        P.error_vs_float64("conv", "float32", strategy="magic")


# ------------------------------------------------------------------ measure


def test_measure_gives_one_row_per_pair(cpu_rows):
    # 1 GEMM x 4 precisions + 1 layer x 3 strategies x 4 precisions
    assert len(cpu_rows) == 4 + 12
    assert all(list(r) == list(P.FIELDS) for r in cpu_rows)
    pairs = {(r["op"], r["strategy"], r["precision"]) for r in cpu_rows}
    assert len(pairs) == 16


def test_measure_rows_say_what_they_are(cpu_rows):
    by = {(r["op"], r["strategy"], r["precision"]): r for r in cpu_rows}
    for r in cpu_rows:
        assert r["device"].startswith("CPU") and r["device_kind"] == "cpu"
        assert isinstance(r["native"], bool)
        assert r["native"] == P.native(r["precision"], "cpu")
        assert ("emulated" in r["arithmetic"]) == (not r["native"] and r["precision"]
                                                    in ("bfloat16", "float16"))
        assert r["allow_tf32"] == (r["precision"] == "tf32")
        if r["status"] == "ok":
            assert r["median_ms"] > 0 and r["tflop_s"] > 0 and r["source"] == "measured"
            assert r["max_rel_error"] >= r["rms_rel_error"] > 0
        else:
            assert r["median_ms"] is None and r["max_rel_error"] is None
    gemm = by[("gemm", "torch.matmul", "float32")]
    assert gemm["status"] == "ok" and gemm["flops"] == 2 * 64**3
    assert gemm["tflop_s"] == pytest.approx(gemm["flops"] / gemm["median_ms"] / 1e9)
    assert "tensor cores" in by[("gemm", "torch.matmul", "tf32")]["status"]
    assert by[("conv", "im2col-gemm", "float16")]["status"].startswith("not applicable")
    assert "no cpu implementation" in by[("conv", "direct-tiled", "float32")]["status"]
    ok = [by[("conv", "reference", p)] for p in ("float32", "bfloat16", "float16")]
    assert all(r["status"] == "ok" and r["flops"] == SMALL.flops for r in ok)
    assert ok[1]["max_rel_error"] > ok[2]["max_rel_error"] > ok[0]["max_rel_error"]
    assert by[("conv", "reference", "float32")]["error_batch"] == SMALL.n


def test_measure_uses_the_same_inputs_for_every_strategy(cpu_rows):
    by = {(r["strategy"], r["precision"]): r for r in cpu_rows if r["op"] == "conv"}
    # float32 by two strategies: both close to float64, so close to each other
    assert by[("reference", "float32")]["max_rel_error"] < 1e-5
    assert by[("im2col-gemm", "float32")]["max_rel_error"] < 1e-5


def test_measure_error_batch_takes_the_first_images():
    lay = ConvConfig.from_study(b=4, i=8, f=2, k=3, s=1, c=2, name="four")
    rows = P.measure(["conv"], ["float32"], device="cpu", layers=[lay], error_batch=2,
                     strategies=["reference"], min_run_time=0.01)
    assert rows[0]["status"] == "ok" and rows[0]["error_batch"] == 2
    assert 0 < rows[0]["max_rel_error"] < 1e-5


def test_measure_past_its_deadline_runs_nothing():
    rows = P.measure(device="cpu", sizes=[64], layers=[SMALL], deadline=0.0, time_limit=5)
    assert rows and all(r["status"] == "skipped: time limit of 5 s reached" for r in rows)
    assert all(r["median_ms"] is None for r in rows)


@pytest.mark.parametrize("kwargs,name", [
    (dict(ops=["fft"]), "op"), (dict(precisions=["fp8"]), "precision"),
    (dict(sizes=[0]), "n \\(GEMM size\\)"), (dict(strategies=["magic"]), "strategy"),
    (dict(min_run_time=0), "min_run_time"), (dict(error_batch=0), "error_batch"),
    (dict(layers=["Conv9"]), "layer"), (dict(device="gpu"), "device")])
def test_measure_refuses_bad_input_up_front(kwargs, name):
    with pytest.raises(ValueError, match=name):
        P.measure(**kwargs)


@simulator_only
def test_measure_on_cuda_without_a_gpu_says_why():
    rows = P.measure(device="cuda", sizes=[64], layers=[SMALL])
    assert rows and all(r["status"].startswith("no CUDA GPU here") for r in rows)
    assert all(r["device"] == "no CUDA GPU" for r in rows)


# ------------------------------------------------------------------ ceilings


def test_ceilings_of_the_h100_sxm():
    c = P.ceilings("H100 SXM")
    assert c["name"] == "H100 SXM"
    assert c["fp16"] >= c["tf32"] > c["fp32"] and c["bf16"] > c["fp32"]
    # dense figures: TF32 is half of FP16 (a sparse TF32 figure would equal FP16)
    assert c["tf32"] == pytest.approx(c["fp16"] / 2, rel=1e-2)
    assert c["bandwidth"] == 3350e9
    assert set(c["sources"]) == {"fp32", "tf32", "bf16", "fp16", "bandwidth"}
    assert all("H100 Tensor Core GPU datasheet" in s for s in c["sources"].values())
    assert P.ceilings("NVIDIA H100 80GB HBM3") == c  # the name CUDA reports


def test_ceilings_where_a_gpu_has_none():
    t4 = P.ceilings("Tesla T4")
    assert t4["tf32"] is None and t4["bf16"] is None and t4["fp16"] == 65e12
    assert t4["sources"]["tf32"].startswith("TF32") and "none on Tesla T4" in t4["sources"]["tf32"]
    k40 = P.ceilings("Tesla K40c")
    assert k40["fp16"] is None and k40["fp32"] == pytest.approx(4.29e12)
    with pytest.raises(ValueError, match="gpu must name"):
        P.ceilings("Voodoo 2")


def test_dense_tensor_core_peaks_in_the_table():
    for _, spec in backend.KNOWN_GPUS:
        if spec.tf32_tensor_flops is None:
            assert spec.bf16_tensor_flops is None
            continue
        # every datasheet here lists BF16 = FP16 and TF32 = FP16 / 2 (dense)
        assert spec.bf16_tensor_flops == spec.fp16_tensor_flops
        # (L4: TF32 120* and FP16 242* with sparsity, so TF32 is 1 % under half of FP16)
        assert spec.tf32_tensor_flops == pytest.approx(spec.fp16_tensor_flops / 2, rel=1e-2)
        assert spec.tf32_tensor_flops > spec.fp32_flops
    a100 = backend.lookup_gpu("NVIDIA A100-SXM4-80GB")
    assert (a100.tf32_tensor_flops, a100.bf16_tensor_flops) == (156e12, 312e12)


# ------------------------------------------------------------------ results/ and the CLI


def test_recorded_reads_gpu_rows_only(tmp_path):
    gpu = [dict(r, device_kind="cuda", device="GPU: Test GPU") for r in _ok_rows()]
    cpu = [dict(r) for r in _ok_rows()]
    results.save("precision_test-gpu", gpu + cpu, directory=tmp_path)
    rec = P.recorded(directory=tmp_path)
    assert len(rec.rows) == len(gpu) and all(r["source"] == "reference" for r in rec.rows)
    assert len(P.recorded("gemm", tmp_path).rows) == sum(r["op"] == "gemm" for r in gpu)
    assert P.recorded(directory=tmp_path / "empty").rows == []
    assert P.COMMAND in P.recorded(directory=tmp_path / "empty").note
    with pytest.raises(ValueError, match="op"):
        P.recorded("fft", tmp_path)


def _ok_rows():
    return [r for r in P.measure(device="cpu", sizes=[32], layers=[SMALL], min_run_time=0.01,
                                 strategies=["reference"]) if r["status"] == "ok"]


def test_command_line_refuses_an_unwritable_out_folder(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(SystemExit) as exc:
        P.main(["--out", str(blocker / "sub")])
    assert exc.value.code == 2 and "cannot save results" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        P.main(["--time-limit", "0"])
    assert exc.value.code == 2


@simulator_only
def test_command_line_without_a_gpu(tmp_path, capsys):
    assert P.main(["--save", "--out", str(tmp_path)]) == results.REFUSED
    assert "nothing saved" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    assert P.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "measuring on CPU" in out and "max_rel_error" in out and P.COMMAND in out
    assert list(tmp_path.iterdir()) == []


def test_format_table():
    text = P.format_table([{"precision": "float16", "max_rel_error": 0.000512, "native": False,
                            "median_ms": 1.23456, "status": "ok"}],
                          ("precision", "max_rel_error", "native", "median_ms", "status"))
    assert "5.1e-04" in text and "False" in text and "1.235" in text


def test_the_table_names_the_rate_by_its_convention():
    """A convolution's tflop_s is direct convolution's FLOPs over the time, whatever the
    strategy computes (an FFT can pass the FP32 peak): the default table says so in its header."""
    row = {"op": "conv", "layer": "Conv3", "strategy": "fft", "precision": "float32",
           "median_ms": 1.0, "tflop_s": 143.7, "status": "ok"}
    header, line = P.format_table([row]).splitlines()
    assert header.split()[5] == P.DIRECT_EQUIV == "direct_equiv_tflop_s"
    assert line.split()[5] == "143.7" and " tflop_s" not in f" {header}"


# ------------------------------------------------------------------ figures


def test_error_and_speed_figures(cpu_rows):
    device = cpu_rows[0]["device"]
    fig = nb10_precision.error_figure(cpu_rows, "gemm")
    assert isinstance(fig, go.Figure) and device in fig.layout.title.text
    assert fig.layout.yaxis.type == "log"
    assert len(fig.data) == 2  # max and RMS of one series; tf32 (not run) left out
    assert list(fig.data[0].x) == ["float32 (TF32 off)", "bfloat16", "float16"]
    if not P.native("bfloat16", "cpu"):
        assert "bfloat16" in fig.layout.title.text and "emulated" in fig.layout.title.text
    speed = nb10_precision.speed_figure(cpu_rows, "conv")
    assert device in speed.layout.title.text and all(isinstance(t, go.Bar) for t in speed.data)
    # reference at 3 precisions, im2col-gemm at float32; direct-tiled has no CPU rows
    assert sorted(len(t.x) for t in speed.data) == [1, 3]
    assert "TFLOP/s" in speed.layout.yaxis.title.text


def test_figures_without_measured_rows_show_why():
    rows = [dict(r, status="no CUDA GPU here (test)") for r in P.measure(
        device="cpu", sizes=[16], layers=[SMALL], deadline=0.0)]
    fig = nb10_precision.error_figure(rows, "gemm")
    assert "no CUDA GPU here" in fig.layout.annotations[0].text


def test_tensor_core_roofline_figure():
    gpu_row = dict(_ok_rows()[0], device="GPU: NVIDIA H100 80GB HBM3, 2026-01-02",
                   device_kind="cuda", tflop_s=50.0, source="reference")
    cpu_row = dict(gpu_row, device="CPU: something", device_kind="cpu")
    fig = nb10_precision.tensor_core_roofline_figure("H100 SXM", [gpu_row, cpu_row])
    assert "H100 SXM" in fig.layout.title.text
    names = [t.name for t in fig.data if "datasheet" in t.name]
    for ceiling in ("FP32", "TF32", "BF16", "FP16"):
        assert sum(ceiling in n for n in names) == 1, names
    roofs = [t for t in fig.data if "datasheet" in t.name]
    assert max(roofs[1].y) == pytest.approx(494.5e3)  # TF32 ceiling in GFLOP/s
    measured = [t for t in fig.data if t.name.startswith("measured GEMM")]
    assert len(measured) == 1 and list(measured[0].y) == [50e3]  # the CPU row left out
    t4 = nb10_precision.tensor_core_roofline_figure("Tesla T4")
    assert "none on this GPU: TF32 tensor cores, BF16 tensor cores" in t4.layout.title.text
