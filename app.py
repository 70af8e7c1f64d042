"""The what-if dashboard: every lever of `roofline` in the sidebar, the numbers, the formulas and why.

Run `streamlit run app.py`. A thin view: sidebar helpers return plain values, the view makes one
`analyze` call and each page shows library outputs (`Analysis.op_table`, `sweep`, `derivations`,
`crossovers`, `speculation`, the committed validation fits) through `roofline.views.plots` figures and
tables; units convert in `roofline.views.fmt`. Cached: loaders, symbolic derivations and rendered figures
keyed by their inputs (rendering, not arithmetic, dominates a rerun); a validation fit runs only when asked
for on the page (a committed fit scores its own file in a fraction of a second). Bad input (an upload,
an impossible combination) is an `st.error` with the reason and the fix; the other views keep working.
The model selector always names the model analysed: an uploaded config.json joins its list.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st
import sympy as sp

import roofline
from roofline import (ATTENTION_IMPLS, ATTENTION_KINDS, BITS, CHUNKED, DEFAULT_PREFILL_CHUNK, ENGINES_DIR, FAMILIES,
                      GLOBAL, IDEAL, LOGITS, METRIC_DEFINITIONS, MLA_FORMS, MOE, STATE_FAMILIES, WINDOW, Analysis,
                      Deployment, Engine, Hardware, ModelConfig, Options, Policy, Precision, analyze, as_served, at_load,
                      attention_twin, bundled_hardware, bundled_models, cache_against_context, config_from_json,
                      crossovers, decode_context, derivations, fmt_bytes, fmt_count, fmt_flops, fmt_rate, fmt_seconds,
                      harness_profiles, kv_sequences, layer_kind_table, load_model, read_engine_file, speculate, sweep,
                      transfer_profile)


DEFAULT_MODEL, DEFAULT_HARDWARE = "llama-2-13b", "h100-sxm"
DEFAULT_BATCH, DEFAULT_PROMPT, DEFAULT_GEN = 1, 1024, 128
DTYPES = tuple(BITS)
AS_SERVED = "as served"  # the activations' default: as a serving engine runs the weights on the device
CURVE_BATCHES = 2 ** np.arange(0, 13)  # latency-throughput: 1 .. 4096, plus the batch shown and the memory wall
REGIME_BATCHES = np.unique(np.round(np.geomspace(1, 4096, 25)))
REGIME_CONTEXTS = np.unique(np.round(np.geomspace(128, 131072, 21)))
MEASUREMENTS_DIR = Path(__file__).resolve().parent / "data" / "measurements"
FIGURE_DPI = 115
CUSTOM, SAME, FRACTION = "custom numbers", "same as A", "a fraction of the target's step"
CACHE_CONTEXTS = 2 ** np.arange(10, 21)  # 1k .. 1M tokens
OWN, ALL_WINDOWED, NO_WINDOW = "model's own", "every layer windowed", "none (every layer global)"
SAME_AS_WEIGHTS = "as the weights"
FIX_CONFIG = "**Fix:** change the sidebar setting the message names, or set it back to its default."


# ---- loaders and symbolic work: cached ----

@st.cache_resource(show_spinner=False)
def bundled_model(name: str) -> ModelConfig:
    return load_model(name)


@st.cache_resource(show_spinner=False)
def uploaded_model(content: bytes, filename: str) -> ModelConfig:
    """A Hugging Face config.json from the uploader; ValueError says what is wrong with it."""
    try:
        return config_from_json(content, filename, name=Path(filename).stem)  # too deep a nesting included
    except ValueError as err:  # the loader's message names the file already; a check's may not
        raise ValueError(str(err) if filename in str(err) else f"{filename}: {err}") from None
    except RecursionError:
        raise ValueError(f"{filename}: a field is nested more than 64 levels deep to read") from None
    except (TypeError, KeyError, AttributeError, ArithmeticError) as err:  # a check the library lacks: still no traceback
        raise ValueError(f"{filename}: a field has an unexpected type or value ({type(err).__name__}: {err})") from None


@st.cache_resource(show_spinner=False)
def derivation(config: ModelConfig, hardware: Hardware, precision: Precision) -> dict:
    """The lecture's formulas and their limits, and this configuration's crossovers (sympy, once per input)."""
    out = {"matmul": derivations.matmul_intensity(), "mlp": derivations.mlp_intensity(),
           "attention": derivations.attention_limits(), "napkin": derivations.lecture_napkin(config, hardware),
           "kv_context": derivations.kv_equals_weights_context(config, precision)}
    try:
        out["ridge"] = derivations.accelerator_intensity(hardware, precision.weight_matmul_dtype)
        out["critical"] = derivations.critical_batch(hardware, precision)
    except ValueError as err:  # no sourced peak for this dtype
        out["no_peak"] = str(err)
    return out


@st.cache_resource(show_spinner=False)
def crossover_table(config: ModelConfig, hardware: Hardware, precision: Precision, prompt: int, gen: int,
                    options: Options, engine: Engine, tp: int, prefill_chunk: int | None) -> list:
    """(title, crossover or the reason there is none) for each of `roofline.serving.crossovers`' quantities."""
    d = Deployment.of(config, hardware, precision=precision, options=options, engine=engine, tp=tp)
    quantities = (
        ("Critical batch: weight matmuls turn compute-bound", lambda: crossovers.critical_batch(d)),
        *([("Expert critical batch: each touched routed expert sees the critical batch",
            lambda: crossovers.expert_critical_batch(d))] if config.n_experts else []),
        ("Context where one sequence's KV read equals the weights", lambda: crossovers.kv_equals_weights_context(d)),
        ("Memory wall: the largest batch that fits", lambda: crossovers.max_batch(d, prompt, gen, prefill_chunk)),
        ("Batch reaching 90% of the decode throughput asymptote", lambda: crossovers.saturation_batch(d, prompt, 0.9)),
        ("Batch beyond which doubling it gains < 10% tokens/s", lambda: crossovers.diminishing_batch(d, prompt, 0.1)),
    )
    rows = []
    for title, solve in quantities:
        try:
            rows.append((title, solve()))
        except ValueError as err:
            rows.append((title, str(err)))
    return rows


def validation_fit():
    """The harness's fit (validation/), imported by the Validation page only: the rest of the app is roofline's
    public API, and roofline never imports the harness."""
    import validation.fit
    return validation.fit


def validation_records():
    import validation.records
    return validation.records


@st.cache_data(max_entries=16, show_spinner=False)
def measurement_frame(path: str, stamp: tuple) -> pd.DataFrame:
    """A measurements CSV; `stamp` (the file's time and size) drops the cache when it changes."""
    return validation_records().load_frame([path])


@st.cache_resource(show_spinner=False)
def committed_fits(stamp: tuple) -> dict[str, tuple[str, dict, Engine]]:
    """Measurements file name -> (profile name, its harness-fit record, the fit as fractions of the measured
    ceilings) for each bundled harness profile fitted on the file; `stamp`: the profiles' files' times."""
    out = {}
    for name, engine in harness_profiles().items():
        datasheet = bundled_hardware().get(engine.hardware)  # None: fractions of the measured ceilings
        try:
            fitted = validation_fit().measured_fractions(engine, datasheet)
        except (KeyError, TypeError, ArithmeticError):  # a profile whose record lacks the measured ceilings
            continue
        for source in engine.harness_fit.get("sources") or []:
            out[Path(source).name] = (name, engine.harness_fit, fitted)
    return out


@st.cache_data(max_entries=8, show_spinner="Fitting the roofline to the measurements, leaving one context out…")
def refit(path: str, stamp: tuple) -> tuple[pd.DataFrame, dict, dict]:
    """`validation.fit` on one file, asked for on the page: tens of seconds on a 2-core machine."""
    result = validation_fit().fit(measurement_frame(path, stamp), Path(path).stem)
    return result.points, result.summary, profile_fields(result.engine)


