"""The study's Figure 2 (share of training time by layer type): the four networks
(helpers.networks.figure2), the analytic FLOP counts (helpers.experiments.layer_costs), the
profiler's time by layer type (helpers.experiments.layer_times), and the experiment with its
command and refusals (helpers.experiments.hotspots)."""

import importlib.util
import json
import math
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from conftest import simulator_only
from torch import nn

import helpers  # noqa: F401  (decides the backend first)
from helpers import results
from helpers.experiments import hotspots, layer_times
from helpers.experiments.hotspots import budget, main, profiling, refusal
from helpers.experiments.layer_costs import GROUPS, layer_flops
from helpers.experiments.layer_times import classify, profile_module
from helpers.figures import nb02_hotspots
from helpers.networks import figure2


def _tiny_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * 7 * 7, 10))


# ------------------------------------------------------------------------ grouping the time


@pytest.mark.parametrize("name, group", [
    ("aten::conv2d", "convolution"),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", "convolution"),
    ("aten::max_pool2d", "pooling"),
    ("MaxPool2DWithIndicesBackward0", "pooling"),
    ("aten::adaptive_avg_pool2d", "pooling"),
    ("aten::relu_", "activation"),
    ("ReluBackward0", "activation"),
    ("aten::linear", "fully connected"),
    ("AddmmBackward0", "fully connected"),
    ("aten::batch_norm", "other"),
    ("NativeBatchNormBackward0", "other"),
    ("aten::dropout", "other"),
    ("aten::cat", "other"),
    ("aten::cross_entropy_loss", "other"),
    ("Optimizer.step#SGD.step", "weight update"),
])
def test_classify_names_the_layer_type(name, group):
    assert classify(name)[0] == group


@pytest.mark.parametrize("name", ["ProfilerStep#3", "aten::empty", "aten::copy_", "MulBackward0",
                                  "aten::_convert_indices_from_coo_to_csr"])
def test_classify_leaves_uninformative_names_alone(name):
    assert classify(name) is None


@pytest.mark.slow
def test_grouping_of_a_tiny_cnn_covers_every_layer_type_and_sums_to_one():
    p = profile_module(_tiny_cnn(), (4, 3, 16, 16), iterations=2, num_classes=10)
    shares = p.shares
    assert set(shares) == set(GROUPS)
    assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-9)
    for group in ("convolution", "pooling", "activation", "fully connected", "weight update"):
        assert shares[group] > 0, group
    assert p.conv_share > 0
    assert "loss" in p.detail["other"]
    # every microsecond once: the profiled total is the iterations' wall time, roughly (counting
    # nested operators twice would give about 2; the margin absorbs a busy machine)
    assert 0.5 < p.total_s / p.wall_s < 1.5, (p.total_s, p.wall_s)
    assert p.device == "cpu" and p.time_kind == "CPU time" and p.device_label.startswith("CPU")
    assert (p.batch, p.input_size, p.iterations, p.warmup) == (4, 16, 2, 1)


def test_threads_are_set_for_the_run_and_restored():
    before = torch.get_num_threads()
    p = profile_module(_tiny_cnn(), (2, 3, 16, 16), iterations=1, num_classes=10, threads=1)
    assert p.threads == 1 and "1 thread" in p.measured_on
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads"):
        profile_module(_tiny_cnn(), (2, 3, 16, 16), iterations=1, threads=0)


def test_backward_nodes_follow_their_forward_layer():
    # No convolution and no pooling here: nothing may be counted as either. TBackward0 and
    # AddmmBackward0 belong to the linear layers, dropout's MulBackward0 to dropout.
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Dropout(0.5),
                        nn.Linear(32, 10))
    p = profile_module(mlp, (4, 3, 8, 8), iterations=2, num_classes=10)
    assert p.seconds["convolution"] == 0 and p.seconds["pooling"] == 0
    assert p.seconds["fully connected"] > 0 and p.seconds["activation"] > 0
    assert "dropout" in p.detail["other"]


