"""Without CUDA, the harness's Triton kernels run in Triton's interpreter, so their arithmetic is
tested on any machine (set before anything imports triton; a GPU runs them compiled)."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# CI explores the same examples on every run (a red main then means a change, not a new random draw); a local run
# draws new ones, which is where the fuzz finds what CI then keeps: `CI=true pytest` reproduces CI's draw.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