# ---- figures: `roofline.views.plots`, rendered once per input ----

@st.cache_data(max_entries=64, show_spinner=False)
def figure_png(kind: str, *args, **kwargs) -> bytes:
    """A `roofline.views.plots` figure as PNG bytes, laid out fast (fixed margins), cached by its inputs."""
    return roofline.plots.png_bytes(getattr(roofline.plots, kind)(*args, **kwargs), dpi=FIGURE_DPI, fast=True)


# ---- sidebar: each helper returns plain values ----

@dataclasses.dataclass(frozen=True)
class Setup:
    """What the sidebar chose: the inputs of the one `analyze` call."""
    model: ModelConfig
    hardware: Hardware | None  # None: the custom numbers are not a valid device
    precision: Precision
    options: Options
    batch: int
    prompt: int
    gen: int
    overrides: dict
    parallel: dict  # tp and replicas, for `analyze`
    speculation: dict | None
    prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK  # tokens per prefill step: sizes the workspace (None: all)
    engine: str = "ideal"  # an engine profile (data/engines: a serving engine or a harness fit) beside the ideal bound


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def sidebar_model() -> ModelConfig:
    """The model the selector shows, which is the one analysed: a bundled model, or an uploaded config.json,
    listed first as "name (uploaded file)" and selected when it arrives. A bad upload: the error, and the
    bundled model the selector shows."""
    selector = st.sidebar.container()  # the selector above the uploader, though its options depend on the upload
    upload = st.sidebar.file_uploader("Add a Hugging Face config.json to the models", type=["json"], key="upload",
                                      help="It joins the model list and is selected; pick a bundled model to leave it.")
    uploaded, problem = None, None
    if upload is not None:
        content = upload.getvalue()
        try:
            uploaded = uploaded_model(content, upload.name)
        except ValueError as err:
            problem = err
    choices = ([f"{uploaded.name} (uploaded {upload.name})"] if uploaded else []) + bundled_models()
    if uploaded and st.session_state.get("model_upload") != (upload.name, hashlib.sha1(content).hexdigest()):
        st.session_state["model_upload"] = (upload.name, hashlib.sha1(content).hexdigest())
        st.session_state["model"] = choices[0]  # a new upload: analysed, and shown as the model
    if st.session_state.get("model") not in choices:  # first run, or the upload picked is gone
        st.session_state["model"] = DEFAULT_MODEL
    name = selector.selectbox("Model", choices, key="model")
    if problem is not None:
        st.error(f"**The uploaded config cannot be used.** {problem}\n\n**Fix:** upload a Hugging Face `config.json` "
                 f"(the one next to the weights) whose `model_type` is one of "
                 f"{', '.join(FAMILIES + STATE_FAMILIES)}, or remove the "
                 f"upload. Showing the bundled **{name}** (the model selector's) meanwhile.")
    return uploaded if uploaded and name == choices[0] else bundled_model(name)


def sidebar_hardware() -> Hardware | None:
    table = bundled_hardware()
    ids = [*table, CUSTOM]
    choice = st.sidebar.selectbox("Hardware", ids, index=ids.index(DEFAULT_HARDWARE), key="hardware",
                                  format_func=lambda i: table[i].name if i in table else i)
    if choice != CUSTOM:
        return table[choice]
    like = table[DEFAULT_HARDWARE]  # the starting numbers are a datasheet's, in the units people quote
    memory = st.sidebar.number_input("memory (GB)", 1.0, 10000.0, like.memory_bytes / 1e9, key="hw_memory_gb")
    bandwidth = st.sidebar.number_input("memory bandwidth (TB/s)", 0.01, 100.0, like.memory_bandwidth / 1e12,
                                        key="hw_bandwidth_tbs")
    bf16 = st.sidebar.number_input("bf16 dense peak (TFLOP/s)", 0.0, 100000.0, like.peak_flops["bf16"] / 1e12,
                                   key="hw_bf16_tflops", help="0: unknown")
    fp8 = st.sidebar.number_input("fp8 dense peak (TFLOP/s)", 0.0, 100000.0, 0.0, key="hw_fp8_tflops",
                                  help="0: no fp8 units (fp8 matmuls run at the bf16 rate)")
    peaks = {dtype: value * 1e12 for dtype, value in (("bf16", bf16), ("fp8", fp8)) if value > 0}
    try:
        # the starting device's datasheet capacity keeps what CUDA shows of it; another number is taken as it is
        usable = like.usable_memory_bytes if memory * 1e9 == like.memory_bytes else None
        return Hardware(id="custom", name="custom device", memory_bytes=memory * 1e9,
                        memory_bandwidth=bandwidth * 1e12, peak_flops=peaks, usable_memory_bytes=usable)
    except ValueError as err:
        st.error(f"**The custom hardware is not valid.** {err}\n\n**Fix:** enter positive numbers.")
        return None


def served_activations(precision: Precision, hardware: Hardware | None, served: bool) -> Precision:
    """`precision` with the activations a serving engine takes with its weights on `hardware` where `served` (the
    sidebar's activations are AS_SERVED; roofline.precision.as_served: fp8 weights W8A8 on Hopper), else as picked."""
    return as_served(precision, hardware.peak_flops) if served and hardware is not None else precision


def sidebar_precision(config: ModelConfig, hardware: Hardware | None) -> Precision:
    """Weights, activations, KV; for an MoE model also the routed experts' format (gpt-oss ships them in mxfp4).
    Activations default to the ones a serving engine takes with the weights on the device (AS_SERVED)."""
    columns = st.sidebar.columns(3)
    weights = columns[0].selectbox("weights", DTYPES, index=DTYPES.index("bf16"), key="weights")
    activations = columns[1].selectbox("activations", [AS_SERVED, *DTYPES], key="activations",
                                       help="as served: fp8 with fp8 weights where the device has fp8 tensor cores "
                                            "(W8A8, as TensorRT-LLM, vLLM and SGLang run them), nvfp4 with nvfp4 weights "
                                            "on Blackwell's FP4 units, bf16 otherwise")
    kv = columns[2].selectbox("KV cache", DTYPES, index=DTYPES.index("bf16"), key="kv")
    experts = None
    if MOE in config.layer_mlp:
        picked = st.sidebar.selectbox("routed experts", [SAME_AS_WEIGHTS, *DTYPES], key="experts",
                                      help="the routed experts' weight format (gpt-oss: mxfp4, Kimi-K2-Thinking: int4)")
        experts = None if picked == SAME_AS_WEIGHTS else picked
    precision = Precision(weights=weights, activations="bf16" if activations == AS_SERVED else activations, kv=kv,
                          experts=experts)
    return served_activations(precision, hardware, activations == AS_SERVED)


def sidebar_workload() -> tuple[int, int, int]:
    columns = st.sidebar.columns(3)
    batch = columns[0].number_input("batch", 1, 1 << 20, DEFAULT_BATCH, key="batch")
    prompt = columns[1].number_input("prompt", 1, 1 << 22, DEFAULT_PROMPT, step=256, key="prompt")
    gen = columns[2].number_input("generate", 1, 1 << 20, DEFAULT_GEN, step=64, key="gen")
    return int(batch), int(prompt), int(gen)


def sidebar_prefill_chunk() -> int | None:
    chunk = st.sidebar.number_input("prefill chunk (tokens; 0: every prompt at once)", 0, 1 << 22, DEFAULT_PREFILL_CHUNK,
                                    step=1024, key="prefill_chunk",
                                    help="prompt tokens per prefill step (chunked prefill): sizes the activation "
                                         "workspace in memory and max batch")
    return int(chunk) or None


