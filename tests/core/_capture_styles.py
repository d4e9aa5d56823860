"""The capture styles of a custom bias: one bias per way Python lets a function reach a trainable
tensor (closure, list, dict, plain object, default argument, ``functools.partial``, bound method,
callable object, score_mod, global, helper function, a module's attribute), shared by the gradient
tests of every backend (``test_trust_grads.py``, ``test_trust_flex_grads.py``).

Shape legend: H heads; each bias reads ``w[h]`` (H,) and the query/key distance.
"""

from __future__ import annotations

import functools
import types

import torch
from torch import nn

from attnkit import biases

W = nn.Parameter(torch.tensor([0.3, -0.2], dtype=torch.float64))  # read by the global-style biases below
CONFIG = types.SimpleNamespace(w=W)


def dist(qi, kv):
    return (qi - kv).abs().to(torch.float64)


def _global_bias(b, h, qi, kv):
    return W[h] * torch.cos(dist(qi, kv))


def _helper(h):
    return W[h]


def _helper_bias(b, h, qi, kv):
    return _helper(h) * torch.cos(dist(qi, kv))


def _module_attr_bias(b, h, qi, kv):
    return CONFIG.w[h] * torch.cos(dist(qi, kv))


def _partial_bias(b, h, qi, kv, w):
    return w[h] * torch.cos(dist(qi, kv))


class _Holder:
    def __init__(self, w):
        self.w = w

    def bias(self, b, h, qi, kv):
        return self.w[h] * torch.cos(dist(qi, kv))

    def __call__(self, b, h, qi, kv):
        return self.bias(b, h, qi, kv)


def capture_styles(w: torch.Tensor) -> dict:
    """One bias per capture style, each reading ``w`` (or the global W, for the global styles)."""
    lst, dct, obj = [w], {"w": w}, types.SimpleNamespace(w=w)

    def closure(b, h, qi, kv):
        return w[h] * torch.cos(dist(qi, kv))

    def in_list(b, h, qi, kv):
        return lst[0][h] * torch.cos(dist(qi, kv))

    def in_dict(b, h, qi, kv):
        return dct["w"][h] * torch.cos(dist(qi, kv))

    def in_object(b, h, qi, kv):
        return obj.w[h] * torch.cos(dist(qi, kv))

    def default(b, h, qi, kv, w=w):
        return w[h] * torch.cos(dist(qi, kv))

    def score_mod(s, b, h, qi, kv):
        return s + w[h] * torch.cos(dist(qi, kv))

    return {
        "closure": closure, "list": in_list, "dict": in_dict, "object": in_object, "default": default,
        "partial": functools.partial(_partial_bias, w=w), "bound-method": _Holder(w).bias,
        "callable-object": biases.custom_bias(_Holder(w)), "score-mod": biases.score_mod(score_mod),
        "global": _global_bias, "helper": _helper_bias, "module-attribute": _module_attr_bias,
    }


GLOBAL_STYLES = ("global", "helper", "module-attribute")


def leaf_for(style: str) -> torch.Tensor:
    return W if style in GLOBAL_STYLES else nn.Parameter(torch.tensor([0.25, -0.15], dtype=torch.float64))
