"""Simulate random scenarios built from the shipped presets and profiles; keep those that fail.

    python tools/fuzz_scenarios.py --seed 1 --count 300 --out /tmp/fuzz

Each scenario draws a preset (dense or mixture of experts), a profile, the parallel degrees
(tp, pp, cp, ep, etp, ZeRO, sequence parallelism), a schedule, a framework, the sequence, batch,
precision and recomputation, and now and then pipeline flushes, an offloaded optimizer, overlaps,
a slower NIC, a CP algorithm, attention kernel, elementwise style, FP8 recipe, ZeRO-3 shard,
partial recomputation or activation offload, hierarchical CP, hybrid sharding below ZeRO-3,
a parallel attention + MLP block, the Gemma 3 presets and the config.json architecture fields
(chunked attention, NoPE global layers, output norms, Q/K/V biases, final-logit soft-capping); ``--pairs`` makes every draw run F&B pairs. Most draws break a layout rule and are refused
(three in four, 2026-12-03); ``--simulable`` draws again (up to 50 times) until the layout is
accepted, so every minute goes to simulations (a seed then draws other scenarios than without
it; the seeds named in tests were drawn without). A scenario passes when it is refused with a
one-line ``UserError`` or simulates within ``--timeout`` seconds to a finite step, an MFU in
(0, 1), a bubble in [0, 1), a valid timeline (one event at a time per stream) and a sound memory
timeline (no stash below zero or left at the end, the peak `simcluster memory` walks). The others
(a crash, a deadlock, a hang, an absurd number) are written to ``--out`` with the reason.
A draw past ``--max-passes`` layer passes a step (microbatches x layers x passes) is skipped, not
simulated: at ~0.6 ms of wall time a pass (2026-12-03) it would run into the timeout as a large
workload, not as a hang; ``--simulable`` draws again instead.

Real presets at real sizes, unlike tests/test_random_layouts.py's tiny models: this is how a
hang at ~1e5 simulated seconds and two pipeline-flush deadlocks (serial p2p, DualPipe) were
found (2026-11-29). It takes minutes, so it is a tool to run by hand, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import traceback
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from simcluster.context import Context, build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.frameworks.schedules import framework_runs
from simcluster.memory_report import timeline_fault
from simcluster.output.events import validate_events
from simcluster.progress import progress_bar
from simcluster.scenario import scenario_from_dict

DENSE = ["llama3-8b", "llama3-70b", "llama2-7b", "gpt3-175b", "gpt3-1.3b", "llama3.2-1b", "mistral-7b", "qwen2.5-7b",
         "olmo2-7b", "qwen3-8b", "gpt3-13b", "nemotron4-15b", "mpt-7b", "gpt-neox-20b", "bloom-176b", "opt-175b"]  # fmt: skip
MOE = ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "grok-1", "llama4-scout", "mixtral-8x22b"]
# every shipped profile; a new one goes at the end, so earlier seeds keep most of their draws
HARDWARE = ["dgx-h100", "dgx-a100", "dgx-b200", "gb200-nvl72", "aws-p5", "amd-mi300x", "dgx-h200", "hgx-h800",
            "gb300-nvl72", "alps-gh200", "dgx-2-v100", "dgx-b300", "amd-mi325x", "dgx-a100-40gb", "amd-mi355x"]  # fmt: skip
SCHEDULES = [None, "1f1b", "afab", "interleaved", "zb-h1", "zb-h1-ds", "zb-h2", "zbv", "zb-1p", "zb-2p", "zb-auto", "v-half",
             "v-min", "dualpipe", "dualpipev", "looped-bfs", "interleaved-zb", "zbv-fixed", "v-auto",
             "zb-h1-ds-exact"]  # fmt: skip
#: v-auto's parallel.activation_limit, fractions of 1F1B's activations: from below what V-Min's
#: blocks need at large pp (about 1/3: a one-line refusal naming the smallest that fits) to 1
ACTIVATION_LIMITS = [0.3, 0.4, 0.5, 0.6, 0.75, 1.0]
FRAMEWORKS = [None, None, "megatron-core", "nemo", "torchtitan", "nanotron", "deepspeed", "megatron-lm-2021",
              "megatron-bridge", "automodel", "zero-bubble"]  # fmt: skip


def draw(rng: random.Random) -> dict[str, Any]:
    """One random scenario (a dict in the schema's layout)."""
    moe = rng.random() < 0.4
    tp, pp, cp = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8]), rng.choice([1, 1, 2, 4])
    parallel: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "zero": rng.choice([0, 1, 1, 2, 3]),
                                "sequence_parallel": rng.random() < 0.7}  # fmt: skip
    doc: dict[str, Any] = {
        "name": "fuzz",
        "model": rng.choice(MOE if moe else DENSE),
        "cluster": {"hardware": rng.choice(HARDWARE), "gpus": tp * pp * cp * rng.choice([1, 2, 4, 8, 16])},
        "parallel": parallel,
        "training": {
            "seq_len": rng.choice([2048, 4096, 8192, 16384, 32768]), "micro_batch": rng.choice([1, 1, 2]),
            "global_batch": rng.choice([32, 64, 128, 256, 512, 1024]),
            "precision": rng.choice(["bf16", "bf16", "fp16", "fp8"]), "recompute": rng.choice(["none", "selective", "full"]),
        },
    }  # fmt: skip
    if moe:
        parallel["ep"] = rng.choice([1, 2, 4, 8])
        if rng.random() < 0.3:
            parallel["etp"] = rng.choice([1, tp])
    _draw_schedule(rng, parallel)
    framework = rng.choice(FRAMEWORKS)
    if framework:
        doc["framework"] = framework
    if pp > 1 and rng.random() < 0.15:
        doc["training"]["pipeline_flushes"] = 2
    if rng.random() < 0.15:
        doc["training"]["optimizer_offload"] = True
    if rng.random() < 0.2:
        doc["overlap"] = {k: rng.random() < 0.5 for k in ("tp_comm", "dp_grad_reduce", "param_gather")}
    if rng.random() < 0.1:
        doc["cluster"]["nic_gbps"] = rng.choice([100, 200, 800])
    _draw_cta_limits(rng, doc["cluster"])
    _draw_settings(rng, doc)
    return doc