class _Event:
    """A stand-in for torch.profiler's FunctionEvent: just the fields attribute() reads."""

    def __init__(self, name, parent=None, seq=-1, us=0.0, kernels=(), device=False,
                 annotation=False):
        dt = torch.autograd.DeviceType
        self.name, self.sequence_nr, self.is_async = name, seq, False
        self.device_type = dt.CUDA if device else dt.CPU
        self.is_user_annotation = annotation
        self.kernels = [SimpleNamespace(name=k, duration=d) for k, d in kernels]
        self.cpu_parent, self.cpu_children = parent, []
        if parent is not None:
            parent.cpu_children.append(self)
        self.cpu_time_total = us
        self.time_range = SimpleNamespace(elapsed_us=lambda: us)

    @property
    def self_cpu_time_total(self):
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)


def test_gpu_time_goes_to_the_operator_that_launched_each_kernel():
    # One iteration as the profiler links it on a GPU: kernels hang on the CPU operator that
    # launched them; ProfilerStep# and Optimizer.step also appear as GPU-side ranges (which
    # must not count as kernel time); one memset is linked to no operator.
    events = []

    def E(*args, **kw):
        events.append(_Event(*args, **kw))
        return events[-1]

    step = E("ProfilerStep*", us=900, kernels=[("ProfilerStep*", 1000)])
    conv = E("aten::conv2d", step, seq=1, us=100)
    E("aten::convolution", conv, seq=1, us=90, kernels=[("implicit_gemm", 30)])
    linear = E("aten::linear", step, seq=2, us=50)
    E("aten::addmm", linear, seq=3, us=40, kernels=[("sgemm", 10)])
    E("Optimizer.step#SGD.step", step, us=80,
      kernels=[("Optimizer.step#SGD.step", 50), ("multi_tensor_apply", 5)])
    dfc = E("autograd::engine::evaluate_function: AddmmBackward0", seq=3, us=60)
    E("aten::mm", E("AddmmBackward0", dfc, seq=3, us=55), us=50, kernels=[("sgemm", 20)])
    E("autograd::engine::evaluate_function: ConvolutionBackward0", seq=1, us=70,
      kernels=[("wgrad", 60)])
    for name, us in [("implicit_gemm", 30), ("sgemm", 10), ("sgemm", 20), ("wgrad", 60),
                     ("multi_tensor_apply", 5), ("memset", 5)]:
        E(name, us=us, device=True)
    E("ProfilerStep*", us=1000, device=True, annotation=True)
    E("Optimizer.step#SGD.step", us=50, device=True)
    seconds, detail, total = layer_times.attribute(events, device_time=True)
    us = {g: round(v * 1e6, 6) for g, v in seconds.items()}
    assert us == {"convolution": 90, "pooling": 0, "activation": 0, "fully connected": 30,
                  "other": 5, "weight update": 5}
    assert round(total * 1e6, 6) == 130
    assert detail["other"]["GPU work linked to no operator"] == pytest.approx(5e-6)
    assert detail["other"].get("framework", 0) == 0  # the ProfilerStep range is no kernel
    # the same events on the CPU clock: every root's time once
    seconds, _, total = layer_times.attribute(events, device_time=False)
    assert round(total * 1e6, 6) == 900 + 60 + 70
    assert round(seconds["convolution"] * 1e6, 6) == 100 + 70
    assert round(seconds["fully connected"] * 1e6, 6) == 50 + 60


def test_profile_module_rejects_bad_arguments():
    with pytest.raises(ValueError, match="input_shape"):
        profile_module(_tiny_cnn(), (4, 3, 16), iterations=1)
    with pytest.raises(ValueError, match="iterations"):
        profile_module(_tiny_cnn(), (4, 3, 16, 16), iterations=0)
    with pytest.raises(ValueError, match="device"):
        profile_module(_tiny_cnn(), (4, 3, 16, 16), device="tpu")


# --------------------------------------------------------------------------------- networks


def test_overfeat_fast_layers_match_the_paper():
    cost = layer_flops("overfeat", 231)
    convs = [(r["output"], r["params"]) for r in cost.conv_layers()]
    # Sermanet et al. 2014, Table 1 (fast model): 96 11x11 /4, 256 5x5, 512, 1024, 1024 3x3
    assert [shape for shape, _ in convs] == [(96, 56, 56), (256, 24, 24), (512, 12, 12),
                                             (1024, 12, 12), (1024, 12, 12)]
    assert [w for _, w in convs] == [3 * 96 * 121 + 96, 96 * 256 * 25 + 256,
                                     256 * 512 * 9 + 512, 512 * 1024 * 9 + 1024,
                                     1024 * 1024 * 9 + 1024]
    pools = [r["output"] for r in cost.layers if r["type"] == "MaxPool2d"]
    assert pools == [(96, 28, 28), (256, 12, 12), (1024, 6, 6)]
    fcs = [r["output"] for r in cost.layers if r["type"] == "Linear"]
    assert fcs == [(3072,), (4096,), (1000,)]
    assert 145e6 <= cost.params < 147e6  # the paper: about 145 million parameters