def sidebar_overrides(config: ModelConfig) -> dict:
    """Architecture what-ifs as `ModelConfig.with_overrides` fields (empty: the model as published)."""
    overrides = {}
    at = f"/{config.name}"  # model-specific widgets start from that model's own values
    with st.sidebar.expander("Attention and MoE what-ifs", expanded=True):
        if not config.has_kv_heads:
            st.caption(f"{config.name} uses MLA: the cache holds the latent (rank C), so KV heads do not apply.")
            rank = st.number_input("MLA latent rank C (kv_lora_rank)", 1, 16384, config.kv_lora_rank, step=64,
                                   key="kv_lora_rank" + at)
            if rank != config.kv_lora_rank:
                overrides["kv_lora_rank"] = int(rank)
        else:
            n = config.n_heads
            heads = st.selectbox("KV heads K", divisors(n), index=divisors(n).index(config.n_kv_heads), key="kv_heads" + at,
                                 format_func=lambda k: f"{k} ({'MHA' if k == n else 'MQA' if k == 1 else f'GQA-{k}'})")
            if heads != config.n_kv_heads:
                overrides["n_kv_heads"] = heads
            st.caption("MLA on/off: turning a non-MLA model into MLA is not modelled by the library; "
                       "the latent-rank control appears for MLA models (DeepSeek).")
        overrides.update(window_overrides(config, at))
        if not config.has_kv_heads:
            st.caption("Cross-layer KV sharing (CLA) applies to MHA/GQA caches, not to MLA's latent.")
        else:
            cla = st.selectbox("CLA factor (layers sharing one KV cache)", divisors(config.n_layers),
                               index=divisors(config.n_layers).index(config.cla_factor), key="cla" + at)
            if cla != config.cla_factor:
                overrides["cla_factor"] = cla
        if config.has_state and st.checkbox("All-attention twin: make every SSM / linear-attention layer attention",
                                            key="twin" + at):
            overrides["layer_attention"] = attention_twin(config).layer_attention
        if config.n_experts:
            top_k = st.slider("MoE top-k (experts per token)", 1, config.n_experts, config.top_k, key="top_k" + at)
            if top_k != config.top_k:
                overrides["top_k"] = top_k
    return overrides


def window_overrides(config: ModelConfig, at: str) -> dict:
    windowed = WINDOW in config.layer_attention
    pattern = f"{config.layer_attention.count(WINDOW)} of {config.n_layers} layers windowed" if windowed else "all global"
    modes = (OWN, ALL_WINDOWED, NO_WINDOW) if windowed else (OWN, ALL_WINDOWED)
    mode = st.radio(f"Sliding window (model: {pattern})", modes, key="window_mode" + at)
    def attention_made(kind):  # constant-state and MLP-only layers keep their kind
        return tuple(kind if k in ATTENTION_KINDS else k for k in config.layer_attention)
    if mode == NO_WINDOW:
        return {"window": 0, "layer_attention": attention_made(GLOBAL)}
    if mode == OWN and not windowed:
        return {}
    size = st.number_input("window W (tokens)", 1, 1 << 22, config.window or 4096, step=512, key="window" + at)
    if mode == ALL_WINDOWED:
        return {"window": int(size), "layer_attention": attention_made(WINDOW)}
    return {"window": int(size)} if size != config.window else {}


def sidebar_parallel() -> dict:
    """Tensor-parallel degree and replicas, as `analyze` takes them."""
    st.sidebar.subheader("Serving")
    columns = st.sidebar.columns(2)
    tp = columns[0].selectbox("tensor parallel", (1, 2, 4, 8, 16, 32, 64), key="tp",
                              help="GPUs sharing each layer (Megatron); the library says when heads do not split")
    replicas = columns[1].number_input("replicas", 1, 4096, 1, key="replicas", help="model copies: throughput x M")
    return {"tp": tp, "replicas": int(replicas)}


def sidebar_speculation() -> dict | None:
    """Speculative decoding's draft, γ and α (None: off)."""
    if not st.sidebar.toggle("Speculative decoding", key="speculate"):
        return None
    draft = st.sidebar.selectbox("draft", [FRACTION, *bundled_models()], key="draft",
                                 help="a draft model, or MTP/Medusa-style heads costing a fraction of a target step")
    if draft == FRACTION:
        draft = st.sidebar.slider("draft step / target step", 0.01, 1.0, 0.1, key="draft_fraction")
    gamma = st.sidebar.slider("γ: drafted tokens per target pass", 1, 16, 4, key="gamma")
    alpha = st.sidebar.slider("α: acceptance rate per drafted token", 0.0, 1.0, 0.8, step=0.05, key="alpha")
    return {"draft": draft, "gamma": gamma, "alpha": alpha}


def sidebar_engine(hardware: Hardware | None) -> str:
    """The achievable roofs: an engine profile (a serving engine, or a harness fit), the ideal bound beside it."""
    files = sorted(ENGINES_DIR.glob("*.yaml"))
    names = [p.stem for p in files]
    choice = st.sidebar.selectbox("Engine", names, index=names.index("ideal"), key="engine",
                                  help="data/engines: efficiencies, launch, host and collective latencies, each with "
                                       "its bound and what pins it; harness*: this project's own fits")
    target = (read_engine_file(ENGINES_DIR / f"{choice}.yaml") or {}).get("hardware")
    if hardware is not None and target not in (None, "measured", hardware.id):
        st.sidebar.warning(f"{choice} was fitted on `{target}`, not `{hardware.id}`: its efficiencies are applied "
                           "to this device's datasheet roofs as they are.")
    return choice


def sidebar_options(config: ModelConfig) -> Options:
    with st.sidebar.expander("Modelling options"):
        attention = st.radio("attention kernel", ATTENTION_IMPLS, horizontal=True, key="attention",
                             help="flash: scores stay on chip; eager: the score matrix goes through memory")
        logits = st.radio("prefill logits", LOGITS, horizontal=True, key="logits",
                          help="last token (serving engines) or every token (Hugging Face forward)")
        form = "absorbed"
        if config.is_mla:
            form = st.radio("MLA decode form", MLA_FORMS, horizontal=True, key="mla_form")
    return Options(attention=attention, mla_form=form, logits=logits)


def sidebar() -> Setup:
    st.sidebar.header("What if…")
    config = sidebar_model()
    hardware = sidebar_hardware()
    precision = sidebar_precision(config, hardware)
    batch, prompt, gen = sidebar_workload()
    chunk = sidebar_prefill_chunk()
    overrides = sidebar_overrides(config)
    parallelism = sidebar_parallel()
    speculation = sidebar_speculation()
    engine = sidebar_engine(hardware)
    options = sidebar_options(config)
    return Setup(config, hardware, precision, options, batch, prompt, gen, overrides, parallelism, speculation, chunk,
                 engine)


# ---- the one library call, and the headline ----

def run_analysis(setup: Setup) -> Analysis | None:
    if setup.hardware is None:
        return None
    try:
        return analyze(setup.model, setup.hardware, batch=[setup.batch], prompt=setup.prompt, gen=setup.gen,
                       precision=setup.precision, options=setup.options,
                       allow_beyond_window=True, prefill_chunk=setup.prefill_chunk,  # beyond: flagged in the headline
                       engine=setup.engine, **setup.parallel, **setup.overrides)
    except ValueError as err:
        st.error(f"**This configuration cannot be analyzed.** {err}\n\n{FIX_CONFIG}")
        return None


def describe(analysis: Analysis) -> str:
    cfg, p, m = analysis.config, analysis.precision, analysis.records()[0]
    attention = f"MLA C={cfg.kv_lora_rank}" if cfg.is_mla else f"K={cfg.n_kv_heads}"
    gpus = f" ({m['tp']}-way tensor parallel x {m['replicas']} replicas)" if m.get("gpus", 1) > 1 else ""
    experts = f", routed experts {p.experts}" if p.experts else ""
    return f"{cfg.name} ({attention}) on {analysis.hardware.name}{gpus}, weights {p.weights}{experts}, KV {p.kv}"


