"""Which tensors that require grad a user's function can reach, and which leaves a result's autograd
graph reaches past a given set of tensors.

A backend that recomputes a bias inside its own backward (blockwise: each tile rebuilt from q, k
and the bias) can hand gradients only to tensors it took as inputs of its ``autograd.Function``.
A user's bias or score function reads trainable tensors from anywhere Python lets it: its closure,
the globals it names (and the attributes of a module it names), its defaults, a
``functools.partial``'s arguments, a bound method's object, a list, dict or plain object holding
them, a helper function it calls. :func:`grad_tensors` follows all of these references, as
Python's garbage collector would, up to :data:`LIMIT` objects.

A reference walk can still miss a tensor (one built inside a C extension, one the function reaches
only on some tiles). :func:`missing_leaves` is the check: evaluate the function under autograd and
walk the result's graph back, stopping at the tensors the walk found; any leaf reached past them
(``AccumulateGrad``, a tensor that requires grad) is one whose gradient would be lost.
"""

from __future__ import annotations

import functools
import numbers
import types

import torch

__all__ = ["LIMIT", "behind", "grad_tensors", "missing_leaves", "reached_past"]

LIMIT = 20_000  # objects (or graph nodes) one walk may visit: a model's whole module tree fits
_ATOMS = (str, bytes, bytearray, numbers.Number, type, types.BuiltinFunctionType, types.CodeType, torch.dtype,
          torch.device)


def grad_tensors(*roots: object) -> list[torch.Tensor]:
    """Every tensor that requires grad reachable from ``roots`` (each once, in walk order)."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    held: list[object] = []  # keeps every visited object alive, so an id() stays unique during the walk
    stack = list(reversed(roots))
    while stack and len(held) < LIMIT:
        o = stack.pop()
        if o is None or isinstance(o, _ATOMS) or id(o) in seen:
            continue
        seen.add(id(o))
        held.append(o)
        if isinstance(o, torch.Tensor):
            if o.requires_grad:
                found.append(o)
            continue  # a tensor's attributes are its own (grad, storage), never another tensor's data
        stack.extend(reversed(_children(o)))
    return found


def _children(o: object) -> list[object]:
    """The objects ``o`` refers to that a function's result may depend on."""
    if isinstance(o, types.ModuleType):
        return []  # a module is entered only through the names a function reads from it (_function)
    if isinstance(o, functools.partial):
        return [o.func, *o.args, *o.keywords.values()]
    if isinstance(o, types.MethodType):
        return [o.__func__, o.__self__]
    if isinstance(o, types.FunctionType):
        return _function(o)
    if isinstance(o, dict):
        return list(o.values())
    if isinstance(o, (list, tuple, set, frozenset)):
        return list(o)
    if isinstance(o, torch.nn.Module):  # its tensors and submodules, and what a subclass stored itself
        return [v for k, v in vars(o).items() if k not in _MODULE_BOOKKEEPING]
    out: list[object] = []
    d = getattr(o, "__dict__", None)
    if isinstance(d, dict):
        out += list(d.values())
    for cls in type(o).__mro__:  # attributes kept in __slots__ have no __dict__ entry
        slots = cls.__dict__.get("__slots__", ())
        out += [getattr(o, n, None) for n in ((slots,) if isinstance(slots, str) else slots)]
    call = type(o).__call__ if callable(o) else None
    if isinstance(call, types.FunctionType):  # a callable object: the code of its __call__ and what it names
        out.append(call)
    return out


# what nn.Module.__init__ stores (hooks, flags); its _parameters, _buffers and _modules are walked
_MODULE_BOOKKEEPING = frozenset(vars(torch.nn.Module())) - {"_parameters", "_buffers", "_modules"}
# libraries whose module-level state holds no tensor of the user's (attnkit's own caches included):
# a function of theirs is walked through its closure and defaults, not its globals
_LIBRARIES = frozenset({"torch", "attnkit", "numpy", "functools", "typing", "builtins"})


def _function(fn: types.FunctionType) -> list[object]:
    """A function's closure cells, defaults, and the globals its code (and code nested in it: a
    lambda, a comprehension) names; for a global that is a module, the attributes named too."""
    out: list[object] = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # an empty cell (a variable not yet assigned when fn was made)
            pass
    out += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    if (fn.__module__ or "").split(".")[0] in _LIBRARIES:
        return out
    names = _names(fn.__code__)
    glob = fn.__globals__
    for n in names:
        if n in glob:
            g = glob[n]
            out.append(g)
            if isinstance(g, types.ModuleType):
                out += [getattr(g, a) for a in names if a != n and hasattr(g, a)]
    return out


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


def _node_of(t: torch.Tensor):
    """The autograd node a use of ``t`` leads to: its grad_fn, or for a leaf its AccumulateGrad."""
    if t.grad_fn is not None:
        return t.grad_fn
    if not t.requires_grad:
        return None  # no node: nothing in a graph leads to it
    with torch.enable_grad():
        return t.view_as(t).grad_fn.next_functions[0][0]  # a leaf's AccumulateGrad node (one per leaf)


def _walk(out: torch.Tensor, stop: set) -> set | None:
    """The autograd nodes of ``out``'s graph reached without entering a node of ``stop``, or None
    when there are more than :data:`LIMIT`."""
    seen: set = set()
    stack = [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen or node in stop:
            continue
        seen.add(node)
        if len(seen) > LIMIT:
            return None
        stack += [nxt for nxt, _ in node.next_functions]
    return seen


def missing_leaves(out: torch.Tensor, given: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """Leaves of ``out``'s autograd graph that are reached without passing through a tensor of
    ``given``, or None when the graph is larger than :data:`LIMIT` nodes (not walked to the end)."""
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        return []
    nodes = _walk(out, {_node_of(t) for t in given})
    if nodes is None:
        return None
    return [n.variable for n in nodes if isinstance(getattr(n, "variable", None), torch.Tensor)]


def reached_past(out: torch.Tensor, t: torch.Tensor, others: list[torch.Tensor]) -> bool | None:
    """Does ``out``'s graph reach ``t`` without passing through a tensor of ``others``? (None: too large.)"""
    if not isinstance(out, torch.Tensor) or out.grad_fn is None:
        return False
    nodes = _walk(out, {_node_of(o) for o in others if o is not t})
    return None if nodes is None else _node_of(t) in nodes


def behind(t: torch.Tensor, u: torch.Tensor) -> bool | None:
    """Is ``t`` in the autograd history of ``u`` (so a gradient reaching u flows on to t)? None
    when the history is larger than :data:`LIMIT` nodes."""
    if u.grad_fn is None or t is u:
        return False
    nodes = _walk(u, set())
    return None if nodes is None else _node_of(t) in nodes
