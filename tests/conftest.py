"""Suite-wide pytest configuration: the hypothesis profiles.

"ci" (the default) is derandomized, so every run of the suite draws the same examples and a
failure reproduces anywhere; it keeps no example database and has no deadline (the CPU
interpreters are slow and their timing varies).  Set HYPOTHESIS_PROFILE=fuzz for a long
randomized search when hunting bugs locally.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("fuzz", deadline=None, database=None, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
