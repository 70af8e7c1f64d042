"""roofline: analytic roofline and cost model for LLM inference, derived symbolically.

Public API: `analyze`, `sweep`, `plan` (the cheapest deployments meeting latency targets), the one
step pricer every estimate goes through (`Deployment`), the
serving what-ifs (`speculate`, `analyze_pipeline`, `analyze_expert_parallel`; tensor parallelism is
`analyze(..., tp=)`), the configs (`ModelConfig`, `Hardware`, `Precision`, `Options`, `Engine`: the
achievable roofs, a harness fit or a serving engine) and their loaders. The core imports neither torch nor streamlit.
"""
from .api import METRIC_DEFINITIONS, Analysis, analyze, sweep
from .bounds import BOUNDS
from .models.config import ModelConfig, bundled_models, load_model
from .cost import Cost
from .deployment import Deployment
from .engine import Engine, load_engine
from .hardware import Hardware, bundled_hardware, load_hardware
from .model import Options
from .planning.plan import plan
from .precision import Precision
from .serving.expert_parallel import analyze_expert_parallel
from .serving.pipeline import analyze_pipeline
from .serving.speculation import speculate

__version__ = "0.1.0"
__all__ = ["analyze", "sweep", "plan", "Analysis", "METRIC_DEFINITIONS", "BOUNDS", "Engine", "load_engine", "ModelConfig",
           "bundled_models", "load_model", "Cost", "Deployment", "Hardware", "bundled_hardware", "load_hardware", "Options",
           "Precision", "speculate", "analyze_pipeline", "analyze_expert_parallel", "__version__"]
