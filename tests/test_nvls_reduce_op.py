"""The reduction decides whether NCCL may run NVLS / NVLS_TREE (``dp.reduce_op``).

NVIDIA/nccl ``src/enqueue.cc`` ``hostToDevRedOp``: ``case ncclAvg:`` sets
``opFull->op = ncclDevPreMulSum`` (scalar 1/nRanks) for ncclFloat16, ncclBfloat16, ncclFloat32
and ncclFloat64, ``ncclDevSumPostDiv`` for the integer types. ``src/include/device.h``
``ncclNvlsSupported(devRedOp, type)``: ``return devRedOp == ncclDevSum || devRedOp ==
ncclDevMinMax`` for int32/uint32/int64/uint64/fp16/bf16, ``return devRedOp == ncclDevSum`` for
fp32/fp64, ``false`` otherwise; ``ncclPrepareTasks`` sets ``nvlsSupport = comm->nvlsSupport &&
(ncclNvlsSupported(op, type) || func == ncclFuncAllGather)``. NCCL 2.17-2.18 had the same rule as
``NCCL_NVLS_SUPPORTS(type, red)`` in ``src/include/collectives.h`` (red 0 Sum, 2 Max, 3 Min;
PreMulSum 4 and SumPostDiv 5 absent), tested in ``getAlgoInfo`` before NCCL_ALGO_NVLS and
NCCL_ALGO_NVLS_TREE. So an AVG (or PREMUL_SUM) all-reduce takes ring or tree where a SUM one of
the same group would take NVLS.
"""

from __future__ import annotations

import pytest

from simcluster.errors import UserError
from simcluster.frameworks import FRAMEWORKS
from simcluster.hardware import load_profile, profile_from_dict
from simcluster.network import collective_time, describe
from simcluster.network.algorithms import NVLS_REDUCE_OPS, REDUCE_OPS
from simcluster.topology import build_cluster

GiB = 2**30
NVLS_ALGOS = ("nvls", "nvls_tree")


def _h100(n: int, measured: bool = False):
    """DGX H100 nodes (NVLS on); without the profile's measured table unless ``measured``."""
    raw = load_profile("dgx-h100").model_dump()
    if not measured:
        raw["measured"] = {}
    return build_cluster(profile_from_dict(raw), n)


def test_nvls_runs_for_sum_only() -> None:
    # ncclNvlsSupported: ncclDevSum only among the ops a gradient reduction asks for
    assert NVLS_REDUCE_OPS == {"sum"}
    assert set(REDUCE_OPS) == {"sum", "avg", "premul_sum"}


@pytest.mark.parametrize("gpus", [8, 16])  # one node: NVLS; two nodes: NVLS_TREE
@pytest.mark.parametrize("redop", ["avg", "premul_sum"])
def test_an_averaging_all_reduce_takes_ring_or_tree_where_sum_takes_nvls(
    gpus: int, redop: str
) -> None:
    c = _h100(gpus)
    group = list(range(gpus))
    assert describe("all_reduce", 8 * GiB, c, group).algo in NVLS_ALGOS  # the sum nccl-tests time
    assert describe("all_reduce", 8 * GiB, c, group, redop=redop).algo not in NVLS_ALGOS
    # the fastest of what is left: NCCL's tuner minimum over the algorithms it may run
    left = min(collective_time("all_reduce", 8 * GiB, c, group, algo=a) for a in ("ring", "tree"))
    t_avg = collective_time("all_reduce", 8 * GiB, c, group, redop=redop)
    assert t_avg == pytest.approx(left, rel=1e-12)
    assert t_avg > collective_time("all_reduce", 8 * GiB, c, group)  # NVLS was the faster


def test_asking_for_nvls_with_avg_names_ncclnvlssupported() -> None:
    c = _h100(16)
    with pytest.raises(UserError, match="ncclNvlsSupported"):
        collective_time("all_reduce", GiB, c, list(range(8)), algo="nvls", redop="avg")
    with pytest.raises(UserError, match="ncclNvlsSupported"):
        collective_time("all_reduce", GiB, c, list(range(16)), algo="nvls_tree", redop="avg")
    with pytest.raises(UserError, match="did you mean 'avg'"):
        collective_time("all_reduce", GiB, c, list(range(8)), redop="agv")


def test_ops_without_nvls_in_the_model_do_not_depend_on_the_reduction() -> None:
    # simcluster's NVLS plans are all-reduces; a reduce-scatter's choice is the same for any op
    c = _h100(16)
    group = list(range(16))
    for op in ("reduce_scatter", "all_gather"):
        assert collective_time(op, GiB, c, group, redop="avg") == collective_time(op, GiB, c, group)


