"""``python -m helpers.experiments.throughput``: the elementwise and GEMM sweeps, to a CSV."""

from helpers.experiments.throughput.sweeps import main

if __name__ == "__main__":
    raise SystemExit(main())
