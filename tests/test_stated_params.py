"""model.params: a stated parameter count checked against the shape (simcluster/stated_params.py)."""

import pytest

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict

# Narayanan et al. 2021, Table 1: the 18.4B model is 40 layers, hidden 6144, 48 heads, vocab 51200
NARAYANAN_18B = {"layers": 40, "hidden": 6144, "heads": 48, "vocab": 51200, "mlp": "gelu",
                 "position": "learned", "max_positions": 2048}  # fmt: skip


def _build(model):
    raw = {"model": model, "cluster": {"hardware": "dgx-a100", "gpus": 8},
           "parallel": {"tp": 8, "sequence_parallel": True}, "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8}}  # fmt: skip
    return build_context(scenario_from_dict(raw))


@pytest.mark.parametrize("stated", [{"params_B": 18.4}, {"params": "18.4B"}, {"params": 18.4e9}, {"n_params": "18B"}])
def test_a_stated_count_the_shape_matches_is_accepted(stated):
    ctx = _build({**NARAYANAN_18B, **stated})
    assert ctx.model.params_total() == pytest.approx(18.4e9, rel=0.10)


def test_a_mixture_of_experts_may_state_its_active_or_total_count():
    # Mistral AI: Mixtral 8x7B has 46.7B parameters, 12.9B active per token
    assert _build({"preset": "mixtral-8x7b", "params": "46.7B"}).model.is_moe
    assert _build({"preset": "mixtral-8x7b", "params": "12.9B"}).model.is_moe


def test_a_shape_far_from_the_stated_count_is_one_error_naming_both():
    with pytest.raises(UserError) as err:
        _build({**NARAYANAN_18B, "params_b": 39.1})  # Table 1's next row, with the 18.4B shape
    assert err.value.field == "model.params"
    # 12·l·h² = 18.1B in the layers, 0.6B in untied embeddings of 51200 x 6144
    assert "39.1B" in str(err.value) and "18.8B" in str(err.value)


@pytest.mark.parametrize(
    "model, field",
    [({"params": "lots"}, "model.params"), ({"params": "70B", "params_b": 70}, "model.params_b"),
     ({"params": 18.4}, "model.params")],  # 18.4 parameters: the B is missing
)
def test_a_count_that_does_not_read_is_one_error(model, field):
    with pytest.raises(UserError) as err:
        _build({**NARAYANAN_18B, **model})
    assert err.value.field == field
