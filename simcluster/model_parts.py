"""The optional parts of a transformer layer that ``model:`` names by set: which linears carry
a bias (``model.bias``) and which query/key norm a model has (``model.qk_norm``)."""

from __future__ import annotations

from typing import Any

#: the linears a bias can sit on (``model.bias``), in the order a model's tensors run
BIAS_PARTS = ("qkv", "attn_out", "mlp", "lm_head")
#: ``bias: true``: every linear of the layers; no model simcluster reads that has them adds
#: one to its LM head but GPT-J, CodeGen and Phi, which list it
_LAYER_BIASES = ("qkv", "attn_out", "mlp")
#: the query/key norms ``model.qk_norm`` tells apart (by their weights; the pass is the same)
QK_NORMS = ("none", "shared", "per_head", "whole", "weightless")


def bias_parts(value: Any) -> tuple[str, ...]:
    """``model.bias`` as its parts: true is every linear of the layers, false none, a name or
    a list those parts (in :data:`BIAS_PARTS` order; an unknown name is kept, for the model's
    checks to refuse by field)."""
    if value is None or value is False:
        return ()
    if value is True:
        return _LAYER_BIASES
    many = isinstance(value, (list, tuple, set, frozenset))
    names = [str(v) for v in value] if many else [str(value)]
    return tuple(p for p in BIAS_PARTS if p in names) + tuple(sorted({n for n in names if n not in BIAS_PARTS}))