def test_overfeat_output_shape():
    with torch.device("meta"):
        net = figure2.OverFeatFast()
    assert net(torch.empty(2, 3, 231, 231, device="meta")).shape == (2, 1000)
    assert net(torch.empty(3, 3, 96, 96, device="meta")).shape == (3, 1000)  # adaptive pooling
    with torch.device("meta"):
        small = figure2.OverFeatFast(num_classes=5)
    assert small(torch.empty(1, 3, 71, 71, device="meta")).shape == (1, 5)
    with pytest.raises(ValueError, match="num_classes"):
        figure2.OverFeatFast(num_classes=0)


@pytest.mark.parametrize("name", figure2.NAMES)
def test_min_input_is_the_smallest_that_trains_with_a_batch_of_one(name):
    with torch.device("meta"):
        net = figure2.build(name)  # training mode, as profiled
    low = figure2.MIN_INPUT[name]
    assert net(torch.empty(1, 3, low, low, device="meta")).shape == (1, 1000)
    with pytest.raises((RuntimeError, ValueError)):
        net(torch.empty(1, 3, low - 1, low - 1, device="meta"))
    with pytest.raises(ValueError, match="input_size"):
        layer_flops(name, low - 1)


@pytest.mark.parametrize("name, weights, gmacs", [
    ("alexnet", "AlexNet_Weights", 0.714), ("vgg16", "VGG16_Weights", 15.47),
    ("googlenet", "GoogLeNet_Weights", 1.498)])
def test_flops_agree_with_torchvision(name, weights, gmacs):
    import torchvision

    cost = layer_flops(name, 224)
    meta = getattr(torchvision.models, weights).IMAGENET1K_V1.meta
    assert cost.params == meta["num_params"]
    macs = (cost.flops["convolution"] + cost.flops["fully connected"]) / 2 / 1e9
    assert macs == pytest.approx(meta["_ops"], rel=0.02)  # torchvision counts multiply-adds
    assert math.isclose(sum(cost.shares.values()), 1.0)
    assert cost.flops_per_weight("fully connected") == pytest.approx(2.0, rel=0.01)  # batch 1
    assert cost.flops_per_weight("convolution") > 100


def test_layer_flops_scale_with_batch_and_reject_bad_input():
    one, four = layer_flops("alexnet", 128), layer_flops("alexnet", 128, batch=4)
    assert four.total_flops == 4 * one.total_flops
    with pytest.raises(ValueError, match="model_name"):
        layer_flops("resnet50", 224)
    with pytest.raises(ValueError, match="batch"):
        layer_flops("alexnet", 128, batch=0)


# ------------------------------------------------------------------- refusal and command


