"""Scenario builders for engine tests: balanced pipelines on an ideal network, and the
per-layer kernel work of a scenario without running the engine."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from simcluster.compute import KernelModel
from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.hardware import load_profile
from simcluster.parallelism.layer import LayerBuilder
from simcluster.parallelism.segments import Compute, Segment
from simcluster.parallelism.shapes import Shapes
from simcluster.scenario import scenario_from_dict


def pipeline_scenario(
    p: int, m: int, schedule: str, v: int = 1, layers: int | None = None, **extra: Any
) -> dict:
    """A pure-pipeline GPT-style scenario with a tiny vocabulary (balanced stages)."""
    chunks = 2 if schedule in ("zbv", "zbv-fixed", "v-half", "v-min", "v-auto", "dualpipev") else v
    layers = layers or 2 * p * chunks
    data = {
        "name": f"pipe-{schedule}",
        "model": {
            "layers": layers,
            "hidden": 4096,
            "heads": 32,
            "ffn": 16384,
            "vocab": 8,
            "mlp": "gelu",
            "norm": "layernorm",
        },
        "cluster": {
            "hardware": "dgx-h100",
            "gpus": p,
            "gpus_per_node": min(p, 8),
            "network": "ideal",
        },
        "parallel": {"pp": p, "schedule": schedule, "vpp": v},
        # the 16-bit gradients kept all step (grad_16bit_freed step): no gradient transient on
        # the stash, whose peaks these pipelines count in microbatches
        "training": {
            "seq_len": 1024, "micro_batch": 1, "global_batch": m, "precision": "bf16",
            "grad_16bit_freed": "step",
        },
        "overlap": {"dp_grad_reduce": True, "param_gather": True},
    }
    return merge_sections(data, **extra)


def gpt_model(layers: int, hidden: int, vocab: int, heads: int = 16, **extra: Any) -> dict:
    """A GPT-style model section: GeLU MLP of 4h, LayerNorm; ``extra`` adds or overrides keys."""
    return {
        "layers": layers, "hidden": hidden, "heads": heads, "ffn": 4 * hidden, "vocab": vocab,
        "mlp": "gelu", "norm": "layernorm", **extra,
    }


def merge_sections(data: dict, **sections: dict) -> dict:
    """Update ``data``'s sections in place with ``sections`` (one level deep) and return it."""
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return data


def run(data: dict, **kw: Any):
    return simulate(scenario_from_dict(data), **kw)


def layer_builder(data: dict) -> LayerBuilder:
    """The segment builder of a scenario dict (layer, embedding and head work, no engine)."""
    sc = scenario_from_dict(data)
    ctx = build_context(sc)
    km = KernelModel.of_training(ctx.profile, sc.training)
    return LayerBuilder(Shapes(ctx.model, ctx.layout, sc.training), km, sc)


def compute_seconds(segments: Iterable[Segment]) -> float:
    """Total compute time of some segments (communication excluded)."""
    return sum(s.seconds for s in segments if isinstance(s, Compute))


def local_attention_model(layers: int, **extra: Any) -> dict:
    """A small model for sliding-window and chunked-attention tests (hidden 2048, 16 heads)."""
    return {"layers": layers, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 32000, **extra}


def local_attention_scenario(name: str, model: dict, seq: int, cp: int = 1, cp_comm: str = "p2p") -> dict:
    """``model`` on one DGX H100 node at ``seq`` tokens, one sequence per data-parallel rank."""
    return {
        "name": name,
        "model": model,
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"cp": cp, "cp_comm": cp_comm},
        "training": {"seq_len": seq, "micro_batch": 1, "global_batch": 8 // cp, "precision": "bf16"},
    }


def attention_core_seconds(res: Any, layer: int) -> float:
    """Rank 0's forward attention-core time on ``layer`` (the fused kernel's event)."""
    ev = res.events
    core = ev[(ev["rank"] == 0) & (ev["name"] == "attn_core") & (ev["layer"] == layer) & (ev["kind"] == "forward")]
    return float((core["end_s"] - core["start_s"]).iloc[0])


def deepspeed_bucket_doc(name: str, zero: int, precision: str, gpus: int, **dp: Any) -> dict:
    """A small DeepSpeed data-parallel layout whose bucket passes last exactly their bytes (no
    SM sharing, no slowest-GPU factor), for the tests of its gradient buckets' copies and casts."""
    return {
        "name": name,
        "framework": "deepspeed",
        "model": gpt_model(4, 2048, 32000),
        "cluster": {
            "hardware": "dgx-h100",
            "gpus": gpus,
            "profile": {"efficiency": {"collective_sms": 0}, "gpu": {"speed_spread": 0.0}},
        },
        "parallel": {"zero": zero},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 2 * gpus, "precision": precision},
        **({"dp": dp} if dp else {}),
    }


def checked_unit_build(name: str, spec: Any) -> tuple[list, Any]:
    """A schedule's order for ``spec``, checked, and its replay at unit F, B and W times."""
    from simcluster.schedules import get_schedule
    from simcluster.schedules.check import check_order, check_timeline, replay

    sched = get_schedule(name)
    ops = sched.build(spec)
    check_order(sched, spec, ops)
    timeline = replay(sched, spec, ops, 1.0, 1.0, 1.0)
    check_timeline(sched, spec, timeline)
    return ops, timeline


def peak_chunk_stash(ops: list) -> float:
    """The largest stash over a V schedule's stages in stage microbatches, the Controllable
    Memory paper's accounting: each chunk's F stashes half a stage's activations, its W frees
    them."""
    from simcluster.memory_report import activation_walk

    return max(activation_walk(stage, [0.5, 0.5]) for stage in ops)


def gemm_tflops(profile: str, precision: str, m: int, n: int, k: int) -> float:
    """A shipped profile's rate for one m x n x k GEMM, launch gap excluded, as GEMM benchmarks
    report it (2 m n k FLOPs over the kernel's time)."""
    km = KernelModel(load_profile(profile), precision)
    return 2 * m * n * k / (km.gemm(m, n, k) - km.launch_s) / 1e12
