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
# # Lesson 10 — Attention in vision: SE, CBAM and ViT's patches
#
# **Question this lesson answers:** what is "attention" in a convolutional network, and how does an
# image become a sequence of tokens?
#
# Attention is not only self-attention over words. The same idea — score, normalise, reweight —
# appears along other axes of an image's feature map (B, C, H, W):
#
# * **Squeeze-and-Excitation** (SE, Hu et al. 2018) weighs *channels*: squeeze each channel to one
#   number by global average pooling, pass the C numbers through a small bottleneck MLP
#   (C → C/r → C), and a sigmoid gives a gate in (0, 1) per channel that rescales it;
# * **CBAM** (Woo et al. 2018) does channel attention (average- *and* max-pooled descriptors through
#   a shared MLP), *then* spatial attention: a 7×7 convolution over the per-pixel channel mean and
#   max gives a gate per pixel;
# * **ViT** (Dosovitskiy et al. 2021) cuts the image into P×P patches, flattens and projects each
#   patch to a D-dimensional token, and runs ordinary self-attention over the patch tokens.
#
# Note that SE and CBAM gates use a sigmoid, not a softmax: gates do not compete and need not sum to 1.

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

SMALL = os.environ.get("ATTNKIT_COURSE_SMALL") == "1"  # the test suite runs every lesson small
OUT = os.environ.get("ATTNKIT_COURSE_OUT", "course_out")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(0)
torch.manual_seed(0)

from attnkit.data.images import load_images

data = load_images("auto", train_limit=512 if SMALL else 6000, test_limit=256 if SMALL else 1000)
print(data.name, "train", tuple(data.train_x.shape), "test", tuple(data.test_x.shape))
C_IN, IMG = 1, data.image_size[0]

# %% [markdown]
# ## Squeeze-and-Excitation from scratch

