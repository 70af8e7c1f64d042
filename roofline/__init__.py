"""roofline: analytic roofline and cost model for LLM inference, derived symbolically.

Public API: `analyze`, `sweep`, the configs (`ModelConfig`, `Hardware`, `Precision`, `Options`,
`Calibration`) and their loaders. The core imports neither torch nor streamlit.
"""
from .api import METRIC_DEFINITIONS, Analysis, analyze, sweep
from .bounds import BOUNDS, Calibration
from .config import ModelConfig, bundled_models, load_model
from .cost import Cost
from .hardware import Hardware, bundled_hardware, load_hardware
from .model import Options
from .precision import Precision

__version__ = "0.1.0"
__all__ = ["analyze", "sweep", "Analysis", "METRIC_DEFINITIONS", "BOUNDS", "Calibration", "ModelConfig",
           "bundled_models", "load_model", "Cost", "Hardware", "bundled_hardware", "load_hardware", "Options",
           "Precision", "__version__"]
