"""What is checked against: the suites' cases and their seeded inputs.

`cases` (the named suites as data), `testdata` (seeded numpy operands, the suites' only
source), `subnormal` and `nonfinite` (the adversarial families' operands), `coverage`
(what a suite covers), and for users' tests `strategies` (hypothesis over `testdata`) with
`hypothesis_profiles`.
"""
