"""``python -m fp4lab.cli ...``: the same as the ``fp4lab`` console script."""

import sys

from .app import main

sys.exit(main())