def what_ifs(overrides: dict) -> str:
    shown = {k: v for k, v in overrides.items() if k != "layer_attention"}
    if "layer_attention" in overrides:
        shown["layers"] = "all windowed" if WINDOW in overrides["layer_attention"] else "all global"
    return ", ".join(f"{k}={v}" for k, v in shown.items())


def headline(analysis: Analysis) -> None:
    m = analysis.records()[0]
    capacity = analysis.hardware.memory_bytes
    row = st.columns(4)
    row[0].metric("TTFT", fmt_seconds(m["ttft_s"]), help=METRIC_DEFINITIONS["ttft_s"])
    row[1].metric("TPOT", fmt_seconds(m["tpot_s"]), help=METRIC_DEFINITIONS["tpot_s"])
    row[2].metric("tokens/s" + (f" (all {m['replicas']} replicas)" if m["replicas"] > 1 else ""),
                  fmt_rate(m["tokens_per_s"], "tokens/s"), help=METRIC_DEFINITIONS["tokens_per_s"])
    row[3].metric("E2E", fmt_seconds(m["e2e_s"]), help=METRIC_DEFINITIONS["e2e_s"])
    row = st.columns([1, 0.6, 0.6, 1.4])
    row[0].metric("memory" + (" per GPU" if m.get("tp", 1) > 1 else ""), fmt_bytes(m["memory_bytes"]),
                  delta=f"of {fmt_bytes(capacity)}", delta_color="off", delta_arrow="off",
                  help=METRIC_DEFINITIONS["memory_bytes"])
    row[1].metric("fits", "yes" if m["fits"] else "no", help="memory <= the device's capacity")
    row[2].metric("max batch", str(m["max_batch"]), help=METRIC_DEFINITIONS["max_batch"])
    row[3].metric("binding resource", str(m["decode_bound"]), help=METRIC_DEFINITIONS["decode_bound"])
    if m.get("gpus", 1) > 1:
        row = st.columns(4)
        row[0].metric("GPUs", str(m["gpus"]), help="tensor-parallel degree x replicas; tokens/s counts every replica")
        row[1].metric("all-reduce per decode step", fmt_seconds(m["comm_s"]),
                      help="2 ring all-reduces per layer, on the critical path; included in TPOT")
        row[2].metric("all-reduce in the prefill", fmt_seconds(m["prefill_comm_s"]), help="included in TTFT")
        if m["link_latency_assumed"]:
            row[3].caption("The interconnect latency is the library's assumption: the hardware file gives none.")
    engine = analysis.deployment.engine
    if not engine.is_ideal:
        gap = analysis.engine_gap(m["batch"], m["prompt_len"])
        st.info(f"**{engine.name}** (data/engines/{engine.name}.yaml): TTFT {fmt_seconds(m['ttft_s'])} against the "
                f"ideal bound's {fmt_seconds(m['ideal_ttft_s'])}, TPOT {fmt_seconds(m['tpot_s'])} against "
                f"{fmt_seconds(m['ideal_tpot_s'])}. The decode step's difference, by term: "
                + ", ".join(f"{term} +{fmt_seconds(seconds)}" for term, seconds in gap.items()) + ".")
        st.image(figure_png("engine_waterfall", m["ideal_tpot_s"], gap, engine.name))
    window = analysis.config.max_positions
    if window and m["prompt_len"] + m["gen_len"] > window:
        st.warning(f"Beyond the context window: prompt + generate = {m['prompt_len'] + m['gen_len']} tokens, but "
                   f"{analysis.config.name} was trained for {window} positions (rope scaling included). The figures "
                   f"price a request the model cannot serve as published: lower the prompt or generate.")
    if not m["fits"]:
        st.warning(f"Does not fit: {fmt_bytes(m['memory_bytes'])} needed, {fmt_bytes(capacity)} available "
                   f"(max batch {m['max_batch']}). Lower the batch or context, quantize weights or KV, or pick a larger device.")
    st.caption(f"{describe(analysis)}; B={m['batch']}, prompt {m['prompt_len']}, generate {m['gen_len']}; "
               + (f"{fmt_count(m['params_total'])} parameters ({fmt_count(m['params_per_gpu'])} per GPU), weights "
                  f"{fmt_bytes(m['weight_bytes_per_gpu'])} per GPU, " if m["tp"] > 1 else
                  f"{fmt_count(m['params'])} parameters, weights {fmt_bytes(m['weight_bytes'])}, ") +
               f"KV {fmt_bytes(m['kv_bytes_per_token'])}/token; prefill {m['prefill_bound']}-bound; "
               f"lecture napkin TPOT {fmt_seconds(m['napkin_tpot_s'])}; engine: {analysis.engine.name}.")


def speculation_view(analysis: Analysis, setup: Setup) -> None:
    spec = setup.speculation
    try:
        result = speculate(analysis.deployment, spec["draft"], spec["gamma"], spec["alpha"],
                                       batch=setup.batch, prompt=setup.prompt, allow_beyond_window=True)
    except ValueError as err:
        st.error(f"**Speculative decoding cannot be priced here.** {err}\n\n**Fix:** change the draft, γ or α.")
        return
    row = st.columns(4)
    row[0].metric("TPOT with speculation", fmt_seconds(result.tpot_s),
                  delta=f"{result.speedup:.2f}× vs {fmt_seconds(result.baseline_tpot_s)}", delta_color="off")
    row[1].metric("tokens per target pass", f"{result.expected_tokens_per_iteration:.2f}",
                  help="(1 − α^(γ+1)) / (1 − α): the accepted prefix plus the pass's own token")
    row[2].metric("iteration", fmt_seconds(result.iteration_s),
                  help=f"γ draft steps {fmt_seconds(result.draft_s)} + one verify pass {fmt_seconds(result.verify_s)}")
    row[3].metric("best γ for this α and batch", str(result.best_gamma), delta=f"{result.best_speedup:.2f}×",
                  delta_color="off")
    if result.best_gamma_is_search_cap:
        st.caption(f"γ = {result.best_gamma} is the search cap: a longer lookahead may be faster still.")


# ---- pages ----

def page_roofline(analysis: Analysis, setup: Setup) -> None:
    ops = analysis.op_table(setup.batch, setup.prompt)
    title = f"{analysis.config.name} on {analysis.hardware.name}: B={setup.batch}, S={setup.prompt}"
    st.image(figure_png("roofline_chart", analysis.hardware, ops, title))
    st.caption("Each op of the prefill (hollow) and of one decode step (filled) at its attained FLOP/s; the marker is "
               "the op's kind (legend), nested where ops coincide. On the slanted roof an op waits on memory, on a "
               "flat roof on compute (one roof per dtype the device has). "
               "Ops without FLOPs (norms, activations, the embedding gather) have no intensity and are left out.")


def page_latency(analysis: Analysis, setup: Setup) -> None:
    wall = int(analysis.metrics["max_batch"].iloc[0])
    batches = sorted({*CURVE_BATCHES.tolist(), setup.batch, wall, wall + 1} - {0})
    curve = analysis.at(batches).metrics
    label = f"{analysis.config.name} on {analysis.hardware.name}"
    st.image(figure_png("latency_throughput", {label: curve}, marks=(setup.batch,), devices={label: analysis.hardware.id},
                        title=f"TPOT vs tokens/s over batch, S={setup.prompt}+{setup.gen} (dashed: does not fit)"))
    st.caption(f"An offline batch: its requests arrive together. The memory wall: B = {wall} is the largest batch "
               f"whose weights, KV cache and workspace fit ({fmt_bytes(analysis.hardware.capacity_bytes)} as the "
               "runtime sees it).")
    st.dataframe(pd.DataFrame({
        "batch": curve["batch"], "TPOT": curve["tpot_s"].map(fmt_seconds),
        "tokens/s": curve["tokens_per_s"].map(lambda v: fmt_rate(v, "tokens/s")),
        "memory": curve["memory_bytes"].map(fmt_bytes), "fits": curve["fits"].map({True: "yes", False: "no"}),
        "decode bound": curve["decode_bound"].astype(str)}), hide_index=True)
    under_load(analysis, setup)


