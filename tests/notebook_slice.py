"""A notebook cut to the code cells that some target cells need, for tests that check a few
cells under other conditions than nbval's run (which executes every cell already).

The cut keeps the setup cell (the first code cell), the targets, and, for every name a kept
cell reads, the last earlier cell that binds it, repeated until nothing new is needed. A name
the cut misses shows up as a NameError when the cut runs, never as a silent pass. A cut for a
machine without a GPU (``gpu=False``) leaves out what only the branches for a GPU read: the
body of ``if <x>.mode == "gpu":`` (or ``MODE``), the ``else`` of ``!= "gpu"``.
"""

from __future__ import annotations

import ast
import builtins

import nbformat

_BUILTINS = frozenset(dir(builtins))

#: The cell put before each notebook in a run of several in one kernel (``.format(folder=...)``):
#: it empties the namespace, so that a notebook cannot silently read a name an earlier one bound,
#: and goes back to ``folder``, where the notebook runs on its own. Imported modules stay
#: imported: that is what running several in one kernel saves.
FRESH_NAMESPACE = """\
%reset -f
import os as _os
_os.chdir({folder!r})
del _os
assert not [n for n in set(get_ipython().user_ns) - set(get_ipython().user_ns_hidden)
            if not n.startswith("_")], "the namespace was not emptied"
"""


def _tree(source: str) -> ast.Module:
    """The cell's syntax tree, with IPython's magic and shell lines left out."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


class _Reads(ast.NodeVisitor):
    """Names a cell binds at its top level, and names it reads before binding them (its free
    names), visiting each statement in the order Python evaluates it."""

    def __init__(self, gpu: bool = True) -> None:
        self.gpu = gpu
        self.bound: set[str] = set()
        self.free: set[str] = set()
        self.scopes: list[set[str]] = []   # names local to the comprehensions and functions in

    def _bind(self, target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            (self.scopes[-1] if self.scopes else self.bound).add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._bind(element)
        elif isinstance(target, ast.Starred):
            self._bind(target.value)
        else:   # x[i] = ..., x.a = ...: reads x and i, binds nothing
            self.visit(target)

    def _read(self, name: str) -> None:
        if not any(name in scope for scope in self.scopes) and name not in self.bound:
            self.free.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id)
        else:
            self._bind(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._bind(target)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self._bind(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._read(node.target.id)
        self.visit(node.value)
        self._bind(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._bind(node.target)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._bind(node.target)
        for stmt in node.body + node.orelse:
            self.visit(stmt)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self._bind(node.optional_vars)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            (self.scopes[-1] if self.scopes else self.bound).add(node.name)
        for stmt in node.body:
            self.visit(stmt)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        runs = _gpu_test(node.test) if not self.gpu else None
        for stmt in (node.body if runs in (None, False) else []) + (
                node.orelse if runs in (None, True) else []):
            self.visit(stmt)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            name = (alias.asname or alias.name).split(".")[0]
            (self.scopes[-1] if self.scopes else self.bound).add(name)

    visit_ImportFrom = visit_Import

    def _comprehension(self, node, results: list[ast.AST]) -> None:
        self.scopes.append(set())
        for gen in node.generators:
            self.visit(gen.iter)
            self._bind(gen.target)
            for cond in gen.ifs:
                self.visit(cond)
        for result in results:
            self.visit(result)
        self.scopes.pop()

    def visit_ListComp(self, node) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    def _function(self, node, body: list[ast.AST]) -> None:
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)
        args = node.args
        local = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        local |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        for stmt in body:   # Python's rule: a name assigned anywhere in a function is local
            local |= {n.id for n in ast.walk(stmt)
                      if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.scopes.append(local)
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        (self.scopes[-1] if self.scopes else self.bound).add(node.name)
        self._function(node, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in node.bases + node.decorator_list:
            self.visit(expr)
        self.scopes.append(set())
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        (self.scopes[-1] if self.scopes else self.bound).add(node.name)


def _gpu_test(test: ast.AST) -> bool | None:
    """For a test ``<x>.mode == "gpu"`` or ``<x>.MODE == "gpu"``: True, the test fails without
    a GPU (only its ``else`` runs); for ``!= "gpu"``: False (only its body runs); else None."""
    if (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and isinstance(test.left, ast.Attribute) and test.left.attr in ("mode", "MODE")
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "gpu"):
        return isinstance(test.ops[0], ast.Eq)
    return None


def names(source: str, gpu: bool = True) -> tuple[set[str], set[str]]:
    """(names the cell binds at its top level, names it reads that it has not bound first).

    A function's body counts as read where it is defined: the globals it reads must exist by
    the time it is called, which in a notebook is almost always that cell or a later one.
    ``gpu=False``: leaving out the branches that run only on a GPU (see the module's text).
    """
    reads = _Reads(gpu)
    reads.visit(_tree(source))
    return reads.bound, reads.free - _BUILTINS


def cut(nb: nbformat.NotebookNode, targets: list[int],
        gpu: bool = True) -> tuple[nbformat.NotebookNode, list[int]]:
    """``nb`` with only the code cells that the code cells at indices ``targets`` need.

    Args:
        nb: the notebook.
        targets: indices into ``nb.cells`` of code cells.
        gpu: False for a cut that runs without a GPU: what only its GPU branches read is not
            needed.

    Returns:
        (a new notebook with the kept cells, in order, outputs cleared; the kept indices).

    Raises:
        ValueError: a target is not a code cell.
    """
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    for t in targets:
        if t not in code:
            raise ValueError(f"targets: cell {t} is not a code cell")
    parsed = {i: names(nb.cells[i].source, gpu) for i in code}
    keep, todo = set(), [code[0], *targets]
    while todo:
        i = todo.pop()
        if i in keep:
            continue
        keep.add(i)
        for name in parsed[i][1]:
            binder = next((j for j in reversed(code) if j < i and name in parsed[j][0]), None)
            if binder is not None and binder not in keep:
                todo.append(binder)
    kept = sorted(keep)
    out = nbformat.v4.new_notebook(metadata=nb.metadata)
    for i in kept:
        cell = nbformat.v4.new_code_cell(nb.cells[i].source)
        out.cells.append(cell)
    return out, kept
