"""Test-suite setup: Triton runs in its CPU interpreter, hypothesis uses the "ci" profile by default.

"ci" is derandomized (the same examples on every run, so CI cannot fail on a draw it never saw before);
``HYPOTHESIS_PROFILE=explore`` searches fresh random examples, ten times as many, for development.
"""

import os

# Must happen before anything imports triton: @triton.jit reads it at decoration time.
os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=100, derandomize=True, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
