"""Solutions to lesson 2's exercises. Run as a script; each answer prints the number that checks it."""

import os

import torch

import attnkit

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"
torch.manual_seed(1)
E = 8
q, k = torch.randn(1, 1, 4, E, dtype=torch.float64), torch.randn(1, 1, 6, E, dtype=torch.float64)

# 1. general with W = I is dot; cosine is a rescaled scaled-dot of unit vectors
gen = attnkit.scores.GeneralScore(E).double()
with torch.no_grad():
    gen.weight.copy_(torch.eye(E))
print("1. max |general(W=I) - dot| =", (gen(q, k) - attnkit.scores.DotScore()(q, k)).abs().max().item())
tau = 10.0
cos = attnkit.scores.CosineScore(init_temperature=tau).double()
qn, kn = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
scaled = attnkit.scores.ScaledDotScore()
via_scaled = scaled(qn, kn) * scaled.default_scale(E) * tau * E**0.5
assert (gen(q, k) - attnkit.scores.DotScore()(q, k)).abs().max() < 1e-12
assert (cos(q, k) - via_scaled).abs().max() < 1e-6 * via_scaled.abs().max()
print("   max |cosine - tau*sqrt(E)*scaled_dot(unit q, unit k)| =", (cos(q, k) - via_scaled).abs().max().item())

# 2. the same toy model with a dot-product score (needs no parameters in the score)
V_SIZE, SRC_LEN, HID = 10, 6, 32
emb, enc = torch.nn.Embedding(V_SIZE + 1, HID), torch.nn.GRU(HID, HID, batch_first=True)
dec, out = torch.nn.GRUCell(2 * HID, HID), torch.nn.Linear(2 * HID, V_SIZE)
params = [p for m in (emb, enc, dec, out) for p in m.parameters()]
opt = torch.optim.Adam(params, lr=1e-2)
for step in range(30 if SMALL else 400):
    src = torch.randint(0, V_SIZE, (64, SRC_LEN))
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((64, 1), V_SIZE), tgt[:, :-1]], 1)
    keys, h = enc(emb(src))
    h, ctx, logits = h[0], torch.zeros(64, HID), []
    for t in range(SRC_LEN):
        h = dec(torch.cat([emb(tgt_in[:, t]), ctx], -1), h)
        ctx = attnkit.attention(h[:, None, None], keys[:, None], keys[:, None], score="scaled_dot").out[:, 0, 0]
        logits.append(out(torch.cat([h, ctx], -1)))
    logits = torch.stack(logits, 1)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V_SIZE), tgt.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
assert (logits.argmax(-1) == tgt).float().mean() > 2 / V_SIZE
print(f"2. scaled-dot Bahdanau: final loss {loss.item():.3f}, accuracy {(logits.argmax(-1) == tgt).float().mean().item():.2f}")

# 3. memory: the additive hidden tensor is A times larger than the score matrix
L = S = 1024
A = 64
print(f"3. additive hidden: {L * S * A * 4 / 2**20:.0f} MiB per head; score matrix: {L * S * 4 / 2**20:.0f} MiB per head")
