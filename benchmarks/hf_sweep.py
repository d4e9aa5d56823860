"""Every architecture in a transformers auto-mapping, built tiny from its config class, run with
``attn_implementation="attnkit"`` against ``"eager"`` on a padded batch — the sweep behind the claim
that no model runs silently wrong.

Each model type ends in one of four states:

* a result — max |logits diff| over real (unpadded) tokens and how many attention maps each
  implementation returned (``att = [ours, eager, ours that are None]``);
* ``"refused"`` — attnkit's routing check rejected it at load because the model computes attention
  itself instead of calling the interface (Bloom, GIT, …): it fails loudly, never runs wrong;
* ``"ERR ..."`` — building or running failed (most fail the same way under eager: configs that need
  more than the tiny overrides below);
* ``"timeout"`` — over 20 s (huge default vocabularies or vision towers).

No downloads: configs come from the installed ``transformers``; weights are random and copied from
the eager model into ours.

    OMP_NUM_THREADS=1 python benchmarks/hf_sweep.py --task causal-lm   # → benchmarks/results/hf_sweep_causal_lm.json
    OMP_NUM_THREADS=1 python benchmarks/hf_sweep.py --task masked-lm llama bert   # some types only
"""

from __future__ import annotations

import argparse
import signal
import warnings
from pathlib import Path

import torch

from common import record

# small enough to build any model in a second; keys a config lacks are skipped
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
             vocab_size=99, head_dim=8, n_embd=32, n_layer=2, n_head=4, d_model=32, n_positions=64,
             max_position_embeddings=64, num_layers=2, num_heads=4, moe_intermediate_size=16, num_experts=4,
             num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, ffn_hidden_size=64, kv_lora_rank=8,
             q_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, sliding_window=4,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, shared_expert_intermediate_size=16, rotary_dim=4,
             first_k_dense_replace=1, n_group=1, topk_group=1, num_experts_per_token=2)


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def _build(T, config_cls, cls_name, kw, impl):
    torch.manual_seed(0)
    cfg = config_cls(**kw)
    try:
        cfg.experts_implementation = "eager"  # MoE layers: the plain loop, same as eager's
    except Exception:
        pass
    return getattr(T, cls_name)._from_config(cfg, attn_implementation=impl).eval()


def sweep_one(T, config_cls, cls_name) -> dict | str:
    base = config_cls()
    kw = {k: v for k, v in SMALL.items() if hasattr(base, k)}
    if getattr(base, "layer_types", None) is not None:  # hybrid models: keep two layers' types
        kw["layer_types"] = list(base.layer_types)[:2]
    try:
        ours = _build(T, config_cls, cls_name, kw, "attnkit")
    except ValueError as e:
        if "compute attention themselves" in str(e):
            return "refused"
        raise
    eager = _build(T, config_cls, cls_name, kw, "eager")
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(4, 99, (2, 7))
    am = torch.ones(2, 7, dtype=torch.long)
    am[1, 4:] = 0  # right padding on the second row
    with torch.no_grad():
        a = ours(input_ids=ids, attention_mask=am, output_attentions=True)
        b = eager(input_ids=ids, attention_mask=am, output_attentions=True)
    diff = (a.logits - b.logits)[am.bool()].abs().max().item()
    att = (len(a.attentions or ()), len(b.attentions or ()), sum(x is None for x in (a.attentions or ())))
    return {"diff": diff, "att": list(att)}


def main(argv=None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=["causal-lm", "masked-lm"], default="causal-lm", help="which auto-mapping to sweep")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/hf_sweep_<task>.json)")
    p.add_argument("only", nargs="*", help="model types to run (default: all in the mapping)")
    args = p.parse_args(argv)
    import transformers as T
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    import attnkit.integrations.hf as akhf

    warnings.filterwarnings("ignore")
    T.logging.set_verbosity_error()
    torch.set_num_threads(1)
    akhf.register()
    mapping = {"causal-lm": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
               "masked-lm": modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES}[args.task]
    signal.signal(signal.SIGALRM, _alarm)
    res: dict[str, dict | str] = {}
    for mt, cls_name in sorted(mapping.items()):
        if args.only and mt not in args.only:
            continue
        if not isinstance(cls_name, str) or not hasattr(T, cls_name):
            continue
        signal.alarm(20)
        try:
            res[mt] = sweep_one(T, CONFIG_MAPPING[mt], cls_name)
        except _Timeout:
            res[mt] = "timeout"
        except Exception as e:  # record and go on: the sweep's point is the whole table
            res[mt] = f"ERR {type(e).__name__}: {str(e)[:150]}"
        finally:
            signal.alarm(0)
        print(mt, res[mt], flush=True)
    out = args.out or Path(__file__).parent / "results" / f"hf_sweep_{args.task.replace('-', '_')}.json"
    summary = {"match_1e-5": sum(isinstance(v, dict) and v["diff"] <= 1e-5 for v in res.values()),
               "mismatch": sum(isinstance(v, dict) and v["diff"] > 1e-5 for v in res.values()),
               "refused": sum(v == "refused" for v in res.values()),
               "error": sum(isinstance(v, str) and v.startswith("ERR") for v in res.values()),
               "timeout": sum(v == "timeout" for v in res.values()), "total": len(res)}
    record(out, {"transformers": T.__version__, "torch": torch.__version__, "summary": summary, "models": res})
    print(summary, "->", out)
    return out


if __name__ == "__main__":
    main()
