"""A failing assertion's inputs and options, saved so that it can be rerun anywhere
without the kernel: `ReplayRecord`, its .npz file and the one-line command that replays
it (`fp8check.testing.replay`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fp8check.contracts import NUMPY_DTYPES
from fp8check.testing.inputs import UINT_OF_SIZE


@dataclass
class ReplayRecord:
    """One assertion as data: which assert (`kind`: "gmm", "tgmm", "quantizer",
    "bitexact"), its arrays by argument name (the output included) and its options.

    The options an assert does not take stay None: `accum`, `profile` and
    `acc_unit_roundoff` (the accumulator's unit roundoff, 2^-24 for float32) for gmm and
    tgmm; `block` (rows, columns), `recipe`, `fmt` and `division_ulps` for the
    quantizer."""

    kind: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    accum: str | None = None
    profile: str | None = None
    acc_unit_roundoff: float | None = None
    block: tuple[int, int] | None = None
    recipe: str | None = None
    fmt: str | None = None
    flushes_subnormals: bool | None = None  # gmm, tgmm; None in files older than it: False
    division_ulps: int | None = None  # quantizer; None in files older than it: 0

    def need(self, name: str) -> Any:
        """Option `name`, which this record's kind must have; ValueError (a damaged or
        foreign file) when it is missing."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"the saved {self.kind} record lacks its {name!r} option")
        return value

    def options(self) -> dict[str, Any]:
        """The options by name (every field but `kind` and `arrays`)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("kind", "arrays")}

    def save(self, directory: Path) -> Path:
        """Write the record to <directory>/<kind>-<content hash>.npz (the arrays as bits
        with their dtype names, so bf16 and fp8 survive) and return the absolute path:
        the same record always writes the same file."""
        arrays, dtypes = {}, {}
        for name, a in self.arrays.items():
            a = np.ascontiguousarray(a)
            dtypes[name] = a.dtype.name
            bits = UINT_OF_SIZE.get(a.dtype.itemsize)
            arrays[name] = a.view(bits) if bits is not None and a.dtype.kind not in "iub" else a
        meta = json.dumps({"kind": self.kind, "options": self.options(), "dtypes": dtypes},
                          sort_keys=True)
        digest = hashlib.sha1(meta.encode())
        for name in sorted(arrays):
            digest.update(arrays[name].tobytes())
        path = Path(os.path.abspath(directory)) / f"{self.kind}-{digest.hexdigest()[:12]}.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, allow_pickle=False, **{"__meta__": np.array(meta)}, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> ReplayRecord:
        """The record `save` wrote to `path` (options it did not write stay None)."""
        by_name = {d.name: d for d in NUMPY_DTYPES.values()}  # ml_dtypes: no np.dtype(name)
        with np.load(path) as f:
            meta = json.loads(str(f["__meta__"]))
            arrays = {name: f[name].view(by_name.get(dt) or np.dtype(dt))
                      for name, dt in meta["dtypes"].items()}
        options = dict(meta["options"])
        if options.get("block") is not None:
            options["block"] = tuple(options["block"])
        return cls(meta["kind"], arrays, **options)


def replay_command(path: Path) -> str:
    """The shell line that replays the record saved at `path` (made absolute, so it works
    from any directory)."""
    code = f"from fp8check.testing import replay; replay({os.path.abspath(path)!r})"
    if not set(code) & set('"$`\\'):  # readable double quotes whenever they are safe
        return f'python -c "{code}"'
    return shlex.join(["python", "-c", code])
