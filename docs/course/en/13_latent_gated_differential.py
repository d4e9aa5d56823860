# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 13 — Today's attention: latent, gated, differential
#
# **Question this lesson answers:** how does DeepSeek's Multi-head Latent Attention (MLA) cache 71
# times less than multi-head attention and still decode exactly, and what do an output gate
# (Qwen3-Next) and a difference of two softmaxes (DiffLlama) change in a layer?
#
# Lesson 9 showed the price of the KV cache: every layer stores a key and a value for every head and
# every token. GQA (lesson 3) shares keys and values between heads. MLA goes further: each token is
# compressed into one short vector, the **latent** `c` (512 numbers in DeepSeek-V3), and every head's
# key and value are *linear images* of it: `k_h = W_UK,h c`, `v_h = W_UV,h c`. Only `c` (plus a small
# rotary key shared by all heads) goes into the cache. The trick that makes decoding cheap is
# **absorption**: because the maps are linear, `W_UK,h` can be moved onto the query and `W_UV,h` onto
# the output, so a decode step attends the latent directly and never rebuilds keys and values.

# %%
import os
import sys
import time

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # run as a script (or in the test suite): figures go to files, no window
import matplotlib.pyplot as plt
import torch

import attnkit
from attnkit.cache import DynamicCache
from attnkit.modules import DecoderAttention, DifferentialAttention, LatentCache, OutputGate
from attnkit.modules.latent_attention import plan_cost

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)
torch.set_num_threads(1)  # decode timings below: one thread, like a server's per-request budget

# %% [markdown]
# ## The cache arithmetic, measured
#
# DeepSeek-V3's attention has 128 heads; each query/key head has 128 "no-position" dims plus 64
# rotary dims, each value head 128 dims; the latent has 512 numbers and the shared rotary key 64.
# We write the same 16 tokens into a multi-head cache (keys and values of every head) and into
# MLA's latent cache, in bfloat16, and read `nbytes`.

# %%
T, H3 = 16, 128
mha = DynamicCache()
mha.update(torch.zeros(1, H3, T, 128 + 64, dtype=torch.bfloat16), torch.zeros(1, H3, T, 128, dtype=torch.bfloat16))
latent = LatentCache()
latent.update(torch.zeros(1, T, 512, dtype=torch.bfloat16), torch.zeros(1, T, 64, dtype=torch.bfloat16))
per_mha = mha.kv_nbytes / mha.capacity
per_mla = latent.kv_nbytes / T
print(f"per token per layer: multi-head {per_mha:.0f} bytes, latent {per_mla:.0f} bytes -> {per_mha / per_mla:.1f}x less")
print(f"61 layers x 128k tokens: multi-head {per_mha * 61 * 131072 / 2**30:.0f} GiB, latent {per_mla * 61 * 131072 / 2**30:.1f} GiB")
assert per_mla == (512 + 64) * 2 and per_mha == H3 * (192 + 128) * 2
assert 71 < per_mha / per_mla < 71.2

# %% [markdown]
# ## Absorption, checked numerically
#
# For head h, query token t and cached token s the score is
# `q_h·k_h = q^N_h · (W_UK,h c_s) + q^R_h · k^R_s`. Associativity moves the matrix onto the query:
# `q^N_h · (W_UK,h c_s) = (W_UK,hᵀ q^N_h) · c_s`. The value side is linearity:
# `Σ_s p_s W_UV,h c_s = W_UV,h (Σ_s p_s c_s)`. So MLA *is* multi-query attention over the latent,
# with a wider query. First the identity on random numbers, then the whole layer both ways.

# %%
r, dn, dr, dv, H = 32, 16, 8, 16, 4
W_UK = torch.randn(dn, r, dtype=torch.float64)
q_nope, c = torch.randn(dn, dtype=torch.float64), torch.randn(r, dtype=torch.float64)
lhs = q_nope @ (W_UK @ c)  # expand the key, then dot
rhs = (W_UK.T @ q_nope) @ c  # absorb into the query, then dot with the latent
print(f"expanded score {lhs.item():.12f}, absorbed score {rhs.item():.12f}")
assert abs(lhs - rhs) < 1e-12

