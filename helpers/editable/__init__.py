"""Verdicts for the kernels a learner edits in place in notebooks 01, 03 and 04: PASSED, or one
sentence that names the mistake (an element never written and where, an index out of range at
a line of the kernel, a result that is the padding forgotten or a stride off by one).

:func:`check_relu` (notebook 01), :func:`check_direct_naive` (03), :func:`check_im2col` (04)
each return a :class:`helpers.checks.Report`; :mod:`helpers.editable.verdict` holds what they
share.
"""

from helpers.editable.cells import check_direct_naive, check_im2col, check_relu

__all__ = ["check_relu", "check_direct_naive", "check_im2col"]
