"""第 13 课练习的解答。作为脚本运行；每个答案都打印出验证它的数值。"""

import torch

from attnkit.cache import DynamicCache
from attnkit.modules import DifferentialAttention, LatentCache
from attnkit.modules.latent_attention import plan_cost

torch.manual_seed(13)

# 1. DeepSeek-V2-Lite：16 个头，每个键头 (128 + 64) 维、值头 128 维，对 512 + 64 的潜向量
mha, latent = DynamicCache(), LatentCache()
mha.update(torch.zeros(1, 16, 8, 192, dtype=torch.bfloat16), torch.zeros(1, 16, 8, 128, dtype=torch.bfloat16))
latent.update(torch.zeros(1, 8, 512, dtype=torch.bfloat16), torch.zeros(1, 8, 64, dtype=torch.bfloat16))
ratio = (mha.kv_nbytes / mha.capacity) / (latent.kv_nbytes / 8)
print(f"1. DeepSeek-V2-Lite：潜向量缓存小 {ratio:.1f} 倍（16 x 320 / 576）")
assert abs(ratio - 16 * 320 / 576) < 1e-9

# 2. 从哪个 L 起，把 4096 个潜向量全部展开比在潜向量宽度上做注意力更省
widths = dict(heads=16, kv_lora_rank=512, qk_nope_dim=128, qk_rope_dim=64, v_dim=128)
cross = next(L for L in range(1, 4097) if plan_cost(L, 4096, **widths)["expand"] < plan_cost(L, 4096, **widths)["absorb"])
print(f"2. S = 4096 时，从 L = {cross} 个新词起展开更省")
assert plan_cost(cross - 1, 4096, **widths)["absorb"] <= plan_cost(cross - 1, 4096, **widths)["expand"]

# 3. λ 向量全为零：λ = e^0 - e^0 + λ_init = λ_init，A1 - λ A2 的每一行之和是 1 - λ_init
layer = DifferentialAttention(32, 4, kv_heads=2, depth=5)
with torch.no_grad():
    for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
        getattr(layer, name).zero_()
    _, w = layer(torch.randn(1, 7, 32), need_weights=True)
print(f"3. lambda = {layer.lam().item():.4f} = lambda_init {layer.lambda_init:.4f}；行和 {w.sum(-1).mean().item():.4f}")
assert abs(layer.lam().item() - layer.lambda_init) < 1e-7
torch.testing.assert_close(w.sum(-1), torch.full_like(w.sum(-1), 1 - layer.lambda_init))
