"""``python -m helpers.conv --check``: every strategy against the float64 reference
(:mod:`helpers.conv.check`)."""

from helpers.conv.check import main

if __name__ == "__main__":
    raise SystemExit(main())
