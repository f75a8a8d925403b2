"""When each framework frees a parameter's 16-bit gradient (``training.grad_16bit_freed``,
simcluster/grad_lifetime.py): kept bytes per parameter and the transient on the stash."""

from __future__ import annotations

import pytest

from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.grad_lifetime import grad_transient_bytes
from simcluster.memory import bytes_per_param, stage_params
from simcluster.memory_report import memory_summary
from simcluster.scenario import scenario_from_dict
from tests.conftest import GPT_LIKE, make_scenario


def _total(bpp) -> float:
    return bpp.params + bpp.grads + bpp.optimizer


def test_kept_bytes_per_parameter_by_lifetime():
    # Ultra-Scale Playbook: 2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 grads) + 12 = 20 B when
    # the bf16 gradient is kept all step (DeepSpeed's BF16_Optimizer under its pipeline engine:
    # clear_lp_grads() only before the next backward)
    assert _total(bytes_per_param("bf16", "adam", True, keep_16bit_grad=True)) == 20
    # Megatron's DDP hook (main_grad.add_(grad); grad = None) and nanotron's accumulator free it:
    # 2 + 4 + 12
    assert _total(bytes_per_param("bf16", "adam", True, keep_16bit_grad=False)) == 18
    # 16-bit main gradients: 2 B whichever way (the .grad is the accumulator or freed into it)
    assert bytes_per_param("bf16", "adam", False, keep_16bit_grad=True).grads == 2
    assert bytes_per_param("bf16", "adam", False, keep_16bit_grad=False).grads == 2


def test_frameworks_set_the_lifetime_their_code_has():
    base = make_scenario(parallel={"tp": 1, "pp": 2})
    by = {
        name: scenario_from_dict({**base, "framework": name}).training.grad_16bit_freed
        for name in ("megatron-core", "megatron-lm-2021", "zero-bubble", "nanotron", "deepspeed", "pytorch-ddp")
    }
    # nanotron FP32GradientAccumulator.backward: loss.backward(), then add and free every .grad;
    # DeepSpeed pipe/engine.py: clear_lp_grads() before each backward; Megatron: the post hook
    assert by == {
        "megatron-core": "add", "megatron-lm-2021": "add", "zero-bubble": "add",
        "nanotron": "backward", "deepspeed": "step", "pytorch-ddp": "add",
    }  # fmt: skip


def _ctx(model=None, **training):
    data = make_scenario(training={"seq_len": 128, "micro_batch": 1, "global_batch": 8, **training})
    if model is not None:
        data["model"] = model
    return build_context(scenario_from_dict(data))


def test_add_holds_one_tensor_at_a_time():
    """Megatron's hook frees each gradient as it is added: the LM head's (V x h, first in the
    backward) or the largest layer tensor at the backward's start, the embedding's (with its
    learned positions) at its end; under the fusion only the embedding makes one."""
    ctx = _ctx(model={**GPT_LIKE, "tied_embeddings": False})
    m, chunk = ctx.model, ctx.chunks[0][0]
    h = m.hidden
    fc1 = h * m.ffn  # GELU: one h x ffn matrix, larger than QKV (3h^2) and the head (V x h)
    assert fc1 > max(3 * h * h, m.vocab * h)
    emb = (m.vocab + m.max_positions) * h
    params = stage_params(m, ctx.layout, [chunk]).total
    assert grad_transient_bytes(m, ctx.layout, ctx.scenario.training, chunk, params) == (2 * fc1, 2 * emb)
    fused = _ctx(grad_accum_fusion=True)
    assert grad_transient_bytes(m, fused.layout, fused.scenario.training, chunk, params) == (0.0, 2 * emb)
    # none in fp32 training, none under ZeRO-3 (its unsharded gradients are its working bytes),
    # none when the 16-bit gradient is kept (static)
    for ctx2 in (_ctx(precision="fp32"), _ctx(grad_16bit_freed="step")):
        assert grad_transient_bytes(m, ctx2.layout, ctx2.scenario.training, chunk, params) == (0.0, 0.0)
    zero3 = build_context(scenario_from_dict(make_scenario(parallel={"tp": 1, "pp": 1, "zero": 3})))
    assert grad_transient_bytes(m, zero3.layout, zero3.scenario.training, chunk, params) == (0.0, 0.0)


def test_a_tied_head_holds_its_gradient_all_backward():
    """With the head tied to the embedding on one stage the weight is one leaf used twice:
    PyTorch's autograd engine sums its two gradients in the leaf's input buffer and runs its
    AccumulateGrad node (the node Megatron's post hook hangs on: grad_acc.register_hook) only
    once both have arrived, so the head's V x h gradient, made first, lives until the
    embedding's backward. At the start: it and fc1's (h x 4h); at the end: it and the
    embedding's word and position gradients (V x h + P x h) before the sum."""
    ctx = _ctx()  # GPT_LIKE ties them
    m, chunk = ctx.model, ctx.chunks[0][0]
    assert m.tied_embeddings and chunk.head and chunk.embedding
    h, v = m.hidden, m.vocab
    params = stage_params(m, ctx.layout, [chunk]).total
    got = grad_transient_bytes(m, ctx.layout, ctx.scenario.training, chunk, params)
    assert got == (2 * (v * h + h * m.ffn), 2 * (v * h + (v + m.max_positions) * h))
    # on two stages the head's copy is its own parameter, freed once added: one tensor again
    two = build_context(scenario_from_dict(make_scenario(
        parallel={"tp": 1, "pp": 2}, training={"seq_len": 128, "micro_batch": 1, "global_batch": 8})))
    first, last = two.chunks[0][0], two.chunks[1][0]
    last_params = stage_params(m, two.layout, [last]).total
    assert grad_transient_bytes(m, two.layout, two.scenario.training, last, last_params) == (2 * h * m.ffn, 0.0)
    first_params = stage_params(m, two.layout, [first]).total
    assert grad_transient_bytes(m, two.layout, two.scenario.training, first, first_params) == (
        2 * h * m.ffn, 2 * (v + m.max_positions) * h)


def test_nanotron_holds_every_bf16_gradient_at_its_backwards_end():
    """nanotron's FP32GradientAccumulator.backward adds and frees the bf16 gradients after the
    whole backward: kept 4 B per parameter (not 6), and at each backward's end all 2P bytes on a
    freed stash. With 128 tokens the stash is far smaller, so that moment is the peak, in the
    simulation and in the memory walk alike."""
    nano = _ctx(grad_16bit_freed="backward")
    kept = _ctx(grad_16bit_freed="step")
    params = stage_params(nano.model, nano.layout, nano.chunks[0]).total
    doc, doc_kept = memory_summary(nano), memory_summary(kept)
    assert doc_kept["grads_bytes"] - doc["grads_bytes"] == pytest.approx(2 * params)
    static = doc["total_bytes"] - doc["activations_bytes"]
    peak = simulate(nano.scenario).summary["peak_memory_bytes"]["max"]
    assert peak == pytest.approx(static + 2 * params, rel=1e-12)
    assert doc["total_bytes"] == pytest.approx(peak, rel=1e-12)
    # the same bytes, kept all step instead, peak higher by the stash the transient sat beside
    assert doc_kept["total_bytes"] > peak