def under_load(analysis: Analysis, setup: Setup) -> None:
    """The same deployment as a continuous-batching server: C requests in flight (closed loop)."""
    st.subheader("Under load (continuous batching)")
    d = analysis.deployment
    pool = kv_sequences(d, setup.prompt, setup.gen)
    if pool < 1:
        st.warning("Not one sequence fits beside the weights: no server to load.")
        return
    levels = sorted({1, 8, 32, 128, setup.batch})
    policy = Policy(kv_sequences=pool)  # the engine's steps: SGLang prefill first
    load = at_load(d, setup.prompt, setup.gen, concurrency=levels, policy=policy)
    st.dataframe(pd.DataFrame({
        "in flight": levels, "requests/s": [f"{r:.3g}" for r in load["rate"]],
        "TTFT": [fmt_seconds(v) for v in load["ttft_s"]], "TPOT": [fmt_seconds(v) for v in load["tpot_s"]],
        "TPOT +chunks": [f"{100 * v:+.0f}%" for v in load["tpot_inflation"]],
        "queued": [f"{v:.0f}" for v in load["queued"]]}), hide_index=True)
    st.caption(f"TTFT: arrival to first token under that load; TPOT: mean time between a running request's tokens, "
               f"its steps carrying the others' prefill chunks (8192 tokens a step, roofline.serving.load). The KV "
               f"pool holds {pool:g} sequences; past it requests queue. Saturates at "
               f"{load['saturation_rate']:.3g} requests/s; a lone request's TTFT {fmt_seconds(load['ttft_alone_s'])}.")


def page_memory(analysis: Analysis, setup: Setup) -> None:
    wall = int(analysis.metrics["max_batch"].iloc[0])
    metrics = analysis.at(sorted({1, setup.batch, wall} - {0})).metrics
    capacity = {analysis.hardware.name: analysis.hardware.memory_bytes}
    st.image(figure_png("memory_breakdown", metrics, capacity,
                        title=f"{analysis.config.name}: memory at S={setup.prompt}+{setup.gen} tokens (B = 1, yours, the wall)"))
    st.dataframe(pd.DataFrame({
        "batch": metrics["batch"], "weights": metrics["weight_bytes"].map(fmt_bytes),
        "KV cache": metrics["kv_bytes"].map(fmt_bytes), "activations": metrics["workspace_bytes"].map(fmt_bytes),
        "total": metrics["memory_bytes"].map(fmt_bytes), "fits": metrics["fits"].map({True: "yes", False: "no"})}),
        hide_index=True)
    chunk = analysis.prefill_chunk
    assumed = f"one {chunk}-token prefill chunk" if chunk else "every prompt of the batch prefilled at once"
    state = metrics["state_bytes_per_sequence"].iloc[0]
    st.caption(f"{METRIC_DEFINITIONS['memory_bytes']}. Activations here: {assumed} (sidebar: prefill chunk). "
               f"KV cache: {fmt_bytes(metrics['kv_bytes_per_token'].iloc[0])} per token per sequence"
               + (f", plus a constant state of {fmt_bytes(state)} per sequence (SSM / linear-attention layers)."
                  if state else "."))
    layer_kinds(analysis, setup)


def layer_kinds(analysis: Analysis, setup: Setup) -> None:
    """Memory and step time by layer kind; for a model with constant-state layers, its cache against context."""
    kinds = layer_kind_table(analysis, setup.batch, setup.prompt, setup.gen)
    st.subheader("By layer kind")
    st.dataframe(pd.DataFrame({
        "layers": kinds["group"], "count": kinds["layers"],
        f"KV / sequence at {setup.prompt + setup.gen} tokens": kinds["kv_bytes"].map(fmt_bytes),
        "constant state / sequence": kinds["state_bytes"].map(fmt_bytes),
        f"prefill time, B={setup.batch}": kinds["prefill_s"].map(fmt_seconds),
        f"decode time, B={setup.batch}": kinds["decode_s"].map(fmt_seconds)}), hide_index=True)
    if analysis.config.has_state:
        cache = cache_against_context(analysis.config, CACHE_CONTEXTS, analysis.deployment.precision)
        st.image(figure_png("cache_against_context", cache,
                            title=f"{analysis.config.name}: cache per sequence against context"))


def op_frame(ops: pd.DataFrame) -> pd.DataFrame:
    """The per-op table as shown: library numbers in library units."""
    return pd.DataFrame({
        "phase": ops["phase"], "op": ops["op"], "layers": ops["count"], "FLOPs": ops["flops"].map(fmt_flops),
        "weights": ops["weights"].map(fmt_bytes), "act read": ops["act_read"].map(fmt_bytes),
        "act write": ops["act_write"].map(fmt_bytes), "KV read": ops["kv_read"].map(fmt_bytes),
        "KV write": ops["kv_write"].map(fmt_bytes), "bytes": ops["bytes"].map(fmt_bytes),
        "FLOP/byte": ops["intensity"].map(fmt_count), "compute": ops["compute_s"].map(fmt_seconds),
        "memory": ops["memory_s"].map(fmt_seconds), "time": ops["time_s"].map(fmt_seconds), "bound": ops["bound"]})


def page_ops(analysis: Analysis, setup: Setup) -> None:
    phase = st.radio("phase", ("decode", "prefill", "both"), horizontal=True, key="op_phase")
    ops = analysis.op_table(setup.batch, setup.prompt)
    if phase != "both":
        ops = ops[ops["phase"] == phase]
    st.dataframe(op_frame(ops), hide_index=True, height=min(38 + 35 * len(ops), 800))
    sharded = setup.parallel.get("tp", 1) > 1
    shard = " One GPU's shard under tensor parallelism; its all-reduces are rows of their own." if sharded else ""
    st.caption(f"B={setup.batch}, prefill of S={setup.prompt} tokens, decode against {decode_context(setup.prompt)} "
               "keys. Each row counts all the layers it runs in (`layers`); time combines compute and memory at the "
               f"calibrated corner (max of the two on the ideal roofline); the times add up to the step.{shard}")


def page_regime(analysis: Analysis, setup: Setup) -> None:
    p = analysis.precision
    frame = sweep(analysis.config, analysis.hardware, batch=REGIME_BATCHES, context=REGIME_CONTEXTS, gen=(setup.gen,),
                  weights=p.weights, kv=p.kv, activations=p.activations, experts=p.experts, options=analysis.options,
                  engine=analysis.engine, prefill=False, prefill_chunk=analysis.prefill_chunk,
                  **setup.parallel)
    lines = derivation(analysis.config, analysis.hardware, p)
    windowed = bool({WINDOW, CHUNKED} & set(analysis.config.layer_attention))  # KV reads that stop growing
    st.image(figure_png("regime_map", frame, ((setup.batch, setup.prompt),),
                        f"{analysis.config.name} on {analysis.hardware.name}: what binds a decode step",
                        critical_batch=lines["critical"][1] if "critical" in lines else None,
                        kv_equals_weights_context=None if windowed else lines["kv_context"][1]))
    st.caption("Colour: what most of a decode step's time waits on, or out of memory (weights + KV at context + "
               f"{setup.gen} generated tokens). Dashed: the critical batch where weight matmuls turn compute-bound; "
               "dotted: where the KV cache read equals the weight read."
               + (" (Not drawn for models with sliding-window or chunked layers: their KV read stops growing at W or "
                  "W_c.)" if windowed else ""))


