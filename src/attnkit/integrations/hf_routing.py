"""Refuse Hugging Face models that would accept ``attn_implementation="attnkit"`` and never use it.

transformers checks only that a requested implementation *name* is registered. A model whose
attention layers compute attention themselves (Bloom, GPT-Neo, DeBERTa, … — those that never call
``ALL_ATTENTION_FUNCTIONS.get_interface``) still builds its mask through the mask registry under
that name. For Bloom the bool mask attnkit registers (True = attend) is then *added* to the scores as
+1/0, so every token sees the future, silently. Such a model must fail at load, not run wrong.

There is no reliable flag for this (``_supports_attention_backend`` is False on BART, which
routes). transformers itself decides whether ``set_attn_implementation`` may switch a model by
reading the source of the model's module (``PreTrainedModel._can_set_attn_implementation``): a
module that defines an ``*Attention*(nn.Module)`` class but never names ``ALL_ATTENTION_FUNCTIONS``
cannot route; nor can one that picks an attention class from a table keyed by the implementation
name (GIT, SAM, Bark: a ``KeyError: 'attnkit'`` from deep inside the model otherwise).
:func:`routes_through_interface` applies that reading, and :func:`install` makes
every ``PreTrainedModel`` run it when one of attnkit's names is requested — at ``__init__`` of the
model and of each sub-model (vision tower, text tower), before any weights are loaded. The same
moment starts :func:`attnkit.integrations.hf_weights.watch` on the model.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys

from . import hf_weights

_ATTENTION_CLASS = re.compile(r"^class \w*Attention\w*\(nn\.Module\):", re.MULTILINE)
# GIT, SAM, Bark, …: one attention class per implementation name, looked up in a table (KeyError otherwise)
_CLASS_TABLE = re.compile(r"ATTENTION_CLASSES\[\s*(config\.)?_?attn_implementation")
_NAMES: set[str] = set()  # implementation names registered by attnkit.integrations.hf.register
_MARK = "_attnkit_routing_check"


def routes_through_interface(cls: type) -> bool:
    """Whether model class ``cls`` sends its attention through transformers' attention interface.

    True when the source of its module cannot be read (a model defined in a notebook): we cannot
    tell, and transformers' own check would refuse to switch such a model anyway.
    """
    module = sys.modules.get(cls.__module__)
    if module is None:
        return True
    try:
        code = inspect.getsource(module)
    except (OSError, TypeError):
        return True
    if _CLASS_TABLE.search(code):
        return False
    if not _ATTENTION_CLASS.search(code):
        return True  # no attention layer of its own: a wrapper around sub-models, checked on their own
    return "ALL_ATTENTION_FUNCTIONS" in code


def check_model_class(cls: type, name: str) -> None:
    """Raise ValueError if ``cls`` would ignore attention implementation ``name``."""
    if not routes_through_interface(cls):
        raise ValueError(
            f'attn_implementation="{name}" cannot be used with {cls.__name__}: its attention layers '
            f"({cls.__module__}) compute attention themselves instead of calling transformers' attention "
            "interface, so attnkit would never run and the mask built for it would be misread. Load it "
            'with attn_implementation="eager" or "sdpa" instead.'
        )


def install(name: str) -> None:
    """Make ``PreTrainedModel`` check every model that asks for ``name`` (idempotent)."""
    from transformers import PreTrainedModel

    _NAMES.add(name)
    original = PreTrainedModel.get_correct_attn_implementation
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        if isinstance(requested_attention, str) and requested_attention in _NAMES:
            check_model_class(type(self), requested_attention)
            hf_weights.watch(self)  # layers that keep output_attentions (Falcon): see hf_weights
        return original(self, requested_attention, is_init_check)

    setattr(get_correct_attn_implementation, _MARK, True)
    PreTrainedModel.get_correct_attn_implementation = get_correct_attn_implementation
