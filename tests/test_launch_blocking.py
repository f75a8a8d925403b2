"""``training.launch_blocking``: ``CUDA_LAUNCH_BLOCKING=1``, every kernel launch synchronous.

Sources: the CUDA C++ Programming Guide, "Asynchronous Concurrent Execution" (kernel launches
return before the kernel completes; setting ``CUDA_LAUNCH_BLOCKING`` to 1 disables that
asynchronicity for debugging); BigScience ``train/tr11-176B-ml/tr11-176B-ml.slurm`` (``export
CUDA_LAUNCH_BLOCKING=1``: "do not remove or the training will hang") and
``chronicles-prequel.md`` (measured 0-6%: 200B on 80 GPUs 91.04 vs 97.20 TFLOPs, 160 GPUs
84.59 vs 84.44 and 90.29 vs 90.25); DeepSpeed 0.6.5 ``runtime/bf16_optimizer.py``
``update_hp_grads`` (a Python loop over the parameters: ``hp_grad.data.add_(lp.grad.data.to(
hp_grad.dtype).view(hp_grad.shape))``, a cast and an add per tensor after every backward);
transformers ``modeling_bloom.py`` (a BloomBlock's 12 parameter tensors: two LayerNorms' weight
and bias, query_key_value, dense, dense_h_to_4h and dense_4h_to_h, each with a bias).
"""

from __future__ import annotations

import pytest
from conftest import make_scenario
from engine_helpers import layer_builder, run

from simcluster.hardware import load_profile
from simcluster.importers import ImportOptions, import_config
from simcluster.parallelism.host import HP_GRAD_OPS, TE_MODULE_OPS, segment_cost
from simcluster.parallelism.segments import Compute

#: a BLOOM-shaped block (LayerNorm with biases, biased linears, GeLU, ALiBi), small
BLOCK = {
    "name": "bloomish", "layers": 2, "hidden": 1024, "heads": 8, "ffn": 4096, "vocab": 1024,
    "mlp": "gelu", "norm": "layernorm", "bias": True, "position": "alibi", "tied_embeddings": True,
}  # fmt: skip
US = 1e-6


def _deepspeed(blocking: bool, m: int = 2) -> dict:
    data = make_scenario(
        model=BLOCK,
        cluster={"hardware": "dgx-a100", "gpus": 8},
        parallel={"tp": 1, "pp": 1, "zero": 1},
        training={
            "seq_len": 2048, "micro_batch": 1, "global_batch": 8 * m, "precision": "bf16",
            "flash_attention": False, "launch_blocking": blocking,
        },
    )  # fmt: skip
    data["framework"] = "deepspeed"
    return data


def _computes(data: dict, phase: str) -> dict[str, Compute]:
    return {s.name: s for s in layer_builder(data).layer(0, phase) if isinstance(s, Compute)}


def test_each_forward_segment_takes_its_gpu_time_plus_its_host_time():
    plain, blocked = _computes(_deepspeed(False), "F"), _computes(_deepspeed(True), "F")
    assert plain.keys() == blocked.keys()
    for name, seg in plain.items():
        assert blocked[name].seconds == pytest.approx(seg.seconds + seg.host)
        assert blocked[name].host == 0.0
        assert dict(blocked[name].work.parts).get("host", 0.0) == pytest.approx(seg.host)
    # the four dense segments' Python ops (parallelism/host.py): 4 modules at 2.7 ops each,
    # plus 2 (QKV glue), 4 (output projection's bias-dropout-add) and 4 (the MLP's): 20.8 ops
    # at dgx-a100's 13.48 us each = 280.38 us per layer forward
    ops = sum(segment_cost(n, "F", 0).python_ops for n in ("attn_qkv", "attn_core", "attn_out", "mlp"))
    assert ops == pytest.approx(4 * TE_MODULE_OPS + 10) == pytest.approx(20.8)
    host_op_us = load_profile("dgx-a100").efficiency.host_op_us
    assert host_op_us == 13.48
    added = sum(b.seconds - plain[n].seconds for n, b in blocked.items())
    assert added == pytest.approx(20.8 * 13.48 * US)


