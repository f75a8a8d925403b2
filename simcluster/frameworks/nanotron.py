"""Hugging Face's nanotron as a framework."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.errors import UserError
from simcluster.frameworks.base import Defaults, parallel_flag, zero_stage


def nanotron(raw: Mapping[str, Any]) -> Defaults:
    """nanotron's defaults for a raw scenario (its ZeRO stage picks the gradient path)."""
    # clip_grad_norm over every local fp32 gradient, always multiplied (optim/clip_grads.py);
    # FP32GradientAccumulator.backward frees the bf16 .grad after the whole backward
    # (loss.backward(), then fp32_grad.add_(half_param.grad); half_param.grad = None)
    # its ZeRO-1 unpacking is dp.param_unpack; the rest of its step's host loop was not read
    # for training.step_tail (not charged)
    training = {
        "elementwise": "nanotron", "grad_clip": "local_scale", "grad_16bit_freed": "backward", "step_tail": "none",
    }  # fmt: skip
    parallel = {"partition": "nanotron"}  # pipeline blocks balanced by their compute cost
    # REDUCE_SCATTER mode (sequence parallelism) with tp_linear_async_communication, as its
    # benchmark script and examples run it; its ALL_REDUCE mode has no async row linear
    tp_async = parallel_flag(raw, "sequence_parallel")
    if zero_stage(raw) >= 2:
        # its optimizer shards the states only (optim/zero.py ZeroDistributedOptimizer)
        raise UserError(
            "parallel.zero",
            f"framework nanotron runs ZeRO stages 0 and 1 only (got zero={zero_stage(raw)}); "
            "use zero<=1, or framework torchtitan (FSDP2) or deepspeed for ZeRO-2/3",
        )
    if zero_stage(raw) >= 1:
        # the non-DDP path: one blocking all-reduce of the whole fp32 gradient buffer after the
        # backward, then a blocking all-gather of the bf16 parameters; trainer.py's
        # training_step calls sync_gradients_across_dp(reduce_op=dist.ReduceOp.AVG), an
        # all_reduce(op=reduce_op) of the contiguous fp32 buffer (FP32GradientAccumulator)
        return {
            "training": training,
            "parallel": parallel,
            "dp": {
                "reduce_op": "avg",
                "grad_collective": "all_reduce",
                "bucket_mb": 1.0e6,
                "param_unpack": "per_tensor",
                "zero_grad_buffer": True,
            },
            "overlap": {
                "dp_grad_reduce": False,
                "param_gather": False,
                "tp_comm": False,
                "tp_async": tp_async,
                "tp_grad_async": False,
                "pp_comm": False,
                "pp_p2p": "serial",
            },
        }
    return {
        "training": training,
        "parallel": parallel,
        # torch DDP, bucket_cap_mb 25 MiB of bf16 gradients, all-reduced as their fp32 copies;
        # the fp32 accumulator's buffer is zeroed each step on both paths. The copies go through
        # the comm hook helpers.py registers, get_fp32_accum_hook(reduce_op=dist.ReduceOp.AVG)
        # (optim/gradient_accumulator.py fp32_accum_hook: all_reduce_coalesced(op=reduce_op)),
        # not DDP's own divide-then-SUM
        "dp": {"bucket_mb": 52.4288, "zero_grad_buffer": True, "bucket_copies": True, "reduce_op": "avg"},
        "overlap": {
            "dp_grad_reduce": True,
            "tp_comm": False,
            "tp_async": tp_async,
            "tp_grad_async": False,
            "pp_comm": False,
            "pp_p2p": "serial",
        },
    }