def page_derivation(analysis: Analysis, setup: Setup) -> None:
    d = derivation(analysis.config, analysis.hardware, analysis.precision)
    m = analysis.records()[0]
    st.markdown("**Matmul** X (B, D) @ W (D, F) in bf16: intensity tends to the batch.")
    st.latex(rf"I = {sp.latex(d['matmul'][0])} \xrightarrow{{D,\,F\to\infty}} {sp.latex(d['matmul'][1])}")
    st.markdown("**Gated MLP** over B sequences of T tokens: decode (T = 1) tends to **B**, prefill (T = S) to B·S.")
    st.latex(rf"I_\text{{MLP}} = {sp.latex(d['mlp'][0])} \xrightarrow{{D,\,F\to\infty}} {sp.latex(d['mlp'][1])}")
    st.markdown(f"This model's whole decode step at B = {setup.batch}: **{fmt_count(m['decode_intensity'])} FLOP/byte**; "
                f"prefill: **{fmt_count(m['prefill_intensity'])} FLOP/byte**.")
    a = d["attention"]
    st.markdown("**Attention** (MHA, every query-key pair): no B anywhere, so batching does not help it.")
    st.latex(rf"I_\text{{attn}} = {sp.latex(a['general'])},\quad \text{{prefill }}(T=S): {sp.latex(a['prefill'])},"
             rf"\quad \text{{decode }}(T=1): {sp.latex(a['decode'])} \xrightarrow{{S\to\infty}} "
             rf"{sp.latex(a['decode_long_context'])}")
    if "no_peak" in d:
        st.warning(f"No ridge or critical batch: {d['no_peak']}")
    else:
        expr, value = d["critical"]
        st.markdown(f"**Ridge** of {analysis.hardware.name} ({analysis.precision.weight_matmul_dtype} matmuls) and the "
                    "**critical batch** where decode weight matmuls (2B / b_w FLOP/byte) turn compute-bound:")
        st.latex(rf"I_\text{{hw}} = \frac{{\text{{peak}}}}{{\text{{bandwidth}}}} = {d['ridge']:.0f},\qquad "
                 rf"B^* = {sp.latex(expr)} = {value:.0f}")
    expr, value = d["kv_context"]
    st.markdown("**KV cache = weights**: the context at which one sequence's KV read per decode step equals the weight read.")
    st.latex(rf"S = {sp.latex(expr)} = {value:,.0f}" if math.isfinite(value) else r"\text{never (windowed KV stays below)}")
    napkin = d["napkin"]
    st.markdown("**The lecture's napkin** (bf16, parameters without norms, KV at S, read once per step):")
    st.latex(rf"\text{{params}} = {sp.latex(napkin['params_formula'])} = {int(napkin['params']):,}")
    st.latex(rf"\text{{memory}}(B, S) = {sp.latex(sp.N(napkin['memory'], 4))}\ \text{{bytes}},\quad "
             rf"\text{{TPOT}}(B, S) = {sp.latex(sp.N(napkin['latency'], 4))}\ \text{{s}}")
    st.markdown("**Crossovers** of this configuration (its engine and tensor parallelism; `roofline.serving.crossovers`):")
    for title, result in crossover_table(analysis.config, analysis.hardware, analysis.precision, setup.prompt,
                                         setup.gen, analysis.options, analysis.engine, analysis.deployment.tp,
                                         analysis.prefill_chunk):
        if isinstance(result, str):
            st.markdown(f"- {title}: not defined here ({result})")
            continue
        shown = "not reached" if not math.isfinite(result.value) else f"{result.value:,.0f}"
        st.markdown(f"- {title}: **{shown}**" + (f" ({result.note})" if result.note else ""))
        st.latex(sp.latex(result.expression))


def compare_controls(analysis: Analysis) -> tuple[ModelConfig, Hardware, Precision, dict]:
    """Configuration B: A with the changes picked here (plain values from widgets)."""
    columns = st.columns(5)
    table = bundled_hardware()
    model = columns[0].selectbox("B: model", [SAME, *bundled_models()], key="b_model")
    hw = columns[1].selectbox("B: hardware", [SAME, *table], key="b_hardware",
                              format_func=lambda i: table[i].name if i in table else i)
    weights = columns[2].selectbox("B: weights", [SAME, *DTYPES], key="b_weights")
    kv = columns[3].selectbox("B: KV cache", [SAME, *DTYPES], key="b_kv")
    base = analysis.config if model == SAME else bundled_model(model)
    overrides = {}
    if not base.has_kv_heads:
        columns[4].caption("B's model uses MLA: no KV heads to change.")
    else:
        heads = columns[4].selectbox("B: KV heads", [SAME, *divisors(base.n_heads)], key="b_kv_heads")
        if heads != SAME:
            overrides["n_kv_heads"] = heads
    p = analysis.precision
    device = analysis.hardware if hw == SAME else table[hw]
    served = st.session_state.get("activations", AS_SERVED) == AS_SERVED  # B's weights on B's device, as A's were
    precision = Precision(weights=p.weights if weights == SAME else weights,
                          activations="bf16" if served else p.activations, kv=p.kv if kv == SAME else kv,
                          experts=p.experts if MOE in base.layer_mlp else None)  # a dense B has no experts
    return base, device, served_activations(precision, device, served), overrides


def compare_table(a: dict, b: dict) -> pd.DataFrame:
    rows = [("TTFT", "ttft_s", fmt_seconds), ("TPOT", "tpot_s", fmt_seconds), ("E2E", "e2e_s", fmt_seconds),
            ("tokens/s", "tokens_per_s", lambda v: fmt_rate(v, "tokens/s")), ("memory", "memory_bytes", fmt_bytes),
            ("KV / token", "kv_bytes_per_token", fmt_bytes), ("max batch", "max_batch", str),
            ("binding resource", "decode_bound", str)]
    ratio = [f"{b[key] / a[key]:.3g}×" if isinstance(a[key], (int, float)) and a[key] else "" for _, key, _ in rows]
    return pd.DataFrame({"": [r[0] for r in rows], "A": [f(a[k]) for _, k, f in rows],
                         "B": [f(b[k]) for _, k, f in rows], "B / A": ratio})


def page_compare(analysis: Analysis, setup: Setup) -> None:
    st.markdown("**A** is the sidebar's configuration; **B** is A with the changes picked here (e.g. KV heads 8 for "
                "MHA → GQA-8, KV cache int8, hardware H200), at the same workload, parallelism and engine.")
    base, hardware, precision, overrides = compare_controls(analysis)
    if (base, hardware, precision, overrides) == (analysis.config, analysis.hardware, analysis.precision, {}):
        st.info("B is still A: pick what B changes above.")
        return
    try:
        other = analysis.what_if(config=base.with_overrides(**overrides) if overrides else base, hardware=hardware,
                                 precision=precision)
    except ValueError as err:
        st.error(f"**Configuration B cannot be analyzed.** {err}\n\n**Fix:** change B's settings above.")
        return
    a, b = analysis.records()[0], other.records()[0]
    st.markdown(f"**A:** {describe(analysis)}  \n**B:** {describe(other)}")
    columns = st.columns(4)
    for column, (label, key) in zip(columns, (("TPOT", "tpot_s"), ("TTFT", "ttft_s"), ("E2E", "e2e_s"))):
        column.metric(f"B: {label}", fmt_seconds(b[key]), delta=fmt_seconds(b[key] - a[key]), delta_color="inverse")
    columns[3].metric("B: memory", fmt_bytes(b["memory_bytes"]), delta=fmt_bytes(b["memory_bytes"] - a["memory_bytes"]),
                      delta_color="inverse")
    st.dataframe(compare_table(a, b), hide_index=True)
    terms_a, terms_b = analysis.decode_terms(setup.batch, setup.prompt), other.decode_terms(setup.batch, setup.prompt)
    change = roofline.plots.term_changes(terms_a, terms_b)
    st.image(figure_png("tpot_waterfall", terms_a, terms_b,
                        title=f"Decode step B = {setup.batch}, S = {setup.prompt}: where TPOT changes, term by term"))
    st.dataframe(pd.DataFrame({"term": change.index, "A": terms_a.reindex(change.index, fill_value=0.0).map(fmt_seconds),
                               "B": terms_b.reindex(change.index, fill_value=0.0).map(fmt_seconds),
                               "B − A": change.map(fmt_seconds)}), hide_index=True)


