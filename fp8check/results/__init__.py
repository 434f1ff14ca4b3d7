"""Results: the model every layer reports in (`model`) and the documents the gate writes
(`documents`).  Importing this package imports neither a validator nor numpy."""

from fp8check.results.documents import (
    RESULTS_VERSION,
    JsonlStream,
    document,
    environment,
    package_versions,
    read_document,
    read_json,
    results_of,
    tally,
    write_json,
    write_junit,
)
from fp8check.results.model import (
    LAYER_NAMES,
    RELATIONS,
    CaseResult,
    Criterion,
    Relation,
    holds,
    jsonable,
)

__all__ = [
    "LAYER_NAMES", "RELATIONS", "RESULTS_VERSION", "CaseResult", "Criterion", "JsonlStream",
    "Relation", "document", "environment", "holds", "jsonable", "package_versions",
    "read_document", "read_json", "results_of", "tally", "write_json", "write_junit",
]
