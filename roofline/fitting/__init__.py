"""Fitting engine profiles: published rows, least squares, leave-one-out."""