mla = attnkit.MultiHeadLatentAttention(64, H, kv_lora_rank=r, qk_nope_dim=dn, qk_rope_dim=dr, v_dim=dv)
x = torch.randn(2, 12, 64)
with torch.no_grad():
    mla.path = "expand"
    out_expand, _ = mla(x)
    mla.path = "absorb"
    out_absorb, _ = mla(x)
print("whole layer, max |expanded - absorbed| =", (out_expand - out_absorb).abs().max().item())
torch.testing.assert_close(out_absorb, out_expand, rtol=1e-5, atol=1e-5)

# %% [markdown]
# ## Decoding from the latent cache
#
# `new_cache()` gives a `LatentCache` (`max_len=` allocates that many tokens at once; without it the
# buffer doubles when full). A prompt fills it, then each step sends one token. The outputs equal
# the full (prefill) computation, and the cache holds `B · T · (r + dr)` numbers plus one int64
# position per token.

# %%
mla.path = "auto"
cache = mla.new_cache(max_len=12)
with torch.no_grad():
    steps = [mla(x[:, :4], cache=cache)[0]] + [mla(x[:, t:t + 1], cache=cache)[0] for t in range(4, 12)]
torch.testing.assert_close(torch.cat(steps, 1), out_expand, rtol=1e-5, atol=1e-5)
print(f"cache after 12 tokens: {cache.kv_nbytes} bytes = 2 x 12 x ({r} + {dr}) x 4, plus {cache.nbytes - cache.kv_nbytes} bytes of positions")
assert cache.kv_nbytes == 2 * 12 * (r + dr) * 4 and cache.nbytes - cache.kv_nbytes == 2 * 12 * 8

# %% [markdown]
# ## Decode time: absorb against expand
#
# Expanding costs `S · r · H · (dn + dv)` multiply-adds per step (every cached latent through
# `kv_b_proj`), absorbing `H · S · (2r + dr)`. With 16 heads and r = 128 that is 4096 against 272
# per cached token. A full prefill is the other way round (the latent-width attention is wider),
# which is why `path="auto"` compares the two counts per call.

# %%
big = attnkit.MultiHeadLatentAttention(512, 16, kv_lora_rank=128, qk_nope_dim=64, qk_rope_dim=32, v_dim=64)
sizes = [256, 1024] if SMALL else [512, 2048, 8192]
times = {"expand": [], "absorb": []}
for S in sizes:
    cache = big.new_cache()
    cache.update(torch.randn(1, S, 128), torch.randn(1, S, 32))
    step = torch.randn(1, 1, 512)
    for path in times:
        big.path = path
        runs = []
        for _ in range(3):
            cache.crop(S)
            t0 = time.perf_counter()
            with torch.no_grad():
                big(step, cache=cache)
            runs.append(time.perf_counter() - t0)
        times[path].append(1e3 * sorted(runs)[1])
    print(f"S={S:5d}: expand {times['expand'][-1]:7.2f} ms, absorb {times['absorb'][-1]:6.2f} ms")
big.path = "auto"
cost = plan_cost(1, 4096, heads=16, kv_lora_rank=128, qk_nope_dim=64, qk_rope_dim=32, v_dim=64)
print(f"multiply-adds at S=4096: expand {cost['expand'] / 1e6:.0f} M, absorb {cost['absorb'] / 1e6:.0f} M")
assert big.choose_path(1, 4096) == "absorb" and big.choose_path(4096, 4096) == "expand"
fig, ax = plt.subplots(figsize=(5.5, 3.4), constrained_layout=True)
for path, ms in times.items():
    ax.plot(sizes, ms, marker="o", label=path)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("cached tokens S")
ax.set_ylabel("one decode step (ms, 1 thread)")
ax.set_title("MLA decode: absorbed vs expanded")
ax.legend()
fig.savefig(f"{OUT}/13_decode_time.png", dpi=110)
plt.show()

# %% [markdown]
# ## The output gate and the difference of two maps
#
# **Gated attention** (Qwen3-Next) multiplies each head's output by `sigmoid(x W_g)`, computed from
# the query token itself. The attention weights are untouched; what changes is how much of each
# head reaches the output, token by token (near 0: the head is off for this token, with no need to
# park weight on a sink). **Differential attention** (DiffLlama) subtracts two softmax maps,
# `A1 − λ·A2`: common-mode weight cancels and entries may go negative; each row sums to `1 − λ`.
# Below: the gate values of a headwise gate (tokens × heads), and one head pair's three maps.

