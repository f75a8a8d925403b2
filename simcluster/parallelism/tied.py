"""Tied word embeddings across pipeline stages: the extra gradient all-reduce they need.

With ``model.tied_embeddings`` and the embedding and the LM head on different pipeline stages,
each of the two stages holds its own copy of the V x h word-embedding matrix (split over tp).
After the data-parallel gradient reduction and before the optimizer, the frameworks all-reduce
that matrix's gradient between the first and the last stage, blocking:

- Megatron-LM 2021 ``_allreduce_embedding_grads`` and Megatron-Core ``finalize_model_grads``
  (``_allreduce_word_embedding_grads``) over the "embedding group" {first stage, last stage};
- nanotron ``parallel/tied_parameters.py`` ``sync_tied_weights_gradients`` (after the DP sync).

The group pairs ranks of equal tp/cp/dp coordinates (``Layout.tied_pair``), so it is a
2-rank all-reduce of V*h/tp elements at the gradient wire precision. V-shaped schedules
(zbv, dualpipev) place embedding and head on stage 0 and need no sync. Multi-token
prediction modules (DeepSeek-V3) embed the next tokens with the main model's embedding, so the
last stage keeps a copy of it and synchronises its gradient the same way, tied or not
(Megatron-Core shares the MTP embedding with the first stage's).
"""

from __future__ import annotations

from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.placement import Chunk

GROUP = "embd"
NAME = "embedding_grad_all_reduce"


def tied_sync_params(model: ModelSpec, layout: Layout, chunks: list[list[Chunk]]) -> list[float]:
    """Per pipeline stage, elements per GPU of the tied embedding gradient it all-reduces with
    its partner stage (0 for stages that take no part)."""
    out = [0.0] * layout.pp
    if not (model.tied_embeddings or model.mtp_layers) or layout.pp < 2:
        return out
    emb = [s for s, cs in enumerate(chunks) if any(c.embedding for c in cs)]
    head = [s for s, cs in enumerate(chunks) if any(c.head for c in cs)]
    if emb != [0] or head != [layout.pp - 1]:
        return out  # both copies on one stage (V schedules): nothing to synchronise
    elements = model.vocab * model.hidden / layout.tp
    out[0] = out[-1] = elements
    return out
