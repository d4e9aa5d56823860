"""第 5 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import torch

import attnkit
from attnkit.modules.positional import SinusoidalPositionalEncoding

torch.manual_seed(5)
D, H, L, k = 16, 4, 10, 3

# 1. p 移动 k 时，每一对 sin/cos 旋转一个固定角度：这是线性映射
pe = SinusoidalPositionalEncoding(D, max_len=256, dtype=torch.float64)(torch.arange(256))
M = torch.linalg.lstsq(pe[:-k], pe[k:]).solution
assert (pe[:-k] @ M - pe[k:]).abs().max() < 1e-10
print("1. max |PE(p+k) - PE(p) M| =", (pe[:-k] @ M - pe[k:]).abs().max().item())

# 2. 解码器层，Post-LN
ref = torch.nn.TransformerDecoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True).double().eval()
x, mem = torch.randn(2, L, D, dtype=torch.float64), torch.randn(2, 7, D, dtype=torch.float64)
sa = attnkit.MultiHeadAttention.from_torch(ref.self_attn)
ca = attnkit.MultiHeadAttention.from_torch(ref.multihead_attn)
with torch.no_grad():
    h = ref.norm1(x + sa(x, causal=True)[0])
    h = ref.norm2(h + ca(h, mem, mem)[0])
    h = ref.norm3(h + ref.linear2(torch.relu(ref.linear1(h))))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    assert (h - ref(x, mem, tgt_mask=causal)).abs().max() < 1e-12
    print("2. max |by hand - torch| =", (h - ref(x, mem, tgt_mask=causal)).abs().max().item())

# 3. 注意力：4 个 (D x D) 加 4D 偏置；前馈：2 个 (D x 4D) 加 5D；归一化：4D
layer = torch.nn.TransformerEncoderLayer(D, H, 4 * D, batch_first=True)
n_attn = sum(p.numel() for p in layer.self_attn.parameters())
n_ff = sum(p.numel() for p in (*layer.linear1.parameters(), *layer.linear2.parameters()))
assert n_attn == 4 * D * D + 4 * D and n_ff == 8 * D * D + 5 * D
print(f"3. attention {n_attn} (formula {4 * D * D + 4 * D}), feed-forward {n_ff} (formula {8 * D * D + 5 * D}), "
      f"share of attention {n_attn / sum(p.numel() for p in layer.parameters()):.2f}")