def test_bf16_optimizer_adds_two_blocking_ops_per_parameter_tensor_per_microbatch():
    # a BLOOM block's 12 parameter tensors, 6 per block half: 2 x 6 ops on each weight-gradient
    # segment, at 13.48 us: 161.76 us each, 323.52 us per layer and microbatch
    assert HP_GRAD_OPS == 2
    plain, blocked = _computes(_deepspeed(False), "W"), _computes(_deepspeed(True), "W")
    for name in ("attn_wgrad", "mlp_wgrad"):
        assert blocked[name].seconds - plain[name].seconds == pytest.approx(2 * 6 * 13.48 * US)
    # without the BF16_Optimizer's cast-then-add (fp32 accumulation fused elsewhere) nothing is added
    no_cast = {}
    for blocking in (False, True):
        data = _deepspeed(blocking)
        data["training"]["grad_accum_cast"] = False
        no_cast[blocking] = _computes(data, "W")["mlp_wgrad"].seconds
    assert no_cast[True] == pytest.approx(no_cast[False])


def test_the_step_pays_every_layers_host_time_once_per_microbatch():
    # without blocking the host runs ahead and its time hides under these kernels; with it,
    # the step grows by the layers' host time per microbatch: forward, its recomputation under
    # full recompute, backward (input and weight gradients)
    m = 2
    data_plain, data_blocked = _deepspeed(False, m), _deepspeed(True, m)
    for d in (data_plain, data_blocked):
        d["training"]["recompute"] = "full"
    plain = run(data_plain).summary["step_time_s"]
    blocked = run(data_blocked).summary["step_time_s"]
    lb = layer_builder(_deepspeed(False, m))
    per_layer = 0.0
    for phase, times in (("F", 2), ("B", 1), ("W", 1)):
        per_layer += times * sum(s.host for s in lb.layer(0, phase) if isinstance(s, Compute))
    per_layer += 2 * 2 * 6 * 13.48 * US  # the BF16_Optimizer's ops on both weight-gradient segments
    expected = m * BLOCK["layers"] * per_layer
    assert blocked - plain == pytest.approx(expected, rel=0.05)


def test_default_is_asynchronous():
    data = _deepspeed(False)
    data["training"].pop("launch_blocking")
    assert _computes(data, "F")["mlp"].host > 0  # the host cost stays on the host clock


BLOCKING = "export CUDA_LAUNCH_BLOCKING=1\n"


def _script(setting: str, flags: str = "") -> str:
    """A Megatron launch script of a 2-layer GPT: ``setting`` on the lines before its python
    command, ``flags`` appended to its arguments."""
    args = (
        'ARGS="--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 '
        f'--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 16 --bf16{flags}"\n'
    )
    return f"#!/bin/bash\n{args}{setting}python pretrain_gpt.py $ARGS\n"


def _imported(path, script: str):
    """What ``simcluster import megatron`` makes of ``script`` written to ``path``."""
    path.write_text(script)
    return import_config("megatron", path, ImportOptions(cluster="dgx-a100", nodes=1))


def test_a_launch_script_exporting_it_imports_as_launch_blocking(tmp_path):
    out = _imported(tmp_path / "run.sh", _script(BLOCKING))
    assert out.scenario["training"]["launch_blocking"] is True
    assert any("CUDA_LAUNCH_BLOCKING=1" in n for n in out.notes)
    out = _imported(tmp_path / "run.sh", _script(""))
    assert "launch_blocking" not in out.scenario["training"]


def test_run_names_launch_blocking_as_what_exposes_the_host(cli, tmp_path):
    # a 1024-wide block's kernels are short: the blocking host time is well over 5% of its step
    import yaml

    path = tmp_path / "blocking.yaml"
    path.write_text(yaml.safe_dump(_deepspeed(True)))
    res = cli("run", str(path))
    assert res.code == 0, res.err
    assert "host-bound" in res.out and "training.launch_blocking" in res.out
    assert "training.cuda_graphs" not in res.out


