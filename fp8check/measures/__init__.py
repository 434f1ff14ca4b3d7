"""How far an output is from its reference: the measures the criteria are made of.

`metrics` (elementwise measures, error bounds, the bias test), `totals` (the same reduced
chunk by chunk), `underflow` (the bound's underflow / flush-to-zero term), `integrity`
(whether a kernel wrote into its inputs), `curves` (loss-curve statistics), `overflow`
(how this machine's stacks cast out-of-range values to FP8).
"""
