"""The report as data: the study, its what-ifs and its plan section (computation, no rendering)."""
