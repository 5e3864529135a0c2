"""``python -m helpers.experiments.precision [--save] [--out DIR] [--quick] [--time-limit S]
[--seed N]``: :func:`helpers.experiments.precision.timings.main`."""

from helpers.experiments.precision.timings import main

if __name__ == "__main__":
    raise SystemExit(main())