def _draw_cta_limits(rng: random.Random, cluster: dict[str, Any]) -> None:
    """Sometimes NCCL CTA limits: per communicator (Megatron's names) and job-wide."""
    if rng.random() < 0.1:
        names = rng.sample(["dp_cp", "cp", "tp", "pp", "ep", "ep_dp", "embd", "tp_dp_cp"], 3)
        cluster["nccl_communicators"] = {n: {"max_ctas": rng.choice([1, 2, 4, 8])} for n in names}
        if rng.random() < 0.3:
            cluster["nccl_min_nchannels"] = rng.choice([2, 4])


def _draw_schedule(rng: random.Random, parallel: dict[str, Any]) -> None:
    """A pipeline schedule (or the default), with its virtual stages or activation limit."""
    schedule = rng.choice(SCHEDULES)
    if schedule:
        parallel["schedule"] = schedule
    if schedule in ("interleaved", "looped-bfs", "interleaved-zb"):
        parallel["vpp"] = rng.choice([2, 4])
    if schedule == "v-auto":
        parallel["activation_limit"] = rng.choice(ACTIVATION_LIMITS)


def _draw_settings(rng: random.Random, doc: dict[str, Any]) -> None:
    """Now and then a setting beyond the layout: CP algorithm, kernels, FP8 recipe, ZeRO-3
    shard, partial recomputation, activation offload."""
    training, parallel = doc["training"], doc["parallel"]
    if parallel["cp"] > 1 and rng.random() < 0.5:
        parallel["cp_comm"] = rng.choice(["p2p", "all_gather", "a2a"])
    if rng.random() < 0.2:
        training["attention_kernel"] = rng.choice(["fa2", "fa3", "cudnn", "cudnn-9.10", "cudnn-9.13"])
    if rng.random() < 0.1:
        training["flash_attention"] = False
    if rng.random() < 0.15:
        training["elementwise"] = rng.choice(["fused", "eager", "nanotron"])
    _draw_weight_settings(rng, training, parallel["zero"])
    if parallel["zero"] == 3 and rng.random() < 0.4:
        parallel["zero_shard"] = rng.choice([2, 4, 8])
    if training["recompute"] == "full" and rng.random() < 0.4:
        training["recompute_num_layers"] = rng.choice([1, 2, 4])
    if rng.random() < 0.1:
        training["activation_offload_layers"] = rng.choice([1, 4, 8])
    _draw_later_settings(rng, doc)
    _draw_lora(doc)
    _draw_fp8_storage(doc)
    _draw_nvfp4(doc)
    _draw_ub_switches(doc)
    _draw_packing(doc)
    _draw_step_tail(doc)
    _draw_dispatcher(doc)
    _draw_module_offload(doc)


