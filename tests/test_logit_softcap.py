"""Gemma 2's tanh soft-capping of the output logits (``model.logit_softcap``,
parallelism/logit_softcap.py): ``logits = c * tanh(logits / c)`` between the LM head and the loss
(transformers' Gemma2ForCausalLM.forward: ``logits / cap``, ``torch.tanh``, ``logits * cap``),
whose backward is ``grad * (1 - tanh^2(x / c))`` from tanh's saved output. Liger-Kernel's fused
cross-entropy takes ``softcap`` and applies it inside its kernel. The attention scores' cap
(``attn_logit_softcapping``) stays refused: no published measurement of the kernel's rate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import compute_seconds, layer_builder

from simcluster.errors import UserError
from simcluster.flops import token_flops
from simcluster.memory import head_activation_bytes
from simcluster.model import from_hf_config, load_preset
from simcluster.parallelism.layer import LayerBuilder
from simcluster.scenario import scenario_from_dict

FIXTURES = Path(__file__).parent / "fixtures" / "hf"
SEQ, MB, VOCAB, TP = 2048, 2, 51200, 2
LOGITS = SEQ * MB * VOCAB / TP  # elements of this GPU's vocab shard of the logits
HBM = 3.35e12 * 0.85  # dgx-h100: datasheet HBM rate x the profile's memory efficiency


def _raw(cap: float, **training) -> dict:
    return {
        "model": {"layers": 2, "hidden": 2048, "heads": 16, "vocab": VOCAB, "logit_softcap": cap},
        "cluster": {"hardware": "dgx-h100", "gpus": TP},
        "parallel": {"tp": TP},
        "training": {"seq_len": SEQ, "micro_batch": MB, "global_batch": MB, **training},
    }


def _builder(cap: float, **training) -> LayerBuilder:
    return layer_builder(_raw(cap, **training))


def _head_seconds(b: LayerBuilder, phase: str) -> float:
    return compute_seconds(b.head(phase))


@pytest.mark.parametrize(
    ("style", "forward_elements", "backward_elements", "kernels"),
    [
        # one compiled kernel: read x, write c*tanh(x/c); backward reads the gradient and the
        # saved output and writes the gradient
        ("fused", 2, 3, 1),
        # Gemma2ForCausalLM eager: three read+write passes; backward the two scalar ops'
        # read+write and tanh_backward's two reads and one write
        ("eager", 6, 7, 3),
    ],
)
def test_cap_adds_its_passes_over_the_16_bit_logits(style, forward_elements, backward_elements, kernels):
    on, off = _builder(30.0, elementwise=style), _builder(0.0, elementwise=style)
    launch = on.km.launch_s
    for phase, elements in (("F", forward_elements), ("B", backward_elements)):
        added = _head_seconds(on, phase) - _head_seconds(off, phase)
        assert added == pytest.approx(elements * LOGITS * 2 / HBM + kernels * launch, rel=1e-9)
    assert _head_seconds(on, "W") == _head_seconds(off, "W")


def test_a_fused_loss_applies_the_cap_inside_its_kernel():
    """Liger-Kernel's LigerCrossEntropyFunction / fused linear cross-entropy take softcap."""
    on, off = _builder(30.0, fused_cross_entropy=True), _builder(0.0, fused_cross_entropy=True)
    for phase in ("F", "B"):
        assert _head_seconds(on, phase) == _head_seconds(off, phase)


def test_cap_keeps_one_16_bit_copy_of_the_logits_and_no_flops():
    """torch.tanh saves its output for the backward (the scalar divide and multiply save
    nothing); a fused loss keeps nothing of its own. tanh is no matmul: model FLOPs unchanged."""
    def parts(cap: float, fused: bool = False):
        sc = scenario_from_dict(_raw(cap, fused_cross_entropy=fused))
        from simcluster.context import build_context

        ctx = build_context(sc)
        return ctx, sc

    (on, sc_on), (off, sc_off) = parts(30.0), parts(0.0)
    kept = head_activation_bytes(on.model, on.layout, sc_on.training)
    assert kept - head_activation_bytes(off.model, off.layout, sc_off.training) == LOGITS * 2
    (fon, fsc_on), (foff, fsc_off) = parts(30.0, True), parts(0.0, True)
    assert head_activation_bytes(fon.model, fon.layout, fsc_on.training) == head_activation_bytes(
        foff.model, foff.layout, fsc_off.training
    )
    assert token_flops(on.model, SEQ) == token_flops(off.model, SEQ)


def _gemma2(tmp_path: Path, **change) -> Path:
    cfg = {**json.loads((FIXTURES / "gemma-2-9b.json").read_text()), **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_gemma2_final_cap_is_read_and_the_attention_cap_refused(tmp_path):
    """google/gemma-2-9b config.json: final_logit_softcapping 30.0, attn_logit_softcapping 50.0;
    Gemma2Config's defaults are the same when the file leaves them out."""
    m = from_hf_config(_gemma2(tmp_path, attn_logit_softcapping=None))
    assert m.logit_softcap == 30.0
    cfg = json.loads((FIXTURES / "gemma-2-9b.json").read_text())
    del cfg["final_logit_softcapping"]
    cfg["attn_logit_softcapping"] = None
    (tmp_path / "default.json").write_text(json.dumps(cfg))
    assert from_hf_config(tmp_path / "default.json").logit_softcap == 30.0
    assert from_hf_config(_gemma2(tmp_path, attn_logit_softcapping=None, final_logit_softcapping=None)).logit_softcap == 0
    with pytest.raises(UserError) as err:
        from_hf_config(_gemma2(tmp_path))
    assert "attn_logit_softcapping 50.0" in str(err.value) and "null" in str(err.value)
    # Gemma 3 dropped both caps (its config carries them as null)
    assert load_preset("gemma3-12b").logit_softcap == 0


def test_scenario_spells_it_as_gemma2_config_does_and_refuses_a_negative_cap():
    raw = _raw(0.0)
    del raw["model"]["logit_softcap"]
    raw["model"]["final_logit_softcapping"] = 30
    from simcluster.context import build_context

    assert build_context(scenario_from_dict(raw)).model.logit_softcap == 30
    with pytest.raises(UserError) as err:
        build_context(scenario_from_dict(_raw(-1.0)))
    assert "logit_softcap" in err.value.field
