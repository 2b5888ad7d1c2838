"""``python -m fp4lab ...``: the same as the ``fp4lab`` console script (also ``python -m fp4lab.cli``)."""

import sys

from fp4lab.cli.app import main

sys.exit(main())
