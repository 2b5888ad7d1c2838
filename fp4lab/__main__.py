"""``python -m fp4lab ...``: the ``fp4lab`` command (as the console script and ``python -m fp4lab.cli``)."""

import sys

from fp4lab.cli.app import main

sys.exit(main())
