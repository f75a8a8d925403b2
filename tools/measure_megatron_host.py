"""Time the host (Python) side of one Megatron-Core MoE transformer layer, by part, on the CPU.

The simulator costs the host's issuing of a layer in *Python ops*: one op is a
``torch.nn.Linear`` forward (``efficiency.host_op_us``, TransformerEngine issue 2053), and
``parallelism/host.py`` counts how many of them each part of Megatron-Core's MoE layer issues.
This tool checks those counts against Megatron-Core itself: it builds one MoE
``TransformerLayer`` from Megatron-Core's local (non-TransformerEngine) spec at tiny sizes, so
that every kernel is a few microseconds and the wall time is the host's, and times each part's
forward (attention, router, the token dispatcher's six steps, experts) in units of a
``torch.nn.Linear`` forward timed in the same run on the same CPU. The ratio carries over to a
GPU host as far as a CPU kernel's few microseconds stand for a CUDA launch's.

By hand, not in CI (Megatron-Core is not a dependency; 0.16.1 was read)::

    python -m venv /tmp/mvenv && . /tmp/mvenv/bin/activate
    pip install torch==2.13.0 numpy packaging && pip install --no-deps megatron-core==0.16.1
    OMP_NUM_THREADS=1 torchrun --nproc_per_node 1 tools/measure_megatron_host.py --experts 8 --top-k 8

On a CPU build the layer's CUDA stream and event calls (the dispatcher's device-to-host copy
stream) are replaced by no-ops, so the sync itself costs nothing here; with more than one rank
the all-to-alls and the token counts' all-gather run on gloo and their parts include the wait.
Multi-latent attention needs TransformerEngine (the local spec's DotProductAttention takes no
separate key width), so its modules are read from the TE spec instead (``host.AttentionInputs``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist


class _NoStream:
    """A CUDA stream or event on a CPU build: every call returns at once."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def wait_stream(self, *args: object) -> None:
        pass

    def wait_event(self, *args: object) -> None:
        pass

    def record_event(self, event: object = None) -> object:
        return event or _NoStream()

    def record(self, *args: object) -> None:
        pass

    def wait(self, *args: object) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


def _cpu_build_shims(seq: int) -> None:
    """Let Megatron-Core's layer run where torch has no CUDA."""
    stream = _NoStream()
    torch.cuda.Stream = _NoStream  # type: ignore[misc, assignment]
    torch.cuda.Event = _NoStream  # type: ignore[misc, assignment]
    torch.cuda.current_stream = lambda *a, **k: stream  # type: ignore[assignment]
    torch.cuda.stream = lambda s: contextlib.nullcontext()  # type: ignore[assignment]
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    import megatron.core.fusions.fused_softmax as fused_softmax
    import megatron.core.tensor_parallel as tensor_parallel
    import megatron.core.transformer.moe.moe_utils as moe_utils
    import megatron.core.transformer.moe.token_dispatcher as token_dispatcher

    mask = torch.triu(torch.ones(seq, seq), diagonal=1).bool()
    fused_softmax.get_default_causal_mask = lambda sq: mask

    class _Rng:
        def fork(self, *args: object, **kwargs: object) -> contextlib.AbstractContextManager:
            return contextlib.nullcontext()

    tensor_parallel.get_cuda_rng_tracker = lambda *a, **k: _Rng()
    # 0.16.1 reads this name only when TransformerEngine imported
    moe_utils.te_general_gemm = None

    def to_host(tensor: object, as_numpy: bool = False, record_stream: bool = False) -> object:
        # the GPU path's copy to the host (and to numpy for the all-to-all's split sizes)
        if torch.is_tensor(tensor):
            host = tensor.to(torch.device("cpu"), non_blocking=True)
            return host.numpy() if as_numpy else host
        return tensor

    token_dispatcher.maybe_move_tensor_to_cpu = to_host


def _layer(args: argparse.Namespace, ranks: int) -> torch.nn.Module:
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=ranks)
    config = TransformerConfig(
        num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2,
        ffn_hidden_size=64, moe_ffn_hidden_size=32, num_moe_experts=args.experts * ranks,
        moe_router_topk=args.top_k, moe_token_dispatcher_type=args.dispatcher, moe_aux_loss_coeff=1e-3,
        moe_router_load_balancing_type="aux_loss", gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, normalization="RMSNorm", add_bias_linear=False,
        qk_layernorm=args.qk_norm, use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
        expert_model_parallel_size=ranks, moe_router_dtype="fp32", moe_grouped_gemm=False,
    )  # fmt: skip
    spec = get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts, moe_grouped_gemm=False, qk_layernorm=args.qk_norm,
        normalization="RMSNorm",
    )  # fmt: skip
    return build_module(spec, config=config, layer_number=1)


