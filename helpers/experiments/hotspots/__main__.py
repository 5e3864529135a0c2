"""``python -m helpers.experiments.hotspots --model NAME|all [...]``:
:func:`helpers.experiments.hotspots.profiling.main`."""

from helpers.experiments.hotspots.profiling import main

if __name__ == "__main__":
    raise SystemExit(main())
