"""Which tensors of a score modifier (bias) the blockwise backend must hand gradients to.

The blockwise backward (:mod:`attnkit.backends.blockwise`) does not keep the autograd graph of the
forward: it recomputes each score tile from q, k and the bias, and differentiates that tile with
``torch.autograd.grad``. A gradient can only reach a tensor that was an input of the
``autograd.Function``, so every trainable tensor a bias reads must be found up front and passed in:

* module parameters of the bias (ALiBi slopes if learned, T5 / Shaw relative-position tables), and
  its buffers that require grad (slopes computed from a parameter),
* dense :class:`~attnkit.core.biases.TensorBias` tensors that require grad,
* tensors a user's :class:`~attnkit.core.biases.CustomBias` / :class:`~attnkit.core.biases.ScoreMod`
  function reaches: closure cells, defaults, globals it names, a bound object, a
  ``functools.partial``'s arguments, lists, dicts and plain objects holding them, helper functions
  (:func:`attnkit.core.reachable.grad_tensors`).

The built-in biases (ALiBi, T5, Shaw, a dense tensor, soft-capping) read only their own attributes,
so their parameters and buffers that require grad are the list. For any other bias, the bias is
evaluated once under autograd on a tiny tile (:func:`bias_inputs`) and its graph
walked back: a leaf reached past the tensors found (one the walk could not see) joins the inputs,
and a tensor found that is also in the history of another one found (``w`` and ``w * 2``, both
captured) stays an input only when the tile does not read it directly as well; where it does, the
per-tile backward would count the path through the other twice, so the route declines (the
reference or SDPA, which differentiate the dense bias by autograd, serve the call). The backward
checks every tile's graph the same way (:func:`check_tile`) and raises rather than drop a
gradient a tile reaches that the tiny one did not.
"""

from __future__ import annotations

import sys

import torch

from ....core.biases import (
    ALiBi,
    CustomBias,
    RelativePositionBias,
    ScoreMod,
    ScoreModifier,
    T5RelativeBias,
    TensorBias,
)
from ....core.indices import index_grid
from ....core.reachable import behind, grad_tensors, missing_leaves, reached_past
from ....core.softcap import SoftCap

__all__ = ["_bias_params", "bias_inputs", "bias_tensors", "check_tile"]


def bias_inputs(call) -> tuple[list[torch.Tensor], str | None]:
    """(tensors the call's bias needs gradients for, None) — or (those, the reason the blockwise
    backend cannot differentiate the bias) when it must decline. Kept on the call for its grad
    mode: the backend's ``supports`` and its run ask the same question of the same call."""
    if torch.compiler.is_compiling():
        return _bias_params(call.bias), None
    memo = getattr(call, "_bias_inputs", None)
    mode = torch.is_grad_enabled()
    if memo is None or memo[0] != mode:
        memo = (mode, _inputs(call))
        call._bias_inputs = memo
    return memo[1]


def _inputs(call) -> tuple[list[torch.Tensor], str | None]:
    if call.bias is None or not torch.is_grad_enabled():
        return [], None  # nothing is recorded for a backward
    leaves = call.bias.leaves()
    if all(type(m) in _DECLARED for m in leaves):  # built-in biases: their tensors are their attributes
        found = [t for m in leaves for t in (*m.parameters(), *m.buffers()) if t.requires_grad]
        return found + [m.t for m in leaves if isinstance(m, TensorBias) and m.t.requires_grad], None
    found = _bias_params(call.bias)
    if not _probe_applies(call):
        return found, None
    out = _probe(call)
    missing = missing_leaves(out, found)
    if missing is None:
        return found, _TOO_LARGE
    params = found + [t for t in missing if not any(t is f for f in found)]
    keep = []
    for t in params:
        over = [behind(t, u) for u in params if u is not t and u.grad_fn is not None]
        if any(b is None for b in over):
            return params, _TOO_LARGE
        if not any(over):
            keep.append(t)
            continue
        direct = reached_past(out, t, params)
        if direct is None or direct:
            return params, (
                f"the bias reads a trainable tensor of shape {tuple(t.shape)} both directly and through another tensor "
                "computed from it; the blockwise backward would count that path twice"
            )
    return keep, None


def bias_tensors(call) -> list[torch.Tensor]:
    """The bias's tensors that get gradients (:func:`bias_inputs`); a ValueError where the backend
    cannot differentiate the bias (``auto`` never picks it then: the backend's ``supports``)."""
    params, why = bias_inputs(call)
    if why is not None:
        raise ValueError(f"the blockwise backend cannot serve this call: {why}; use backend='reference' or 'auto'")
    return params


_DECLARED = (ALiBi, T5RelativeBias, RelativePositionBias, TensorBias, SoftCap)
_TOO_LARGE = "the autograd graph the bias reads is too large to check that every trainable tensor gets its gradient"


def _probe_applies(call) -> bool:
    """The probe runs where the graph can be walked: not under torch.func (nor torch.compile, above)."""
    return not torch._C._functorch.is_functorch_wrapped_tensor(call.q) and min(call.q.shape[0], call.L, call.S) > 0


def _probe(call) -> torch.Tensor:
    """The bias on a tiny tile (at most 2 × 2 × 3 × 5), under autograd: (B', H', l, s)."""
    bias = call.bias
    nb = min(call.q.shape[0], 2) if "b" in bias.dims else 1
    nh = min(call.q.shape[1], 2) if "h" in bias.dims else 1
    g = index_grid((0, min(call.L, 3)), (0, min(call.S, 5)), batch=nb, heads=nh, device=call.q.device)
    work = torch.float64 if call.q.dtype == torch.float64 else torch.float32
    zero = torch.zeros((nb, nh, g.q.shape[2], g.kv.shape[3]), dtype=work, device=call.q.device)
    with torch.enable_grad():
        out = bias.score_mod(call.L, call.S)(zero, g.b, g.h, g.q, g.kv)
    return out if isinstance(out, torch.Tensor) else zero


def check_tile(s_nat: torch.Tensor, given: list[torch.Tensor]) -> None:
    """Raise where a recomputed tile's graph reaches a trainable tensor the backward was not given
    (its gradient would be lost silently otherwise)."""
    missing = missing_leaves(s_nat, given)
    if missing:
        raise RuntimeError(
            f"the blockwise backward recomputed a bias tile that reads {len(missing)} trainable tensor(s) (shape "
            f"{tuple(missing[0].shape)}) that a smaller tile of the forward's check did not read; their gradients "
            "would be lost. Make the bias read the same tensors on every tile, or use backend='reference'"
        )


def _bias_params(bias: ScoreModifier | None) -> list[torch.Tensor]:
    """Tensors of a bias that may want gradients: every tensor requiring grad it reaches."""
    if bias is None:
        return []
    if not torch.compiler.is_compiling():
        return grad_tensors(bias)
    return _traced_params(bias)


def _traced_params(bias: ScoreModifier) -> list[torch.Tensor]:
    """:func:`_bias_params` while torch.compile traces (Dynamo models functions and modules without
    the attributes a general walk reads): parameters, dense tensors and what a function captures."""
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