# %%
class SE(torch.nn.Module):
    def __init__(self, channels, reduction=4):
        super().__init__()
        self.fc1 = torch.nn.Linear(channels, max(1, channels // reduction))
        self.fc2 = torch.nn.Linear(max(1, channels // reduction), channels)

    def forward(self, x):  # x (B, C, H, W)
        z = x.mean(dim=(2, 3))  # squeeze: one number per channel
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(z))))  # excitation: a gate per channel
        self.last_gate = s.detach()
        return x * s[:, :, None, None]


class CBAM(torch.nn.Module):
    def __init__(self, channels, reduction=4, kernel=7):
        super().__init__()
        hidden = max(1, channels // reduction)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(channels, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, channels))
        self.conv = torch.nn.Conv2d(2, 1, kernel, padding=kernel // 2, bias=False)

    def forward(self, x):
        gate_c = torch.sigmoid(self.mlp(x.mean(dim=(2, 3))) + self.mlp(x.amax(dim=(2, 3))))  # channel first
        x = x * gate_c[:, :, None, None]
        pooled = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)  # (B, 2, H, W)
        gate_s = torch.sigmoid(self.conv(pooled))  # then space: one gate per pixel
        self.last_map = gate_s.detach()
        return x * gate_s


x = torch.randn(2, 16, 10, 10)
se = SE(16)
assert sum(p.numel() for p in se.parameters()) == 2 * 16 * 16 // 4 + 16 + 4
assert torch.allclose(se(x), x * se.last_gate[:, :, None, None])
print("SE output shape", tuple(se(x).shape), "| gates of image 0:", np.round(se.last_gate[0, :6].numpy(), 3))
print("SE parameters:", sum(p.numel() for p in se.parameters()), "(formula 2 C^2/r + C + C/r =", 2 * 16 * 16 // 4 + 16 + 4, ")")

# %% [markdown]
# ### The same numbers from attnkit's modules (if present)
#
# attnkit ships `SqueezeExcite` and `CBAM` in `attnkit.modules`. We copy our weights into them and
# compare outputs. attnkit's CBAM follows the authors' released code, which adds a BatchNorm after the
# spatial convolution; in eval mode with fresh statistics that norm divides by `sqrt(1 + 1e-5)`, so
# the two differ by about 1e-6.

# %%
try:
    from attnkit.modules.cbam import CBAM as AkCBAM
    from attnkit.modules.squeeze_excite import SqueezeExcite
except ImportError as err:  # the lesson's own versions above are the main line
    print("attnkit's vision modules are not available here:", err)
else:
    ak_se = SqueezeExcite(16, reduction=4)
    ak_se.load_state_dict(se.state_dict())
    assert (ak_se(x) - se(x)).abs().max() < 1e-6
    print("SE   max |ours - attnkit| =", (ak_se(x) - se(x)).abs().max().item())
    cb = CBAM(16)
    ak_cb = AkCBAM(16, reduction=4).eval()
    with torch.no_grad():
        for ours, theirs in zip((cb.mlp[0], cb.mlp[2]), (ak_cb.channel.mlp[0], ak_cb.channel.mlp[2])):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        ak_cb.spatial.conv.weight.copy_(cb.conv.weight)
        assert (ak_cb(x) - cb(x)).abs().max() < 1e-5
        print("CBAM max |ours - attnkit| =", (ak_cb(x) - cb(x)).abs().max().item())

# %% [markdown]
# ## A small CNN with CBAM, trained briefly
#
# Train a two-layer CNN with CBAM after each convolution, then look at CBAM's spatial gate on test
# images. The map shows where the *gate* is open. It is not an explanation of the decision: the
# gate is one multiplicative factor among many, and a bright region only says the features there
# were passed on, not that they caused the prediction.

# %%
class SmallCNN(torch.nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.c1, self.a1 = torch.nn.Conv2d(C_IN, 16, 3, padding=1), CBAM(16)
        self.c2, self.a2 = torch.nn.Conv2d(16, 32, 3, padding=1), CBAM(32)
        self.fc = torch.nn.Linear(32, n_classes)

    def forward(self, x):
        x = self.a1(torch.relu(self.c1(x)))
        x = self.a2(torch.relu(self.c2(torch.nn.functional.max_pool2d(x, 2))))
        return self.fc(x.mean(dim=(2, 3)))


net = SmallCNN(len(data.classes))
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
steps = 10 if SMALL else 300
for step in range(steps):
    idx = torch.randint(0, len(data.train_x), (64,))
    loss = torch.nn.functional.cross_entropy(net(data.train_x[idx]), data.train_y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
net.eval()
with torch.no_grad():
    acc = (net(data.test_x).argmax(1) == data.test_y).float().mean().item()
print(f"{steps} steps: last loss {loss.item():.3f}, test accuracy {acc:.3f}")

with torch.no_grad():
    net(data.test_x[:4])
fig, axes = plt.subplots(2, 4, figsize=(10, 5), constrained_layout=True)
for i in range(4):
    axes[0, i].imshow(data.test_x[i, 0].numpy(), cmap="gray")
    axes[0, i].set_title(f"label: {data.classes[int(data.test_y[i])]}", fontsize=9)
    im = axes[1, i].imshow(net.a1.last_map[i, 0].numpy(), vmin=0, vmax=1, cmap="viridis")
    axes[1, i].set_title("CBAM spatial gate (layer 1)", fontsize=9)
    for ax in axes[:, i]:
        ax.set_xlabel("x (pixels)")
        ax.set_ylabel("y (pixels)")
fig.colorbar(im, ax=axes[1, :], label="gate value (0 = closed, 1 = open)")
fig.savefig(f"{OUT}/10_cbam_gates.png", dpi=110)
plt.show()

# %% [markdown]
# ## ViT: patches are tokens
#
# Cutting into P×P patches and applying one linear map to each flattened patch is the same as a
# convolution with kernel P and stride P. We check that, then run one self-attention layer over the
# patch tokens — from here on it is lesson 3.

# %%
P, D = IMG // 4, 32  # a 4 x 4 grid of patches
img = data.test_x[:2]
patches = img.unfold(2, P, P).unfold(3, P, P)  # (B, C, 4, 4, P, P)
tokens_raw = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 16, C_IN * P * P)  # (B, N=16, C*P*P)
proj = torch.nn.Conv2d(C_IN, D, P, stride=P)
by_hand = tokens_raw @ proj.weight.reshape(D, -1).T + proj.bias
by_conv = proj(img).flatten(2).transpose(1, 2)
assert (by_hand - by_conv).abs().max() < 1e-5
print("patch tokens", tuple(by_hand.shape), "| max |unfold+linear - conv| =", (by_hand - by_conv).abs().max().item())
try:
    from attnkit.models.vit import PatchEmbed
except ImportError as err:
    print("attnkit.models.vit is not available here:", err)
else:
    pe = PatchEmbed(P, C_IN, D)
    pe.proj.load_state_dict(proj.state_dict())
    assert (pe(img)[0] - by_hand).abs().max() < 1e-6 and tuple(pe(img)[1]) == (4, 4)
    print("attnkit PatchEmbed: max diff", (pe(img)[0] - by_hand).abs().max().item(), "grid", pe(img)[1])
attn = attnkit.MultiHeadAttention(D, 4)
out, w = attn(by_hand, need_weights=True)
assert w.shape == (2, 16, 16) and torch.allclose(w.sum(-1), torch.ones(2, 16))
print("self-attention over patches:", tuple(out.shape), "weights", tuple(w.shape), "(16 patches x 16 patches)")

fig, axes = plt.subplots(4, 4, figsize=(4, 4), constrained_layout=True)
for n, ax in enumerate(axes.flat):
    ax.imshow(patches[0, 0, n // 4, n % 4].numpy(), cmap="gray", vmin=0, vmax=1)
    ax.set_title(f"token {n}", fontsize=7)
    ax.axis("off")
fig.suptitle("one image as 16 patch tokens")
fig.savefig(f"{OUT}/10_vit_patches.png", dpi=110)
plt.show()

# %% [markdown]
# ## Exercises
#
# 1. Train `SmallCNN` without the two CBAM modules (replace them by `torch.nn.Identity()`) for the
#    same number of steps. Compare test accuracy and parameter counts. Is the difference larger than
#    the spread over three seeds?
# 2. Replace SE's sigmoid by a softmax over channels. What changes in the gates' scale, and why does
#    that hurt when many channels matter at once?
# 3. Count the self-attention cost of ViT on a 224×224 image with P = 16 and with P = 8. How does it
#    scale with P?
#
# Solutions: `solutions/10_attention_in_vision.py`.