def test_far_too_slow_runs_are_refused_up_front(monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("a refused run must not start")

    monkeypatch.setattr(profiling, "profile_module", no_run)
    reason = refusal("vgg16", 64, 224, 10, "cpu", budget_s=30)
    assert reason.startswith("refused:") and "GFLOP" in reason and "30 s budget" in reason
    with pytest.raises(ValueError, match="refused"):
        hotspots.measure("vgg16", 64, 224, 10, "cpu", budget_s=30)


def test_estimate_is_seconds_that_grow_with_the_work():
    one = hotspots.estimate("alexnet", 1, 128, 1, "cpu", warmup=0)
    assert one > 0
    assert hotspots.estimate("alexnet", 4, 128, 2, "cpu", warmup=0) == pytest.approx(8 * one)
    with pytest.raises(ValueError, match="iterations"):
        hotspots.estimate("alexnet", 1, 128, 0)


def test_runs_too_large_for_memory_are_refused(monkeypatch):
    monkeypatch.setattr(budget.memory, "available_bytes", lambda device: 2**30)
    reason = refusal("vgg16", 64, 224, 1, "cpu", budget_s=1e9)
    assert reason.startswith("refused:") and "GiB" in reason


@simulator_only
def test_cuda_without_a_gpu_is_refused_with_the_reason(capsys):
    reason = refusal("alexnet", 1, 64, 1, "cuda")
    assert reason.startswith("refused: device='cuda' needs a CUDA GPU")
    assert main(["--model", "alexnet", "--device", "cuda"]) == 2
    out = capsys.readouterr().out
    assert "needs a CUDA GPU" in out


def test_command_prints_the_shares_table(capsys):
    assert main(["--model", "googlenet", "--batch", "1", "--input", "48", "--iterations", "1",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "measured on CPU" in out and "1 thread" in out  # the CPU default: one thread
    for group in GROUPS:
        assert group in out
    line = next(x for x in out.splitlines() if x.startswith("GoogLeNet"))
    assert line.rstrip().endswith("89 %")  # the study's share beside ours
    tokens = line.split()  # GoogLeNet, batch, input, then "share %" per group
    assert tokens[1:3] == ["1", "48"] and 0 <= float(tokens[3]) <= 100


def test_command_refuses_vgg16_at_full_size_on_the_cpu(capsys):
    assert main(["--model", "vgg16", "--batch", "64", "--input", "224", "--iterations", "10",
                 "--device", "cpu", "--budget", "30"]) == 2
    out = capsys.readouterr().out
    assert "refused" in out and "GFLOP" in out


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet50"], "invalid choice"),
    (["--model", "alexnet", "--batch", "0"], "batch"),
    (["--model", "alexnet", "--input", "20"], "input_size"),
    (["--model", "alexnet", "--iterations", "-1"], "iterations"),
    (["--model", "alexnet", "--device", "tpu"], "invalid choice"),
    (["--model", "alexnet", "--threads", "0"], "threads"),
])
def test_command_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------- results/ and the figure


def test_nothing_recorded_says_which_command_records_it(tmp_path):
    rec = hotspots.recorded(directory=tmp_path)
    assert not rec and rec.profiles == []
    assert hotspots.COMMAND in rec.note
    assert hotspots.COMMAND == "python -m helpers.experiments.hotspots --model all --save"


def test_recorded_profiles_round_trip_through_results(tmp_path):
    alex = profile_module(_tiny_cnn(), (2, 3, 16, 16), iterations=1, num_classes=10,
                          name="alexnet")
    vgg = profile_module(_tiny_cnn(), (4, 3, 16, 16), iterations=1, num_classes=10, name="vgg16")
    rows = [dict(r, device_kind="cuda") for p in (alex, vgg) for r in p.rows()]
    cpu_rows = [dict(r, model="overfeat") for r in alex.rows()]  # device_kind "cpu": left out
    results.save("hotspots_test-gpu", rows + cpu_rows, directory=tmp_path)
    meta_path = tmp_path / "hotspots_test-gpu.json"
    meta = json.loads(meta_path.read_text())
    meta["environment"]["gpu_name"] = "Test GPU"
    meta_path.write_text(json.dumps(meta))
    rec = hotspots.recorded(directory=tmp_path)
    assert rec and [p.model for p in rec.profiles] == ["alexnet", "vgg16"]
    ref = rec.profiles[0]
    assert ref.source == "reference" and ref.device == "cuda"
    assert ref.device_label == "GPU: Test GPU" and ref.date == meta["date"][:10]
    assert ref.batch == 2 and ref.input_size == 16 and rec.profiles[1].batch == 4
    assert ref.shares == pytest.approx(alex.shares)
    assert "GPU: Test GPU" in rec.note
    assert "AlexNet" in hotspots.format_table(rec.profiles)


def test_save_keeps_gpu_profiles_only(tmp_path):
    p = profile_module(_tiny_cnn(), (2, 3, 16, 16), iterations=1, num_classes=10, name="alexnet")
    with pytest.raises(ValueError, match="GPU"):
        hotspots.save([p], command="pytest", directory=tmp_path)
    with pytest.raises(ValueError, match="GPU"):
        hotspots.save([], command="pytest", directory=tmp_path)
    assert not list(tmp_path.iterdir())


def test_hotspot_figure_stacks_one_trace_per_layer_type():
    bars = [("AlexNet", "study, K40c", {"convolution": 0.86, "not convolution (not split)": 0.14}),
            ("AlexNet", "here, CPU", {"convolution": 0.5, "pooling": 0.1, "fully connected": 0.4})]
    fig = nb02_hotspots.hotspot_figure(bars, subtitle="measured on CPU")
    names = [t.name for t in fig.data]
    assert names == ["convolution", "pooling", "fully connected", "not convolution (not split)"]
    assert fig.layout.barmode == "stack"
    assert list(fig.data[0].y) == [86.0, 50.0]
    with pytest.raises(ValueError, match="bars"):
        nb02_hotspots.hotspot_figure([])


# ------------------------------------------------------- time limit, torchvision, --out


SKIPPED = "skipped: time limit of 7.5 s reached"


def test_profile_models_past_deadline_profiles_nothing():
    profiles, skipped = hotspots.profile_models(
        [("overfeat", 71), ("vgg16", 32)], 1, 1, threads=1,
        deadline=time.monotonic() - 1.0, time_limit=7.5)
    assert profiles == []
    assert skipped == [("overfeat", SKIPPED), ("vgg16", SKIPPED)]


@pytest.mark.slow
def test_profile_models_without_deadline_profiles_every_network():
    profiles, skipped = hotspots.profile_models([("overfeat", 71)], 1, 1, threads=1,
                                                deadline=None)
    assert skipped == [] and [p.model for p in profiles] == ["overfeat"]
    assert profiles[0].total_s > 0 and profiles[0].batch == 1


def test_overfeat_builds_without_torchvision_and_the_others_say_why(monkeypatch):
    assert figure2.missing_requirement("overfeat") is None
    has_torchvision = importlib.util.find_spec("torchvision") is not None
    assert (figure2.missing_requirement("alexnet") is None) == has_torchvision
    monkeypatch.setitem(sys.modules, "torchvision", None)  # as if it were not
    assert figure2.missing_requirement("overfeat") is None
    assert isinstance(figure2.build("overfeat", num_classes=10), figure2.OverFeatFast)
    for name in figure2.TORCHVISION_MODELS:
        assert figure2.missing_requirement(name) == "torchvision is not installed"
        with pytest.raises(ImportError):
            figure2.build(name)
    with pytest.raises(ValueError, match="model_name"):
        figure2.missing_requirement("lenet")


def test_command_skips_networks_that_need_torchvision(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchvision", None)
    assert main(["--model", "alexnet"]) == 1
    out = capsys.readouterr().out
    assert "AlexNet: skipped: torchvision is not installed" in out and "nothing" in out


def test_command_past_its_time_limit_measures_nothing(capsys):
    # a microsecond has passed before the first network could start
    assert main(["--model", "overfeat", "--batch", "1", "--input", "71", "--iterations", "1",
                 "--time-limit", "1e-6"]) == 1
    out = capsys.readouterr().out
    assert "OverFeat (fast): skipped: time limit of 1e-06 s reached" in out
    assert "nothing measured" in out


@pytest.mark.parametrize("value", ["0", "-3"])
def test_command_rejects_a_time_limit_that_is_not_positive(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--model", "overfeat", "--time-limit", value])
    assert exc.value.code == 2 and "--time-limit must be > 0" in capsys.readouterr().err


@pytest.mark.slow
def test_command_saves_no_cpu_profiles_even_with_out(tmp_path, capsys):
    assert main(["--model", "overfeat", "--batch", "1", "--input", "71", "--iterations", "1",
                 "--threads", "1", "--save", "--out", str(tmp_path)]) == 0
    assert "not saved: results/ holds GPU measurements" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_each_profile_is_handed_over_as_soon_as_it_is_measured(monkeypatch):
    """So that the command saves after each network: a run stopped later keeps those."""
    monkeypatch.setattr(profiling, "measure", lambda model, *a, **k: SimpleNamespace(model=model))
    handed = []
    profiles, late = hotspots.profile_models([("alexnet", 32), ("vgg16", 32)], 1, 1,
                                             on_profile=handed.append)
    assert [[p.model for p in h] for h in handed] == [["alexnet"], ["alexnet", "vgg16"]]
    assert handed[-1] == profiles and late == []
