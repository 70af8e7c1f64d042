"""The letters of the cost model, declared once (scaling-book notation plus ours).

| letter | meaning                                              |
|--------|------------------------------------------------------|
| B      | batch: sequences decoded together                    |
| S      | key positions each new query can see (context, incl. the new tokens) |
| T      | query tokens processed per sequence in this step (prefill T=S, decode T=1) |
| D      | model (hidden) dimension                             |
| F      | dense MLP inner dimension (per projection)           |
| N      | query heads                                          |
| K      | key/value heads (N = MHA, 1 = MQA, between = GQA)    |
| H      | head dimension (explicit, never D/N)                 |
| L      | layers                                               |
| V      | vocabulary size                                      |
| C      | MLA latent (kv_lora_rank)                            |
| Cq     | MLA query latent (q_lora_rank; 0 = no compression)   |
| R      | MLA decoupled rope dimension (qk_rope_head_dim)      |
| Hn, Hv | MLA per-head no-rope query/key dim and value dim     |
| E      | routed experts; k experts chosen per token (top-k)   |
| Fe     | expert MLP inner dimension; Es shared experts        |
| W      | sliding-window length                                |
| Wc     | attention chunk length (Llama 4: a query sees only its own chunk) |
| b_w, b_a, b_kv | bytes per element of weights, activations, KV cache (scales included) |
| b_e    | bytes per routed-expert weight element (its own format: gpt-oss MXFP4, Kimi-K2 INT4) |
| Di     | constant-state mixer inner width (Mamba d_inner; DeltaNet value heads x value dim) |
| Ns     | state size per inner channel (Mamba d_state; DeltaNet key head dim)    |
| Nh     | state heads (Mamba-2 nheads; DeltaNet value heads); head dim = Di/Nh  |
| G      | groups sharing B and C (Mamba-2 ngroups; DeltaNet key heads)           |
| Kc     | causal conv1d kernel width of a constant-state mixer                   |
| Rdt    | Mamba-1 dt rank (x_proj's low-rank step size)                          |
| Q      | chunk length of the chunked (SSD / delta-rule) prefill scan             |
| b_s    | bytes per element of the recurrent state (fp32 in HF and mamba_ssm)    |
| Fs     | shared-expert MLP width when it is not a multiple of Fe (Granite-4.0-H) |
| Ni, Hi | DeepSeek Sparse Attention: the lightning indexer's heads and head dim  |
| Kt     | keys a DSA query's attention reads: the indexer's top-k (2048)         |
| Dl     | latent width the routed experts run in (Nemotron-3 Super/Ultra's latent MoE) |
| Mc, Mh | DeepSeek-V4: source tokens per compressed entry of its sparse (4) and heavily compressed (128) layers |
| Nc     | DeepSeek-V4: residual streams of its hyper-connections (hc_mult)        |
| Go, Ro | DeepSeek-V4: groups of its output projection and each group's rank (o_groups, o_lora_rank) |
"""
import sympy as sp

B, S, T = sp.symbols("B S T", positive=True)
D, F, N, K, H, L, V = sp.symbols("D F N K H L V", positive=True)
C, Cq, R, Hn, Hv = sp.symbols("C C_q R H_n H_v", positive=True)
E, k, Fe, Es = sp.symbols("E k F_e E_s", positive=True)
W = sp.symbols("W", positive=True)
Wc = sp.symbols("W_c", positive=True)  # attention chunk length (Llama 4's chunked layers)
P = sp.symbols("P", positive=True)  # learned position table rows (GPT-2)
b_w, b_a, b_kv = sp.symbols("b_w b_a b_kv", positive=True)
# The routed experts' weights get their own letter: checkpoints store them in another format than the rest
# (gpt-oss: MXFP4 experts, bf16 attention). A fourth width, not a per-op scale, keeps every cost one
# expression in the letters and every evaluator one call; Precision(experts=None) sets b_e = b_w.
b_e = sp.symbols("b_e", positive=True)
# Constant-state mixers (Mamba-1/2, gated DeltaNet, lightning attention): see roofline/state_ops.py.
Di, Ns, Nh, G, Kc, Rdt, Q = sp.symbols("D_i N_s N_h G K_c R_dt Q", positive=True)
b_s = sp.symbols("b_s", positive=True)
Fs = sp.symbols("F_s", positive=True)
Ni, Hi, Kt = sp.symbols("N_i H_i K_t", positive=True)  # DeepSeek Sparse Attention (sparse_ops.lightning_indexer)
Dl = sp.symbols("D_l", positive=True)  # latent MoE: the experts' input and output width
Mc, Mh, Nc, Go, Ro = sp.symbols("M_c M_h N_c G_o R_o", positive=True)  # DeepSeek-V4 (compressed_ops)

# Arguments of every compiled evaluator, in this order.
WORKLOAD = (B, S, T)
BYTE_WIDTHS = (b_w, b_a, b_kv, b_e)
