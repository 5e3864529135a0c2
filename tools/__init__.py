"""Tooling of the workbook outside the teaching package: JupyterLab's start-up, the notebook
runner, the book renderer, the README's picture, the Colab installer and sync. Run from the
repository root: ``python -m tools.book``."""
