"""`Catch`: where a seeded bug must fail."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Catch:
    """A seeded bug must fail `suite` (seed 0 in the tests, every seed the detection
    benchmark tries) with `criterion` among the failed criteria of some case."""

    suite: str
    criterion: str
