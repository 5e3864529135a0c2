"""``python -m helpers.experiments.parallel``: measure data and model parallelism over ranks."""

from helpers.experiments.parallel.launcher import main

if __name__ == "__main__":
    raise SystemExit(main())
