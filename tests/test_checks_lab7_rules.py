"""Lab 7's rules where a plausible reading differs from the right one: rule 5 (a copy from
pageable memory blocks the host, a compute does not), the tie rule of TODO 3 under float
round-off, and the precision of the recorded Conv5 convolution behind the lab's durations.

Rule 5 follows the CUDA Runtime API's "API synchronization behavior": a copy between pageable
host memory and the device blocks the host thread, while kernels already queued on other streams
keep running. The planted readings come from ``test_checks_lab7`` (the solution's ``schedule``
and ``best_chunks``, and the wrong models).
"""

from __future__ import annotations

import json
import math
import random

import pytest

from helpers.checks import lab7
from helpers.checks.lab7 import data as lab7_data
from helpers.experiments import transfers
from helpers.experiments.transfers import provenance
from helpers.experiments.transfers.provenance import PRECISIONS, compute_precision
from test_checks_lab7 import BEST_MISTAKES, SCHEDULE_MISTAKES, best_chunks, model, schedule

# ------------------------------------------------------------------ rule 5: pageable copies


def _serial(durations, order):
    """The makespan if every operation waited for the one issued before it."""
    return sum(durations[i][lab7.OPS.index(op)]
               for i, op in lab7.issue_order(len(durations), order))


def test_a_pageable_case_tells_copies_block_from_everything_serialises():
    """Some case gives different makespans under the two readings of rule 5, and the checker
    fails the 'everything serialises' reading on it, naming rule 5."""
    apart = []
    for chunks, streams, engines, order, pinned, seed, what in lab7.SCHEDULE_CASES:
        if pinned:
            continue
        durations = lab7.schedule_durations(chunks, seed)
        blocked = lab7.makespan(lab7.simulate(durations, streams, engines, order, False))
        if blocked < _serial(durations, order) - 1e-3:
            apart.append(what)
    assert apart, "no pageable case separates the two readings of rule 5"
    wrong, words = SCHEDULE_MISTAKES["pageable: everything serialises (computes block the host "
                                     "too)"]
    report = lab7.check_schedule(wrong)
    assert report.status == "failed" and apart[0] in report.message
    assert "rule 5" in report.message and words in report.message


def test_the_case_built_for_rule_5_shows_what_its_title_says():
    case = next(c for c in lab7.SCHEDULE_CASES if "runs beside" in c[-1])
    chunks, streams, engines, order, pinned, seed, _ = case
    ops = {(o["chunk"], o["op"]): (o["start_ms"], o["end_ms"])
           for o in lab7.simulate(lab7.schedule_durations(chunks, seed), streams, engines, order,
                                  pinned)}
    (a0, a1), (b0, b1) = ops[(0, "d2h")], ops[(1, "compute")]
    assert not pinned and a0 < b1 and b0 < a1          # chunk 0's copy out beside chunk 1's compute


@pytest.mark.parametrize("name", ["pageable treated as pinned",
                                  "pageable: everything serialises (computes block the host too)",
                                  "pageable: only a copy in blocks the host"])
def test_each_reading_of_rule_5_fails_naming_it(name):
    report = lab7.check_schedule(SCHEDULE_MISTAKES[name][0])
    assert report.status == "failed" and "pageable" in report.message
    assert "rule 5" in report.message, report.message


def test_pageable_copies_follow_the_cuda_documentation():
    """On random cases: nothing issued after a pageable copy starts before that copy has ended
    (the host is blocked in it); a copy waits for nothing issued to other streams before it
    but the last copy (a compute does not block the host), so it can overlap one; and the
    makespan lies between the pinned one and the all-serial one."""
    rng = random.Random(5)
    overlapped = 0
    for _ in range(300):
        n = rng.randint(1, 6)
        durations = [tuple(round(rng.uniform(0.05, 3), 3) for _ in range(3)) for _ in range(n)]
        streams, engines, order = rng.randint(1, 4), rng.choice([1, 2]), rng.choice(lab7.ORDERS)
        ops = lab7.simulate(durations, streams, engines, order, False)
        issued = lab7.issue_order(n, order)
        at = {(o["chunk"], o["op"]): o for o in ops}
        for k, key in enumerate(issued):
            if key[1] != "compute":
                assert all(at[b]["start_ms"] >= at[key]["end_ms"] - 1e-9 for b in issued[k + 1:])
        overlapped += any(a["start_ms"] < b["end_ms"] - 1e-9 and b["start_ms"] < a["end_ms"] - 1e-9
                          for a in ops for b in ops if a is not b)
        mine = {(o["chunk"], o["op"]): o for o in schedule(durations, streams, engines, order,
                                                             False)}
        assert all(mine[k]["start_ms"] == pytest.approx(at[k]["start_ms"]) for k in at)
        span = lab7.makespan(ops)
        assert lab7.makespan(lab7.simulate(durations, streams, engines, order, True)) - 1e-9 \
            <= span <= _serial(durations, order) + 1e-9
    assert overlapped > 0


