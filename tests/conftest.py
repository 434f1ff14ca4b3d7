"""Suite-wide pytest configuration: the hypothesis profiles.

fp8check's own `fp8check-ci` profile is the default (`fp8check.hypothesis_profiles`):
derandomized, so every run of the suite draws the same examples and a failure reproduces
anywhere; no example database, no deadline (the CPU interpreters are slow and their
timing varies).  Set HYPOTHESIS_PROFILE=fp8check-dev for a randomized search with the
example database when hunting bugs locally.
"""

import os

from hypothesis import settings

from fp8check.hypothesis_profiles import CI_PROFILE

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", CI_PROFILE))

# The sample user suite is run by tests/test_plugin_user_example.py through pytester (as a
# user's own run, in a subprocess), not collected as part of this one.
collect_ignore = ["user_example"]
