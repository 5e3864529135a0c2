"""NVVM IR, the LLVM IR text Numba's front end hands NVVM, without its line information.

:func:`without_debug_info` lets the compiler worker lower a kernel once, with line information
(for the PTX and the source line of each instruction), and still give nvJitLink the LTO-IR a GPU
build links, which Numba lowers without it.
"""

from __future__ import annotations

import re

__all__ = ["without_debug_info"]

_NODE = re.compile(r"^!(\d+) = ")
_NAMED = re.compile(r"^!([A-Za-z_.$][\w.$-]*) = !\{(.*)\}\s*$")
_REF = re.compile(r"!(\d+)\b")
_DBG_ATTACHMENT = re.compile(r",? !dbg !\d+")
_DBG_FUNCTION = re.compile(r'@"?llvm\.dbg\.')
_DEBUG_FLAGS = ('!"Dwarf Version"', '!"Debug Info Version"')


def without_debug_info(ir: str) -> str:
    """LLVM IR that Numba lowered with line information, without it: the ``llvm.dbg.*`` calls
    and declarations, the ``!dbg`` attachments, the compile unit (``!llvm.dbg.cu``), the debug
    module flags, and every metadata node that only they reached. What is left is the IR Numba
    lowers without line information but for the names of values and metadata nodes; NVVM
    compiles both to the same machine code (checked with numba-cuda 0.30.4 for the kernels of
    :mod:`helpers.kernels`, rung 7's candidates and Table I's direct kernels on sm_75, sm_80,
    sm_89 and sm_90: the same registers, shared memory, spills and SASS instructions).

    Args:
        ir: one module's IR text, as ``CUDACodeLibrary.llvm_strs`` holds it.

    Returns:
        The IR text without the line information, ending with a newline. Raises nothing: text
        without line information comes back as it was, metadata nodes nothing uses left out.
    """
    nodes: dict[int, str] = {}
    body, named = [], []
    for line in ir.splitlines():
        m = _NODE.match(line)
        if m:
            nodes[int(m.group(1))] = line
        elif _NAMED.match(line):
            named.append(line)
        elif not _DBG_FUNCTION.search(line):
            body.append(_DBG_ATTACHMENT.sub("", line))
    kept_named = []
    for line in named:
        name, refs = _NAMED.match(line).groups()
        if name == "llvm.dbg.cu":
            continue
        if name == "llvm.module.flags":
            flags = [r for r in _REF.findall(refs)
                     if not any(f in nodes.get(int(r), "") for f in _DEBUG_FLAGS)]
            if not flags:
                continue
            line = f"!{name} = !{{ {', '.join('!' + r for r in flags)} }}"
        kept_named.append(line)
    todo = [int(r) for line in body for r in _REF.findall(line)]
    todo += [int(r) for line in kept_named for r in _REF.findall(line.split(" = ", 1)[1])]
    keep: set[int] = set()
    while todo:
        n = todo.pop()
        if n not in keep and n in nodes:
            keep.add(n)
            todo += [int(r) for r in _REF.findall(nodes[n].split(" = ", 1)[1])]
    return "\n".join(body + kept_named + [nodes[n] for n in sorted(keep)]) + "\n"