def test_rule_5_no_longer_says_that_nothing_overlaps():
    assert "no\n   two operations overlap" not in lab7.RULES
    assert "blocks the host" in lab7.RULES and "A\n   compute does not block the host" in lab7.RULES


def test_the_old_serial_model_is_a_wrong_model_now():
    assert lab7.check_schedule(model(pageable_serial=True)).status == "failed"
    assert lab7.check_schedule(schedule).status == "passed"


# ------------------------------------------------------------------- TODO 3: round-off ties


def test_a_strict_comparison_picks_more_chunks_on_a_round_off_tie_and_fails():
    case = next(c for c in lab7.BEST_CASES if "round-off" in c[-1])
    strict = BEST_MISTAKES["ties compared strictly (span < best, no tolerance)"][0]
    c, span = strict(*case[:7])
    best_c, best_m = lab7.reference_best(*case[:7])
    assert c > best_c and span < best_m and best_m - span < 1e-12   # round-off, not a real win
    assert f"{c} chunks" in case[-1]
    report = lab7.check_best_chunks(strict)
    assert report.status == "failed" and "round-off" in report.message
    assert "the tie rule" in report.message and "span < best - 1e-6" in report.message


def _ties_by_isclose(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms, max_chunks):
    best = None
    for c in range(1, max_chunks + 1):
        each = (h2d_ms / c + overhead_ms, compute_ms / c + overhead_ms, d2h_ms / c + overhead_ms)
        span = max(o["end_ms"] for o in schedule([each] * c, streams, copy_engines,
                                                  "depth-first", True))
        if best is None or (span < best[1] and not math.isclose(span, best[1], abs_tol=1e-6)):
            best = (c, span)
    return best


def _first_within_tolerance(h2d_ms, compute_ms, d2h_ms, streams, copy_engines, overhead_ms,
                            max_chunks):
    spans = {}
    for c in range(1, max_chunks + 1):
        each = (h2d_ms / c + overhead_ms, compute_ms / c + overhead_ms, d2h_ms / c + overhead_ms)
        spans[c] = max(o["end_ms"] for o in schedule([each] * c, streams, copy_engines,
                                                      "depth-first", True))
    lowest = min(spans.values())
    c = next(c for c, s in spans.items() if s <= lowest + 1e-6)
    return c, spans[c]


@pytest.mark.parametrize("right", [best_chunks, _ties_by_isclose, _first_within_tolerance])
def test_a_right_answer_written_differently_passes(right):
    report = lab7.check_best_chunks(right)
    assert report.status == "passed", report.message


# ---------------------------------------------------- the precision behind Conv5's durations


def test_the_conv5_durations_say_their_precision_from_the_provenance():
    stages = lab7_data.layer_stages("Conv5", 4)
    if stages["source"] != "recorded":
        pytest.skip("results/ holds no Conv5 overlap recording")
    got = stages["precision"]
    assert got["precision"] in ("tf32", "tf32 allowed", "float32") and got["label"]
    if got["precision"] == "tf32":          # the rate itself rules float32 out
        assert got["tflop_s"] > got["fp32_peak_tflop_s"]


def test_the_best_chunk_cases_named_after_conv5_match_the_recorded_stages():
    """The cases "like Conv5 on an H100" say which precision they stand for, and the recorded
    stages agree: copy-bound with cuDNN's TF32 time, compute-bound with the FP32 time."""
    named = {c[-1]: c for c in lab7.BEST_CASES if "like Conv5" in c[-1]}
    tf32 = next(c for w, c in named.items() if "TF32" in w and "TF32 off" not in w)
    fp32 = next(c for w, c in named.items() if "FP32" in w)
    assert tf32[1] < max(tf32[0], tf32[2]) and tf32[-1].startswith("copy-bound")
    assert fp32[1] > max(fp32[0], fp32[2]) and fp32[-1].startswith("compute-bound")
    stages = lab7_data.layer_stages("Conv5", 4)
    if stages["source"] != "recorded" or stages["fp32"] is None:
        pytest.skip("results/ holds no Conv5 overlap and FP32 recording of one GPU")
    assert "H100" in stages["label"] and stages["precision"]["precision"] == "tf32"
    h, c, d = stages["measured_stages"]
    assert c < max(h, d) < stages["fp32"]["compute_ms"]
    for case, compute in ((tf32, c), (fp32, stages["fp32"]["compute_ms"])):
        assert case[:3] == pytest.approx((h, compute, d), abs=0.01)