def device_files(files: list[Path], hardware: Hardware | None) -> list[Path]:
    """The files measured on the sidebar's device (their names start with the device's slug: cuda-h100-…)."""
    family = hardware.id.split("-")[0] if hardware else None
    return [p for p in files if family in p.stem.split("-")]


@dataclasses.dataclass(frozen=True)
class Scored:
    """A measurements file's points beside a prediction, and what that prediction is."""
    points: pd.DataFrame  # validation.fit's points: predicted_s, heldout_predicted_s, heldout_error, mbu, mfu
    summary: dict  # per phase: the median and p90 of |error|; mbu_batch1
    fitted: dict | None  # the profile's parameters (None: the ideal roofline)
    source: str  # where the predictions come from, for the caption
    error: str  # what the error metric is: "held-out" or "ideal roofline"
    how: str  # how that error was measured


def scored_measurements(path: Path, frame: pd.DataFrame, stamp: tuple) -> Scored:
    """Nothing fitted unless asked: a committed fit that never saw the file predicts it (every point held
    out); one fitted on it shows its recorded leave-one-context-out error; otherwise the ideal roofline on the
    measured ceilings, or, turned on, a fit here."""
    device = str(frame["device_name"].iloc[0])
    transfer = transfer_profile(device, path.name)
    profile_files = tuple((p.name, p.stat().st_mtime_ns) for p in sorted(ENGINES_DIR.glob("*.yaml")))
    committed = committed_fits(profile_files).get(path.name)
    if transfer:
        result = validation_fit().score(frame, transfer)
        return Scored(result.points, result.summary, profile_fields(transfer), f"Predicted by `{transfer.name}`, "
                      f"fitted on other measurements of {device} (nothing refitted)", "held-out",
                      "every point predicted by a fit that never saw this file")
    if committed:
        name, raw, fitted = committed
        result = validation_fit().score(frame, fitted)
        recorded = {phase: raw[phase] for phase in ("decode", "prefill") if phase in raw}
        return Scored(result.points.assign(heldout_predicted_s=np.nan), {**result.summary, **recorded},
                      profile_fields(fitted),
                      f"The committed fit `{name}` (data/engines/{name}.yaml), fitted on this file of {device}; "
                      "the points are its in-sample predictions", "held-out",
                      "leave-one-context-out, recorded in the profile when it was fitted")
    if st.toggle("Fit this file here, leaving one context out (tens of seconds)", key=f"refit/{path.name}"):
        points, summary, fitted = refit(str(path), stamp)
        return Scored(points, summary, fitted, f"Fitted here on {device}", "held-out", "leave-one-context-out")
    result = validation_fit().score(frame, IDEAL)
    return Scored(result.points.assign(heldout_predicted_s=np.nan), result.summary, None,
                  "No committed fit covers this file: the ideal roofline on the ceilings measured with each point of "
                  f"{device} (turn on the fit above to fit one)", "ideal roofline", "nothing fitted")


def profile_fields(engine: Engine) -> dict:
    """An engine profile's name and parameters, as the Validation page's caption reads them."""
    return {"name": engine.name, **engine.parameters()}


def page_validation(analysis: Analysis | None, setup: Setup) -> None:
    fitted_from = {Path(name).name for engine in harness_profiles().values()
                   for name in engine.harness_fit.get("sources") or []}
    files = sorted(MEASUREMENTS_DIR.glob("*.csv"), key=lambda p: (p.name not in fitted_from, p.name))  # calibrated first
    if not files:
        st.info("No measurements yet: run `roofline validate` (see validation/README.md); its CSVs in "
                "data/measurements/ show up here.")
        return
    device = setup.hardware.id if setup.hardware else "custom"
    own = device_files(files, setup.hardware)
    path = st.selectbox("measurements", files, index=files.index(own[0]) if own else 0, format_func=lambda p: p.name,
                        key=f"measurements/{device}")  # one choice per sidebar device, opening on its own file
    if not own:
        st.caption(f"No measurements of {setup.hardware.name if setup.hardware else 'the custom device'} here: "
                   "showing another device's.")
    stamp = (path.stat().st_mtime_ns, path.stat().st_size)
    try:
        frame = measurement_frame(str(path), stamp)
        scored = scored_measurements(path, frame, stamp)
    except ValueError as err:
        st.error(f"**{path.name} cannot be fitted.** {err}\n\n**Fix:** rerun `roofline validate` to complete the file.")
        return
    points, summary, fitted = scored.points, scored.summary, scored.fitted
    phases = [phase for phase in ("decode", "prefill") if phase in summary]
    columns = st.columns(len(phases) + 1)
    for column, phase in zip(columns, phases):
        s = summary[phase]
        column.metric(f"{phase}: {scored.error} median |error|", f"{s['heldout_median_abs_err']:.1%}",
                      help=f"{scored.how}, over {s['n_heldout']} of {s['n_points']} points; "
                           f"p90 {s['heldout_p90_abs_err']:.1%}")
    columns[-1].metric("memory-bandwidth utilization, B = 1", f"{summary['mbu_batch1']:.0%}",
                       help="bytes the library counts over the measured read stream")
    if fitted is None:
        st.caption(f"{scored.source}. Predictions use the measured model and device, not the sidebar's.")
    else:
        flops = f"{fitted['flops_efficiency']:.0%}"
        st.caption(f"{scored.source}: weights stream at {fitted['bandwidth_efficiency']:.0%} of the measured read "
                   f"stream and GEMMs reach {flops} of the measured FLOP/s; attention kernels "
                   f"{fitted['attention_bandwidth_efficiency']:.0%} and {fitted['attention_flops_efficiency']:.0%} of "
                   "the same roofs; "
                   f"overhead {fmt_seconds(fitted['step_overhead_s'])} per step + "
                   f"{fmt_seconds(fitted['layer_overhead_s'])} per layer. Predictions use the measured model and "
                   "device, not the sidebar's.")
    predicted = "ideal roofline" if fitted is None else "prediction"
    shown = points.assign(measured_s=points["time_s"], label=points["phase"],
                          predicted_s=points["heldout_predicted_s"].fillna(points["predicted_s"]))
    st.image(figure_png("measured_vs_predicted", shown[["measured_s", "predicted_s", "label"]],
                        title=f"{path.stem}: measured vs {predicted}"))
    columns = st.columns(2)
    phase = columns[0].radio("fitted curve", phases, horizontal=True, key="val_phase")
    variant = points["model"].astype(str) + ", K=" + points["n_kv_heads"].astype(str)  # a file may hold several
    shown_variant = columns[1].radio("model measured", sorted(variant.unique()), horizontal=True, key="val_variant")
    rows = points[(points["phase"] == phase) & (variant == shown_variant)]  # one model's curves, not a blend
    if rows.empty:
        st.caption(f"No {phase} points of {shown_variant} in {path.name}.")
    else:
        st.image(figure_png("validation_curves", pd.DataFrame({
            "batch": rows["batch"], "context": rows["context"], "measured_s": rows["time_s"],
            "predicted_s": rows["heldout_predicted_s"].fillna(rows["predicted_s"]),
            "ideal_s": rows["predicted_ideal_s"]}), title=f"{shown_variant}, {phase}: measured vs {predicted} over batch"))
    table = pd.DataFrame({
        "model": points["model"], "KV heads": points["n_kv_heads"], "phase": points["phase"],
        "batch": points["batch"], "context": points["context"],
        "measured": points["time_s"].map(fmt_seconds), "predicted": points["predicted_s"].map(fmt_seconds),
        "error": points["insample_error"].map(lambda v: f"{v:+.1%}"),
        "held-out": points["heldout_predicted_s"].map(lambda v: "" if pd.isna(v) else fmt_seconds(v)),
        "held-out error": (points["heldout_predicted_s"] / points["time_s"] - 1).map(
            lambda v: "" if pd.isna(v) else f"{v:+.1%}"),
        "MBU": points["mbu"].map(lambda v: f"{v:.0%}"), "MFU": points["mfu"].map(lambda v: f"{v:.0%}")})
    held_out = points["heldout_predicted_s"].notna().any()  # none made here for a committed fit's own file
    st.dataframe(table if held_out else table.drop(columns=["held-out", "held-out error"]), hide_index=True)
    st.caption("MBU and MFU: the library's bytes and FLOPs of the step over the measured time, as fractions of the "
               "copy bandwidth and GEMM FLOP/s measured with the point."
               + (" Held-out: the prediction of a fit that did not see the point." if held_out else ""))


