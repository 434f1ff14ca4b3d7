"""Convert Khattak & Mikaitis's FP8 tensor-core measurements into this folder's fixtures.

Usage: python tests/data/km25/convert.py REPO [COMMIT]

REPO is a clone (bare or not) of github.com/north-numerical-computing/MATLAB-tensor-core;
COMMIT defaults to HEAD.  For each format (E4M3, E5M2) it reads
model_validation/<GPU>/<FMT>/{a_<GPU>_<FMT>, b_<GPU>_<FMT>, c_<GPU>_fp32, d_<GPU>_fp32}.txt
for GPU in H100, H200, B200 and writes <fmt>.npz (README.md says what each array is).

a and b are float32 hex words, 32 per line (one k32 dot product a line); each must be a
value of the format exactly (its FP8 code decodes to the same float32 bits, signed zeros
included), else the script stops: the GPU saw the value the CUDA driver's saturating
conversion gave, and a fixture must hold what it saw.  The inputs are identical across the
three GPUs (checked; stored once).  c and d are 32-bit binary strings, one a line, kept as
the uint32 words.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

GPUS = ("H100", "H200", "B200")
FORMATS = {"E4M3": ("e4m3", ml_dtypes.float8_e4m3fn), "E5M2": ("e5m2", ml_dtypes.float8_e5m2)}
ROWS, K = 5000, 32


def _show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _hex_words(text: str) -> np.ndarray:
    rows = [[int(w, 16) for w in line.split()] for line in text.splitlines() if line.strip()]
    out = np.array(rows, np.uint32)
    if out.shape != (ROWS, K):
        raise SystemExit(f"expected {ROWS} lines of {K} hex words, got {out.shape}")
    return out


def _bin_words(text: str) -> np.ndarray:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != ROWS or any(len(s) != 32 or set(s) - {"0", "1"} for s in lines):
        raise SystemExit(f"expected {ROWS} lines of 32 binary digits")
    return np.array([int(s, 2) for s in lines], np.uint32)


def _codes(words: np.ndarray, dtype) -> np.ndarray:
    """FP8 codes of float32 words, exact: the round trip gives back the same bits."""
    f32 = words.view(np.float32)
    codes = f32.astype(dtype).view(np.uint8)
    back = codes.view(dtype).astype(np.float32).view(np.uint32)
    bad = back != words
    if bad.any():
        raise SystemExit(f"{int(bad.sum())} input words are not {dtype.__name__} values "
                         f"(first {words[bad][0]:08x})")
    return codes


def main(argv: list[str]) -> None:
    if len(argv) not in (1, 2):
        raise SystemExit(__doc__.split("\n\n")[1])
    repo = argv[0]
    commit = _show_commit(repo, argv[1] if len(argv) == 2 else "HEAD")
    out_dir = Path(__file__).resolve().parent
    for fmt, (name, dtype) in FORMATS.items():
        arrays: dict[str, np.ndarray] = {}
        for gpu in GPUS:
            base = f"model_validation/{gpu}/{fmt}/"
            a = _codes(_hex_words(_show(repo, commit, f"{base}a_{gpu}_{fmt}.txt")), dtype)
            b = _codes(_hex_words(_show(repo, commit, f"{base}b_{gpu}_{fmt}.txt")), dtype)
            if "a" in arrays and not (np.array_equal(a, arrays["a"])
                                      and np.array_equal(b, arrays["b"])):
                raise SystemExit(f"{gpu} {fmt}: inputs differ from {GPUS[0]}'s")
            arrays["a"], arrays["b"] = a, b
            arrays[f"c_{gpu}"] = _bin_words(_show(repo, commit, f"{base}c_{gpu}_fp32.txt"))
            arrays[f"d_{gpu}"] = _bin_words(_show(repo, commit, f"{base}d_{gpu}_fp32.txt"))
        np.savez_compressed(out_dir / f"{name}.npz", commit=np.array(commit), **arrays)
        print(f"{name}.npz: {ROWS} dot products x {len(GPUS)} GPUs from {commit}")


def _show_commit(repo: str, rev: str) -> str:
    return subprocess.run(["git", "-C", repo, "rev-parse", f"{rev}^{{commit}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    main(sys.argv[1:])