def _recording(tmp_path, env: dict, compute_ms: float):
    row = dict.fromkeys(transfers.OVERLAP_FIELDS, "")
    row.update(experiment="overlap", layer="Conv5", b=128, chunks=4, compute_ms=compute_ms,
               device="GPU: Test GPU", device_kind="cuda", source="measured", status="ok")
    (tmp_path / "transfers_overlap_test.csv").write_text(
        ",".join(row) + "\n" + ",".join(str(v) for v in row.values()) + "\n")
    (tmp_path / "transfers_overlap_test.json").write_text(json.dumps(
        {"name": "transfers_overlap_test", "date": "2026-01-02T00:00:00+00:00",
         "environment": {"gpu_name": "Test GPU", **env}}))
    return transfers.recorded("overlap", tmp_path).rows[0]


@pytest.mark.parametrize("cc,ms,want", [("9.0", 0.197, "tf32"), ("9.0", 0.9, "tf32 allowed"),
                                        ("7.0", 0.197, "float32")])
def test_compute_precision_reads_the_recording(tmp_path, cc, ms, want):
    row = _recording(tmp_path, {"gpu_compute_capability": cc, "gpu_peak_fp32_flops": 67e12}, ms)
    got = compute_precision(row, tmp_path)
    assert got["precision"] == want and got["compute_capability"] == cc
    assert got["tflop_s"] == pytest.approx(41108373504 / (ms * 1e-3) / 1e12)
    assert got["label"].startswith(got["short"])


def test_compute_precision_without_a_gpu_in_the_provenance(tmp_path):
    row = _recording(tmp_path, {}, 0.197)
    assert compute_precision(row, tmp_path)["precision"] == "unknown"
    live = dict(row, source="measured")      # the environment of this machine
    assert compute_precision(live)["precision"] in PRECISIONS


def test_the_overlap_table_lines_give_the_precision_and_fp32_beside_it():
    every = transfers.recorded("overlap").rows
    if not every:
        assert provenance.precision_lines(every) == []
        return
    conv5 = next((r for r in every if r["layer"] == "Conv5"
                  and provenance.fp32_compute(r) is not None), None)
    if conv5 is None:
        pytest.skip("results/ holds no FP32 time of Conv5 on an overlap recording's GPU")
    rows = [r for r in every if r["device"] == conv5["device"]]   # one recording
    lines = provenance.precision_lines(rows)
    assert lines[0].startswith("compute precision, read from each run's provenance: ")
    assert provenance.fp32_compute(conv5)["compute_ms"] > conv5["compute_ms"]  # TF32 is faster
    said = [line for line in lines if line.lstrip().startswith("Conv5 ")]
    assert len(said) == 2 and said[1].split()[1] == "FP32"
    assert provenance.precision_lines([]) == []


def test_the_overlap_lines_of_two_gpus_come_in_a_block_each_headed_by_the_gpu():
    """Two recordings' rows (two GPUs) in one table: each block names its GPU, so that a
    learner can tell whose Conv5 each line is; one device's rows get no heading."""
    row = {"layer": "Conv5", "b": 128, "compute_ms": 1.0, "h2d_ms": 2.0, "d2h_ms": 0.5,
           "overlapped_ms": 2.2}
    rows = [dict(row, device="GPU: A, 2026-01-01"), dict(row, device="GPU: B, 2026-02-02",
                                                          compute_ms=0.5)]
    lines = provenance.precision_lines(rows, directory="/nonexistent")
    heads = [i for i, line in enumerate(lines) if not line.startswith(" ")]
    assert [lines[i] for i in heads] == ["GPU: A, 2026-01-01:", "GPU: B, 2026-02-02:"]
    assert all(line.startswith("  compute precision") for line in (lines[1], lines[heads[1] + 1]))
    single = provenance.precision_lines(rows[:1], directory="/nonexistent")
    assert single and single[0].startswith("compute precision") and single == [
        line[2:] for line in lines[1:heads[1]]]
