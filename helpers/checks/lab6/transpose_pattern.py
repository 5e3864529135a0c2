"""Lab 6, TODO 2: the transpose's accesses, recorded warp by warp in the simulator, and judged.

:func:`record_transpose` runs a learner's ``transpose_kernel(src, dst)`` once on a src of
:data:`RECORD_SHAPE` (whole tiles) with every access logged (:func:`.recorded.record_launch`).
:func:`race_message`, :func:`coalescing_message` and :func:`conflict_message` read the log and
say what is wrong, naming the side (load of src, store to dst, load or store of a shared array),
the line, and the degree (32-byte sectors per warp request against the fewest its bytes need; an
n-way bank conflict); each returns None where there is nothing to say. :func:`summary` is the
line a kernel that passes gets.

Source: CUDA C Best Practices Guide, "Coalesced Access to Global Memory", "Shared Memory and
Memory Banks"; NVIDIA, "An Efficient Matrix Transpose in CUDA C/C++" (the 32 x 33 tile).
"""

from __future__ import annotations

import linecache
import math
import re

import numpy as np

from helpers.checks.lab6.recorded import SECTOR_BYTES, Recording, record_launch

__all__ = ["RECORD_SHAPE", "coalescing_message", "conflict_message", "race_message",
           "record_transpose", "summary"]

#: (H, W) of the src the recorded launch transposes: whole tiles of 16 or 32, rows a
#: multiple of 32 bytes, so that a row of src or dst starts on a sector.
RECORD_SHAPE = (32, 64)

_BANKS = 32
WARP = 32


def record_transpose(kernel, tile: int, rows: int) -> Recording:
    """Run ``kernel(src, dst)`` in the simulator on a float32 src of :data:`RECORD_SHAPE`
    (holding 0, 1, 2, ...) and a NaN dst, blocks of ``(tile, rows)`` threads, a grid of
    ``(ceil(W / tile), ceil(H / tile))``, every access recorded.

    Raises:
        Whatever the kernel raises in the simulator.
    """
    h, w = RECORD_SHAPE
    src = np.arange(h * w, dtype=np.float32).reshape(h, w)
    dst = np.full((w, h), np.nan, np.float32)
    grid = (math.ceil(w / tile), math.ceil(h / tile))
    return record_launch(kernel, grid, (tile, rows), src=src, dst=dst)


def _where(rec: Recording) -> str:
    h, w = RECORD_SHAPE
    bx, by, _ = rec.block
    return (f"recorded in the simulator, warp by warp, on a src of {h} x {w} (blocks of {bx} x "
            f"{by} threads)")


def _line(site_line) -> str:
    number, code = site_line
    return f"line {number} (`{code}`)" if code else f"line {number}"


def _array(name: str, rec: Recording) -> str:
    """`tile` for a shared array made on a line `tile = cuda.shared.array(...)`."""
    m = re.match(r"the shared array of line (\d+)$", name)
    if not m:
        return name
    shape, _, filename = rec.arrays[name]
    code = linecache.getline(filename, int(m.group(1)))
    var = re.match(r"\s*(\w+)\s*=", code)
    dims = " x ".join(map(str, shape))
    return (f"the shared array `{var.group(1)}` ({dims})" if var
            else f"the shared array of line {m.group(1)} ({dims})")


def _lanes(array: str, example: list) -> str:
    """'src[0, 0], src[1, 0], src[2, 0], ..., src[31, 0]' for a request's lanes."""
    name = array.split("`")[1] if "`" in array else array
    shown = [f"{name}[{', '.join(map(str, i))}]" for i in example]
    return ", ".join(shown[:3] + ["...", shown[-1]]) if len(shown) > 4 else ", ".join(shown)


def _shape_of(example: list) -> str:
    """What a request's lanes form in a 2-D array: a row, a column, or elements apart."""
    if len(example) < 2 or len(example[0]) != 2:
        return ""
    rows = {r for r, _ in example}
    cols = {c for _, c in example}
    if len(cols) == 1 and len(rows) > 1:
        return "a column"
    if len(rows) == 1:
        return "one row"
    return f"{len(rows)} rows"


def race_message(rec: Recording, uses_syncwarp: bool) -> str | None:
    """The first read of a shared word another thread wrote with no barrier between, or None.

    Args:
        rec: the recording. uses_syncwarp: the kernel calls ``cuda.syncwarp`` (the message
            then says why a warp barrier is not enough).
    """
    races = rec.races()
    if not races:
        return None
    r = races[0]
    xyz = lambda t, w: f"(tx={t[0]}, ty={t[1]}) of warp {w}"  # noqa: E731
    arr = _array(r.array, rec)
    message = (
        f"your kernel reads {arr} where no barrier orders the read after another thread's "
        f"write: thread {xyz(r.reader, r.reader_warp)} reads element {tuple(r.index)} at "
        f"{_line(r.reader_line)}, which thread {xyz(r.writer, r.writer_warp)} writes at "
        f"{_line(r.writer_line)}, with no cuda.syncthreads() "
        f"between ({_where(rec)}). The block-wide barrier cuda.syncthreads() is missing: on a "
        f"GPU the warps of a block run in any order, so a thread can read the tile before "
        f"the other threads have written it, and the simulator, which runs threads in any "
        f"order too, may or may not show wrong values.")
    if uses_syncwarp:
        message += (" cuda.syncwarp() orders only the 32 threads of one warp, and a column "
                    "of the tile is written by threads of other warps: it takes "
                    "cuda.syncthreads(), which waits for every thread of the block.")
    else:
        message += (" Put cuda.syncthreads() between the loop that fills the tile and the "
                    "loop that reads it.")
    return message


