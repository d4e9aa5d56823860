"""Which tensors of a score modifier (bias) the blockwise backend must hand gradients to.

The blockwise backward (:mod:`attnkit.backends.blockwise`) does not keep the autograd graph of the
forward: it recomputes each score tile from q, k and the bias, and differentiates that tile with
``torch.autograd.grad``. A gradient can only reach a tensor that was an input of the
``autograd.Function``, so every trainable tensor a bias reads must be found up front and passed in:

* module parameters of the bias (ALiBi slopes if learned, T5 / Shaw relative-position tables),
* dense :class:`~attnkit.core.biases.TensorBias` tensors that require grad,
* tensors a user's :class:`~attnkit.core.biases.CustomBias` / :class:`~attnkit.core.biases.ScoreMod`
  function captures from outside (closure cells, defaults, globals it names, a bound module).

Without this discovery those gradients would silently be zero.
"""

from __future__ import annotations

import sys

import torch

from ...core.biases import CustomBias, ScoreMod, ScoreModifier, TensorBias

__all__ = ["_bias_params"]


def _bias_params(bias: ScoreModifier | None) -> list[torch.Tensor]:
    """Tensors of a bias that may want gradients: module parameters and dense tensor biases."""
    if bias is None:
        return []
    mods = bias.leaves()
    out: list[torch.Tensor] = []
    for m in mods:  # per leaf: a combined bias built inside torch.compile cannot list .parameters()
        out += [p for p in m.parameters() if p.requires_grad and not any(p is o for o in out)]
    out += [m.t for m in mods if isinstance(m, TensorBias) and m.t.requires_grad]
    for m in mods:
        if isinstance(m, (CustomBias, ScoreMod)):
            out += [t for t in _captured_tensors(m.fn) if not any(t is o for o in out)]
    return out


def _captured_tensors(fn) -> list[torch.Tensor]:
    """Trainable tensors a user's bias/score function reads from outside (closure cells, defaults,
    globals it names, a bound module). The backward recomputes tiles and can only hand gradients to tensors it was given as
    inputs of the autograd Function, so these must be found here, or their gradients would be lost."""
    found: list[torch.Tensor] = []
    code = getattr(fn, "__code__", None)
    try:
        closure, glob = fn.__closure__, fn.__globals__
    except AttributeError:
        # a function defined inside a torch.compile'd function: Dynamo models it without these
        # attributes, so its closure cannot be searched (its module's globals can, below); a
        # trainable tensor in the closure would silently get no gradient, so with autograd on a
        # capturing function is refused
        if torch.compiler.is_compiling() and torch.is_grad_enabled() and code is not None and code.co_freevars:
            raise ValueError(
                f"bias: the custom bias / score_mod {getattr(fn, '__name__', fn)!r} is defined inside a torch.compile'd function "
                f"and captures {', '.join(code.co_freevars)}; the blockwise backend cannot see captured tensors there, so a "
                "trainable one would get no gradient: define the function outside the compiled function, run under "
                "torch.no_grad() for inference, or use backend='reference'"
            )
        closure, glob = None, vars(sys.modules[fn.__module__]) if getattr(fn, "__module__", None) in sys.modules else {}
    cells = [c.cell_contents for c in (closure or ()) if _has_contents(c)]
    named = [glob[n] for n in (code.co_names if code is not None else ()) if n in glob]
    objs = cells + named + list(getattr(fn, "__defaults__", None) or ()) + [getattr(fn, "__self__", None)]
    for o in objs:
        if isinstance(o, torch.Tensor) and o.requires_grad:
            found.append(o)
        elif isinstance(o, torch.nn.Module):
            found += [p for p in o.parameters() if p.requires_grad]
    return found


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell (a variable not yet assigned when fn was made)
        return False
    return True
