"""Build tooling of the workbook (not part of the teaching package): the notebook runner, the
book renderer and the Colab sync. Run from the repository root: ``python -m tools.book``."""
