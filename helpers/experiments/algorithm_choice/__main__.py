"""``python -m helpers.experiments.algorithm_choice [--device D] [--save] ...``:
:func:`helpers.experiments.algorithm_choice.choices.main`."""

from helpers.experiments.algorithm_choice.choices import main

if __name__ == "__main__":
    raise SystemExit(main())