def test_a_measured_table_keeps_its_sum_reference() -> None:
    # dgx-h100's table is nccl-tests all_reduce_perf (float sum, NVLS on one DGX H100): at its own
    # geometry a sum all-reduce is the measurement; an avg one is the ring/tree model time
    # carried by the same measured/modelled ratio, so slower by model(ring) / model(nvls)
    calibrated, model = _h100(8, measured=True), _h100(8)
    group = list(range(8))
    ratio = collective_time("all_reduce", 8 * GiB, calibrated, group) / collective_time(
        "all_reduce", 8 * GiB, model, group
    )
    avg = collective_time("all_reduce", 8 * GiB, calibrated, group, redop="avg")
    assert avg == pytest.approx(
        ratio * collective_time("all_reduce", 8 * GiB, model, group, redop="avg"), rel=1e-9
    )
    assert describe("all_reduce", 8 * GiB, calibrated, group, redop="avg").algo not in NVLS_ALGOS


@pytest.mark.parametrize("zero", [0, 1])
def test_nanotron_averages_in_the_collective(zero: int) -> None:
    # huggingface/nanotron: ZeRO-0 registers get_fp32_accum_hook(reduce_op=dist.ReduceOp.AVG)
    # (helpers.py init_optimizer_and_grad_accumulator), whose fp32_accum_hook calls
    # dist.all_reduce_coalesced(..., op=reduce_op); ZeRO-1 (no DDP) runs trainer.py
    # training_step's sync_gradients_across_dp(reduce_op=dist.ReduceOp.AVG), an
    # all_reduce(self._contiguous_fp32_grad_buffer, op=reduce_op) (optim/gradient_accumulator.py)
    assert FRAMEWORKS["nanotron"].defaults({"parallel": {"zero": zero}})["dp"]["reduce_op"] == "avg"


def test_which_frameworks_average_in_the_collective() -> None:
    raw = {"parallel": {"pp": 2, "tp": 2}}

    def op(name: str) -> str:
        return FRAMEWORKS[name].defaults(raw).get("dp", {}).get("reduce_op", "sum")

    # Megatron-Core start_grad_sync: ReduceOp.SUM unless ddp_config.average_in_collective
    # (default False; NeMo's and Megatron-Bridge's recipes set it True)
    assert op("megatron-core") == "sum"
    assert op("nemo") == op("megatron-bridge") == "avg"
    # DeepSpeed's allreduce_bucket / average_tensor divide then all-reduce with SUM; torch DDP's
    # reducer scales each gradient by 1/world into its bucket and all-reduces with SUM;
    # FSDP1's _reduce_grad pre/post-divides around a SUM reduce-scatter
    for name in ("deepspeed", "pytorch-ddp", "pytorch-fsdp", "megatron-lm-2021"):
        assert op(name) == "sum", name


def test_the_engine_reduces_gradients_with_dp_reduce_op() -> None:
    # one DGX H100, dp 8 at ZeRO-0: each bucket is one all-reduce over the node's 8 GPUs, NVLS
    # for sum; with avg (nanotron's ReduceOp.AVG) the same buckets, no NVLS, take ring/tree
    # time on an idle network: the reduction ends no sooner and the bytes are the same
    from tests.engine_helpers import gpt_model, run

    def grads(reduce_op: str):
        res = run(
            {
                "model": gpt_model(
                    4, 2048, 1024, bias=True, position="learned", max_positions=2048
                ),
                "cluster": {"hardware": "dgx-h100", "gpus": 8},
                "parallel": {"zero": 0},
                "training": {"seq_len": 1024, "micro_batch": 1, "global_batch": 8},
                "overlap": {"dp_grad_reduce": False},
                "dp": {"reduce_op": reduce_op},
            }
        )
        ev = res.events
        return ev[(ev["group"] == "dp") & (ev["kind"] == "all_reduce")]

    summed, averaged = grads("sum"), grads("avg")
    assert len(summed) == len(averaged) > 0
    assert averaged["bytes"].sum() == summed["bytes"].sum()
    c = _h100(8, measured=True)  # the profile as the engine runs it, measured table included
    for nbytes, t_sum, t_avg in zip(
        summed["bytes"],
        summed["end_s"] - summed["start_s"],
        averaged["end_s"] - averaged["start_s"],
        strict=True,
    ):
        group = list(range(8))
        assert t_sum == pytest.approx(collective_time("all_reduce", nbytes, c, group), rel=1e-6)
        assert t_avg == pytest.approx(
            collective_time("all_reduce", nbytes, c, group, redop="avg"), rel=1e-6
        )
        assert t_avg > t_sum


def test_collective_cli_takes_nccl_tests_reduction(capsys) -> None:
    # nccl-tests' -o sum|avg|mulsum: the command answers for the reduction it is given
    import json

    from simcluster.cli import main

    def row(*extra: str) -> dict:
        assert main(["collective", "all_reduce", "8GiB", "--gpus", "8", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)

    assert row()["algo"] == "nvls"
    assert row("--reduce-op", "avg")["algo"] not in NVLS_ALGOS
    assert (
        row("--reduce-op", "mulsum")
        == row("--reduce-op", "premul_sum")
        == row("--reduce-op", "avg")
    )
    assert main(["collective", "all_reduce", "8GiB", "--gpus", "8", "--reduce-op", "agv"]) == 2
    assert "--reduce-op" in capsys.readouterr().err