#: Megatron-Core's fine-grained offload names (training.offload_modules)
OFFLOAD_MODULES = ("expert_fc1", "moe_act", "core_attn", "attn_proj", "mlp_norm", "attn_norm", "qkv_linear")


def _draw_module_offload(doc: dict[str, Any]) -> None:
    """Now and then Megatron-Core's fine-grained activation offload of two or three modules
    (attn_proj without core_attn is refused), beside the whole-layer offload or not (refused
    together), sometimes with its cap on copies in flight, from a generator of its own so the
    earlier draws stay the seed's."""
    rng = _seeded_by(doc, salt=0x0FF)
    if rng.random() < 0.3:
        doc["training"]["offload_modules"] = rng.sample(OFFLOAD_MODULES, rng.choice([1, 2, 3]))
        cap = _seeded_by(doc, salt=0xCA9)  # its own generator: the draws above stay the seed's
        if cap.random() < 0.4:
            # Megatron-Core's max in-flight offloads: the compute waits for the copy N layers back
            doc["training"]["offload_max_inflight"] = cap.choice([0, 1, 2])


def _draw_dispatcher(doc: dict[str, Any]) -> None:
    """Now and then DeepEP or HybridEP for the expert all-to-all of an expert-parallel MoE
    (their copies per GPU or NVLink domain, and measured kernel rates where a profile has them),
    sometimes on an SM count of their own, from a generator of its own so the earlier draws stay the seed's."""
    if doc["parallel"].get("ep", 1) == 1:
        return
    rng = _seeded_by(doc, salt=0xDE9)
    if rng.random() < 0.35:
        doc["moe"] = {**doc.get("moe", {}), "dispatcher": rng.choice(["deepep", "hybridep"])}
        if rng.random() < 0.4:
            # the kernels' SMs (moe.dispatch_sms), now and then odd (DeepEP refuses those)
            doc["moe"]["dispatch_sms"] = rng.choice([8, 16, 24, 32, 48, 21])
        if rng.random() < 0.3:
            # group-limited routing (model.router_groups / group_topk), now and then groups that
            # do not split the experts or pick too few of them (refused)
            groups, picked = rng.choice([(8, 4), (4, 2), (8, 3), (16, 8), (7, 2), (8, 1)])
            model = doc["model"] if isinstance(doc["model"], dict) else {"preset": doc["model"]}
            doc["model"] = {**model, "router_groups": groups, "group_topk": picked}