# %%
D, L = 32, 10
xs = torch.randn(1, L, D)
gate = OutputGate(D, 4, 8, kind="headwise")
gated = DecoderAttention(D, 4, kv_heads=2, gate=gate)
plain = DecoderAttention(D, 4, kv_heads=2)
plain.load_state_dict(gated.state_dict(), strict=False)
with torch.no_grad():
    _, w_gated = gated(xs, need_weights=True)
    _, w_plain = plain(xs, need_weights=True)
    g = gate.gates(xs)[0, :, :, 0]  # (L, H)
torch.testing.assert_close(w_gated, w_plain)
print("the gate leaves the attention weights unchanged; gate values range", round(g.min().item(), 3), "to", round(g.max().item(), 3))

diff = DifferentialAttention(D, 4, kv_heads=2, depth=3)
with torch.no_grad():
    q, k, v = diff.project(xs, torch.arange(L)[None])
    a1 = attnkit.attention(q[:, :2], k[:, :1], v[:, :1], mask=attnkit.masks.causal(), return_weights=True).weights[0, 0]
    a2 = attnkit.attention(q[:, 2:], k[:, 1:], v[:, 1:], mask=attnkit.masks.causal(), return_weights=True).weights[0, 0]
    _, w_diff = diff(xs, need_weights=True)
    lam = diff.lam().item()
torch.testing.assert_close(w_diff[0, 0], a1 - lam * a2)
torch.testing.assert_close(w_diff.sum(-1), torch.full_like(w_diff.sum(-1), 1 - lam))
print(f"lambda = {lam:.3f}; every row of A1 - lambda A2 sums to 1 - lambda = {1 - lam:.3f}; most negative weight {w_diff.min().item():.3f}")

fig, axes = plt.subplots(1, 4, figsize=(12, 3.2), constrained_layout=True)
gim = axes[0].imshow(g.T, cmap="viridis", vmin=0, vmax=1)
fig.colorbar(gim, ax=axes[0], shrink=0.6, location="bottom")
axes[0].set_title("output gate (heads x tokens)")
axes[0].set_xlabel("token")
axes[0].set_ylabel("head")
lim = max(a1.max().item(), a2.max().item())
for ax, m, title in ((axes[1], a1, "A1"), (axes[2], a2, "A2"), (axes[3], w_diff[0, 0], f"A1 - {lam:.2f} A2")):
    im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_title(title)
    ax.set_xlabel("key")
axes[1].set_ylabel("query")
fig.colorbar(im, ax=axes[1:], shrink=0.8)
fig.savefig(f"{OUT}/13_gate_and_difference.png", dpi=110)
plt.show()

# %% [markdown]
# ## A Hugging Face layer, taken out of its model
#
# `attnkit.integrations.hf.from_hf_attention` turns one attention layer of a transformers model
# (DeepSeek-V2/V3, Qwen3-Next, DiffLlama, gpt-oss, Gemma 2/3, LLaMA, Qwen3, Mistral) into the attnkit
# module above with copies of its weights. Here a tiny random DeepSeek-V3 layer.

# %%
try:
    import transformers
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    from attnkit.integrations.hf import from_hf_attention
except ImportError:
    transformers = None
if transformers is not None:
    cfg = transformers.AutoConfig.for_model("deepseek_v3", hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                                            kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)
    layer = from_hf_attention(DeepseekV3Attention(cfg, 0))
    c = layer.new_cache()
    with torch.no_grad():
        layer(torch.randn(1, 6, 32), cache=c)
    print(type(layer).__name__, "| cache:", c.kv_nbytes, "bytes for 6 tokens =", 6 * (16 + 4) * 4)
    assert c.kv_nbytes == 6 * (16 + 4) * 4

# %% [markdown]
# ## Exercises
#
# 1. DeepSeek-V2-Lite has 16 heads (same head widths, same latent). How many times smaller than a
#    multi-head cache is its latent cache? Measure it with `nbytes` as above.
# 2. With DeepSeek-V2-Lite's widths (H=16, r=512, dn=128, dr=64, dv=128) and S = 4096 cached tokens,
#    from how many new tokens L on does `plan_cost` prefer expanding?
# 3. Set a differential layer's four λ vectors to zero. What is λ then, and what do the rows of its
#    map sum to? Check with `need_weights=True`.
#
# Solutions: `solutions/13_latent_gated_differential.py`.