def page_plan(analysis: Analysis, setup: Setup) -> None:
    """The cheapest deployments of this model that meet TTFT and TPOT at a request rate (roofline.plan)."""
    import altair as alt
    from roofline import DEFAULT_ENGINE, Targets, Workload, load_prices, pareto, plan, verdict
    prices = load_prices()
    columns = st.columns(3)
    rate = columns[0].number_input("requests/s", min_value=0.01, value=10.0, key="plan_rate")
    ttft = columns[1].number_input("TTFT target (ms)", min_value=1.0, value=500.0, key="plan_ttft")
    tpot = columns[2].number_input("TPOT target (ms)", min_value=0.1, value=50.0, key="plan_tpot")
    hardware = st.multiselect("hardware (priced)", sorted(prices), default=sorted(prices), key="plan_hw")  # full width:
    columns = st.columns([3, 1])  # chips of every device id fit without truncation
    engines = columns[0].multiselect("engines (the ideal bound is beside every row)",
                                     [p.stem for p in sorted(ENGINES_DIR.glob("*.yaml")) if p.stem != "ideal"],
                                     default=[DEFAULT_ENGINE], key="plan_engines")
    kv = columns[1].multiselect("KV formats", ["bf16", "fp8"], default=["bf16"], key="plan_kv")
    held = st.radio("targets hold for", ["the mean (no queueing)", "p50", "p90", "p99"], horizontal=True,
                    key="plan_percentile", help="a percentile simulates the cheapest two per device (continuous batching)")
    if not hardware or not engines or not kv:
        st.info("Pick at least one device, one engine and one KV format.")
        return
    targets = Targets(ttft / 1e3, tpot / 1e3, percentile=None if held.startswith("the") else float(held[1:]))
    bar = st.progress(0.0, "simulating the frontier") if targets.percentile else None
    frame = plan(setup.model, Workload(rate, setup.prompt, setup.gen), targets, tuple(hardware),
                 engines=tuple(engines), prices=prices, prefill_chunk=setup.prefill_chunk, kv=tuple(kv),
                 progress=None if bar is None else lambda done, total: bar.progress(min(done / total, 1.0)))
    frame = frame.assign(pareto=pareto(frame))
    kept = frame[frame["feasible"]].assign(
        tpot_ms=lambda f: f["tpot_s"] * 1e3, ttft_ms=lambda f: f["ttft_s"] * 1e3,
        configuration=lambda f: [roofline.candidate_name(r) + ("" if r["mode"] == "disaggregated" else
                                                               f" x{int(r['replicas'])}") for _, r in f.iterrows()])
    st.caption(f"{setup.model.name}: {rate:g} requests/s of prompt {setup.prompt} and {setup.gen} output tokens "
               f"(the sidebar's workload); prices: data/prices.yaml. Each point is one deployment (hover for it); "
               f"the dashed line joins the Pareto frontier of cost against TPOT; the dotted rule is the TPOT target.")
    st.write(verdict(frame, targets, setup.model.name))
    if not kept.empty:
        # Axes from 0 to past the largest point (and the TPOT target), so no point sits on an edge; colours: each
        # device's in every figure (roofline.plots.device_color), whichever devices are picked.
        x_top, y_top = max(tpot, kept["tpot_ms"].max()) * 1.08, kept["usd_per_million_tokens"].max() * 1.1
        devices = sorted(prices)
        base = alt.Chart(kept).encode(
            x=alt.X("tpot_ms", title="TPOT (ms)", scale=alt.Scale(domain=[0, x_top], nice=False)),
            y=alt.Y("usd_per_million_tokens", title="$ per million output tokens",
                    scale=alt.Scale(domain=[0, y_top], nice=False)))
        points = base.mark_circle(size=70).encode(
            color=alt.Color("hardware", scale=alt.Scale(domain=devices, range=[roofline.plots.device_color(d) for d in devices])),
            tooltip=["configuration", "batch", "capacity_batch", "binding", "gpus", "usd_per_million_tokens", "ttft_ms",
                     "tpot_ms", "decode_bound"])
        front = alt.Chart(kept[kept["pareto"]]).mark_line(color="gray", strokeDash=[4, 3]).encode(
            x="tpot_ms", y="usd_per_million_tokens")
        target = alt.Chart(pd.DataFrame({"tpot_ms": [tpot]})).mark_rule(color="black", strokeDash=[2, 2]).encode(
            x="tpot_ms", tooltip=[alt.Tooltip("tpot_ms", title="TPOT target (ms)")])
        st.altair_chart(points + front + target, width="stretch")
        simulated = ["sim_ttft_s", "sim_tpot_s"] if targets.percentile else []
        st.dataframe(kept[["configuration", "batch", "capacity_batch", "binding", "replicas", "gpus",
                           "usd_per_million_tokens", "capacity_tokens_per_s_per_gpu", "ttft_s", "tpot_s",
                           "ideal_ttft_s", "ideal_tpot_s", *simulated, "decode_bound", "pareto"]],
                     hide_index=True)
        with st.expander("Closed forms behind the batch (roofline.planning.forms)"):
            for row, batch, tp in roofline.explain_plan(frame, Workload(rate, setup.prompt, setup.gen), targets):
                st.markdown(f"**{row['hardware']} tp={int(row['tp'])} {row['weights']}**: capacity batch "
                            f"{int(row['capacity_batch'])}, set by {row['binding']}; largest batch within TPOT "
                            f"= {batch.value:g}" + (f" ({batch.note})" if batch.note else ""))
                st.latex(sp.latex(batch.expression))
                st.caption(", ".join(f"{k} = {v:.4g}" for k, v in batch.given.items()))
                st.latex(sp.latex(tp.expression) + rf" = {tp.value:.3g}\;\text{{(TP break-even)}}")
    rejected = frame[~frame["feasible"]]
    if len(rejected):
        st.caption("Rejected: " + ", ".join(f"{n} by {reason}" for reason, n in
                                            rejected["rejected"].str.split(":").str[0].value_counts().items()))


PAGES = {"Roofline": page_roofline, "Latency–throughput": page_latency, "Memory": page_memory,
         "Per-op table": page_ops, "Regime map": page_regime, "Derivation": page_derivation, "Compare": page_compare,
         "Validation": page_validation, "Plan": page_plan}
NEEDS_NO_ANALYSIS = ("Validation",)


def main() -> None:
    st.set_page_config(page_title="roofline: what if…", layout="wide")
    setup = sidebar()
    st.title("roofline: what if…")
    analysis = run_analysis(setup)
    if analysis is not None:
        if setup.overrides:
            st.caption(f"What-if: {what_ifs(setup.overrides)}")
        headline(analysis)
        if setup.speculation:
            speculation_view(analysis, setup)
    page = st.radio("view", tuple(PAGES), horizontal=True, key="page", label_visibility="collapsed")
    if analysis is None and page not in NEEDS_NO_ANALYSIS:
        st.info("This view needs a configuration that can be analyzed: fix the error above (Validation still works).")
        return
    PAGES[page](analysis, setup)


if __name__ == "__main__":  # streamlit runs the script as __main__; tests import its helpers
    main()
