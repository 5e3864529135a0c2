"""``python -m helpers.experiments.sweep``: measure a preset of the study's sweeps to a CSV."""

from helpers.experiments.sweep.presets import main

if __name__ == "__main__":
    raise SystemExit(main())
