"""`python -m fp8check gate ...`, same as the `fp8check` command."""

import sys

from fp8check.cli import main

if __name__ == "__main__":
    sys.exit(main())