def coalescing_message(rec: Recording) -> str | None:
    """'its loads of src are not coalesced: ...' for the first global load or store whose warp
    requests touch more 32-byte sectors than their bytes need, or None."""
    for site in rec.sites("global"):
        if site.sectors <= site.ideal:
            continue
        side, verb = (("loads of src", "read") if site.kind == "load"
                      else ("stores to dst", "write"))
        sectors, ideal = site.worst
        form = _shape_of(site.example)
        want = ("a warp's lanes (consecutive threadIdx.x) must read consecutive elements of a "
                "row of src, src[y + j, x] with x = blockIdx.x * TILE + threadIdx.x"
                if site.kind == "load" else
                "a warp's lanes (consecutive threadIdx.x) must write consecutive elements of a "
                "row of dst, dst[y + j, x] with x = blockIdx.y * TILE + threadIdx.x, the tile "
                "read across")
        return (
            f"its {side} are not coalesced: at {_line(site.line)} a warp's "
            f"request touches {sectors} sectors of {SECTOR_BYTES} bytes where its "
            f"{len(site.example) * 4} bytes need {ideal} (over its {site.requests} requests "
            f"{site.per_request:.1f} sectors each against {site.ideal_per_request:.1f}, a "
            f"{'load' if site.kind == 'load' else 'store'} efficiency of "
            f"{100 * site.ideal / site.sectors:.1f} %): its {len(site.example)} lanes "
            f"{verb} {_lanes(site.array, site.example)}"
            f"{', ' + form + ' of ' + site.array if form and form != 'one row' else ''} "
            f"({_where(rec)}). {want[0].upper() + want[1:]}.")
    return None


def _bank_story(words: list[int]) -> str:
    distinct = sorted(set(words))
    by_bank: dict[int, list[int]] = {}
    for w in distinct:
        by_bank.setdefault(w % _BANKS, []).append(w)
    bank, held = max(by_bank.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    shown = ", ".join(map(str, held[:4])) + (", ..." if len(held) > 4 else "")
    story = f"bank {bank} holds {len(held)} of them (words {shown})"
    steps = set(np.diff(words).tolist()) if len(words) > 1 else set()
    if len(steps) == 1:
        step = steps.pop()
        g = math.gcd(step, _BANKS)
        if step and g == _BANKS:
            story += (f": the lanes' words are {step} apart, a multiple of {_BANKS}, so they "
                      f"all fall in one bank")
        elif step and g > 1:
            story += (f": the lanes' words are {step} apart, and {step} shares the factor {g} "
                      f"with the {_BANKS} banks, so they fall in {_BANKS // g} banks only")
    return story


def conflict_message(rec: Recording) -> str | None:
    """'its reads of the shared array ... are a n-way bank conflict: ...' for the first
    shared-memory load or store whose warp requests are a bank conflict, or None."""
    for site in rec.sites("shared"):
        if site.degree <= 1:
            continue
        arr = _array(site.array, rec)
        shape, itemsize, _ = rec.arrays[site.array]
        words = [int(np.ravel_multi_index(i, shape)) * itemsize // 4 for i in site.example]
        side = "reads of" if site.kind == "load" else "writes to"
        width = rec.block[0]
        if width < WARP:
            return (
                f"its {side} {arr} at {_line(site.line)} are a {site.degree}-way bank "
                f"conflict: with blocks {width} threads wide a warp is {WARP // width} rows of "
                f"{width} threads, and its {len(words)} lanes "
                f"{'read' if site.kind == 'load' else 'write'} words "
                f"{', '.join(map(str, words[:3]))}, ..., {words[-1]} "
                f"({_lanes(arr, site.example)}), of which {_bank_story(words)} "
                f"(conflict_degree = {site.degree}; {_where(rec)}). No padding of a tile "
                f"{width} words wide keeps both its row writes and its column reads free of "
                f"conflicts when a warp spans {WARP // width} of its rows: use TILE = {WARP} "
                f"(blocks of {WARP} x BLOCK_ROWS threads) and rows of {WARP + 1} words.")
        row = (f" Its rows are {shape[-1]} words long: " if len(shape) == 2 else
               f" It is a 1-D array of {shape[0]:,} words, and the index decides the row "
               f"length: ")
        return (
            f"its {side} {arr} at {_line(site.line)} are a {site.degree}-way bank "
            f"conflict: a warp's {len(words)} lanes "
            f"{'read' if site.kind == 'load' else 'write'} words "
            f"{', '.join(map(str, words[:3]))}, ..., {words[-1]} "
            f"({_lanes(arr, site.example)}), and {_bank_story(words)}: "
            f"conflict_degree = {site.degree}, the request served in {site.degree} passes "
            f"instead of 1 (mean over its {site.requests} requests: {site.mean_degree:.1f}; "
            f"{_where(rec)}).{row}for a warp that reads a column of {WARP} rows, the words of "
            f"the column must be an odd number apart, such as {_BANKS + 1} (PADDED = TILE + 1 "
            f"as a global, cuda.shared.array((TILE, PADDED), float32), indexed "
            f"tile[row, column]), so that a column's {_BANKS} words fall in "
            f"{_BANKS} different banks.")
    return None


def summary(rec: Recording) -> str:
    """'Recorded warp by warp: ...' for a kernel whose accesses are all fine."""
    parts = []
    for site in rec.sites("global"):
        what = "loads of src" if site.kind == "load" else "stores to dst"
        parts.append(f"{what} {site.per_request:.0f} sectors of 32 bytes a request (the fewest)")
    shared = rec.sites("shared")
    if shared:
        worst = max(s.degree for s in shared)
        parts.append(f"shared-memory accesses conflict degree {worst} (no bank conflict)")
    return f" {_where(rec)[0].upper() + _where(rec)[1:]}: " + "; ".join(parts) + "."
