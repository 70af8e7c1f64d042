"""The parts of `roofline.plan` (planning/plan.py): the workload's lengths, the price sheet, the vectorized candidate search,
the closed forms it shows, and the simulated percentiles of its frontier."""