def _timed_parts(layer: torch.nn.Module) -> dict[str, list[float]]:
    """Wrap each part's forward so that its wall time is recorded per call."""
    parts: dict[str, list[float]] = {}

    def wrap(obj: object, method: str, label: str) -> None:
        inner: Callable = getattr(obj, method)

        @functools.wraps(inner)
        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            parts.setdefault(label, []).append(time.perf_counter() - start)
            return out

        setattr(obj, method, timed)

    mlp = layer.mlp
    wrap(layer.self_attention, "forward", "attention")
    wrap(mlp.router, "forward", "router")
    steps = ("dispatch_preprocess", "token_dispatch", "dispatch_postprocess", "combine_preprocess",
             "token_combine", "combine_postprocess")  # fmt: skip
    for step in steps:
        if hasattr(mlp.token_dispatcher, step):
            wrap(mlp.token_dispatcher, step, step)
    wrap(mlp.experts, "forward", "experts (one MLP per expert)")
    return parts


def _timed_backward(layer: torch.nn.Module) -> dict[str, list[float]]:
    """Record each part's backward wall time, from autograd reaching its outputs' gradients
    (a full backward pre-hook) to its inputs' (a full backward hook); the rest of the layer's
    backward (norms, residual glue) is the layer's total less these."""
    parts: dict[str, list[float]] = {}
    mlp = layer.mlp
    for module, label in ((layer.self_attention, "attention backward"), (mlp, "MoE block backward"),
                          (mlp.router, "router backward"), (mlp.experts, "experts backward")):  # fmt: skip
        started: list[float] = []

        def pre(_m: object, _g: object, started: list[float] = started) -> None:
            started.append(time.perf_counter())

        def post(_m: object, _gi: object, _go: object, started: list[float] = started, label: str = label) -> None:
            parts.setdefault(label, []).append(time.perf_counter() - started.pop())

        module.register_full_backward_pre_hook(pre)
        module.register_full_backward_hook(post)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experts", type=int, default=8, help="local experts per rank")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--dispatcher", default="alltoall", choices=("alltoall", "allgather"))
    parser.add_argument("--qk-norm", action="store_true")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backward-parts", action="store_true",
                        help="also time the attention's, the MoE block's, the router's and the experts' backward")  # fmt: skip
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    ranks, seq = dist.get_world_size(), 32
    _cpu_build_shims(seq)
    layer = _layer(args, ranks)
    parts = _timed_parts(layer)
    backward_parts = _timed_backward(layer) if args.backward_parts else {}
    x = torch.randn(seq, 1, 64, requires_grad=True)
    linear, rows = torch.nn.Linear(64, 64), torch.randn(seq, 64)
    for _ in range(20):  # warm up: caches, first-call paths
        layer(x, attention_mask=None)[0].sum().backward()
    parts.clear()
    backward_parts.clear()
    forward, backward, unit = [], [], []
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        out = layer(x, attention_mask=None)[0]
        mid = time.perf_counter()
        out.sum().backward()
        end = time.perf_counter()
        forward.append(mid - start)
        backward.append(end - mid)
        start = time.perf_counter()
        for _ in range(10):
            linear(rows)
        unit.append((time.perf_counter() - start) / 10)
    if dist.get_rank() == 0:
        one = statistics.median(unit)
        print(f"{ranks} rank(s), {args.experts} local experts, top-{args.top_k}, {args.dispatcher} dispatcher,"
              f" grouped-query attention{' with q/k norm' if args.qk_norm else ''}")  # fmt: skip
        print(f"torch.nn.Linear forward (the unit): {one * 1e6:.1f} us")
        rows_out = [("layer forward", forward), ("layer backward (autograd)", backward), *parts.items(),
                    *backward_parts.items()]  # fmt: skip
        for name, times in rows_out:
            t = statistics.median(times)
            print(f"  {name:30s} {t * 1e6:8.0f} us = {t / one:6.1f} units")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
