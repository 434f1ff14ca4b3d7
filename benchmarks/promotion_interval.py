"""What the Hopper FP8 kernel's promotion interval buys: error against the exact result and
against the bound, per interval, measured in one run (CPU; the model, not a GPU).

    python benchmarks/promotion_interval.py [--m 1024] [--k 2048] [--n 512]

For each of Triton's `max_num_imprecise_acc` choices (32, 64, 128 K elements per
tensor-core chain; 128 is DeepGEMM's and the sm_90 default's one chain per block) it
prints, on blockwise-quantized normal data with an outlier channel: the largest and RMS
error of `gmm(..., accum="deepgemm-hopper", interval=I)` relative to the largest exact
output, the largest `bound_ratio` against the bound a kernel with that accumulator must
meet (<= 1 by the theorem in references/hopper_bound.py), and the same for the
exact-partial float32 recipe (`deepgemm`) for scale.
"""

from __future__ import annotations

import argparse

import numpy as np

from fp8check.measures import metrics
from fp8check.references import abs_product, gmm, quantize
from fp8check.references.hopper_bound import truncation_term


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--n", type=int, default=512)
    o = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((o.m, o.k)).astype(np.float32)
    x[:, 5] *= 100.0  # an outlier channel: the tensor core loses small products behind it
    w = rng.standard_normal((2, o.k, o.n)).astype(np.float32)
    gs = np.array([o.m // 2, o.m - o.m // 2], np.int32)
    lq, rq = quantize(x, (1, 128)), quantize(w, (128, 128))
    exact = gmm(lq, rq, gs, out_dtype=np.float64, accum="exact")
    ab = abs_product(lq, rq, gs)
    scale = np.abs(exact).max()
    print(f"M={o.m} K={o.k} N={o.n}: error / max|exact|, and the largest bound_ratio")
    print(f"{'recipe':24s} {'max err':>10s} {'rms err':>10s} {'bound_ratio':>12s}")
    for interval in (32, 64, 128, None):
        if interval is None:
            out, extra, name = gmm(lq, rq, gs, accum="deepgemm"), None, "deepgemm (exact P)"
        else:
            out = gmm(lq, rq, gs, accum="deepgemm-hopper", interval=interval)
            extra = truncation_term(lq, rq, gs, interval=interval)
            name = f"hopper, every {interval}"
        err = out.astype(np.float64) - exact
        ratio = metrics.bound_ratio(out, exact, ab, o.k, extra=extra)
        print(f"{name:24s} {np.abs(err).max() / scale:10.2e} "
              f"{np.sqrt(np.mean(err**2)) / scale:10.2e} {ratio.max():12.3f}")


if __name__ == "__main__":
    main()
