"""Validation harness: a torch decode under test, the device's measured ceilings, sweeps that
lose nothing, and a fit of the library's roofline to the measurements (see validation/README.md).

Only `cli` (and what it imports lazily) needs torch for measuring; `fit`, `records` and `plots` do not.
"""
