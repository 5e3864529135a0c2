"""``python -m helpers.conv --check``: every strategy against the float64 reference
(:mod:`helpers.conv.check`)."""

from helpers.conv.check import main

raise SystemExit(main())
