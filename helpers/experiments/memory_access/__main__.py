"""``python -m helpers.experiments.memory_access [--save] [--out DIR] [--time-limit S]``: the
explanations, then the GPU timings (:func:`helpers.experiments.memory_access.timings.main`)."""

import sys

from helpers.experiments.memory_access.timings import main

if __name__ == "__main__":
    sys.exit(main())
