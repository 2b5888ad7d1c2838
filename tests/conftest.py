"""Test-suite setup: Triton runs in its CPU interpreter, hypothesis uses the "ci" profile by default."""

import os

# Must happen before anything imports triton: @triton.jit reads it at decoration time.
os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import settings  # noqa: E402

settings.register_profile("ci", deadline=None, max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
