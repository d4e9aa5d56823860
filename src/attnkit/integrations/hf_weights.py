"""When attnkit's Hugging Face attention function must return the attention weights.

transformers' eager attention always returns the weights, and models pick them up in one of three
ways; attnkit returns them (a weight-returning backend runs) whenever one of them asks:

1. ``output_attentions=True`` passed down to the attention function in its kwargs;
2. ``@capture_outputs`` models (GPT-2, OPT, SigLIP, … in transformers ≥ 5) pass nothing down: a hook
   takes the weights from the layer's return value while the output collector asks for an
   ``*attentions`` key (:func:`weights_collected`);
3. layers whose ``forward`` takes ``output_attentions`` as a named argument and keeps it (Falcon's
   attention and decoder layers) return whatever the attention function gave.

For 3, every module of a model that asks for an attnkit implementation name and whose ``forward``
names an ``output_attentions`` parameter gets a forward pre-hook that records the value it was
called with (a :mod:`contextvars` stack, so threads and nested layers each see their own) and a
forward hook that drops it again; :func:`layer_wants_weights` reads the innermost value that was
set. The layers' hooks go on when the model first runs (:func:`watch` is called while transformers
checks the model's implementation name, before its layers exist; layers added after that first
forward are not watched). They read the call's own arguments, so
a wrapper around the registered attention function, gradient-checkpoint recomputation and
generation see the same flag. A ``None`` flag on a ``PreTrainedModel`` means its
``config.output_attentions``, as the models resolve it.

Under ``torch.compile`` nothing is recorded (Dynamo cannot trace a context variable) and only 1 and
2 apply.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import weakref

import torch
from torch import nn

# innermost last: the output_attentions value of each running layer that names one (None: not given)
_FLAGS: contextvars.ContextVar[tuple[bool | None, ...]] = contextvars.ContextVar("attnkit_hf_output_attentions", default=())
_WATCHED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # models with the installing pre-hook
_WALKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # models whose layers got hooks
_HOOKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # layers with the recording hooks


def weights_collected() -> bool:
    """Whether transformers' output capture is collecting attention weights for the running forward.

    The collector is private API: if it moves, only the kwargs and the layer flags count."""
    try:
        from transformers.utils.output_capturing import _active_collector

        collected = _active_collector.get()
    except Exception:  # pragma: no cover - depends on the transformers version
        return False
    return isinstance(collected, dict) and any(k.endswith("attentions") for k in collected)


def layer_wants_weights() -> bool:
    """The innermost running layer's ``output_attentions`` (False when none set one, or while compiling)."""
    if torch.compiler.is_compiling():
        return False
    return next((f for f in reversed(_FLAGS.get()) if f is not None), False)


def wants_weights(kwargs: dict) -> bool:
    """Whether an attention call with these kwargs must return weights (see the module docstring)."""
    return bool(kwargs.get("output_attentions", False)) or weights_collected() or layer_wants_weights()


def watch(model: nn.Module) -> None:
    """Record ``output_attentions`` for ``model`` from now on and for its layers from its first
    forward on, when they exist (idempotent)."""
    if model in _WATCHED:
        return
    _WATCHED.add(model)
    model.register_forward_pre_hook(_enter_model, with_kwargs=True)
    model.register_forward_hook(_pop, always_call=True)


def _enter_model(model: nn.Module, args: tuple, kwargs: dict) -> None:
    if torch.compiler.is_compiling():
        return
    if model not in _WALKED:  # once: walking every module on every forward would cost per decoding step
        _WALKED.add(model)
        for layer in model.modules():  # hooks added to other modules fire from their next call on: this one
            if layer not in _WATCHED and layer not in _HOOKED and _signature(type(layer)) is not None:
                _HOOKED.add(layer)
                layer.register_forward_pre_hook(_push, with_kwargs=True)
                layer.register_forward_hook(_pop, always_call=True)
    _push(model, args, kwargs, from_config=True)


@functools.lru_cache(maxsize=None)
def _signature(cls: type) -> inspect.Signature | None:
    """The signature of ``cls.forward`` (without ``self``) if it names ``output_attentions``, else None."""
    try:
        sig = inspect.signature(cls.forward)
    except (TypeError, ValueError):  # pragma: no cover - builtins or odd callables
        return None
    p = sig.parameters.get("output_attentions")
    if p is None or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
        return None
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def _push(layer: nn.Module, args: tuple, kwargs: dict, from_config: bool = False) -> None:
    if torch.compiler.is_compiling():
        return
    flag = kwargs.get("output_attentions")
    sig = _signature(type(layer))
    if flag is None and args and sig is not None:  # passed by position
        try:
            flag = sig.bind_partial(*args, **kwargs).arguments.get("output_attentions")
        except TypeError:  # arguments forward does not take: the call itself will say so
            flag = None
    if flag is None and from_config:  # how PreTrainedModels resolve it
        flag = getattr(getattr(layer, "config", None), "output_attentions", None)
    _FLAGS.set(_FLAGS.get() + (None if flag is None else bool(flag),))


def _pop(layer: nn.Module, args: tuple, output: object) -> None:
    if torch.compiler.is_compiling():
        return
    flags = _FLAGS.get()
    if flags:
        _FLAGS.set(flags[:-1])
