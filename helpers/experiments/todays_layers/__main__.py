"""``python -m helpers.experiments.todays_layers``: time today's layers, print and save them."""

from helpers.experiments.todays_layers.networks import main

if __name__ == "__main__":
    raise SystemExit(main())
