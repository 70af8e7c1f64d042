"""Without CUDA, the harness's Triton kernels run in Triton's interpreter, so their arithmetic is
tested on any machine (set before anything imports triton; a GPU runs them compiled)."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
