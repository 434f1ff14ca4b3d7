"""A failing assertion's inputs and options, saved so that it can be rerun anywhere
without the kernel: `ReplayRecord`, its .npz file and the one-line command that replays
it (`fp8check.testing.replay`)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from fp8check.contracts import CONTRACTS_BY_NAME, NUMPY_DTYPES, Claims, claims_type
from fp8check.testing.inputs import UINT_OF_SIZE

# The claims a record of each kind carries: its contracts' (`Contract.replay`).
_CLAIMS = {c.replay: claims_type(c) for c in CONTRACTS_BY_NAME.values()}


@dataclass
class ReplayRecord:
    """One assertion as data: which assert (`kind`: "gmm", "tgmm", "quantizer",
    "bitexact"), its arrays by argument name (the output included), the `profile` (gmm,
    tgmm) and the kernel's `claims` the criteria got (MatmulClaims for gmm and tgmm,
    QuantizerClaims for the quantizer; None for bitexact)."""

    kind: str
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    profile: str | None = None
    claims: Claims | None = None

    def need(self, name: str) -> Any:
        """Option `name`, which this record's kind must have; ValueError (a damaged or
        foreign file) when it is missing."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"the saved {self.kind} record lacks its {name!r} option")
        return value

    def options(self) -> dict[str, Any]:
        """The options as the file holds them: the profile and each claim by field name
        (tuples as lists)."""
        claims = {} if self.claims is None else {
            f.name: _jsonable(getattr(self.claims, f.name)) for f in fields(self.claims)}
        return {"profile": self.profile, **claims}

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
        kind = _CLAIMS.get(meta["kind"])
        claims = None
        if kind is not None:  # the claims' fields; a file older than a claim lacks it
            names = {f.name for f in fields(kind)}
            given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                     for k, v in options.items()
                                     if k in names and v is not None}
            claims = kind(**given)
        return cls(meta["kind"], arrays, options.get("profile"), claims)


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def replay_command(path: Path) -> str:
    """The shell line that replays the record saved at `path` (made absolute, so it works
    from any directory)."""
    code = f"from fp8check.testing import replay; replay({os.path.abspath(path)!r})"
    if not set(code) & set('"$`\\'):  # readable double quotes whenever they are safe
        return f'python -c "{code}"'
    return shlex.join(["python", "-c", code])