def test_no_collective_overlaps_compute_under_launch_blocking():
    """CUDA_LAUNCH_BLOCKING=1 makes an NCCL collective's kernel launch wait until it has run, so
    the thread that issues a gradient bucket's reduction issues no compute beside it: the
    overlaps a preset turns on are off (Megatron-Core's DP gradient reduce-scatter no longer
    hides under the backward), and one the scenario writes true is refused."""
    from simcluster.errors import UserError
    from simcluster.scenario import scenario_from_dict

    def megatron(blocking: bool) -> dict:
        data = _deepspeed(blocking)
        data["framework"] = "megatron-core"
        data["model"].update(hidden=4096, heads=32, ffn=16384, layers=8)
        data["cluster"]["gpus"] = 16  # dp 16 over two nodes: the reduction is worth hiding
        data["training"]["global_batch"] = 32
        return data

    assert scenario_from_dict(megatron(False)).overlap.dp_grad_reduce  # the preset's
    sc = scenario_from_dict(megatron(True)).overlap
    assert not (sc.dp_grad_reduce or sc.param_gather or sc.tp_comm or sc.tp_grad_async or sc.pp_comm)
    # the blocking step pays the DP reduction the asynchronous one hides
    hidden = megatron(False)
    exposed = {**hidden, "overlap": {"dp_grad_reduce": False}}
    hide = run(exposed).summary["step_time_s"] - run(hidden).summary["step_time_s"]
    assert hide > 0.01
    blocked = megatron(True)
    blocked_exposed = {**blocked, "overlap": {"dp_grad_reduce": False}}
    assert run(blocked).summary["step_time_s"] == pytest.approx(run(blocked_exposed).summary["step_time_s"])
    with pytest.raises(UserError, match="launch_blocking") as err:
        scenario_from_dict({**blocked, "overlap": {"dp_grad_reduce": True}})
    assert err.value.field == "overlap.dp_grad_reduce"
    assert "\n" not in str(err.value)


def test_importing_launch_blocking_drops_the_scripts_overlaps(tmp_path):
    overlaps = " --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
    out = _imported(tmp_path / "run.sh", _script(BLOCKING, overlaps))
    assert out.scenario["overlap"]["dp_grad_reduce"] is False
    assert out.scenario["overlap"]["param_gather"] is False
    assert any("overlap.dp_grad_reduce, overlap.param_gather false" in n for n in out.notes)
    out = _imported(tmp_path / "run.sh", _script("", overlaps))
    assert out.scenario["overlap"]["dp_grad_reduce"] is True


@pytest.mark.parametrize(
    ("setting", "blocking"),
    [
        ("export CUDA_LAUNCH_BLOCKING=1\n", True),
        ("CUDA_LAUNCH_BLOCKING=1\nexport CUDA_LAUNCH_BLOCKING\n", True),
        ("declare -x CUDA_LAUNCH_BLOCKING=1\n", True),
        ("CUDA_LAUNCH_BLOCKING=1 ", True),  # an assignment before the command: its environment
        ("CUDA_LAUNCH_BLOCKING=1\n", False),  # a shell variable, not exported: Python never sees it
        ("export CUDA_LAUNCH_BLOCKING=0\n", False),
    ],
)
def test_only_the_programs_environment_sets_launch_blocking(tmp_path, setting, blocking):
    """CUDA reads CUDA_LAUNCH_BLOCKING from the process's environment: a variable the script
    exports, or one assigned on the command line that runs the program (bash: "the environment
    for any simple command ... may be augmented temporarily by prefixing it with parameter
    assignments"); a plain assignment stays the shell's."""
    out = _imported(tmp_path / "run.sh", _script(setting))
    assert out.scenario["training"].get("launch_blocking", False) is blocking
