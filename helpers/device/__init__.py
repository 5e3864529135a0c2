"""Where kernels run and how we measure there: the backend decision (GPU or simulator), the GPU
table, timing, memory, and array helpers (zero-copy views, poisoning, launch shapes).

Imports nothing else of :mod:`helpers`.
"""
