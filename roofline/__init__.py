"""roofline: analytic roofline and cost model for LLM inference, derived symbolically.

The public API, `__all__` (the README's "Using it" shows it; app.py uses nothing else of the package):
- estimates: `analyze`, `sweep` (an `Analysis`, its METRIC_DEFINITIONS and BOUNDS), `plan` (the cheapest
  deployments meeting `Targets` for a `Workload` at `load_prices`; `pareto`, `verdict`, `explain_plan`: the
  closed forms behind a plan's batch), serving under load
  (`at_load` with a `Policy`, `kv_sequences`), the serving what-ifs (`speculate`, `analyze_pipeline`,
  `analyze_expert_parallel`; tensor parallelism is `analyze(..., tp=)`), the closed forms (`crossovers`,
  `derivations`) and the constant-state views (`attention_twin`, `cache_against_context`, `layer_kind_table`);
- the one step pricer every estimate goes through, `Deployment`, and its inputs with their loaders: `ModelConfig`,
  `Hardware`, `Precision`, `Options`, `Engine` (the achievable roofs: a harness fit or a serving engine);
- the vocabulary those inputs take (attention kinds, families, formats' bits, the phases' defaults);
- the views a front end draws with: `fmt_*` (units), `plots` (matplotlib: loaded on first use).
The core imports neither torch nor streamlit.
"""
from importlib import import_module

from . import derivations
from .api import METRIC_DEFINITIONS, Analysis, analyze, sweep
from .bounds import BOUNDS
from .cost import Cost
from .deployment import Deployment
from .engine import ENGINES_DIR, IDEAL, Engine, harness_profiles, load_engine, read_engine_file, transfer_profile
from .hardware import Hardware, bundled_hardware, load_hardware
from .memory import DEFAULT_PREFILL_CHUNK
from .model import ATTENTION_IMPLS, LOGITS, MLA_FORMS, Options, decode_context
from .models.config import (ATTENTION_KINDS, CHUNKED, FAMILIES, GLOBAL, MOE, WINDOW, ModelConfig, bundled_models,
                            config_from_json, load_model)
from .models.config_state import STATE_FAMILIES
from .planning.forms import explain as explain_plan
from .planning.plan import DEFAULT_ENGINE, Targets, Workload, candidate_name, load_prices, pareto, plan, verdict
from .precision import BITS, Precision, as_served
from .serving import crossovers
from .serving.constant_state import attention_twin, cache_against_context, layer_kind_table
from .serving.expert_parallel import analyze_expert_parallel
from .serving.load import Policy, at_load, kv_sequences
from .serving.pipeline import analyze_pipeline
from .serving.speculation import speculate
from .views.fmt import fmt_bytes, fmt_count, fmt_flops, fmt_rate, fmt_seconds

__version__ = "0.1.0"
_LAZY = {"plots": ".views.plots"}  # matplotlib costs ~1 s to import: only a front end that draws pays it


def __getattr__(name: str):
    if name in _LAZY:
        return import_module(_LAZY[name], __name__)
    raise AttributeError(f"module 'roofline' has no attribute {name!r}")


__all__ = [
    # estimates
    "analyze", "sweep", "Analysis", "METRIC_DEFINITIONS", "BOUNDS", "plan", "Targets", "Workload", "load_prices",
    "pareto", "verdict", "candidate_name", "explain_plan", "DEFAULT_ENGINE", "at_load", "Policy", "kv_sequences",
    "speculate", "analyze_pipeline",
    "analyze_expert_parallel", "crossovers", "derivations", "attention_twin", "cache_against_context",
    "layer_kind_table",
    # the step pricer and its inputs
    "Deployment", "Cost", "ModelConfig", "bundled_models", "load_model", "config_from_json", "Hardware",
    "bundled_hardware", "load_hardware", "Precision", "as_served", "Options", "Engine", "load_engine", "IDEAL", "ENGINES_DIR",
    "read_engine_file", "harness_profiles", "transfer_profile",
    # the vocabulary of those inputs
    "ATTENTION_KINDS", "CHUNKED", "FAMILIES", "GLOBAL", "MOE", "WINDOW", "STATE_FAMILIES", "ATTENTION_IMPLS",
    "LOGITS", "MLA_FORMS", "BITS", "DEFAULT_PREFILL_CHUNK", "decode_context",
    # views
    "fmt_bytes", "fmt_count", "fmt_flops", "fmt_rate", "fmt_seconds", "plots",
    "__version__",
]
