"""Solutions to lesson 9's exercises. Run as a script; each answer prints the number that checks it."""

import torch

import attnkit

torch.manual_seed(9)
VOCAB, D, H, LAYERS, W = 30, 16, 2, 2, 8
tok, pos = torch.nn.Embedding(VOCAB, D), torch.nn.Embedding(256, D)
attns = torch.nn.ModuleList([attnkit.MultiHeadAttention(D, H) for _ in range(LAYERS)]).eval()
head = torch.nn.Linear(D, VOCAB)


def run(tokens, start=0, caches=None, mask=None):
    x = tok(tokens) + pos(torch.arange(start, start + tokens.shape[1]))
    for i, attn in enumerate(attns):
        x = x + attn(x, causal=True, mask=mask, cache=None if caches is None else caches[i])[0]
    return head(x)


# 1. a sliding-window cache keeps the last W keys: equal to recomputing with a window mask
prompt, n = torch.randint(0, VOCAB, (1, 4)), 20
with torch.no_grad():
    seq = prompt
    for _ in range(n):
        seq = torch.cat([seq, run(seq, mask=attnkit.masks.sliding_window(left=W - 1))[:, -1:].argmax(-1)], 1)
    caches = [attnkit.cache.SlidingWindowCache(window=W) for _ in range(LAYERS)]
    out = torch.cat([prompt, run(prompt, caches=caches)[:, -1:].argmax(-1)], 1)
    for _ in range(n - 1):
        out = torch.cat([out, run(out[:, -1:], start=out.shape[1] - 1, caches=caches)[:, -1:].argmax(-1)], 1)
print("1. identical tokens with a window of", W, ":", bool((seq == out).all()))
assert torch.equal(seq, out)

# 2. K and V: 2 x B x kv_heads x E x capacity x 4 bytes (float32), per layer
c = attnkit.cache.DynamicCache()
with torch.no_grad():
    attns[0](torch.randn(3, 10, D), causal=True, cache=c)
print("2. formula", 2 * 3 * H * (D // H) * c.capacity * 4, "bytes | kv_nbytes", c.kv_nbytes, "| capacity", c.capacity, "tokens")
assert c.kv_nbytes == 2 * 3 * H * (D // H) * c.capacity * 4 and c.capacity >= 10

# 3. in an encoder every token attends to later tokens too, so a new token changes old outputs
x = torch.randn(1, 6, D)
with torch.no_grad():
    before = attns[0](x[:, :5])[0]
    after = attns[0](x)[0][:, :5]
assert (before - after).abs().max() > 1e-3
print("3. bidirectional: old positions change by", (before - after).abs().max().item(), "when a token is appended")
