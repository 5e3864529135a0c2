"""``python -m helpers.experiments.transfers``: measure CPU-GPU copies on this GPU."""

from helpers.experiments.transfers.command import main

if __name__ == "__main__":
    raise SystemExit(main())
