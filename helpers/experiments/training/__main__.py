"""``python -m helpers.experiments.training``: train once and print the accuracy reached."""

from helpers.experiments.training.learning import main

if __name__ == "__main__":
    raise SystemExit(main())