def _draw_packing(doc: dict[str, Any]) -> None:
    """Packed documents (``training.document_tokens``) on one draw in eight, now and then longer
    than the sequence (refused). Its own generator, as :func:`_draw_lora`."""
    rng = _seeded_by(doc, salt=0xD0C)
    if rng.random() < 0.125:
        seq = doc["training"]["seq_len"]
        doc["training"]["document_tokens"] = rng.choice([128, 512, max(seq // 4, 1), seq, 2 * seq])


def _draw_step_tail(doc: dict[str, Any]) -> None:
    """No eager tail (``training.step_tail: none``, an optimizer captured in a graph or a
    framework whose step was not read) on one draw in eight. Its own generator, as
    :func:`_draw_lora`."""
    rng = _seeded_by(doc, salt=0x7A1)
    if rng.random() < 0.125:
        doc["training"]["step_tail"] = "none"


def _draw_weight_settings(rng: random.Random, training: dict[str, Any], zero: int) -> None:
    """The FP8 recipe and how the weights are kept: TE's copies cast every microbatch, FP8
    parameters (Megatron keeps them only beside a sharded optimizer state: zero >= 1), apex's
    master remainders."""
    if training["precision"] == "fp8" and rng.random() < 0.5:
        training["fp8_recipe"] = rng.choice(["delayed", "current", "block"])
    if training["precision"] == "fp8" and rng.random() < 0.3:
        if zero >= 1 and rng.random() < 0.5:
            training["fp8_param_gather"] = True
        else:
            training["fp8_weight_cache"] = False
    if rng.random() < 0.1:
        training["master_weights"] = "remainder"


def _draw_later_settings(rng: random.Random, doc: dict[str, Any]) -> None:
    """Settings whose refusals and interactions the draws above never reach: hierarchical CP
    (a2a+p2p needs cp_a2a), hybrid sharding below ZeRO-3 and the replicas' all-reduce, a
    parallel attention + MLP block on any dense preset and its TP collectives, and when each
    16-bit gradient is freed. (One generator serves a whole run, so a seed draws other scenarios
    than before these were added.)"""
    parallel = doc["parallel"]
    if parallel["cp"] == 4 and rng.random() < 0.2:
        parallel["cp_comm"], parallel["cp_a2a"] = "a2a+p2p", 2
    if parallel["zero"] in (1, 2) and rng.random() < 0.2:
        parallel["zero_shard"] = rng.choice([2, 4, 8])
    if parallel.get("zero_shard") and rng.random() < 0.5:
        doc["zero3"] = {"replica_all_reduce": "last_microbatch"}
    if doc["model"] in DENSE and rng.random() < 0.15:
        doc["model"] = {"preset": doc["model"], "parallel_block": True, "parallel_norms": rng.choice([1, 2])}
        parallel["parallel_block_comm"] = rng.choice(["separate", "gpt-neox", "fused"])
    if rng.random() < 0.2:  # when each 16-bit gradient is freed: its transient on the stash
        doc["training"]["grad_16bit_freed"] = rng.choice(["add", "backward", "step"])
    _draw_model_variants(rng, doc)


def _seeded_by(doc: dict[str, Any], salt: int = 0) -> random.Random:
    """A generator of its own for a late draw, seeded by the scenario drawn so far (and
    ``salt``), so adding the draw leaves the earlier ones the seed's."""
    return random.Random(zlib.crc32(json.dumps(doc, sort_keys=True, default=str).encode()) ^ salt)


def _draw_lora(doc: dict[str, Any]) -> None:
    """LoRA adapters (``lora:``) on one draw in five, the refused combinations (MoE, ZeRO-3)
    drawn too. Its own generator, seeded by the drawn scenario, so the draws before it are
    the ones a seed gave before LoRA was added."""
    rng = _seeded_by(doc)
    if rng.random() < 0.2:
        targets = rng.sample(["qkv", "proj", "fc1", "fc2"], rng.randint(1, 4))
        doc["lora"] = {"rank": rng.choice([8, 16, 64]), "targets": targets, "dropout": rng.choice([0.0, 0.1])}
        if rng.random() < 0.3:  # TransformerEngine's op fuser (inert at tp > 1)
            doc["lora"]["op_fuser"] = True


def _draw_ub_switches(doc: dict[str, Any]) -> None:
    """Megatron-Core's per-linear userbuffers switches on one draw in four with ``overlap.tp_comm``
    (rs_dgrad with reduce-scatter buffers for the linears it acts on; now and then a bulk one,
    refused), and now and then an FP8 buffer for the output projection's forward reduce-scatter
    (``fp8_buf``, userbuffers_traffic.scatters_fp8; half of them an atomic GEMM). Its own generator,
    as :func:`_draw_lora`, so earlier draws stay the seed's."""
    overlap = doc.get("overlap", {})
    rng = _seeded_by(doc, 4)
    if not overlap.get("tp_comm") or rng.random() >= 0.25:
        return
    for column in ("qkv", "fc1"):
        if rng.random() < 0.3:
            overlap[f"tp_comm_disable_{column}"] = True
    if rng.random() < 0.6:
        overlap["tp_comm_rs_dgrad"] = True
        method = rng.choice(["ring_exchange", "ring_exchange", "pipeline", "bulk"])
        overlap["tp_comm_cfg"] = {f"{c}_dgrad": {"method": method} for c in ("qkv", "fc1")}
    if rng.random() < 0.3:  # the output projection's reduce-scatter into an FP8 buffer
        cfg = overlap.setdefault("tp_comm_cfg", {})
        cfg["proj_fprop"] = {"method": rng.choice(["pipeline", "ring_exchange"]), "fp8_buf": True,
                             "atomic_gemm": rng.random() < 0.5}


def _draw_fp8_storage(doc: dict[str, Any]) -> None:
    """FP8 attention and the SwiGLU input kept in FP8, each on about one draw in seven (FP8
    attention's refusals too: a 16-bit precision, a profile without FP8 curves). Its own
    generator, as :func:`_draw_lora`, so earlier draws stay the seed's."""
    rng = _seeded_by(doc, salt=0x5F8)
    if rng.random() < 0.15:
        doc["training"]["fp8_attention"] = True
    if rng.random() < 0.15:
        doc["training"]["activation_fp8_store"] = True


def _draw_nvfp4(doc: dict[str, Any]) -> None:
    """NVFP4 in place of one FP8 draw in eight, half of them with NVFP4 parameters
    (``training.fp4_param``; refused without LoRA, and NVFP4 itself off Blackwell or beside
    FP8 parameters). Its own generator, as :func:`_draw_lora`."""
    training = doc["training"]
    rng = _seeded_by(doc, salt=0xF4)
    if training["precision"] != "fp8" or rng.random() >= 0.125:
        return
    training["precision"] = "nvfp4"
    training.pop("fp8_recipe", None)
    if rng.random() < 0.5:
        training["fp4_param"] = True


#: the dense presets with sliding-window local layers among global ones (Gemma 3)
WINDOWED = ["gemma3-12b", "gemma3-27b"]


def _draw_model_variants(rng: random.Random, doc: dict[str, Any]) -> None:
    """The architecture fields a Hugging Face config.json brings: the Gemma 3 presets (a
    1024-token window, one global layer in six, output norms, q/k norms), Llama 4's chunked
    local attention with NoPE global layers (``attention_chunk``, ``nope_global``), output
    norms (``post_norms``), Q/K/V biases (``qkv_bias``) and Gemma 2's final-logit soft-capping
    (``logit_softcap``), on any preset; the combinations the model refuses are drawn too."""
    if doc["model"] in DENSE and rng.random() < 0.15:
        doc["model"] = rng.choice(WINDOWED)
    extra: dict[str, Any] = {}
    if rng.random() < 0.1:
        extra.update(attention_chunk=rng.choice([1024, 2048, 8192]), sliding_window=0)
        if rng.random() < 0.6:
            extra.update(global_every=4, nope_global=True)
    if rng.random() < 0.1:
        extra["post_norms"] = True
    if rng.random() < 0.1:
        extra["qkv_bias"] = True
    if rng.random() < 0.15:
        extra["logit_softcap"] = rng.choice([30.0, 50.0])
        if rng.random() < 0.5:  # a fused loss folds the cap (true), Megatron's and TE's do not
            doc["training"]["fused_cross_entropy"] = rng.choice([True, "native", "te"])
    if extra:
        model = doc["model"] if isinstance(doc["model"], dict) else {"preset": doc["model"]}
        doc["model"] = {**model, **extra}


def paired(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` made to run F&B pairs (``--pairs``): DualPipe or DualPipeV, or Megatron-Core's
    expert-parallel overlap on a mixture of experts."""
    parallel = doc["parallel"]
    parallel.pop("vpp", None)
    if doc["model"] in MOE and parallel.get("ep", 1) > 1 and rng.random() < 0.5:
        parallel.pop("schedule", None)
        doc["framework"] = "megatron-core"
        doc.setdefault("overlap", {})["ep_comm"] = True
        if parallel["pp"] > 1:  # Megatron-Bridge's rule: a virtual pipeline with pp > 1
            parallel["schedule"], parallel["vpp"] = "interleaved", 2
    else:
        parallel["schedule"] = rng.choice(["dualpipe", "dualpipev"])
        if not framework_runs(doc.get("framework"), parallel["schedule"]):
            del doc["framework"]  # Megatron-Core, say, runs no DualPipe: its draw would be refused
    return doc


#: draws tried for one ``--simulable`` scenario before the last, refused, is kept
REDRAWS = 50
#: layer passes a step past which a draw is skipped: ~60 s at ~0.6 ms a pass (Llama 3 70B on
#: 64 H100 simulated 10,240 passes in 6.1 s, 2026-12-03), half the default timeout
MAX_LAYER_PASSES = 100_000


def draw_scenario(
    rng: random.Random, pairs: bool = False, simulable: bool = False, max_passes: int = MAX_LAYER_PASSES
) -> dict[str, Any]:
    """One scenario as the options ask: made to run F&B pairs (``pairs``), drawn again until
    its layout is accepted and at most ``max_passes`` layer passes a step (``simulable``; the
    checks ``build_context`` runs, without simulating)."""
    for _ in range(REDRAWS if simulable else 1):
        doc = draw(rng)
        if pairs:
            doc = paired(rng, doc)
        if not simulable or _accepted(doc, max_passes):
            break
    return doc


def _accepted(doc: dict[str, Any], max_passes: int) -> bool:
    """Whether the scenario's layout passes the checks and is small enough to simulate (a crash
    counts as accepted: simulating it is how the crash is reported)."""
    try:
        return layer_passes(build_context(scenario_from_dict(doc))) <= max_passes
    except UserError:
        return False
    except Exception:  # noqa: BLE001 - check() reports it with its traceback
        return True


def layer_passes(ctx: Context) -> int:
    """Layer passes the engine simulates a step: each microbatch through every layer of the
    model, forward and backward (and weight gradients apart where the schedule splits them)."""
    layers = sum(chunk.layers for stage in ctx.chunks for chunk in stage)
    return ctx.spec.m * layers * (3 if ctx.schedule.splits_backward else 2)


class Timeout(Exception):
    """A simulation ran past its time limit."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise :class:`Timeout` in the block once ``seconds`` of wall time have passed (SIGALRM:
    a hang inside the engine's Python loop is interrupted where it stands)."""

    def expire(*_: object) -> None:
        raise Timeout

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)


#: check()'s verdicts for a scenario that passes, or is too large to simulate here
SIMULATED, REFUSED, SKIPPED = "simulated", "refused", "skipped"


def check(doc: dict[str, Any], timeout_s: int, max_passes: int = MAX_LAYER_PASSES) -> str:
    """:data:`SIMULATED` or :data:`REFUSED` (in one line) when ``doc`` passes,
    :data:`SKIPPED` past ``max_passes`` layer passes a step; else what went wrong."""

    try:
        with time_limit(timeout_s):
            ctx = build_context(scenario_from_dict(doc))
            if layer_passes(ctx) > max_passes:
                return SKIPPED
            result = simulate(ctx)
    except UserError as err:
        return REFUSED if err.field and "\n" not in err.one_line() else f"bad error: {err}"
    except Timeout:
        return f"no result within {timeout_s} s"
    except Exception:  # noqa: BLE001 - every other failure is what the tool looks for
        return traceback.format_exc(limit=6)
    try:  # the timeline `run --out` writes: one event at a time per stream, finite times
        validate_events(result.events)
    except UserError as err:
        return f"invalid timeline: {err}"
    summary = result.summary
    step, mfu, bubble = summary["step_time_s"], summary["mfu"], summary["bubble_fraction"]
    if not (math.isfinite(step) and step > 0 and 0 < mfu < 1 and 0 <= bubble < 1):
        return f"absurd: step {step} s, MFU {mfu}, bubble {bubble}"
    verdict = memory_verdict(doc, result)
    return verdict if verdict != SIMULATED else advice_verdict(doc, summary)


def advice_verdict(doc: dict[str, Any], summary: dict[str, Any]) -> str:
    """:data:`SIMULATED` when what `run` says under its table can be worked out: the memory
    advice (one change that fits, several together, a lighter recomputation) and the speed
    hints, each rebuilding changed scenarios of its own."""
    from simcluster.commands.run import add_memory_advice
    from simcluster.speed_hints import Rerun, speed_hints

    scenario = scenario_from_dict(doc)
    try:
        add_memory_advice(dict(summary), scenario, None)
        speed_hints(summary, build_context(scenario), Rerun("fuzz.yaml"))
    except Exception:  # noqa: BLE001 - a refusal here would be a traceback under `run`, too
        return "advice: " + traceback.format_exc(limit=6)
    return SIMULATED


def memory_verdict(doc: dict[str, Any], result: Any) -> str:
    """:data:`SIMULATED` when the memory timeline is sound (``memory_report.timeline_fault``)."""
    ctx = build_context(scenario_from_dict(doc))
    fault = timeline_fault(ctx, result.memory, result.summary["peak_memory_bytes"]["per_stage"])
    return SIMULATED if fault is None else f"memory: {fault}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per scenario (default 120)")
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"))
    parser.add_argument("--pairs", action="store_true", help="only layouts with F&B pairs (DualPipe, overlap.ep_comm)")
    parser.add_argument("--simulable", action="store_true", help="draw again until a layout is accepted (no refusals)")
    parser.add_argument("--max-passes", type=int, default=MAX_LAYER_PASSES,
                        help=f"skip draws past this many layer passes a step (default {MAX_LAYER_PASSES:,})")  # fmt: skip
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    failures = 0
    passed = {SIMULATED: 0, REFUSED: 0, SKIPPED: 0}
    with progress_bar("fuzzing", args.count) as advance:
        for i in range(args.count):
            doc = draw_scenario(rng, args.pairs, args.simulable, args.max_passes)
            reason = check(doc, args.timeout, args.max_passes)
            if reason in passed:
                passed[reason] += 1
            else:
                failures += 1
                args.out.mkdir(parents=True, exist_ok=True)
                path = args.out / f"seed{args.seed}-{i}.yaml"
                path.write_text(f"# {reason.strip().splitlines()[-1]}\n" + yaml.safe_dump(doc))
                print(f"{path}: {reason.strip().splitlines()[-1]}", flush=True)
            advance(f"{failures} failing")
    kept = f" (kept in {args.out})" if failures else ""
    print(
        f"{args.count} scenarios: {passed[SIMULATED]} simulated, {passed[REFUSED]} refused in one line, "
        f"{passed[SKIPPED]} skipped as too large, {failures} failing{kept}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
