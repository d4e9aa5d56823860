"""Solutions to lesson 3's exercises. Run as a script; each answer prints the number that checks it."""

import torch

import attnkit

torch.manual_seed(3)
B, L, D, H = 2, 6, 16, 4
E = D // H
ref = torch.nn.MultiheadAttention(D, H, batch_first=True).double().eval()
x = torch.randn(B, L, D, dtype=torch.float64)
W_q, W_k, W_v = ref.in_proj_weight.split(D)
b_q, b_k, b_v = ref.in_proj_bias.split(D)

# 1. einsum: b batch, h head, i query, j key, e feature
q, k, v = ((x @ W.T + b).view(B, L, H, E) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v)))
w = torch.softmax(torch.einsum("bihe,bjhe->bhij", q, k) / E**0.5, dim=-1)
o = torch.einsum("bhij,bjhe->bihe", w, v).reshape(B, L, D)
o = o @ ref.out_proj.weight.T + ref.out_proj.bias
assert (o - ref(x, x, x)[0]).abs().max() < 1e-12
print("1. max |einsum - torch| =", (o - ref(x, x, x)[0]).abs().max().item())

# 2. causal by hand: key j is allowed for query i when j <= i
s = torch.einsum("bihe,bjhe->bhij", q, k) / E**0.5
s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
o = torch.einsum("bhij,bjhe->bihe", torch.softmax(s, -1), v).reshape(B, L, D) @ ref.out_proj.weight.T + ref.out_proj.bias
ours = attnkit.MultiHeadAttention.from_torch(ref)
assert (o - ours(x, x, x, causal=True)[0]).abs().max() < 1e-12
print("2. max |causal by hand - attnkit| =", (o - ours(x, x, x, causal=True)[0]).abs().max().item())

# 3. K and V: 2 tensors x tokens x kv_heads x head_dim x 2 bytes
D3, H3, T = 4096, 32, 8192
for name, kv in (("MHA", 32), ("GQA-8", 8), ("MQA", 1)):
    print(f"3. {name:6s}: {2 * T * kv * (D3 // H3) * 2 / 2**20:7.1f} MiB per layer per sequence")
