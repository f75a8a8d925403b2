"""Regenerate validation/*.yaml from ../shared/validation/published.yaml (run from the repo root).

tests/test_validate.py re-derives every measured value from its `published` figures, so a wrong
conversion here fails the tests.
"""
import copy
import sys

import yaml

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from simcluster.flops import megatron_flops_per_step  # noqa: E402 - needs ROOT on sys.path
from simcluster.hardware import load_profile  # noqa: E402
from simcluster.kernel_versions import family as kernel_family  # noqa: E402
from simcluster.kernel_versions import release as kernel_release  # noqa: E402

pub = {e["id"]: e for e in yaml.safe_load(open(ROOT.parent / "shared" / "validation" / "published.yaml"))["entries"]}
H100_PEAK = 989.4e12

def dump(path, header, cases):
    class D(yaml.SafeDumper):
        pass
    D.add_representer(float, lambda d, v: d.represent_scalar("tag:yaml.org,2002:float", repr(float(f"{v:.6g}"))))
    text = yaml.dump({"cases": cases}, Dumper=D, sort_keys=False, width=110, default_flow_style=None)
    open(path, "w").write(header + text)

def fmt_b(x):
    return f"{x:g}"

def mlperf_gpt3_case(name, family, source, blocks_ms, block_tokens, gbs, gpus, scenario, step_s):
    """One MLPerf GPT-3 175B case (FP8, sequence 2048). Every case is slow: keeps the families out
    of the quick set (the 10752-GPU v3.1 row takes ~130 s; the others 5-90 s)."""
    return {
        "name": name, "family": family, "source": source, "slow": True,
        "published": {"blocks_ms": blocks_ms, "block_tokens": block_tokens, "global_batch": gbs, "seq_len": 2048,
                      "gpus": gpus, "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": round(step_s, 5)},
    }



def optimizer_step_gather(parallel, precision, fp8_recipe):
    """Whether NeMo 2's and Megatron-Bridge's performance scripts set
    overlap_param_gather_with_optimizer_step (dp, pp and vp all > 1; not for MXFP8 or NVFP4 in
    Bridge's overrides), under which Megatron-Core's get_model disables bucketing on every chunk
    (dp.bucket_stages none); at dp 1 there is no reduction for the setting to change."""
    interleaved = parallel.get("pp", 1) > 1 and parallel.get("vpp", 1) > 1
    block = precision == "nvfp4" or (precision == "fp8" and fp8_recipe == "block")
    return interleaved and parallel.get("zero", 1) in (1, 2) and not block


def megatron_h100_scenario(model, gpus, parallel, seq, mbs, gbs, precision, attention_kernel,
                           fp8_recipe="delayed", hardware="dgx-h100", fp32_grads=True, dfa=False,
                           fp8_params=False, comm_overlap=False):
    """A Megatron-Core / NeMo run on DGX H100 (or ``hardware``) as the recipes set it up: no recompute, Megatron's
    gradient_accumulation_fusion (no 16-bit gradient buffer) and its DP / TP overlaps. ``fp32_grads``
    False: main gradients kept and reduced in bf16 (grad_reduce_in_fp32=False). ``dfa``: a NeMo 1.x run on
    apex's DistributedFusedAdam, which buckets every stage by bucket_cap_mb (ASSUMED its default,
    100 MiB of gradients, as NeMo's docs list it; the launcher's llama2 configs set 125) and, without
    FP8 parameters, keeps the master weights as remainders of the bf16 ones (training.master_weights);
    otherwise Megatron-Core's DDP buckets.
    ``fp8_params``: the FP8 recipe keeps the weights in FP8 (fp8_param_gather: NeMo 2's and
    Megatron-Bridge's FP8 mixed-precision configs), so ZeRO gathers them at 1 B per element.
    ``comm_overlap``: a NeMo 2 or Megatron-Bridge performance run, whose comm-overlap config
    (MegatronCommOverlapCallback / CommOverlapConfig) gives the distributed optimizer's DDP
    buckets of 128 Mi parameters (dp.bucket_mb comm-overlap; Megatron FSDP keeps the default)."""
    training = {"seq_len": seq, "micro_batch": mbs, "global_batch": gbs, "precision": precision,
                "recompute": "none", "attention_kernel": attention_kernel, "grad_accum_fusion": True}
    if not fp32_grads:
        training["fp32_grad_accum"] = False
    if precision == "fp8":
        training["fp8_recipe"] = fp8_recipe
        if fp8_params:
            training["fp8_param_gather"] = True
    if dfa and not fp8_params and precision != "fp16":
        # NeMo 1.x's setup_optimization: store_param_remainders for an fp32 optimizer over a
        # bf16 model (store_params with fp8_params instead)
        training["master_weights"] = "remainder"
    return {
        "model": model,
        "cluster": {"hardware": hardware, "gpus": gpus},
        "parallel": parallel,
        "training": training,
        "overlap": {"dp_grad_reduce": True, "param_gather": True, "tp_comm": True},
        # NeMo's and Megatron-Bridge's performance scripts turn Megatron-Core's bucket NaN check off
        # ("Disable local gradient checker at non-debugging mode") and their recipes average in
        # the collective (average_in_collective=True); NeMo 1.x runs use apex's
        # DistributedFusedAdam. Megatron-LM's own runs set both (the r0.8 family below).
        # the gradient buffer is zeroed at each step's start: Megatron-Core's DDP (train_step ->
        # zero_grad_buffer -> _ParamAndGradBuffer.reset: grad_data.zero_()) in Megatron-LM, NeMo 2
        # and Bridge; apex's DistributedFusedAdam in NeMo 1.x (zero_grad: _grad_buffer.zero_(),
        # with NeMo's default contiguous_grad_buffer=True). Averaging in the collective is
        # ReduceOp.AVG (Megatron-Core start_grad_sync; apex DistributedFusedAdam's
        # average_grad_sync, NeMo's default): dp.reduce_op avg
        "dp": {"nan_check": False, "prescale": False, "reduce_op": "avg", "zero_grad_buffer": True,
               # Megatron-Core's DistributedDataParallel: buckets of max(40M, 1M x dp) parameters,
               # only on pipeline rank 0's first model chunk (bucket_size None elsewhere)
               **({"bucket_mb": 104.8576, "bucket_stages": "all"} if dfa
                  else {"bucket_mb": "comm-overlap" if comm_overlap and parallel.get("zero", 1) in (1, 2)
                        else "megatron-core",
                        "bucket_stages": "none" if comm_overlap and optimizer_step_gather(parallel, precision, fp8_recipe)
                        else "first"})},
    }


def with_userbuffers(case, cfg, evidence):
    """Set the run's TransformerEngine userbuffers settings (overlap.tp_comm_cfg: a preset of
    simcluster/userbuffers.py or a mapping) and say where they were read; no-op without TP."""
    if cfg is not None and case["scenario"]["parallel"].get("tp", 1) > 1 and case["scenario"]["overlap"].get("tp_comm"):
        case["scenario"]["overlap"]["tp_comm_cfg"] = cfg
        case["source"] += f" Userbuffers (overlap.tp_comm_cfg): {evidence}"
    return case


# The cuDNN release of NVIDIA's containers, which sets how fast TransformerEngine's fused attention
# runs on Blackwell (cudnn-frontend's sdpa_benchmark_training artifacts: cuDNN 9.17 runs causal 8K
# 1.14x / 1.22x faster forward / backward than 9.13.1 on the same die). Each entry: release, source.
CONTAINER_CUDNN = {
    "nemo-25.04": ("9.9.0", "NGC PyTorch 25.04's cuDNN 9.9.0 (NVIDIA/cudnn-frontend benchmark/Llama-3.2-1B-"
                            "Training/README.md, its software table), NeMo 25.04's base (ASSUMED)"),
    "mlperf-v4.1": ("9.4.0", "NVIDIA's v4.1 system descriptions, e.g. NVIDIA/systems/eos_ngc24.09_nemo.json: NeMo "
                             "Framework 24.09, CUDA 12.6.1, cuDNN 9.4.0; the B200 preview's b200_n8_preview_nemo.json "
                             "states no software, ASSUMED a release of that round"),
    "mlperf-v5.0": ("9.9.0", "NVIDIA's v5.0 system descriptions, e.g. NVIDIA/systems/nyx_n1_ngc25.04_nemo.json: "
                             "container pytorch 25.04, cuDNN 9.9.0"),
    "nemo-25.09": ("9.11.0.98", "NVIDIA-NeMo/Megatron-Bridge docs/releases/software-versions.md: NeMo 25.09 = "
                                "PyTorch 25.06 with cuDNN 9.11.0.98"),
    "nemo-25.11": ("9.13.1.26", "NVIDIA-NeMo/Megatron-Bridge docs/releases/software-versions.md: NeMo 25.11 = "
                                "PyTorch 25.09 with cuDNN 9.13.1.26"),
    "nemo-26.02": ("9.18.0.50", "NVIDIA-NeMo/Megatron-Bridge docs/releases/software-versions.md and issue 1724: "
                                "NeMo 26.02 reinstalls cuDNN 9.18.0.50 on PyTorch 25.11"),
    "mlperf-v5.1": ("9.13.1", "NVIDIA's v5.1 system descriptions, e.g. NVIDIA/systems/theia_ngpu8_ngc25.09_nemo.json: "
                              "NeMo 25.09 container, CUDA 13.0.1, cuDNN 9.13.1; its Dockerfiles build on "
                              "nvcr.io/nvidia/pytorch:25.09-py3 with libcudnn9-cuda-13=9.13.1.26-1; other "
                              "submitters' runs of that implementation ASSUMED the same build"),
}
# profile -> the cuDNN release its default ``cudnn`` curves were timed with, where the profile also
# carries older releases' curves (``cudnn-9.10``, ``cudnn-9.13``: timed through the cuDNN graph as
# TransformerEngine calls it)
NEWER_CUDNN_CURVES = {"gb200-nvl72": "9.17", "gb300-nvl72": "9.22", "dgx-b300": "9.22", "dgx-b200": "9.13"}
# cudnn-frontend v1.17.0's release notes: "the sdpa improvements added in cuDNN 9.17.0. GB200 and
# GB300 data"; a container from that release on runs the default curves' kernels
SDPA_IMPROVED = (9, 17)


def _release(text):
    return tuple(int(p) for p in text.split(".")[:2])


def older_cudnn_curves(hardware):
    """The cuDNN releases (major, minor) whose curves a profile keeps under a versioned name."""
    names = load_profile(hardware).efficiency.attention_kernels
    return sorted(kernel_release(n)[:2] for n in names if kernel_family(n) == "cudnn" and kernel_release(n))


def with_container_cudnn(case, container):
    """Run the case's cuDNN attention on the profile's curves of the container's cuDNN release
    where it predates both 9.17's SDPA improvements and the profile's default curves: the newest
    older release the profile keeps at or below the container's, else the oldest it keeps (the
    nearest to an older one); no change on other profiles or kernels."""
    training, hardware = case["scenario"]["training"], case["scenario"]["cluster"]["hardware"]
    release, evidence = CONTAINER_CUDNN[container]
    newer = NEWER_CUDNN_CURVES.get(hardware)
    if training.get("attention_kernel") != "cudnn" or newer is None:
        return case
    if _release(release) >= min(SDPA_IMPROVED, _release(newer)):
        return case
    kept = older_cudnn_curves(hardware)
    below = [r for r in kept if r <= _release(release)]
    picked = below[-1] if below else kept[0]
    version = f"{picked[0]}.{picked[1]}"
    kernel = training["attention_kernel"] = f"cudnn-{version}"
    if below:
        why = f"{version} is the newest release at or below it the profile keeps, timed on Blackwell through the cuDNN graph"
    else:
        why = f"{version} is the oldest release the profile keeps, timed on Blackwell through the cuDNN graph, the nearest to an older one"
        if (9, 10) not in kept:
            why += (" (a few percent fast: a B200's 9.10.2 graph rows, cudnn-frontend cb560b9, run causal 8K 10% slower "
                    "forward and 1% backward than 9.13.1's)")
    case["source"] += (
        f" Attention on the profile's {kernel} curves (training.attention_kernel): the container's cuDNN is "
        f"{release} ({evidence}), {_older_than_default(newer)}; {why}.")
    return case


def _older_than_default(newer):
    """Why a container's cuDNN does not run a profile's default curves (timed with ``newer``)."""
    if _release(newer) >= SDPA_IMPROVED:
        return (f"before the SDPA improvements of cuDNN 9.17 (cudnn-frontend v1.17.0's release notes, with GB200 "
                f"and GB300 data) that the profile's default curves (cuDNN {newer}) carry")
    return f"older than the release of the profile's default curves (cuDNN {newer})"


def ub_mapping(dgrad_qkv, wgrad_qkv, dgrad_fc1, wgrad_fc1, proj, fc2):
    """A userbuffers config written out as TransformerEngine's ub_cfgs: bulk overlaps without a
    margin, the forward reduce-scatters as pipelines of ``proj`` / ``fc2`` SMs with a margin."""
    bulk = {"qkv_dgrad": dgrad_qkv, "qkv_wgrad": wgrad_qkv, "fc1_dgrad": dgrad_fc1, "fc1_wgrad": wgrad_fc1}
    out = {name: {"num_sm": n, "set_sm_margin": False} for name, n in bulk.items()}
    out.update({name: {"method": "pipeline", "num_sm": n, "set_sm_margin": True}
                for name, n in (("proj_fprop", proj), ("fc2_fprop", fc2))})
    return out


TE1_NOTE = ("no config passed, so TransformerEngine 1.x's defaults (te-1: 16 SMs per pipeline and bulk "
            "overlap, no SM margin; initialize_ub add_ub defaults; the margin became TE 2.0's default)")
# ---------------- Narayanan 2021 Table 1 ----------------
e = pub["narayanan2021_table1_weak_scaling"]
cases = []
for r in e["rows"]:
    n_layers, h, heads = r["layers"], r["hidden"], r["heads"]
    tp, pp, gpus, gbs, mbs = r["tp"], r["pp"], r["gpus"], r["gbs"], r["mbs"]
    vl = r["vpp_layers_per_stage"]
    vpp = (n_layers // pp) // vl if vl else 1
    par = {"tp": tp, "pp": pp}
    if vpp > 1:
        par.update(vpp=vpp, schedule="interleaved")
    flops = megatron_flops_per_step(gbs, 2048, n_layers, h, 51200, recompute=True)
    step = flops / (r["tflops_per_gpu"] * 1e12 * gpus)
    local_ddp = r["params_B"] >= 39
    cases.append({
        "name": f"narayanan2021/{fmt_b(r['params_B'])}B-{gpus}gpu",
        "family": "narayanan2021-a100",
        "source": (
            f"Narayanan et al. SC'21 (arXiv 2104.04473) Table 1 row {fmt_b(r['params_B'])}B: "
            f"{r['tflops_per_gpu']} TFLOP/s per GPU on {gpus} A100 (Selene); split/mbs/vpp from "
            "NVIDIA/Megatron-LM examples/academic_paper_scripts/sc21/run_table_1.sh. measured "
            "step_time_s = 96*B*s*l*h^2*(1+s/(6h)+V/(16*l*h)) / (TFLOP/s * gpus) (the paper's eq. 3, "
            "counts the recompute forward). attention: unfused (softmax kernels on materialised scores; FlashAttention, Dao et al. "
            "arXiv 2205.14135, is from 2022). Gradients fp16: CONFIG.sh passes --fp16 without "
            "--accumulate-allreduce-grads-in-fp32 (arguments.py forces it for bf16 only), so the main_grad "
            "buffer is fp16, accumulated and all-reduced in fp16 (training.fp32_grad_accum false). ddp: "
            + ("Megatron 'local' DDP, gradient all-reduce after backward (no overlap), its contiguous "
               "buffer zeroed at each step's start (training.py train_step: zero_grad_buffer)" if local_ddp
               else "torch DDP, bucketed all-reduce overlapped with backward, gradients freed by "
               "optimizer.zero_grad (no buffer to zero); its reducer copies each gradient into its "
               "bucket, scaled by 1/dp, and the reduced bucket back into .grad (gradient_as_bucket_view "
               "off, Megatron's torchDDP wrapper does not set it: dp.bucket_copies)")
        ),
        "published": {"tflops_per_gpu": r["tflops_per_gpu"], "gpus": gpus, "global_batch": gbs,
                      "seq_len": 2048, "layers": n_layers, "hidden": h, "vocab": 51200},
        "scenario": {
            "model": {"name": f"gpt-{fmt_b(r['params_B'])}b", "layers": n_layers, "hidden": h, "heads": heads,
                      "ffn": 4 * h, "vocab": 51200, "mlp": "gelu", "norm": "layernorm", "bias": True,
                      "position": "learned", "max_positions": 2048, "tied_embeddings": True, "dropout": True},
            "cluster": {"hardware": "dgx-a100", "gpus": gpus},
            "parallel": par,
            # fp16 without --accumulate-allreduce-grads-in-fp32 (CONFIG.sh): the local DDP's
            # main_grad buffer is fp16, accumulated and all-reduced in fp16
            "training": {"seq_len": 2048, "micro_batch": mbs, "global_batch": gbs, "precision": "fp16",
                         "recompute": "full", "flash_attention": False, "fp32_grad_accum": False},
            # Megatron 2021: blocking pipeline send/recv (no p2p overlap), no TP overlap, and the
            # backward's TP all-reduce blocking (copy_to_tensor_model_parallel_region; the async
            # ColumnParallelLinearWithAsyncAllreduce came after the paper's runs)
            # pipeline transfers as 1/tp slices re-gathered by the receiving stage (the paper's
            # Sec. 4.1 scatter/gather optimisation, --scatter-gather-tensors-in-pipeline default)
            "overlap": {"dp_grad_reduce": not local_ddp, "tp_comm": False, "tp_grad_async": False,
                        "pp_comm": False, "pp_scatter_gather": True},
            # both DDPs average before reducing: Megatron's local DDP divides its gradient buffer
            # by dp (buffer_.data /= dp); torch DDP's reducer scales each gradient as it copies it
            # into its bucket (copy_grad_to_bucket: mul_out by 1/world size) and copies the
            # reduced bucket back into .grad after the backward (gradient_as_bucket_view off, its
            # default): dp.bucket_copies, the scaling inside the first copy.
            # the local DDP also zeroes its contiguous buffer at each step's start (train_step:
            # partition.zero_grad_buffer()); torch DDP's optimizer.zero_grad frees the grads
            # the local DDP all-reduces its whole buffer at once; torch DDP buckets 25 MiB of fp16
            # gradients (13.1M parameters, reduced here at the model's fp32 width)
            "dp": {"prescale": local_ddp, "bucket_copies": not local_ddp, "zero_grad_buffer": local_ddp,
                   "bucket_mb": 1.0e6 if local_ddp else 52.4288},
        },
        "measured": {"step_time_s": round(step, 6)},
        **({"slow": True} if gpus >= 2520 else {}),  # 530B and 1T: 40-65 s each
    })
dump(str(ROOT / "validation" / "narayanan2021-a100.yaml"),
     "# Narayanan et al. 2021 (SC'21) Table 1: GPT weak scaling on A100 (Selene, DGX A100).\n"
     "# Generated from /work/shared/validation/published.yaml; tests/test_validate.py re-derives\n"
     "# every measured value from `published` with the paper's own FLOP formula.\n", cases)

# ---------------- Megatron-Core r0.8 H100 ----------------
e = pub["megatron_core_r0.8_h100_weak_scaling"]
cases = []
for r in e["rows"]:
    n_layers, h, heads = r["layers"], r["hidden"], r["heads"]
    tp, pp, gpus, gbs = r["tp"], r["pp"], r["gpus"], r["gbs"]
    flops = megatron_flops_per_step(gbs, 4096, n_layers, h, 131072, recompute=False)
    step = flops / (r["tflops_per_gpu"] * 1e12 * gpus)
    cases.append({
        "name": f"mcore-r0.8/{fmt_b(r['params_B'])}B-{gpus}gpu",
        "family": "megatron-core-h100",
        "source": (
            f"NVIDIA/Megatron-LM README 'Performance Benchmarking' + images/model_table.png (r0.8.0), "
            f"row {fmt_b(r['params_B'])}B: {r['tflops_per_gpu']} TFLOP/s per GPU on {gpus} H100. measured "
            "step_time_s = 72*B*s*l*h^2*(1+s/(6h)+V/(12*l*h)) / (TFLOP/s * gpus) (Megatron "
            "num_floating_point_operations for a GPT with 4h GeLU MLP; no recompute counted). "
            "ASSUMED (not stated by the source): bf16 (MFU quoted against 989 TFLOP/s), micro-batch 1, "
            "no recompute, 1F1B without virtual stages (the README's strong-scaling text, 47% -> 42% MFU "
            "from 96 to 4,608 GPUs at 1,152 sequences, needs interleaving: docs/accuracy.md spot check; "
            "the table states none), sequence parallel with tp, distributed "
            "optimizer (zero 1), the README's overlap flags (grad reduce, param gather, tp comm); "
            "GPT shape: 4h GeLU MLP, LayerNorm, biases, untied embeddings (matches the param counts). "
            "Attention: TransformerEngine's cuDNN fused attention (TE prefers it over FlashAttention on "
            "Hopper)."
        ),
        "published": {"tflops_per_gpu": r["tflops_per_gpu"], "gpus": gpus, "global_batch": gbs,
                      "seq_len": 4096, "layers": n_layers, "hidden": h, "vocab": 131072},
        "scenario": megatron_h100_scenario(
            {"name": f"gpt-{fmt_b(r['params_B'])}b", "layers": n_layers, "hidden": h, "heads": heads,
             "ffn": 4 * h, "vocab": 131072, "mlp": "gelu", "norm": "layernorm", "bias": True,
             "position": "rope", "tied_embeddings": False},
            gpus, {"tp": tp, "pp": pp, "zero": 1, "sequence_parallel": tp > 1}, 4096, 1, gbs, "bf16", "cudnn"),
        "measured": {"step_time_s": round(step, 6)},

    })
    # Megatron-LM's own DDP buckets (pretrain_gpt.py defaults): each bucket's norm is checked
    # for NaN and the bucket scaled by 1/dp in place before its reduce-scatter
    cases[-1]["scenario"]["dp"].update(nan_check=True, prescale=True)
    cases[-1]["scenario"]["dp"].pop("reduce_op")  # ReduceOp.SUM without average_in_collective
    cases[-1]["source"] += (
        " Gradient buckets as Megatron-Core's Bucket.start_grad_sync runs them with Megatron-LM's defaults "
        "(--check-for-nan-in-loss-and-grad on, no --ddp-average-in-collective): grad_data.norm() checked "
        "for NaN, then grad_data *= 1/dp, then the reduce-scatter (dp.nan_check, dp.prescale); the "
        "buffer zeroed at each step's start (train_step: zero_grad_buffer, dp.zero_grad_buffer); buckets as "
        "DistributedDataParallel sizes them: max(40M, 1M x dp) parameters, on pipeline rank 0's first model "
        "chunk only, one bucket per chunk on the other stages (dp.bucket_mb megatron-core, dp.bucket_stages first)."
    )
    with_userbuffers(cases[-1], "te-1", "Megatron-LM's --tp-comm-overlap without --tp-comm-overlap-cfg "
                     "passes ub_cfgs={} (megatron/training/initialize.py _initialize_tp_communicators): "
                     + TE1_NOTE + "; r0.8 ran in NGC PyTorch 24.0x containers with TE 1.x.")
    if tp == 8 and pp == 1:
        # the one row whose assumed settings the measurement itself rules out (docs/accuracy.md)
        cases[-1]["source"] += (
            " KNOWN GAP: with micro-batch 1 and fp32 gradients each GPU reduce-scatters 15.7 GB and "
            "gathers 7.9 GB over its own 400 Gb/s rail (DP 48, one GPU per node), at least 0.28 s "
            "beyond what one microbatch's backward and forward can hide even at line rate, so the "
            "measured step would need 664 TFLOP/s of compute; micro-batch 4 or bf16 gradients would "
            "reach it, but neither is stated (README, model_table.png; NVIDIA/Megatron-LM issue 1571 "
            "asks for the launch parameters, unanswered) and each moves the other unpipelined rows "
            "further off, so neither is assumed."
        )
dump(str(ROOT / "validation" / "megatron-core-h100.yaml"),
     "# Megatron-Core r0.8 weak scaling on H100 (NVIDIA/Megatron-LM README, model_table.png).\n"
     "# Generated from /work/shared/validation/published.yaml; unstated settings are assumptions,\n"
     "# written in each case's source. tests/test_validate.py re-derives every measured value.\n", cases)

# ---------------- nanotron / Ultra-Scale Playbook ----------------
def nanotron_flops_per_token(n_layers, h, heads, kv, ffn, V, s):
    dh = h // heads
    fwd = (2 * n_layers * s * h * heads * dh + 2 * n_layers * s * h * 2 * kv * dh + 2 * n_layers * heads * s * dh * s
           + 2 * n_layers * heads * s * s * dh + 2 * n_layers * heads * s * dh * h + 4 * n_layers * s * h * ffn
           + 2 * n_layers * s * ffn * h + 2 * s * h * V)
    return 3 * fwd / s

# nanotron's data-parallel paths (src/nanotron/trainer.py, optim/zero.py,
# optim/gradient_accumulator.py); accumulate_grad_in_fp32 is on in the benchmark config.
NANOTRON_ZERO0 = (
    "ZeRO-0: torch DDP with bucket_cap_mb 25 (MiB of bf16 grads = 13.1M params) and nanotron's "
    "fp32 comm hook, which all-reduces each bucket's fp32 accumulation buffer (52.4 MB on the wire: "
    "dp.bucket_mb 52.4288); DDP syncs only in the last micro-batch's backward, so the bucket "
    "all-reduces overlap that backward only; nanotron builds DDP without gradient_as_bucket_view "
    "(trainer.py), so torch's reducer copies each bf16 gradient into its bucket and the bucket "
    "back into .grad after the backward (dp.bucket_copies). The hook reduces with ReduceOp.AVG "
    "(helpers.py init_optimizer_and_grad_accumulator: get_fp32_accum_hook(reduce_op=dist.ReduceOp.AVG); "
    "all_reduce_coalesced(op=reduce_op)): dp.reduce_op avg"
)
NANOTRON_ZERO1 = (
    "ZeRO-1: no DDP; after the last backward one blocking all-reduce of the whole fp32 gradient "
    "buffer (optim/zero.py: reduce_scatter=False, 'too memory hungry'), the optimizer steps its "
    "1/dp shard, then one blocking all_gather_coalesced of the bf16 params: dp.grad_collective "
    "all_reduce, one bucket per stage (dp.bucket_mb 1e6), no overlap of either; the gather is "
    "unpacked in Python, every parameter tensor sliced for every DP rank and each gathered piece "
    "copied back with its own copy_ (optim/zero.py _all_gather_params, distributed.py "
    "all_gather_coalesced): dp.param_unpack per_tensor. The all-reduce is ReduceOp.AVG (trainer.py "
    "training_step: sync_gradients_across_dp(reduce_op=dist.ReduceOp.AVG)): dp.reduce_op avg"
)
NANOTRON_ZERO0_SCENARIO = {
    "dp": {"bucket_mb": 52.4288, "zero_grad_buffer": True, "bucket_copies": True, "reduce_op": "avg"},
    "overlap": {"dp_grad_reduce": True, "tp_comm": False, "tp_grad_async": False, "pp_comm": False,
                "pp_p2p": "serial"},
}
NANOTRON_ZERO1_SCENARIO = {
    "dp": {"grad_collective": "all_reduce", "bucket_mb": 1.0e6, "param_unpack": "per_tensor",
           "zero_grad_buffer": True, "reduce_op": "avg"},
    "overlap": {"dp_grad_reduce": False, "param_gather": False, "tp_comm": False, "tp_grad_async": False,
                "pp_comm": False,
                "pp_p2p": "serial"},
}

e = pub["nanotron_ultrascale_best_configs"]
cases = []
for r in e["rows"]:
    m = e["models_inferred"][r["model"]]
    n_layers, h, heads, kv, ffn = m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn"]
    gpus = r["nodes"] * 8
    assert r["dp"] * r["tp"] * r["pp"] == gpus, r
    gbs = r["dp"] * r["gas"] * r["mbs"]
    fpt = nanotron_flops_per_token(n_layers, h, heads, kv, ffn, 131072, 4096)
    tps = r["mfu_pct"] / 100 * H100_PEAK * gpus / fpt
    paths = NANOTRON_ZERO1_SCENARIO if r["zero"] else NANOTRON_ZERO0_SCENARIO  # dp and overlap
    paths = {**copy.deepcopy(paths), "overlap": {**paths["overlap"], "tp_async": r["tp"] > 1}}
    cases.append({
        "name": f"nanotron/{r['model']}-{r['nodes']}node-dp{r['dp']}tp{r['tp']}pp{r['pp']}",
        "family": "nanotron-h100",
        "source": (
            f"huggingface/nanotron docs/benchmark_summary.svg (best config per cell, nanotron v0.5), "
            f"{r['model']} on {r['nodes']} nodes: MFU {r['mfu_pct']}%. Model shapes from "
            "scripts/scaling_benchmarks.py (seq 4096, vocab 131072, MHA, SwiGLU). measured tokens_per_s "
            "= MFU * 989.4e12 * gpus / F, F = nanotron get_flops per token (3 x forward matmuls incl. "
            "attention scores without causal discount and the LM head). Hardware aws-p5 (INFERRED: "
            "nanotron's run_multinode.sh uses partition hopper-prod with /fsx paths (FSx for Lustre) "
            "and trainer.py exports EFA metrics, i.e. AWS p5.48xlarge with EFA; not stated by HF). "
            "Framework behaviour read from nanotron's code: pipeline p2p one transfer at a time, each "
            "waited on (p2p.py isend/irecv + wait, never batched; state.py queues a forward's activation "
            "until the next backward and a backward's gradient until after the next forward's "
            "receive: overlap.pp_p2p serial); "
            + ("layers over stages as models/base.py build_model assigns pipeline blocks, balanced by "
               "get_block_compute_costs with the LM head's vocab*h (parallel.partition nanotron); "
               if r["pp"] > 1 else "")
            + (NANOTRON_ZERO1 if r["zero"] else NANOTRON_ZERO0)
            + "; the fp32 gradient accumulator's buffer zeroed each step (optim/gradient_accumulator.py "
            "FP32GradientAccumulator.zero_grad: _contiguous_fp32_grad_buffer.zero_(); dp.zero_grad_buffer)"
            + ("; tied embeddings over pp: the embedding gradient is all-reduced between first and "
               "last stage (tied_parameters.py)" if m["tied_embeddings"] and r["pp"] > 1 else "")
            + ("; TP in REDUCE_SCATTER mode (sequence parallel) with tp_linear_async_communication, "
               "as scripts/scaling_benchmarks.py sets both: a column linear all-gathers its input "
               "under its own token shard's GEMM and reduce-scatters its input gradient under its "
               "weight-gradient GEMM, a row linear all-gathers its output gradient under its own "
               "shard's GEMM (parallel/tensor_parallel/functional.py; overlap.tp_async)"
               if r["tp"] > 1 else "")
            + ". ASSUMED: MFU denominator 989.4 TFLOP/s (H100 SXM bf16 dense), bf16 with fp32 grad "
            "accumulation, no recompute, 1F1B pipeline engine. Attention: the flash-attn 2 package "
            "(models/llama.py CoreAttention calls flash_attn_varlen_func), FA2's H100 curves. "
            "Memory-bound ops as models/llama.py runs them (training.elementwise nanotron): "
            "TritonRMSNorm and flash-attn's rotary kernel, PyTorch permute/cat copies of Q, K "
            "and V around it, GLUActivation as two kernels. Gradient clipping as its benchmark config "
            "sets it (examples/config_tiny_llama_bench.yaml: clip_grad 1.0) and optim/clip_grads.py "
            "runs it: the norm over every local fp32 gradient and each one multiplied by the clamped "
            "coefficient, every step (training.grad_clip local_scale). The bf16 gradients are freed "
            "after each microbatch's whole backward (optim/gradient_accumulator.py "
            "FP32GradientAccumulator.backward: loss.backward(), then fp32_grad.add_(half_param.grad) "
            "and half_param.grad = None; training.grad_16bit_freed backward). The step's host loop "
            "beyond its ZeRO-1 unpacking (dp.param_unpack) was not read: no eager tail charged "
            "(training.step_tail none)."
        ),
        "published": {"mfu_pct": r["mfu_pct"], "gpus": gpus, "global_batch": gbs, "seq_len": 4096},
        "scenario": {
            "model": {"name": f"llama-{r['model']}", "layers": n_layers, "hidden": h, "heads": heads,
                      "kv_heads": kv, "ffn": ffn, "vocab": 131072, "mlp": "swiglu", "norm": "rmsnorm",
                      "position": "rope", "tied_embeddings": m["tied_embeddings"]},
            "cluster": {"hardware": "aws-p5", "gpus": gpus},
            "parallel": {"dp": r["dp"], "tp": r["tp"], "pp": r["pp"], "zero": r["zero"],
                         "sequence_parallel": r["tp"] > 1, "partition": "nanotron"},
            "training": {"seq_len": 4096, "micro_batch": r["mbs"], "global_batch": gbs,
                         "precision": "bf16", "recompute": "none", "attention_kernel": "fa2",
                         "elementwise": "nanotron", "grad_clip": "local_scale",
                         "grad_16bit_freed": "backward", "step_tail": "none"},
            **paths,
        },
        "measured": {"tokens_per_s": round(tps, 1)},
        # the SVG's memory label: nanotron logs torch max_memory_allocated / 1024**3 (and the
        # reserved figure); which of the two the summary shows is not stated
        "peak_memory_gib": r["mem_GB"],

    })
dump(str(ROOT / "validation" / "nanotron-h100.yaml"),
     "# nanotron / Ultra-Scale Playbook best configurations on H100 (huggingface/nanotron\n"
     "# docs/benchmark_summary.svg). Generated from /work/shared/validation/published.yaml;\n"
     "# tests/test_validate.py re-derives every measured value with nanotron's FLOP formula.\n", cases)

# ---------------- Korthikanti et al. 2022 (sequence parallelism + selective recompute) -------
# Not in published.yaml: the end-to-end iteration times of arXiv 2205.05198 as Calculon's
# validation quotes them (calculon-ai/calculon calculon/megatron/validation.py kProfile), with
# Calculon's execution files (validation/{model}_{full,seqsel}.json) for batch, micro-batch and
# interleaving. "full": TP all-reduce + full recompute; "sel": SP + selective recompute.
KORTHIKANTI = {  # model: layers, hidden, heads, gpus, pp, vpp, global batch, micro-batch, t_full, t_sel
    "22B": (48, 6144, 64, 8, 1, 1, 4, 4, 1.42, 1.10),
    "175B": (96, 12288, 96, 64, 8, 3, 64, 1, 18.13, 13.75),
    "530B": (105, 20480, 128, 280, 35, 3, 280, 1, 49.05, 37.83),
    "1T": (128, 25600, 160, 512, 64, 1, 512, 1, 94.42, 71.49),
}
cases = []
for size, (n_layers, h, heads, gpus, pp, vpp, gbs, mbs, t_full, t_sel) in KORTHIKANTI.items():
    for mode, t in (("full", t_full), ("sel", t_sel)):
        par = {"tp": 8, "pp": pp, "sequence_parallel": mode == "sel"}
        if vpp > 1:
            par.update(vpp=vpp, schedule="interleaved")
        cases.append({
            "name": f"korthikanti2022/{size}-{mode}",
            "family": "korthikanti2022-a100",
            "source": (
                f"Korthikanti et al. MLSys'23 (arXiv 2205.05198), end-to-end iteration time of the {size} "
                f"model, {'full recompute, TP all-reduce' if mode == 'full' else 'present work: sequence parallelism + selective recompute'}: "
                f"{t} s on {gpus} A100 80GB (Selene); the times and the execution settings (tp 8, pp {pp}, "
                f"interleave {vpp}, batch {gbs}, micro-batch {mbs}, fp16) as Calculon's validation quotes them "
                "(calculon-ai/calculon calculon/megatron/validation.py and validation/*.json). ASSUMED: GPT "
                "layers (GeLU 4h MLP, LayerNorm, biases, learned positions, tied embeddings, dropout), vocab "
                "51200, unfused attention (Megatron 2022), no TP/p2p overlap, data parallel 1; the "
                "backward's TP collective asynchronous under the weight gradient (the 2022 code's "
                "ColumnParallelLinearWithAsyncAllreduce / WithSequenceParallelism). Gradients fp16: the run is "
                "fp16 and Megatron forces accumulate_allreduce_grads_in_fp32 for bf16 only, so main_grad is "
                "fp16 (training.fp32_grad_accum false)."
            ),
            "published": {"iteration_time_s": t, "gpus": gpus, "global_batch": gbs, "seq_len": 2048,
                          "mode": mode},
            "scenario": {
                "model": {"name": f"gpt-{size}", "layers": n_layers, "hidden": h, "heads": heads,
                          "ffn": 4 * h, "vocab": 51200, "mlp": "gelu", "norm": "layernorm", "bias": True,
                          "position": "learned", "max_positions": 2048, "tied_embeddings": True,
                          "dropout": True},
                "cluster": {"hardware": "dgx-a100", "gpus": gpus},
                "parallel": par,
                "training": {"seq_len": 2048, "micro_batch": mbs, "global_batch": gbs, "precision": "fp16",
                             "recompute": "full" if mode == "full" else "selective",
                             "flash_attention": False, "fp32_grad_accum": False},
                # the paper's Megatron (megatron/mpu/layers.py with model_parallel_memory_opt):
                # the input gradient's all-reduce (full) or reduce-scatter (SP) is asynchronous,
                # under the weight gradient (ColumnParallelLinearWithAsyncAllreduce)
                # (--scatter-gather-tensors-in-pipeline is on, but under SP the sends are already
                # 1/tp slices)
                "overlap": {"dp_grad_reduce": True, "tp_comm": False, "tp_grad_async": True,
                            "pp_comm": False, "pp_scatter_gather": True},
                # Megatron's local DDP (buffer_.data /= dp; one replica here), its buffer zeroed
                # at each step's start (train_step: partition.zero_grad_buffer())
                "dp": {"prescale": True, "zero_grad_buffer": True, "bucket_mb": 1.0e6},
            },
            "measured": {"step_time_s": t},
            **({"slow": True} if gpus >= 280 else {}),  # 530B and 1T: tens of seconds each
        })
dump(str(ROOT / "validation" / "korthikanti2022-a100.yaml"),
     "# Korthikanti et al. 2022 (arXiv 2205.05198): iteration times with full recompute and with\n"
     "# sequence parallelism + selective recompute, GPT 22B-1T on A100 (the runs Calculon validates\n"
     "# on). Generated by tools/generate_validation_cases.py from the table in that script.\n", cases)

# ---------------- Zero Bubble ----------------
e = pub["zero_bubble_qi2024"]


ZB_GRADS = (
    "Weight gradients accumulate in the wgrad GEMM's epilogue (Megatron's gradient_accumulation_fusion, "
    "on by default; examples/pretrain_zero_bubble.sh does not pass --no-gradient-accumulation-fusion: "
    "training.grad_accum_fusion), charged into an fp32 main gradient where the fork's fp16 run keeps "
    "an fp16 one (a stand-in chosen by score, docs/accuracy.md)."
)


def zb_scenario(size, m, gpus, par, mbs, nmb):
    """A Zero Bubble run: pure pipeline of GPT layers on DGX A100, as the fork's script runs it:
    its zero-bubble schedules step the optimizer with post-validation (examples/
    pretrain_zero_bubble.sh adds --enable-optimizer-post-validation whenever zero bubble is on
    and the run is fp16); the 1F1B baselines run Megatron's synchronous step."""
    zero_bubble = par["schedule"] in ("zb-1p", "zb-2p", "zbv")
    return {
        "model": {"name": f"gpt-{size}", "layers": m["layers"], "hidden": m["hidden"],
                  "heads": m["heads"], "ffn": 4 * m["hidden"], "vocab": 32000, "mlp": "gelu",
                  "norm": "layernorm", "bias": True, "position": "learned",
                  "max_positions": 1024, "tied_embeddings": False, "dropout": True},
        "cluster": {"hardware": "dgx-a100", "gpus": gpus},
        "parallel": par,
        "training": {"seq_len": 1024, "micro_batch": mbs, "global_batch": mbs * nmb,
                     "precision": "fp16", "recompute": "none", "flash_attention": False,
                     # Megatron's default (the script has no --no-gradient-accumulation-fusion)
                     "grad_accum_fusion": True,
                     **({"optimizer_post_validation": True} if zero_bubble else {})},
        # the fork's example script runs with --no-overlap-p2p-communication, and without
        # Megatron's DP overlaps (one replica here: nothing to reduce either way)
        "overlap": {"pp_comm": False, "dp_grad_reduce": False, "param_gather": False},
    }


def zb_measured(group, label, sps, gpus, memory_gb, scenario, **published):
    """A Zero Bubble case's comparison group, published figures, scenario and measured values:
    tokens/s = samples/GPU/s * gpus * 1024, and the published peak memory (GB as the fork's logs
    report torch's GiB figures)."""
    return {
        "compare": {"group": group, "label": label},
        "published": {"samples_per_gpu_per_s": sps, "gpus": gpus, "seq_len": 1024,
                      "peak_memory_gb": memory_gb, **published},
        "scenario": scenario,
        "measured": {"tokens_per_s": round(sps * gpus * 1024, 3)},
        "peak_memory_gib": memory_gb,
    }


# 1F1B-I as the fork runs it: one layer per virtual stage (--num-layers-per-virtual-pipeline-stage
# 1), the embedding and the LM head counting as one layer each -> vpp = (layers + 2) / pp
label_sched = {"1F1B": ("1f1b", 1), "1F1B-I": ("interleaved", None), "ZB-1p": ("zb-1p", 1), "ZB-2p": ("zb-2p", 1)}
cases = []
for size, m in e["models"].items():
    for i, nmb in enumerate(m["microbatches"]):
        for label in ("1F1B", "1F1B-I", "ZB-1p", "ZB-2p"):
            sps = e["table4_samples_per_gpu_per_s"][size][label][i]
            sched, vpp = label_sched[label]
            if vpp is None:
                vpp = (m["layers"] + 2) // m["pp"]
            pp, mbs = m["pp"], m["mbs"]
            par = {"pp": pp, "schedule": sched}
            if vpp > 1:
                par["vpp"] = vpp
            cases.append({
                "name": f"zb/{size}-m{nmb}-{label}",
                "family": "zero-bubble-a100",
                "source": (
                    f"Qi et al. ICLR'24 Zero Bubble (arXiv 2401.10241) Table 4, {size} (pp {pp}, mbs {mbs}), "
                    f"{nmb} microbatches, {label}: {sps} samples per GPU per s on A100 SXM 80GB. measured "
                    "tokens_per_s = samples/GPU/s * gpus * 1024 (seq). Pure pipeline (#GPU = #stages), "
                    "first and last stage one layer fewer. Mapping: ZB-1p -> zb-1p, ZB-2p -> zb-2p (the "
                    "paper's automatic schedules: the heuristic planned with the run's own F/B/W and p2p "
                    "times under p or 2p microbatches of activations; sail-sg leaves its ILP pass off). ASSUMED: fp16 (the fork's script default), vocab 32000 "
                    "(SentencePiece tokenizer, size not stated), GPT layers (GeLU 4h MLP, LayerNorm, "
                    "biases, learned positions, untied embeddings, dropout), 1F1B-I with one layer per "
                    "virtual stage as in the fork's example script (embedding and head count as layers), "
                    "no recompute, DGX A100 links (the paper used RoCE between 4 nodes). Unfused "
                    "attention (s^2 scores stored): the paper's Table 4 peak memory matches it in all 16 "
                    "rows and is 1.4-2.5x what FlashAttention would store (docs/accuracy.md). "
                    + ZB_GRADS
                ),
                **zb_measured(f"zb/{size}-m{nmb}", label, sps, pp, e["table4_peak_memory_GB"][size][label],
                              zb_scenario(size, m, pp, par, mbs, nmb),
                              bubble_rate=e["table5_bubble_rate"][size][label][i]),
            })
dump(str(ROOT / "validation" / "zero-bubble-a100.yaml"),
     "# Zero Bubble (Qi et al., ICLR'24) Table 4 throughput: pure pipeline on A100, four schedules.\n"
     "# Generated from /work/shared/validation/published.yaml; `compare` groups the four schedules\n"
     "# of one row for the ordering check (ZB-2p > ZB-1p >~ 1F1B-I > 1F1B).\n", cases)

# ---------------- Zero Bubble, same-memory comparison (arXiv version's Table 6) ----------------
# ZB-V against ZB-1p and 1F1B at (about) the same activation memory, on more GPUs than stages of
# Table 4's runs. ZB-2p* is left out: the stored transcription does not say how its run differs.
t6 = e["table6_same_memory_arxiv_version"]
t6_sched = {"ZB-V": "zbv", "ZB-1p": "zb-1p", "1F1B": "1f1b"}
cases = []
for size, row in t6.items():
    m = e["models"][size]
    gpus, mbs = row["gpus"], row["mbs"]
    for i, nmb in enumerate(row["microbatches"]):
        for label, sched in t6_sched.items():
            sps = row["samples_per_gpu_s"][label][i]
            mem = row["memory_GB"][label]
            mem = mem[i] if isinstance(mem, list) else mem
            cases.append({
                "name": f"zb-v/{size}-{gpus}gpu-m{nmb}-{label}",
                "family": "zero-bubble-v-a100",
                "source": (
                    f"Qi et al. Zero Bubble (arXiv 2401.10241, the arXiv version's Table 6: schedules at "
                    f"the same memory), {size} on {gpus} GPUs (pure pipeline, pp {gpus}), micro-batch "
                    f"{mbs}, {nmb} microbatches, {label}: {sps} samples per GPU per s, {mem} GB on A100 "
                    "SXM 80GB. measured tokens_per_s = samples/GPU/s * gpus * 1024 (seq). Mapping: ZB-V -> "
                    "zbv, ZB-1p -> zb-1p (the automatic schedule, as in Table 4's cases). ASSUMED as for the Table 4 cases: "
                    "fp16, vocab 32000, GPT layers with dropout, unfused attention, no recompute, DGX "
                    "A100 links, the default layer split (embedding and head count as layers). "
                    + ZB_GRADS
                ),
                **zb_measured(f"zb-v/{size}-m{nmb}", label, sps, gpus, mem,
                              zb_scenario(size, m, gpus, {"pp": gpus, "schedule": sched}, mbs, nmb)),
            })
dump(str(ROOT / "validation" / "zero-bubble-v-a100.yaml"),
     "# Zero Bubble (Qi et al., arXiv 2401.10241) Table 6 of the arXiv version: ZB-V, ZB-1p and 1F1B\n"
     "# at the same memory, pure pipeline on A100. Generated from /work/shared/validation/published.yaml;\n"
     "# `compare` groups a row's schedules (the ordering check sees ZB-1p >~ 1F1B).\n", cases)

# ---------------- NeMo long-sequence context parallelism (Llama 2 7B, FP8, DGX H100) ----------------
e = pub["nemo_long_sequence_cp_h100"]
L2 = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 11008, "vocab": 32000}


def nemo_llama_flops(model, gbs, s):
    """NeMo's llama2/llama3 model-FLOPs formula as the 24.03-25.04 scripts had it
    (nemo/utils/flops_formulas.py; a later version multiplies the 12*s/h term by 0.5):
    gbs*s*l*h^2*(12 + 12*g/a + 18*ffn/h + 12*s/h + 6*V/(l*h)), no causal discount."""
    m = model
    return gbs * s * m["layers"] * m["hidden"] ** 2 * (
        12 + 12 * m["kv_heads"] / m["heads"] + 18 * m["ffn"] / m["hidden"] + 12 * s / m["hidden"]
        + 6 * m["vocab"] / (m["layers"] * m["hidden"]))


cases = []
for r in e["rows"]:
    s, gpus, gbs = r["seq_K"] * 1024, r["gpus"], r["gbs"]
    tp, pp, dp, cp = r["tp"], r["pp"], r["dp"], r["cp"]
    step = nemo_llama_flops(L2, gbs, s) / (r["tflops_cp"] * 1e12 * gpus)
    cases.append({
        "name": f"nemo-cp/llama2-7b-{r['seq_K']}k-{gpus}gpu",
        "family": "nemo-long-context-h100",
        "source": (
            f"NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (NeMo 24.03.01 container), "
            f"Llama 2 7B FP8 on DGX H100, sequence {r['seq_K']}K: {r['tflops_cp']} TFLOP/s per GPU with "
            f"tp {tp} pp {pp} dp {dp} cp {cp} on {gpus} GPUs, global batch {gbs}. measured step_time_s = "
            "F / (TFLOP/s * gpus), F = NeMo's llama2 formula gbs*s*l*h^2*(12 + 12*g/a + 18*ffn/h + 12*s/h + "
            "6*V/(l*h)) without a causal discount on the attention term (the formula of that era; a later "
            "NeMo halves it for causal masks). Evidence for the undiscounted form: with the causal half the "
            "1M-token row would need 536 TFLOP/s of causal attention per GPU, above every published H100 "
            "kernel rate. ASSUMED (not stated): micro-batch 1, no recompute, distributed optimizer (apex's "
            "DistributedFusedAdam, whose master weights NeMo keeps as remainders of the bf16 ones: "
            "setup_optimization's store_param_remainders, training.master_weights), gradient buckets "
            "kept and reduced in fp32 (apex's default, the optimizer's dtype: NeMo sets no "
            "grad_sync_dtype and conf/training/llama/llama2_7b.yaml has none; the launcher's Llama 2 "
            "7B FP8 example adds +training.model.optim.grad_sync_dtype=bf16 only in a later version, "
            "examples/training/llama/h100/llama2_7b_fp8.sh at 7d6e2df, after its Llama 3 scripts of "
            "spring 2024 had it and its Llama 2 7B script of then, with gc_interval, did not; in bf16 "
            "the 4K row would read +2.6% and 67.9 GiB, in fp32 it reads +6.4% and 80.4 GiB of the "
            "79.6 it ran in), the "
            "TP/DP overlaps of NeMo's performance recipes, 1F1B at pp 2; attention by the flash-attn 2 "
            "package (ASSUMED: TransformerEngine prefers cuDNN on Hopper since 1.2, but NeMo's runs of "
            "that time disabled TE's fused attention: NeMo-Framework-Launcher PR 422 'enable fused "
            "attention' came in August 2024, nvidia-resiliency-ext PR 81 removed NVTE_FUSED_ATTN only for "
            "NeMo >= 25.02; the launcher's llama2 configs set use_flash_attention: true)."
        ),
        "published": {"tflops_per_gpu": r["tflops_cp"], "gpus": gpus, "global_batch": gbs, "seq_len": s},
        "scenario": megatron_h100_scenario(
            {"name": "llama2-7b", **L2, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
             "tied_embeddings": False},
            gpus, {"tp": tp, "pp": pp, "cp": cp, "zero": 1, "sequence_parallel": tp > 1}, s, 1, gbs, "fp8", "fa2",
            dfa=True),
        "measured": {"step_time_s": round(step, 6)},
    })
    with_userbuffers(cases[-1], "te-1", "ASSUMED: NeMo-Framework-Launcher has no tp_overlap ub_cfg for "
                     "hidden 4096 (conf/training/tp_overlap/ lists h5120 and up), so a run with "
                     "ub_tp_comm_overlap gets " + TE1_NOTE + ".")
dump(str(ROOT / "validation" / "nemo-long-context-h100.yaml"),
     "# NeMo long-sequence performance (Llama 2 7B, FP8, DGX H100) with context parallelism, 4K-1M tokens.\n"
     "# Generated from /work/shared/validation/published.yaml; unstated settings are assumptions,\n"
     "# written in each case's source. tests/test_validate.py re-derives every measured value.\n", cases)

# ---------------- NeMo 24.07 pre-training performance summary (FP8, DGX H100) ----------------
# Not in published.yaml: NVIDIA/NeMo docs/source/performance/performance_summary.md (commit
# 070a0bb168d405d653b9734c0017cf5078e77c0d), "Pretraining", container NeMo24.07, DGX-H100, FP8;
# tokens/s/GPU as published. The page does not give the Nemotron rows' shapes: the 8B and 22B ones are
# the launcher's nemotron_8b.yaml / nemotron_22b.yaml (checked against the table's FLOPs per token);
# Nemotron-340B is left out: no launcher config of it is dated to 24.07 (of the stored nemotron_340b.yaml
# versions the June 2024 one has PP 12 / VP 8, the later ones postdate the release); the same layout's
# DGX Cloud v24.11 rows (NeMo 24.09, 324 against this table's 322 tokens/s/GPU) are cases instead.
NEMO_SUMMARY_SRC = ("NVIDIA/NeMo docs/source/performance/performance_summary.md (commit 070a0bb), "
                    "pre-training at FP8 on DGX-H100, container NeMo24.07")
GPT3 = {"5B": (24, 4096, 32), "20B": (44, 6144, 48), "175B": (96, 12288, 96)}


def gpt3_model(size, s, **extra):
    """A GPT-3 model section of NeMo's configs (GeLU 4h MLP, LayerNorm, biases, learned positions,
    vocab 51200) at sequence length ``s``."""
    n_layers, h, heads = GPT3[size]
    return {"name": f"gpt3-{size.lower()}", "layers": n_layers, "hidden": h, "heads": heads, "ffn": 4 * h,
            "vocab": 51200, "mlp": "gelu", "norm": "layernorm", "bias": True, "position": "learned",
            "max_positions": s, "tied_embeddings": False, **extra}
LLAMA = {  # layers, hidden, heads, kv heads, ffn, vocab (the models' published configs)
    "LLAMA2-7B": (32, 4096, 32, 32, 11008, 32000),
    "LLAMA2-13B": (40, 5120, 40, 40, 13824, 32000),
    "LLAMA2-70B": (80, 8192, 64, 8, 28672, 32000),
    "LLAMA3-8B": (32, 4096, 32, 8, 14336, 128256),
    "LLAMA3-70B": (80, 8192, 64, 8, 28672, 128256),
}
def llama_model(name):
    """A Llama model section from LLAMA's published shapes."""
    n_layers, h, heads, kv, ffn, vocab = LLAMA[name]
    return {"name": name.lower(), "layers": n_layers, "hidden": h, "heads": heads, "kv_heads": kv,
            "ffn": ffn, "vocab": vocab, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
            "tied_embeddings": False}


NEMOTRON = {  # layers, hidden, heads, ffn: NeMo-Framework-Launcher conf/training/nemotron/nemotron_{8b,22b}.yaml
    "NEMOTRON-8B": (32, 4096, 32, 16384),
    "NEMOTRON-22B": (40, 6144, 48, 24576),
}
NEMOTRON_YAML = "NeMo-Framework-Launcher launcher_scripts/conf/training/nemotron/nemotron_{}.yaml (at 089b90e)"


def nemotron_model(name):
    """A Nemotron(-3) model section of the launcher's configs: squared-ReLU MLP without gating,
    LayerNorm (layernorm1p: zero-centred gamma, the same kernel), no biases, RoPE (on half of each
    head, rotary_percentage 0.5: the rotary pass's cost is not split), multi-head attention,
    untied embeddings, the 256,000-token SentencePiece vocabulary."""
    n_layers, h, heads, ffn = NEMOTRON[name]
    return {"name": name.lower(), "layers": n_layers, "hidden": h, "heads": heads, "kv_heads": heads,
            "ffn": ffn, "vocab": 256000, "mlp": "relu2", "norm": "layernorm", "position": "rope",
            "tied_embeddings": False}


def megatron_parallel(tp, pp, cp, vp, zero=1):
    """Megatron's layout flags: sequence parallel with tp, interleaved 1F1B when vp > 1."""
    par = {"tp": tp, "pp": pp, "cp": cp, "zero": zero, "sequence_parallel": tp > 1}
    if pp > 1:
        par["schedule"] = "interleaved" if vp > 1 else "1f1b"
        if vp > 1:
            par["vpp"] = vp
    return par


NEMO_SUMMARY = [  # model, gpus, gbs, mbs, seq, tp, pp, cp, vp, tokens/s/GPU, model TFLOP/s/GPU
    ("GPT3-5B", 64, 2048, 4, 2048, 1, 1, 1, 1, 22521, 736),
    ("GPT3-20B", 64, 256, 2, 2048, 2, 1, 1, 1, 5851, 750),
    ("GPT3-175B", 128, 256, 1, 2048, 4, 8, 1, 6, 726, 782),
    ("GPT3-175B", 512, 2048, 2, 2048, 4, 8, 1, 6, 782, 842),
    ("LLAMA2-7B", 8, 128, 1, 4096, 1, 1, 1, 1, 16847, 776),
    ("LLAMA2-13B", 16, 128, 1, 4096, 1, 4, 1, 10, 8646, 754),
    ("LLAMA2-70B", 64, 128, 1, 4096, 4, 4, 1, 20, 1707, 759),
    ("LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 2, 1, 12036, 697),
    ("LLAMA3-70B", 64, 128, 1, 8192, 4, 4, 2, 5, 1533, 738),
    ("NEMOTRON-8B", 64, 256, 4, 4096, 2, 1, 1, 1, 12701, 653),
    ("NEMOTRON-22B", 64, 256, 2, 4096, 2, 4, 1, 10, 4256, 554),
]
LAUNCHER_UB = "NeMo-Framework-Launcher launcher_scripts/conf/training/tp_overlap/"
NEMO_2407_UB = {  # the launcher's ub_cfg file each model's training yaml names (ASSUMED: the July 2024 revision)
    "GPT3-20B": ("userbuffers_fp8_h100_h6144_tp2_mbs2_seqlen2048",
                 f"{LAUNCHER_UB}ub_cfg_h100_h6144_tp2_mbs2_seqlen2048.yaml (bulk 8/16/4/16 SMs, pipelines "
                 "16/24 SMs with a margin), the values of NeMo 2's preset of the same name."),
    "GPT3-175B": ("userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048@nemo-2.0",
                  f"{LAUNCHER_UB}ub_cfg_h100_h12288_tp4_mbs2_seqlen2048.yaml (its header: MBS1; bulk 4/4/2/4, "
                  "proj_fprop pipeline 24 SMs, fc2_fprop ring exchange, margins), as NeMo 2.0-2.2's "
                  "fp8_h100_h12288 preset."),
    "LLAMA2-70B": (ub_mapping(8, 16, 2, 4, 24, 16),
                   f"{LAUNCHER_UB}ub_cfg_h100_h8192_tp4_mbs1_seqlen4096.yaml (bulk 8/16/2/4 SMs, pipelines "
                   "24/16 SMs with a margin)."),
    "LLAMA3-70B": ("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192@nemo-2.0",
                   f"{LAUNCHER_UB}ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192.yaml, passed by the launcher's "
                   "examples/training/llama/h100/llama3_70b_fp8.sh (bulk 4/24/2/4, pipelines 24/16 SMs)."),
    **{name: ("te-1", "ASSUMED: the launcher's nemotron yaml names no tp_overlap config (its defaults list "
                      "leaves 'optional tp_overlap@model.ub_tp_comm_overlap_cfg' empty) and its FP8 example "
                      "passes none: " + TE1_NOTE + ".")
       for name in NEMOTRON},
}
# NeMo-Framework-Launcher examples/training/*/h100/*_fp8*.sh: the scripts that add grad_sync_dtype=bf16
# (the Llama 2 7B/13B ones from the launcher's renaming, PR 361, NEMO_FRAMEWORK_LAUNCHER_DIR, on)
_EX = "NeMo-Framework-Launcher examples/training/"
LAUNCHER_BF16_GRADS = {
    "GPT3-5B": _EX + "gpt/h100/5b_fp8_8node.sh", "GPT3-20B": _EX + "gpt/h100/20b_fp8_8node.sh",
    "GPT3-175B": _EX + "gpt/h100/175b_fp8_16node.sh", "LLAMA2-70B": _EX + "llama/h100/llama2_70b_fp8.sh",
    "LLAMA3-8B": _EX + "llama/h100/llama3_8b_fp8.sh", "LLAMA3-70B": _EX + "llama/h100/llama3_70b_fp8.sh",
    "LLAMA2-7B": _EX + "llama/h100/llama2_7b_fp8.sh at 7d6e2df (the line came with the launcher's new "
                 "naming, after 2024-06-18; its spring-2024 version had none)",
    "LLAMA2-13B": _EX + "llama/h100/llama2_13b_fp8.sh at edc9045 (with the launcher's new naming, before "
                  "its README's PR 391 of 2024-07-26; the spring-2024 version had none)",
}
# the FP8 example scripts that add no grad_sync_dtype, in their spring-2024 and their renamed (edc9045)
# versions alike: apex's default, gradients kept and reduced in fp32
LAUNCHER_FP32_GRADS = {
    "NEMOTRON-8B": _EX + "nemotron/h100/nemotron_8b_fp8.sh", "NEMOTRON-22B": _EX + "nemotron/h100/nemotron_22b_fp8.sh",
}
cases = []
for name, gpus, gbs, mbs, s, tp, pp, cp, vp, tps_gpu, tflops in NEMO_SUMMARY:
    if name.startswith("GPT3"):
        model = gpt3_model(name.split("-")[1], s, dropout=True)
        shape = ("GPT-3 (GeLU 4h MLP, LayerNorm, biases, learned positions, vocab 51200; dropout 0.1 as the "
                 "launcher's gpt3 configs set hidden_dropout)")
    elif name.startswith("NEMOTRON"):
        model = nemotron_model(name)
        n_layers, h = model["layers"], model["hidden"]
        layer_w, head_w = n_layers * (4 * h * h + 2 * h * model["ffn"]), h * model["vocab"]
        flops_token = 6 * (layer_w + head_w) + 12 * n_layers * h * s
        shape = (f"{name} not given by the page; the launcher's Nemotron-3 config "
                 f"({NEMOTRON_YAML.format(name.split('-')[1].lower())}): {n_layers} layers, hidden {h}, "
                 f"{model['heads']} heads (multi-head), squared-ReLU MLP {model['ffn']}, layernorm1p, no biases, "
                 f"RoPE on half of each head, untied embeddings, vocab {model['vocab']} (SentencePiece); no dropout. Check: "
                 f"6 x (its {layer_w / 1e9:.2f}B layer and {head_w / 1e9:.2f}B "
                 f"LM-head weights) + 12 l h s = {flops_token / 1e9:.1f} GFLOP per token, x {tps_gpu} tokens/s = "
                 f"{flops_token * tps_gpu / 1e12:.0f} TFLOP/s, the table's {tflops}")
    else:
        model = llama_model(name)
        shape = (f"{name} as published (GQA {model['heads']}/{model['kv_heads']}, SwiGLU {model['ffn']}, "
                 f"vocab {model['vocab']})")
    par = megatron_parallel(tp, pp, cp, vp)
    cases.append({
        "name": f"nemo-24.07/{name.lower()}-{gpus}gpu",
        "family": "nemo-fp8-h100",
        "source": (
            f"{NEMO_SUMMARY_SRC}: {name} on {gpus} GPUs, GBS {gbs}, MBS {mbs}, sequence {s}, tp {tp} pp {pp} "
            f"cp {cp} vp {vp}: {tps_gpu} tokens/s/GPU ({tflops} model TFLOP/s). measured tokens_per_s = "
            f"tokens/s/GPU x gpus. Shape: {shape}. ASSUMED (not stated): no recompute, distributed "
            "optimizer (apex's DistributedFusedAdam, master weights as remainders of the bf16 ones: "
            "NeMo's setup_optimization, training.master_weights), the overlaps of NeMo's recipes (TP comm overlap, grad reduce, param gather), "
            "sequence parallel with tp, Megatron's gradient accumulation fusion; attention by the "
            "flash-attn 2 package (NeMo-Framework-Launcher enabled TE's fused attention only in August "
            "2024, PR 422, after this container)."
        ),
        "published": {"tokens_per_s_per_gpu": tps_gpu, "model_tflops_per_gpu": tflops, "gpus": gpus,
                      "global_batch": gbs, "seq_len": s},
        "scenario": megatron_h100_scenario(model, gpus, par, s, mbs, gbs, "fp8", "fa2",
                                           fp32_grads=name not in LAUNCHER_BF16_GRADS, dfa=True),
        "measured": {"tokens_per_s": tps_gpu * gpus},
    })
    if name in LAUNCHER_BF16_GRADS:
        cases[-1]["source"] += (
            f" Gradients: the launcher's H100 FP8 example script for this model ({LAUNCHER_BF16_GRADS[name]}) "
            "adds +training.model.optim.grad_sync_dtype=bf16: distributed_fused_adam keeps and reduces the "
            "gradient buckets in bf16 (training.fp32_grad_accum false).")
    if name in LAUNCHER_FP32_GRADS:
        cases[-1]["source"] += (
            f" Gradients: the launcher's H100 FP8 example script for this model ({LAUNCHER_FP32_GRADS[name]}, "
            "its spring-2024 version and its renamed one at edc9045) sets no grad_sync_dtype: apex's "
            "DistributedFusedAdam keeps and reduces the gradient buckets in fp32, its default.")
    with_userbuffers(cases[-1], *NEMO_2407_UB.get(name, (None, "")))
dump(str(ROOT / "validation" / "nemo-fp8-h100.yaml"),
     "# NeMo 24.07 pre-training performance summary: FP8 on DGX H100, tokens/s/GPU as published.\n"
     "# Generated by tools/generate_validation_cases.py from the table in that script (source in each\n"
     "# case); unstated settings are assumptions, written in each case's source.\n", cases)

# ---------------- Megatron-Bridge performance summary (NeMo 25.09 / 25.11 / 26.02, DGX H100, FP8) ----------------
# Not in published.yaml: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (commit
# df0289c180dd20ff26933455c7a0a11084f6a36f), the DGX-H100 pre-training tables of the 25.09, 25.11
# and 26.02 NeMo containers, tokens/s/GPU as published. Dense Llama rows only (the MoE rows need
# dispatcher and routing settings the page does not give).
BRIDGE_SRC = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (commit df0289c), "
              "DGX-H100 pre-training, FP8 current scaling (FP8-CS)")
# The summary's runs come from Megatron-Bridge's scripts/performance, whose Llama configs set
# mixed_precision.grad_reduce_in_fp32 = False and ddp.grad_reduce_in_fp32 = False for every
# benchmark: bf16 main gradients, reduced in bf16 (training.fp32_grad_accum false).
BRIDGE_GRADS = (" From the benchmark configs (scripts/performance/configs/llama3/llama3_llm_pretrain.py "
                "set_llama3_common_configs, llama31/llama31_llm_pretrain.py set_llama31_common_configs; "
                "later also utils/helpers.py set_basic_perf_overrides): grad_reduce_in_fp32 False, so main "
                "gradients are kept and reduced in bf16 (training.fp32_grad_accum false); with Megatron "
                "FSDP the Llama 3 8B H100 config also turns gradient_accumulation_fusion off. The FP8 "
                "mixed-precision configs (bf16_with_fp8_current_scaling_mixed, bf16_with_mxfp8_mixed) keep "
                "the weights in FP8 and gather them so (fp8_param_gather: training.fp8_param_gather). The "
                "loss is TransformerEngine's parallel cross-entropy (training.fused_cross_entropy te): "
                "models/gpt_provider.py GPTModelProvider sets cross_entropy_loss_fusion True ('Generally "
                "beneficial'), and the Llama 3 recipes (recipes/llama/llama3.py _llama3_common) and the "
                "performance scripts (utils/helpers.py set_common_perf_overrides) set "
                "cross_entropy_fusion_impl 'te' (read in later revisions than the containers' own).")
BRIDGE_LOSS = "te"


def bridge_h100_scenario(model, gpus, par, s, mbs, gbs, fsdp):
    """A Bridge benchmark run on DGX H100: bf16 main gradients (BRIDGE_GRADS); with Megatron FSDP the
    Llama 3 8B H100 config turns gradient_accumulation_fusion off (configs/llama3/
    llama3_llm_pretrain.py llama3_8b_h100_config: 'Disabled to avoid functional errors')."""
    sc = megatron_h100_scenario(model, gpus, par, s, mbs, gbs, "fp8", "cudnn", "current", fp32_grads=False,
                                fp8_params=True, comm_overlap=True)
    sc["training"]["fused_cross_entropy"] = BRIDGE_LOSS
    if fsdp:
        sc["training"]["grad_accum_fusion"] = False
    return sc


BRIDGE_H100 = [  # container, model, gpus, gbs, mbs, seq, fsdp, tp, pp, cp, vp, tokens/s/GPU, TFLOP/s
    ("25.09", "LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 1, 1, 1, 14079, 725),
    ("25.09", "LLAMA3-70B", 64, 128, 1, 8192, 0, 4, 8, 1, 5, 1619, 727),
    ("25.09", "LLAMA3.1-405B", 1024, 512, 1, 8192, 0, 8, 8, 2, 8, 302, 763),
    ("25.11", "LLAMA3-8B", 8, 128, 1, 8192, 1, 1, 1, 1, 1, 14451, 744),
    ("25.11", "LLAMA3-70B", 64, 128, 1, 8192, 0, 4, 8, 1, 5, 1602, 719),
    ("25.11", "LLAMA3.1-405B", 1024, 512, 1, 8192, 0, 8, 8, 2, 8, 292, 737),
    ("26.02", "LLAMA3-70B", 64, 256, 1, 8192, 0, 4, 8, 1, 5, 1621, 728),
    ("26.02", "LLAMA3.1-405B", 1024, 1536, 1, 8192, 0, 8, 8, 2, 8, 311, 784),
]
LLAMA["LLAMA3.1-405B"] = (126, 16384, 128, 8, 53248, 128256)
cases = []
for container, name, gpus, gbs, mbs, s, fsdp, tp, pp, cp, vp, tps_gpu, tflops in BRIDGE_H100:
    model = llama_model(name)
    par = megatron_parallel(tp, pp, cp, vp, zero=3 if fsdp else 1)
    cases.append({
        "name": f"bridge-{container}/{name.lower()}-{gpus}gpu",
        "family": "megatron-bridge-fp8-h100",
        "source": (
            f"{BRIDGE_SRC}, NeMo {container} container: {name} on {gpus} GPUs, GBS {gbs}, MBS {mbs}, "
            f"sequence {s}, FSDP {fsdp} tp {tp} pp {pp} cp {cp} vp {vp}: {tps_gpu} tokens/s/GPU ({tflops} "
            "model TFLOP/s). measured tokens_per_s = tokens/s/GPU x gpus. Shape as published. FSDP 1 is "
            "modelled as ZeRO-3 over the data-parallel ranks. ASSUMED (not stated): no recompute, the "
            "recipes' overlaps (TP comm overlap, grad reduce, param gather), sequence parallel with tp, "
            "gradient accumulation fusion; attention by TransformerEngine's cuDNN backend (its default "
            "on Hopper; NeMo's recipes have enabled fused attention since August 2024). FP8 current "
            "scaling: an amax pass over each tensor before its cast (training.fp8_recipe: current)."
            + BRIDGE_GRADS
        ),
        "published": {"tokens_per_s_per_gpu": tps_gpu, "model_tflops_per_gpu": tflops, "gpus": gpus,
                      "global_batch": gbs, "seq_len": s, "container": container},
        "scenario": bridge_h100_scenario(model, gpus, par, s, mbs, gbs, fsdp),
        "measured": {"tokens_per_s": tps_gpu * gpus},
    })
    preset = {"LLAMA3-70B": "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192",
              "LLAMA3.1-405B": "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192"}.get(name)
    with_userbuffers(cases[-1], preset, f"{preset}, the H100 FP8 preset the benchmark configs pick "
                     "(scripts/performance/configs/llama/llama3_llm_pretrain.py, llama31_llm_pretrain.py; "
                     "src/megatron/bridge/training/comm_overlap.py).")
dump(str(ROOT / "validation" / "megatron-bridge-fp8-h100.yaml"),
     "# Megatron-Bridge performance summary: dense Llama 3 pre-training at FP8 on DGX H100 (NeMo 25.09,\n"
     "# 25.11, 26.02), tokens/s/GPU as published. Generated by tools/generate_validation_cases.py from\n"
     "# the table in that script (source in each case); unstated settings are assumptions.\n", cases)

# --- torchtitan FSDP2 on 64 A100s -----------------------------------------------------------------
# pytorch/torchtitan docs/performance.md (commit 0413364; the A100 tables, before the page moved to
# H100 numbers): Llama 2/3 with FSDP2 (1D parallelism) on 64 A100 80GB GPUs, WPS = tokens/s per GPU
# and MFU as published. "selective op" is torchtitan's op-level policy (save SDPA's output and every
# other matmul output, recompute the rest): training.recompute op.
TITAN_SRC = ("pytorch/torchtitan docs/performance.md (commit 0413364), FSDP2 on 64 A100 (80GB) GPUs, "
             "local batch size per GPU, WPS per GPU and MFU as published")
TITAN_A100 = [  # model, local batch, AC mode, WPS per GPU, MFU %
    ("LLAMA3-8B", 1, "selective layer", 2904, 56.8),
    ("LLAMA3-8B", 1, "selective op", 2973, 58.2),
    ("LLAMA3-70B", 1, "full", 331, 51.7),
    ("LLAMA2-13B", 2, "none", 2162, 61.1),
    ("LLAMA2-13B", 2, "selective layer", 1914, 54.1),
    ("LLAMA2-13B", 2, "selective op", 1904, 53.8),
    ("LLAMA2-70B", 1, "selective op", 355, 50.8),  # local batch 1: batch 2 runs out of memory
    ("LLAMA2-70B", 2, "full", 353, 50.5),
]
TITAN_SEQ = {"LLAMA2": 4096, "LLAMA3": 8192}  # torchtitan's train configs (the page: Llama 2's is half)
cases = []
for name, lbs, ac, wps, mfu in TITAN_A100:
    model = llama_model(name)
    s = TITAN_SEQ[name.split("-")[0]]
    recompute = {"none": "none", "selective op": "op"}.get(ac, "full")
    training = {"seq_len": s, "micro_batch": lbs, "global_batch": lbs * 64, "precision": "bf16",
                "recompute": recompute, "elementwise": "eager", "attention_kernel": "fa2", "step_tail": "none"}
    if ac == "selective layer":
        training["recompute_num_layers"] = model["layers"] // 2
    cases.append({
        "name": f"torchtitan/{name.lower()}-{ac.replace(' ', '-')}-64xa100",
        "family": "torchtitan-a100",
        "source": (
            f"{TITAN_SRC}: {name}, local batch {lbs}, activation checkpointing '{ac}': {wps} WPS, MFU "
            f"{mfu}%. measured tokens_per_s = WPS x 64. Sequence {s} (torchtitan's {name.split('-')[0]} "
            "configs). Framework behaviour from torchtitan's code of that time: FSDP2 = ZeRO-3 (parameters "
            "re-gathered for the backward, bf16 compute, fp32 gradient reduce-scatter; each gather copied "
            "out into per-parameter tensors and each gradient copy-cast into the reduce-scatter buffer, "
            "no unsharded fp32 main gradient: zero3.buffers copies), PyTorch eager "
            "without torch.compile (RMSNorm and rotary embedding as unfused fp32 ops: training.elementwise "
            "eager), SDPA's FlashAttention-2, unfused fp32 cross-entropy; 'selective layer' checkpoints "
            "every second block, modelled as full recomputation of half of the layers "
            "(training.recompute_num_layers); 'selective op' keeps SDPA's output and every other "
            "matmul output of each block and reruns the rest (training.recompute op; "
            "torchtitan apply_ac _save_list and its mm_count policy). Its step's host loop was not read: "
            "no eager tail charged (training.step_tail none). ASSUMED (not stated): DGX A100 nodes (8 GPUs, "
            "8x200 Gb/s InfiniBand)."
        ),
        "published": {"wps_per_gpu": wps, "mfu_pct": mfu, "gpus": 64, "local_batch": lbs, "seq_len": s,
                      "activation_checkpointing": ac},
        "scenario": {
            "model": model,
            "cluster": {"hardware": "dgx-a100", "gpus": 64},
            "parallel": {"dp": 64, "zero": 3},
            "training": training,
            "zero3": {"buffers": "copies"},
            "overlap": {"tp_grad_async": False},  # no TP here; torchtitan's eager DTensor TP blocks
        },
        "measured": {"tokens_per_s": wps * 64},
    })
dump(str(ROOT / "validation" / "torchtitan-a100.yaml"),
     "# torchtitan FSDP2 on 64 A100s (Llama 2 and 3), tokens/s per GPU as published. Generated by\n"
     "# tools/generate_validation_cases.py from the table in that script (source in each case).\n", cases)

# --- torchtitan FSDP2 + Float8 on 32 and 64 H200 (Trainy, June 2025) -------------------------------
# pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md (the same table in
# llama3-8b_h200_202506_trainy-whitefiber.md): Llama 3.1 8B on 4 and 8 nodes of 8 H200, TPS per GPU
# sampled at iteration 100 (torchtitan's tokens per second per device over the 10 logged steps).
TITAN_H200_SRC = (
    "pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md (commit bcdeaa3; the same table in "
    "llama3-8b_h200_202506_trainy-whitefiber.md): the Trainy team's baseline of June 2025, Llama 3.1 8B on {nodes} "
    "hosts of 8 H200 (NVLink; 400 Gb/s ConnectX-7 RDMA per GPU), torch 2.8.0a0+5228986c39 (NGC 25.05), torchao "
    "0afa4c1, torchtitan e7c0cae, launched with llama3_8b.toml and --training.local_batch_size=2 --training.compile "
    "--model.converters=float8 --float8.enable_fsdp_float8_all_gather "
    "--float8.precompute_float8_dynamic_scale_for_fsdp --float8.force_recompute_fp8_weight_in_bwd: {tps} TPS per "
    "GPU at the 100th iteration (memory {mem} GiB). torchtitan's tps is the rank's tokens per second divided by "
    "its non-data-parallel degree (1 here), so measured tokens_per_s = TPS x {gpus}. From llama3_8b.toml (read at "
    "f3534d7 and 01424cb, both: sequence 8192, FSDP over every rank (data_parallel_shard_degree -1), "
    "activation_checkpoint 'selective' with selective_ac_option 'op', float8 filter_fqns output: the LM head "
    "stays BF16); simcluster import torchtitan of those settings gives this scenario: framework torchtitan (FSDP2 "
    "= ZeRO-3, SDPA), torch.compile on the blocks and, since pytorch/torchtitan#1033, the loss "
    "(training.elementwise fused), torchao's Float8 tensorwise dynamic scaling (training.precision fp8, "
    "fp8_recipe current; framework torchtitan's fp8_library torchao: the input cast again in the backward, the "
    "FP8 weight copied column-major for the input gradient) with FSDP's all-gather in FP8 "
    "(training.fp8_param_gather), op-level selective "
    "recomputation (training.recompute op). Not modelled: precompute_float8_dynamic_scale_for_fsdp (one amax "
    "all-reduce over every weight after the optimizer step) and force_recompute_fp8_weight_in_bwd (no field). "
    "ASSUMED (not stated): the hosts as DGX H200 (8 H200 SXM at 700 W, 8x400 Gb/s NDR, rail-optimized fat tree); "
    "the memory column as torchtitan's logged memory line (max_reserved_gib, the caching allocator's peak "
    "reservation), compared on the side (peak_memory_gib)."
)
TITAN_H200 = [(4, 10938, 47.96), (8, 10753, 46.97)]  # nodes, TPS per GPU, memory GiB (iteration 100)
cases = []
for nodes, tps, mem in TITAN_H200:
    gpus = 8 * nodes
    cases.append({
        "name": f"torchtitan/llama3.1-8b-float8-fsdp-{gpus}xh200",
        "family": "torchtitan-h200",
        "source": TITAN_H200_SRC.format(nodes=nodes, tps=tps, mem=mem, gpus=gpus),
        "published": {"tps_per_gpu": tps, "gpus": gpus, "local_batch": 2, "seq_len": 8192, "memory_gib": mem},
        "scenario": {
            "framework": "torchtitan",
            "model": llama_model("LLAMA3-8B"),
            "cluster": {"hardware": "dgx-h200", "gpus": gpus},
            "parallel": {"dp": gpus, "zero": 3},
            "training": {"seq_len": 8192, "micro_batch": 2, "global_batch": 2 * gpus, "precision": "fp8",
                         "fp8_recipe": "current", "fp8_param_gather": True, "recompute": "op",
                         "elementwise": "fused"},
        },
        "measured": {"tokens_per_s": tps * gpus},
        # torchtitan's logged memory line: max_reserved_gib (torch.cuda.max_memory_reserved)
        "peak_memory_gib": mem,
    })
dump(str(ROOT / "validation" / "torchtitan-h200.yaml"),
     "# torchtitan FSDP2 with torchao Float8 on 32 and 64 H200 (Llama 3.1 8B, the Trainy team's June 2025 baseline),\n"
     "# tokens/s per GPU as published. Generated by tools/generate_validation_cases.py (source in each case).\n", cases)

# --- BigScience BLOOM-176B on Jean Zay (Megatron-DeepSpeed) ----------------------------------------
# bigscience-workshop/bigscience train/tr11-176B-ml: the main run's end of epoch 1 (README.md
# @00327f8c, "Important checkpoints": iteration 85376, 104.70 s, 149.77 TFLOPs) and the steady
# iterations of the topology re-tests from the iteration-94767 checkpoint (reshaping-log.md @c352f83;
# the first iteration after a restart is slower and is not used). TFLOPs as logged by
# Megatron-DeepSpeed: Narayanan's eq. 3 with the recompute forward (bigscience math/README.md).
BLOOM_SRC = "bigscience-workshop/bigscience train/tr11-176B-ml"
BLOOM_ROWS = [  # nodes, tp, pp, micro-batch, seconds per iteration, TFLOPs logged, where
    (48, 4, 12, 2, 104.70, 149.77, "README.md @00327f8c ('Important checkpoints', iteration 85376)"),
    (24, 4, 12, 2, 215.82, 145.31, "reshaping-log.md @c352f83 (iteration 94768; 94769: 215.99 s)"),
    (24, 4, 24, 1, 220.30, 142.35, "reshaping-log.md @c352f83 (iteration 94770)"),
    (24, 2, 24, 1, 199.82, 156.95, "reshaping-log.md @c352f83 (iteration 94769)"),
    (36, 4, 36, 1, 155.71, 134.26, "reshaping-log.md @c352f83 (iteration 94769)"),
    (36, 2, 36, 1, 141.22, 148.04, "reshaping-log.md @c352f83 (iteration 94770)"),
]
cases = []
for nodes, tp, pp, mbs, seconds, tflops, where in BLOOM_ROWS:
    gpus = nodes * 8
    per = 72 // pp  # 70 blocks + the two embedding units, 'type:transformer|embedding'
    cases.append({
        "name": f"bloom/176B-{nodes}node-tp{tp}pp{pp}dp{gpus // (tp * pp)}-mbs{mbs}",
        "family": "bigscience-a100",
        "source": (
            f"{BLOOM_SRC} {where}: {seconds} s per iteration, {tflops} TFLOPs as logged (Narayanan's eq. 3 "
            "with the recompute forward, V = 250880). Setup from tr11-176B-ml.slurm and README.md: 70 layers, "
            "h 14336, 112 heads, vocab 250,680 padded to 250,880, tied embeddings, ALiBi, GeLU, dropout 0.1, "
            "global batch 2048 x 2048 tokens, bf16 with DeepSpeed's BF16_Optimizer (ZeRO stage 0 in the config; "
            "it shards the fp32 optimizer state over data parallel like ZeRO-1 and accumulates gradients in "
            "fp32), full activation checkpointing, Megatron's fused softmax on materialised scores (no "
            "FlashAttention; ALiBi's bias copied into the scores by torch.baddbmm with beta 1), --pp-partition-method 'type:transformer|embedding' (each embedding counts as one "
            "layer: the first and last stages hold one block fewer). Framework: DeepSpeed's pipeline engine "
            "(framework deepspeed). Hardware (README.md): 8 A100 80GB per node, NVLink, 4 Omni-Path links per "
            "node (OPA 100 Gb/s per port) on a dedicated NCCL subnet, 'non-blocking fat tree' (HF blog "
            "bloom-megatron-deepspeed): dgx-a100 with 4 NICs of 100 Gb/s. CUDA_LAUNCH_BLOCKING=1, exported by "
            "tr11-176B-ml.slurm to avoid hangs (BigScience measured 0-6% from it, chronicles-prequel.md): "
            "training.launch_blocking, the host's time to issue each op added to the GPU's. The pipe engine "
            "sends each stage's output and input gradient as 1/tp partitions and the receiver all-gathers "
            "them over its TP group (runtime/pipe/engine.py is_pipe_partitioned, is_grad_partitioned: "
            "overlap.pp_scatter_gather, set by framework deepspeed). Gradients all-reduced in bf16: the "
            "config names no communication_data_type, so DeepSpeed's engine casts the BF16_Optimizer's fp32 "
            "buffers to bf16 for the all-reduce and copies the result back (runtime/engine.py "
            "communication_data_type: bfloat16 when bf16 is enabled at stage 0, allreduce_bucket; "
            "dp.reduce_dtype 16bit); the README pins PyTorch 1.11 'for its NCCL version which supports BF16 "
            "comms'."
        ),
        "published": {"seconds_per_iteration": seconds, "tflops_per_gpu": tflops, "gpus": gpus,
                      "global_batch": 2048, "seq_len": 2048, "layers": 70, "hidden": 14336, "vocab": 250880},
        "scenario": {
            "framework": "deepspeed",
            "model": {"name": "bloom-176b", "layers": 70, "hidden": 14336, "heads": 112, "ffn": 4 * 14336,
                      "vocab": 250880, "mlp": "gelu", "norm": "layernorm", "position": "alibi",
                      "tied_embeddings": True, "bias": True, "dropout": True},
            "cluster": {"hardware": "dgx-a100", "gpus": gpus, "nics_per_node": 4, "nic_gbps": 100},
            "parallel": {"tp": tp, "pp": pp, "zero": 1,
                         "layers_per_stage": [per - 1] + [per] * (pp - 2) + [per - 1]},
            "training": {"seq_len": 2048, "micro_batch": mbs, "global_batch": 2048, "precision": "bf16",
                         "recompute": "full", "flash_attention": False, "launch_blocking": True},
            "dp": {"reduce_dtype": "16bit"},
        },
        "measured": {"step_time_s": seconds},
    })
dump(str(ROOT / "validation" / "bigscience-a100.yaml"),
     "# BLOOM-176B on Jean Zay (Megatron-DeepSpeed, 192-384 A100), seconds per iteration as logged.\n"
     "# Generated by tools/generate_validation_cases.py from the table in that script (source in each case).\n",
     cases)

# --- NVIDIA DGX Cloud benchmarking recipes (DGX H100 reference, BF16 and FP8) ---------------------
# Not in published.yaml: NVIDIA/dgxc-benchmarking READMEs, measured step times ("train_step_timing",
# the last of 50 steps) on the DGX H100 reference architecture (8x H100 80GB 700 W, NVLink4,
# 8x 400 Gb/s InfiniBand per node). Llama 3.1 from llama3.1/README.md @741c886 (NeMo 2,
# nvcr.io/nvidia/nemo:25.02.01; settings from llama3.1/pretrain_llama31.py and NeMo's
# llama3_8b / llama3_70b / llama31_405b recipes in performance mode); Nemotron-4 15B from
# nemotron/README_15b.md @0b71cfd and GPT-3 175B from nemo_megatron/README_175b.md @8f5cbb3 (NeMo
# 24.12 launcher; settings from nemotron4-15b-synth.yaml and gpt3_175b_hydra.yaml @8f5cbb3).
# Weak scaling: the smallest and the largest GPU count of each table (the step times are flat
# within 1-3% in between); FP8 at the smallest count. Nemotron-4 340B from nemotron/README_340b.md
# @35a9aec (NeMo 24.09 container; apex's DistributedFusedAdam, below the loop).
DGXC_SRC = {
    "llama": "NVIDIA/dgxc-benchmarking llama3.1/README.md (commit 741c886), NeMo 25.02.01",
    "nemotron": "NVIDIA/dgxc-benchmarking nemotron/README_15b.md (commit 0b71cfd), NeMo 24.12",
    "gpt3": "NVIDIA/dgxc-benchmarking nemo_megatron/README_175b.md (commit 8f5cbb3), NeMo 24.12",
}
DGXC = [  # source, model, precision, gpus, seq, tp, pp, cp, vp, mbs, gbs, step s
    ("llama", "LLAMA3-8B", "bf16", 8, 8192, 1, 1, 2, 1, 1, 128, 12.27),
    ("llama", "LLAMA3-8B", "bf16", 128, 8192, 1, 1, 2, 1, 1, 2048, 12.33),
    ("llama", "LLAMA3-8B", "fp8", 8, 8192, 1, 1, 2, 1, 1, 128, 9.33),
    ("llama", "LLAMA3-70B", "bf16", 64, 8192, 4, 4, 2, 5, 1, 128, 14.66),
    ("llama", "LLAMA3-70B", "bf16", 2048, 8192, 4, 4, 2, 5, 1, 4096, 14.66),
    ("llama", "LLAMA3-70B", "fp8", 64, 8192, 4, 8, 1, 5, 1, 128, 9.86),
    ("llama", "LLAMA3.1-405B", "bf16", 512, 8192, 8, 8, 2, 8, 1, 256, 19.78),
    ("llama", "LLAMA3.1-405B", "bf16", 2048, 8192, 8, 8, 2, 8, 1, 1024, 19.87),
    ("llama", "LLAMA3.1-405B", "fp8", 512, 8192, 8, 8, 2, 8, 1, 256, 12.37),
    ("nemotron", "NEMOTRON4-15B", "bf16", 16, 4096, 4, 1, 1, 1, 4, 64, 2.812),
    ("nemotron", "NEMOTRON4-15B", "bf16", 2048, 4096, 4, 1, 1, 1, 4, 8192, 2.887),
    ("nemotron", "NEMOTRON4-15B", "fp8", 16, 4096, 4, 1, 1, 1, 4, 64, 2.039),
    ("gpt3", "GPT3-175B", "bf16", 128, 2048, 4, 8, 1, 6, 1, 256, 8.309),
    ("gpt3", "GPT3-175B", "bf16", 2048, 2048, 4, 8, 1, 6, 1, 4096, 8.49),
    ("gpt3", "GPT3-175B", "fp8", 128, 2048, 4, 8, 1, 6, 1, 256, 5.626),
]
DGXC_SETTINGS = {
    "llama": (
        "Settings from pretrain_llama31.py and NeMo's recipes (performance_mode): no recompute, "
        "distributed optimizer with overlapped grad reduce and param gather, TP comm overlap "
        "(userbuffers) for 70B/405B, sequence parallel, gradient accumulation fusion, cuDNN fused "
        "attention (NVTE_FUSED_ATTN=1), CUDA graphs off; bf16 main gradients, reduced in bf16 "
        "(grad_reduce_in_fp32=False: training.fp32_grad_accum false) in BF16 and FP8 alike: NeMo "
        "2.2.0's llama3_8b, llama3_70b and llama31_405b pretrain_performance_optimizations set "
        "recipe.trainer.plugins.grad_reduce_in_fp32 = False (read in the nemo_toolkit 2.2.0 wheel), "
        "MegatronStrategy.connect copies the plugin's value over the DDP config's "
        "(update_config_with_dtype_overrides), and pretrain_llama31.py sets it again after swapping "
        "in bf16_with_fp8_mixed() (built on bf16_mixed, True) for FP8; the README's example log of "
        "the 8B on 8 GPUs reads memory_allocated: 44271689728 after a step, 5.5 B per parameter "
        "(bf16 weights 2, bf16 gradients 2, optimizer 12 / (dp x cp = 8)). FP8 (bf16_with_fp8_mixed: "
        "delayed scaling) keeps the weights and gathers them in FP8 (fp8_param_gather: "
        "training.fp8_param_gather)."
    ),
    "nemotron": (
        "Shape from nemotron4-15b-synth.yaml: 32 layers, h 6144, 48 heads, 8 query groups, FFN "
        "24576 squared-ReLU, vocab 256000, LayerNorm without biases, untied embeddings. Settings "
        "from that yaml: no recompute, sequence parallel, TP comm overlap (ub_tp_comm_overlap), "
        "Megatron-Core distributed optimizer with overlapped grad and param sync, fused "
        "cross-entropy. ASSUMED: fp32 gradient reduction (NeMo's default grad_sync_dtype), cuDNN "
        "fused attention."
    ),
    "gpt3": (
        "GPT-3 shape (96 layers, h 12288, GeLU 4h MLP, LayerNorm, biases, learned positions, vocab "
        "51200, dropout 0.1). Settings from gpt3_175b_hydra.yaml: no recompute, sequence parallel, TP comm "
        "overlap, distributed_fused_adam with overlapped grad and param sync and grad_sync_dtype "
        "bf16 (bf16 main gradients: training.fp32_grad_accum false), gradient accumulation fusion; "
        "virtual pipeline 6 as the yaml sets it (the README's table says 12); fp8_params: true, so "
        "the FP8 row keeps its weights in FP8 and the optimizer gathers them at 1 B an element "
        "(training.fp8_param_gather; apex's DistributedFusedAdam gathers FP8 parameters as the "
        "MLPerf GPT-3 configs' runs do). ASSUMED: cuDNN fused attention."
    ),
}
# Nemotron-4 (nemotron4-15b-synth.yaml / nemotron4-340b-synth.yaml and NeMo 2's Nemotron4Config15B /
# 340B alike): the Llama table's columns, a squared-ReLU MLP and LayerNorm (layernorm1p) instead
LLAMA["NEMOTRON4-15B"] = (32, 6144, 48, 8, 24576, 256000)
LLAMA["NEMOTRON4-340B"] = (96, 18432, 96, 8, 73728, 256000)


def nemotron4_model(name):
    """A Nemotron-4 model section (``name`` a key of LLAMA): squared-ReLU MLP, LayerNorm."""
    return dict(llama_model(name), mlp="relu2", norm="layernorm")


_DGXC_LLAMA_UB = ("dgxc-benchmarking llama3.1/pretrain_llama31.py replaces the recipe's tp_comm_overlap_cfg "
                  "with NeMo's H100 preset for the dtype, from the NeMo 2.2 of the 25.02.01 container "
                  "(setup.sh NEMO_COMMIT d2b21556; NeMo 2.0-2.2 FP8 presets pipeline the forward "
                  "reduce-scatters, 2.3 made them ring exchanges).")
DGXC_UB = {
    ("llama", "LLAMA3-70B", "bf16"): ("userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192", _DGXC_LLAMA_UB),
    ("llama", "LLAMA3-70B", "fp8"): ("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192@nemo-2.0", _DGXC_LLAMA_UB),
    ("llama", "LLAMA3.1-405B", "bf16"): ("userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192", _DGXC_LLAMA_UB),
    ("llama", "LLAMA3.1-405B", "fp8"): ("userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192@nemo-2.0",
                                        _DGXC_LLAMA_UB),
    **{("nemotron", "NEMOTRON4-15B", prec): (
        "te-1", "nemotron4-15b-synth.yaml sets ub_tp_comm_overlap without ub_tp_comm_overlap_cfg, so NeMo "
        "1.0's initialize_ub_func passes ub_cfgs=None: " + TE1_NOTE + " (ASSUMED: the 24.12 container's TE "
        "is 1.x).") for prec in ("bf16", "fp8")},
    **{("gpt3", "GPT3-175B", prec): (
        ub_mapping(4, 8, 2, 4, 24, 20), "gpt3_175b_hydra.yaml's inline ub_tp_comm_overlap_cfg (bulk 4/8/2/4 "
        "SMs, proj_fprop / fc2_fprop pipelines of 24 / 20 SMs with a margin), for BF16 and FP8 alike.")
       for prec in ("bf16", "fp8")},
}
# NeMo's performance recipes defer the LM head's weight gradients to the pipeline flush
# (MegatronCommOverlapCallback defer_embedding_wgrad_compute=True): llama3_70b.py with
# wgrad_deferral_limit=22 (read at NVIDIA/NeMo@0189a3b), llama31_405b.py with 50 (NVIDIA/NeMo@00aa2e1)
DGXC_DEFER = {"LLAMA3-70B": 22, "LLAMA3.1-405B": 50}
DGXC_DEFER_NOTE = (
    " The performance recipe's MegatronCommOverlapCallback sets defer_embedding_wgrad_compute=True, "
    "wgrad_deferral_limit={limit} (parallel.defer_head_wgrad; NeMo's {recipe}, read at NVIDIA/NeMo@{commit}; "
    "ASSUMED the same in the 25.02.01 container's NeMo 2.2)."
)
# the loss kernel (parallelism/loss_kernels.py): NeMo 2's GPTConfig sets cross_entropy_loss_fusion
# True (nemo/collections/llm/gpt/model/base.py, 2.2.0) and 25.02 ships Megatron-Core 0.11, which
# has no cross_entropy_fusion_impl (0.12.0 added it, 'native' by default): the native fused loss;
# nemotron4-15b-synth.yaml sets cross_entropy_loss_fusion: true (NeMo 1.x's build_transformer_config
# passes it on); gpt3_175b_hydra.yaml has no such key, so Megatron-Core's default (unfused) stays
DGXC_LOSS = {
    "llama": ("native", " The loss: NeMo 2's GPTConfig sets cross_entropy_loss_fusion True and the "
              "25.02 container's Megatron-Core 0.11 has no cross_entropy_fusion_impl, so Megatron-Core's "
              "native fused loss ran (training.fused_cross_entropy native)."),
    "nemotron": ("native", " The loss: nemotron4-15b-synth.yaml sets cross_entropy_loss_fusion: true, "
                 "Megatron-Core's native fused loss (training.fused_cross_entropy native)."),
}
DGXC_DEFER_SRC = {"LLAMA3-70B": ("llama3_70b.py", "0189a3b"), "LLAMA3.1-405B": ("llama31_405b.py", "00aa2e1")}
cases = []
for src, name, prec, gpus, s, tp, pp, cp, vp, mbs, gbs, step in DGXC:
    if name.startswith("GPT3"):
        model = gpt3_model("175B", s, dropout=True)
    elif name.startswith("NEMOTRON"):
        model = nemotron4_model(name)
    else:
        model = llama_model(name)
    par = megatron_parallel(tp, pp, cp, vp)
    scenario = megatron_h100_scenario(model, gpus, par, s, mbs, gbs, prec, "cudnn", dfa=src == "gpt3",
                                      fp8_params=src in ("llama", "gpt3"), comm_overlap=src == "llama")
    if prec == "fp8" or src in ("gpt3", "llama"):
        scenario["training"]["fp32_grad_accum"] = False
    if name.startswith("LLAMA3-8B"):
        scenario["overlap"]["tp_comm"] = False  # tp 1: no TP overlap callback in the 8B script
    if src in DGXC_LOSS:
        scenario["training"]["fused_cross_entropy"] = DGXC_LOSS[src][0]
    defer = ""
    if name in DGXC_DEFER:
        scenario["parallel"].update(defer_head_wgrad=True, head_wgrad_deferral_limit=DGXC_DEFER[name])
        recipe, commit = DGXC_DEFER_SRC[name]
        defer = DGXC_DEFER_NOTE.format(limit=DGXC_DEFER[name], recipe=recipe, commit=commit)
    cases.append({
        "name": f"dgxc/{name.lower()}-{prec}-{gpus}gpu",
        "family": "nvidia-dgxc-h100",
        "source": (
            f"{DGXC_SRC[src]}, DGX H100 reference: {name} {prec.upper()} on {gpus} GPUs, sequence {s}, "
            f"tp {tp} pp {pp} cp {cp} vp {vp}, MBS {mbs}, GBS {gbs}: training step {step} s (the last "
            f"of 50 steps, as the README measures it). {DGXC_SETTINGS[src]}{defer}"
            + (DGXC_LOSS[src][1] if src in DGXC_LOSS else "")
        ),
        "published": {"step_time_s": step, "gpus": gpus, "global_batch": gbs, "seq_len": s,
                      "precision": prec},
        "scenario": scenario,
        "measured": {"step_time_s": step},
    })
    with_userbuffers(cases[-1], *DGXC_UB[(src, name, prec)] if (src, name, prec) in DGXC_UB else (None, ""))
# Nemotron-4 340B: nemotron/README_340b.md at 35a9aec (dgxc-benchmarking v24.11, CHANGELOG 2024-12-13;
# setup.sh's container nvcr.io/nvidia/nemo:24.09), "24.11" BF16 and FP8 tables (the same numbers at
# 8f5cbb3, v25.02, whose 340B recipe still runs the 24.09 container). Settings: configure.sh at 35a9aec
# (the 340b branch) over nemotron4-340b-synth.yaml, stored only at 8f5cbb3 (ASSUMED the v24.11 copy's
# settings, both on the same container and with the same measured steps). Written before simulating.
DGXC_340B = [  # precision, gpus, gbs, step s (tp 8, pp 8, vp 12, mbs 1, sequence 4096)
    ("bf16", 128, 32, 4.61), ("bf16", 2048, 512, 4.84), ("fp8", 128, 32, 3.16),
]
DGXC_340B_SETTINGS = (
    "NVIDIA/dgxc-benchmarking nemotron/README_340b.md (commit 35a9aec, release v24.11, container "
    "nvcr.io/nvidia/nemo:24.09; the same table at 8f5cbb3), DGX H100 reference: NEMOTRON4-340B {prec} "
    "on {gpus} GPUs, sequence 4096, tp 8 pp 8 cp 1 vp 12, MBS 1, GBS {gbs} (nodes x 2): training step "
    "{step} s (the last step, as the README measures it). Shape from nemotron4-340b-synth.yaml: 96 "
    "layers, h 18432, 96 heads (head dim 192), 8 query groups, FFN 73728 squared-ReLU, layernorm1p, no "
    "biases, RoPE on half of each head, untied embeddings, vocab 256000. Settings from configure.sh at "
    "35a9aec (340b branch): megatron_gpt_pretraining.py (NeMo 1.x, Megatron-Core GPT with "
    "TransformerEngine), NVTE_FUSED_ATTN=0 so TransformerEngine runs flash-attn 2 "
    "(training.attention_kernel fa2), NCCL_NVLS_ENABLE=0 (cluster.nvls false), ub_tp_comm_overlap True "
    "with sequence parallel, overlap_p2p_comm True and batch_p2p_comm False (overlap.pp_p2p batched, the "
    "nearest), fp8_hybrid (delayed scaling) and fp8_params = the FP8 flag (the FP8 row keeps its weights "
    "in FP8: training.fp8_param_gather, apex's optimizer storing fp32 master copies, store_params). From "
    "the yaml: activations_checkpoint_granularity selective (Megatron-Core checkpoints the core attention: "
    "training.recompute selective), apex distributed_fused_adam with bucket_cap_mb 50 (dp.bucket_mb "
    "52.4288 MB), grad_sync_dtype bf16 (training.fp32_grad_accum false), overlapped grad and param sync, "
    "contiguous gradient buffer; NeMo 1.x's setup_optimization forces the optimizer state to fp32 (the "
    "yaml's optim dtype bf16 is overridden) and, for the BF16 row, stores bf16 weights with their fp32 "
    "remainders (training.master_weights remainder); gradient_accumulation_fusion, "
    "defer_embedding_wgrad_compute with wgrad_deferral_limit 22 (parallel.defer_head_wgrad), "
    "cross_entropy_loss_fusion (Megatron-Core's native fused loss). No counterpart here: "
    "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN, NVTE_UB_SPLIT_AG, gc_interval 12; the asynchronous amax reduction "
    "variables are read by TransformerEngine up to 1.5 only (training.fp8_amax_async), not by 24.09's."
)
for prec, gpus, gbs, step in DGXC_340B:
    model = nemotron4_model("NEMOTRON4-340B")
    scenario = megatron_h100_scenario(model, gpus, megatron_parallel(8, 8, 1, 12), 4096, 1, gbs, prec,
                                      "fa2", fp32_grads=False, dfa=True, fp8_params=prec == "fp8")
    scenario["training"]["recompute"] = "selective"
    scenario["training"]["fused_cross_entropy"] = "native"
    scenario["cluster"]["nvls"] = False
    scenario["dp"]["bucket_mb"] = 52.4288
    scenario["parallel"].update(defer_head_wgrad=True, head_wgrad_deferral_limit=22)
    cases.append({
        "name": f"dgxc/nemotron4-340b-{prec}-{gpus}gpu",
        "family": "nvidia-dgxc-h100",
        "source": DGXC_340B_SETTINGS.format(prec=prec.upper(), gpus=gpus, gbs=gbs, step=step),
        "published": {"step_time_s": step, "gpus": gpus, "global_batch": gbs, "seq_len": 4096,
                      "precision": prec},
        "scenario": scenario,
        "measured": {"step_time_s": step},
    })
    with_userbuffers(cases[-1], "te-1", "nemotron4-340b-synth.yaml and configure.sh turn "
                     "ub_tp_comm_overlap on without ub_tp_comm_overlap_cfg (no H100 h18432 tp_overlap file "
                     "exists in the launcher), so NeMo 1.0's initialize_ub_func passes ub_cfgs=None: "
                     + TE1_NOTE + " (ASSUMED: the 24.09 container's TE is 1.x).")
# Nemotron-4 on NeMo 25.04: nemotron/README.md at commit dc1028f (GSW 25.05, launch.sh FW_VERSION
# 25.04.00; the same performance section at 1f6d9f4, GSW 25.05.04, whose setup.sh pins NeMo
# b4148d2), measured step times (the mean of iterations 11-44 of a 50-step run,
# parse_train_timing.sh), the H100 tables (15B on 16 GPUs, 340B on 256). The runs are NeMo 2's
# scripts/performance/llm/pretrain_nemotron4_{15b,340b}.py (read at b4148d2) over the recipes in
# performance mode, the release of the Grok-1 rows below. Written before simulating. The same
# README's GB200 tables for 340B (TP 8, PP 4, VP 12: BF16 2.189 / 2.229 s, FP8 1.483 / 1.549 s on
# 128 / 512 GPUs) are left out: which attention ran at head dim 192 on sm100 is not settled (the
# scripts set no NVTE_*_ATTN; TransformerEngine before its PR 1797 selected cuDNN's fused
# attention for any d <= 256 from sm90, but cuDNN 9.8-9.9 may not have had an sm100 backward above
# 128, and the container's TransformerEngine and cuDNN versions were not found; flash-attn 2 has
# no Blackwell curve in gb200-nvl72).
DGXC_2504_SRC = ("NVIDIA/dgxc-benchmarking nemotron/README.md (commit dc1028f, GSW 25.05, container "
                 "nemo:25.04.00; the same table at 1f6d9f4, NeMo b4148d2 per setup.sh)")
DGXC_2504 = [  # size, precision, gpus, tp, pp, vp, mbs, gbs, step s, MFU % as published
    ("15b", "bf16", 16, 2, 1, 1, 2, 64, 2.746, 56.7),
    ("15b", "fp8", 16, 2, 1, 1, 2, 64, 1.988, 39.1),
    ("340b", "bf16", 256, 8, 8, 12, 1, 64, 4.606, 47.3),
    ("340b", "fp8", 256, 8, 8, 12, 1, 64, 3.107, 35.0),
]
DGXC_2504_SETTINGS = {
    "340b": (
        "Shape: the nemotron4_340b recipe's Nemotron4Config340B (96 layers, h 18432, 96 heads of 192, 8 "
        "query groups, FFN 73728 squared-ReLU, layernorm1p, no biases, RoPE, untied embeddings; the "
        "script's NullTokenizer of 256000). The recipe's performance mode: MegatronCommOverlapCallback "
        "with tp_comm_overlap, defer_embedding_wgrad_compute and wgrad_deferral_limit 22 "
        "(parallel.defer_head_wgrad), grad_reduce_in_fp32 False (training.fp32_grad_accum false); read "
        "in the recipe at NeMo 01d03c1, ASSUMED the same in 2.3.0."
    ),
    "15b": (
        "Shape: Nemotron4Config15B (32 layers, h 6144, 48 heads, 8 query groups, FFN 24576 squared-ReLU, "
        "layernorm1p, no biases, RoPE, untied embeddings; vocab 256000). The recipe's performance mode: "
        "MegatronCommOverlapCallback with tp_comm_overlap only (nemotron4_15b.py, the one stored version, "
        "023dfbe, undated), so the BF16 row keeps bf16-mixed's fp32 gradient reduction (ASSUMED, the "
        "framework default) and the FP8 row reduces in bf16 (set_primary_perf_configs: "
        "grad_reduce_in_fp32 False for every FP8 recipe)."
    ),
}
DGXC_2504_COMMON = (
    " Megatron-Core's distributed optimizer with overlapped grad reduce and param gather, no "
    "recompute, sequence parallel; NeMo 2.3.0's set_primary_perf_configs: TransformerEngine's "
    "cross-entropy (training.fused_cross_entropy te), the bucket NaN check off, "
    "overlap_param_gather_with_optimizer_step with dp, pp and vp > 1; FP8 as bf16_with_fp8_mixed (no "
    "-fr flag in launch.sh: delayed scaling, weights kept and gathered in FP8: "
    "training.fp8_param_gather). launch.sh passes -fsdp 0 and, on H100, no --cuda_graphs (the "
    "scripts' H100 default: off). No counterpart here: the 340B script's NVTE_NORM_FWD/BWD_USE_CUDNN "
    "(cuDNN's LayerNorm kernels), vboost, the 2 MiB pipeline NCCL chunk. Attention: no "
    "NVTE_FUSED_ATTN is set, so TransformerEngine's default on Hopper, cuDNN's fused attention (head "
    "dim 192 included: cuDNN >= 9.5, TransformerEngine issue 1591)."
)
for size, prec, gpus, tp, pp, vp, mbs, gbs, step, mfu in DGXC_2504:
    model = nemotron4_model(f"NEMOTRON4-{size.upper()}")
    fp32_grads = size == "15b" and prec == "bf16"
    scenario = megatron_h100_scenario(model, gpus, megatron_parallel(tp, pp, 1, vp), 4096, mbs, gbs, prec,
                                      "cudnn", fp32_grads=fp32_grads, fp8_params=True, comm_overlap=True)
    scenario["training"]["fused_cross_entropy"] = "te"
    if size == "340b":
        scenario["parallel"].update(defer_head_wgrad=True, head_wgrad_deferral_limit=22)
    cases.append({
        "name": f"dgxc-25.04/nemotron4-{size}-{prec}-{gpus}gpu",
        "family": "nvidia-dgxc-h100",
        "source": (
            f"{DGXC_2504_SRC}: Nemotron4 {size.upper()} {prec.upper()} on {gpus} H100 GPUs, sequence 4096, tp "
            f"{tp} pp {pp} cp 1 vp {vp}, MBS {mbs}, GBS {gbs}: training step {step} s. "
            + DGXC_2504_SETTINGS[size] + DGXC_2504_COMMON
        ),
        "published": {"step_time_s": step, "mfu_pct": mfu, "gpus": gpus, "global_batch": gbs,
                      "seq_len": 4096, "precision": prec},
        "scenario": scenario,
        "measured": {"step_time_s": step},
    })
    with_userbuffers(cases[-1], "te-2", f"pretrain_nemotron4_{size}.py (b4148d2) sets a TP overlap config only "
                     "on b200 and gb200, so on H100 the callback initialises userbuffers with TransformerEngine's "
                     "defaults (te-2; ASSUMED: the 25.04 container's TransformerEngine is 2.x).")
dump(str(ROOT / "validation" / "nvidia-dgxc-h100.yaml"),
     "# NVIDIA DGX Cloud benchmarking recipes: measured step times on the DGX H100 reference\n"
     "# architecture (BF16 and FP8). Generated by tools/generate_validation_cases.py from the table\n"
     "# in that script (source in each case); unstated settings are assumptions.\n", cases)

# ---------------- NeMo long-sequence context parallelism (Llama 3 8B, FP8, DGX B200) ----------------
# Not in published.yaml (which notes it: "Same file has a LLAMA3-8B FP8 DGX-B200 table"):
# NVIDIA/NeMo docs/source/performance/performance_long_sequence.md at commit
# 9421f21af3bc554cd5656caac4dff863b20e8c65, "LLAMA3-8B (FP8) - B200", container NeMo25.04.rc2,
# DGX-B200, the with-CP columns. The without-CP column is left out: its layouts are not given.
# In every row the "# of GPUs" column is 4 x tp * pp * dp * cp (8K: 8 GPUs at tp 1, pp 1, dp 2,
# cp 1), as in the H100 table's pattern (GPUs = sequence in K). The layout is taken as the run:
# gbs is divisible by the published dp in every row and would not be by gpus / (tp * pp * cp)
# at 512K and 1M (8 and 4 sequences). NeMo's per-GPU TFLOP/s divides by the run's own world
# size, so the step time follows from the layout's GPU count.
NEMO_CP_B200 = [  # seq K, gpus, gbs, tp, pp, dp, cp, TFLOP/s per GPU with CP
    (8, 8, 512, 1, 1, 2, 1, 1671), (16, 16, 256, 1, 1, 4, 1, 1717), (32, 32, 128, 1, 1, 4, 2, 1624),
    (64, 64, 64, 1, 1, 4, 4, 1600), (128, 128, 32, 2, 1, 4, 4, 1588), (256, 256, 16, 4, 1, 4, 4, 1590),
    (512, 512, 8, 4, 1, 4, 8, 1619), (1024, 1024, 4, 4, 1, 4, 16, 1608),
]


cases = []
for seq_k, listed_gpus, gbs, tp, pp, dp, cp, tflops in NEMO_CP_B200:
    s = seq_k * 1024
    gpus = tp * pp * dp * cp
    model = llama_model("LLAMA3-8B")
    assert listed_gpus == 4 * gpus and gbs % dp == 0  # the published columns (see above)
    step = nemo_llama_flops(model, gbs, s) / (tflops * 1e12 * gpus)
    cases.append({
        "name": f"nemo-cp-b200/llama3-8b-{seq_k}k-{gpus}gpu",
        "family": "nemo-long-context-b200",
        "source": (
            "NVIDIA/NeMo docs/source/performance/performance_long_sequence.md (commit 9421f21), "
            f"LLAMA3-8B (FP8) on DGX-B200, container NeMo25.04.rc2, sequence {seq_k}K: {tflops} TFLOP/s "
            f"per GPU with tp {tp} pp {pp} dp {dp} cp {cp}, batch size {gbs}. The table lists {listed_gpus} "
            f"GPUs, four times tp*pp*dp*cp = {gpus} in every row; the layout is taken as the run ({gpus} GPUs: "
            "the batch divides by the published dp in every row, and would not by gpus/(tp*pp*cp) at 512K "
            "and 1M), and NeMo's per-GPU TFLOP/s divides by the run's own world size. measured "
            "step_time_s = F / (TFLOP/s * gpus), F = NeMo's llama3 formula gbs*s*l*h^2*(12 + 12*g/a + "
            "18*ffn/h + 12*s/h + 6*V/(l*h)), V = 128256, without a causal discount (nemo/utils/"
            "flops_formulas.py of that era, the same undiscounted form as the H100 table). Evidence for the "
            "undiscounted form: with the causal half, the 1M-token row (97% attention) would need about 1,600 "
            "TFLOP/s of causal attention forward and backward, above every B200 rate cuDNN measured through "
            "its graph (9.13.1: best 1,515 forward, 1,236 backward). ASSUMED (not "
            "stated): micro-batch 1, no recompute, distributed optimizer, the TP/DP overlaps of NeMo's "
            "performance recipes, ring attention (TransformerEngine's default p2p CP), FP8 delayed "
            "scaling with the weights kept and gathered in FP8 (NeMo 2's bf16_with_fp8_mixed: fp8_param_gather), BF16 attention by TransformerEngine's cuDNN backend (the "
            "fused-attention backend TE uses on Blackwell)."
        ),
        "published": {"tflops_per_gpu": tflops, "gpus": gpus, "global_batch": gbs, "seq_len": s},
        "scenario": megatron_h100_scenario(
            model, gpus, {"tp": tp, "pp": pp, "cp": cp, "zero": 1, "sequence_parallel": tp > 1}, s, 1, gbs,
            "fp8", "cudnn", hardware="dgx-b200", fp8_params=True, comm_overlap=True),
        "measured": {"step_time_s": round(step, 6)},
    })
    # ASSUMED: run by NeMo's performance scripts, which from 25.04 (NeMo 2.3.0) pick
    # TransformerEngine's cross-entropy beside GPTConfig's cross_entropy_loss_fusion
    cases[-1]["scenario"]["training"]["fused_cross_entropy"] = "te"
    cases[-1]["source"] += (" ASSUMED: the loss as NeMo's 25.04 performance scripts set it, TransformerEngine's "
                            "parallel cross-entropy (scripts/performance/utils.py: cross_entropy_fusion_impl "
                            "\"te\"; training.fused_cross_entropy te); which scripts produced this table is not stated. "
                            "ASSUMED: gradients reduced in fp32, bf16_mixed's grad_reduce_in_fp32 True, which "
                            "NeMo 2.3.0's llama3_8b_16k/64k/128k recipes keep; the performance scripts set it "
                            "False for every FP8 run, but as written they run 8K sequences only (no sequence "
                            "argument) and neither path's layouts are the table's (bf16: the family 4.6 -> 5.1%).")
    with_userbuffers(cases[-1], "te-2", "NeMo has no Llama 3 8B userbuffers preset (the perf scripts pass "
                     "none for 8B), so TransformerEngine 2.x's defaults apply (te-2: pipeline and bulk "
                     "overlaps 16 SMs each with an SM margin; get_default_config), ASSUMED: the 25.04 "
                     "container's TE is 2.x.")
    with_container_cudnn(cases[-1], "nemo-25.04")
dump(str(ROOT / "validation" / "nemo-long-context-b200.yaml"),
     "# NeMo long-sequence performance (Llama 3 8B, FP8, DGX B200) with context parallelism, 8K-1M tokens.\n"
     "# Generated by tools/generate_validation_cases.py from the table in that script (source in each\n"
     "# case); unstated settings are assumptions. tests/test_validate.py re-derives every measured value.\n",
     cases)

# ---------------- Megatron-Bridge performance summary, Blackwell (DGX B200, GB200 NVL72, FP8-CS) ----------------
# Same page as the H100 rows above (commit df0289c): the dense Llama rows of the DGX-B200 and
# DGX-GB200 tables with FP8 current scaling (FP8-CS; the 25.09 tables have no precision column
# and give FP8-MX in parentheses, so their main figures are taken as FP8-CS); the 26.02 FP8-MX and
# NVFP4 rows follow in BRIDGE_BLACKWELL_MORE; the MoE rows are left out (as above). The
# Llama 3 70B rows with Megatron FSDP on GB200 and GB300 offload activations to the Grace CPU
# (training.activation_offload_layers, the presets' cpu_offloading_num_layers, BRIDGE_OFFLOAD);
# the 405B FSDP row (25.09, 128 GB200 over two NVL72 racks, tp 2) offloads 95 of 126 layers.
BRIDGE_BLACKWELL = [  # container, system, model, gpus, gbs, mbs, seq, fsdp, tp, pp, cp, vp, tokens/s/GPU, TFLOP/s
    ("25.09", "B200", "LLAMA3-8B", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 29994, 1544),
    ("25.09", "B200", "LLAMA3.1-405B", 128, 64, 1, 8192, 0, 4, 8, 2, 8, 664, 1676),
    ("25.11", "B200", "LLAMA3-8B", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 30624, 1576),
    ("25.11", "B200", "LLAMA3.1-405B", 128, 64, 1, 8192, 0, 4, 8, 2, 8, 661, 1667),
    ("25.09", "GB200", "LLAMA3-8B", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 31357, 1614),
    ("25.11", "GB200", "LLAMA3-8B", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 31508, 1622),
    ("25.11", "GB200", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 4, 16, 1, 4, 813, 2053),
    ("26.02", "GB200", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 4, 16, 1, 4, 793, 2004),
    ("25.09", "GB200", "LLAMA3-70B", 64, 128, 2, 8192, 1, 1, 1, 1, 1, 3986, 1791),
    ("25.11", "GB200", "LLAMA3-70B", 64, 256, 2, 8192, 1, 1, 1, 1, 1, 4312, 1937),
    ("26.02", "GB200", "LLAMA3-70B", 64, 256, 2, 8192, 1, 1, 1, 1, 1, 4040, 1815),
    ("25.11", "GB300", "LLAMA3-70B", 64, 256, 2, 8192, 1, 1, 1, 1, 1, 4520, 2030),
    ("26.02", "GB300", "LLAMA3-70B", 64, 256, 2, 8192, 1, 1, 1, 1, 1, 5003, 2248),
    ("25.09", "GB200", "LLAMA3.1-405B", 128, 64, 1, 8192, 1, 2, 1, 1, 1, 729, 1840),
]
# The same page's other precisions on the same layouts, and its GB300 rows: NeMo 26.02's FP8-MX
# (MXFP8: 1x32 blocks with E8M0 scales inside the cast, training.fp8_recipe block) and NVFP4 rows
# (training.precision nvfp4, Megatron-Bridge's bf16_with_nvfp4_mixed: every transformer linear
# in NVFP4), and the FP8-CS rows of DGX-GB300 (25.11, 26.02) not listed above.
BRIDGE_BLACKWELL_MORE = [  # as BRIDGE_BLACKWELL, then the precision
    ("26.02", "GB200", "LLAMA3-70B", 64, 256, 1, 8192, 0, 2, 4, 1, 5, 3887, 1746, "FP8-MX"),
    ("26.02", "GB200", "LLAMA3-70B", 64, 256, 1, 8192, 0, 2, 4, 1, 5, 5041, 2264, "NVFP4"),
    ("26.02", "GB200", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 4, 16, 1, 8, 786, 1983, "FP8-MX"),
    ("26.02", "GB200", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 4, 16, 1, 8, 1145, 2891, "NVFP4"),
    ("26.02", "GB300", "LLAMA3-70B", 64, 256, 1, 8192, 0, 1, 4, 1, 5, 4596, 2064, "FP8-MX"),
    ("26.02", "GB300", "LLAMA3-70B", 64, 256, 1, 8192, 0, 1, 4, 1, 5, 6798, 3056, "NVFP4"),
    ("26.02", "GB300", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 2, 8, 2, 4, 931, 2349, "FP8-MX"),
    ("26.02", "GB300", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 4, 8, 1, 4, 1347, 3401, "NVFP4"),
    ("26.02", "GB300", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 4, 8, 1, 4, 988, 2495, "FP8-CS"),
    ("25.11", "GB300", "LLAMA3-8B", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 37556, 1933, "FP8-CS"),
    ("25.11", "GB300", "LLAMA3.1-405B", 256, 1536, 1, 8192, 0, 2, 8, 2, 4, 999, 2522, "FP8-CS"),
]
# precision column -> (training.precision, training.fp8_recipe, what the source says of it)
BRIDGE_PRECISION = {
    "FP8-CS": ("fp8", "current", "FP8 current scaling: an amax pass over each tensor before its cast "
                                 "(training.fp8_recipe: current)."),
    "FP8-MX": ("fp8", "block", "MXFP8 (Megatron-Bridge bf16_with_mxfp8_mixed): 1x32 blocks with E8M0 scales "
                               "found inside the cast, no amax pass (training.fp8_recipe: block); its weights kept and "
                               "gathered in MXFP8 (fp8_param_gather)."),
    "NVFP4": ("nvfp4", None, "NVFP4 (Megatron-Bridge bf16_with_nvfp4_mixed: fp4 e2m1, fp4_recipe nvfp4, no "
                             "layers kept in BF16): every transformer linear's GEMMs on the FP4 tensor cores, "
                             "TransformerEngine's NVFP4BlockScaling casts (training.precision: nvfp4)."),
}
BLACKWELL_HW = {"B200": "dgx-b200", "GB200": "gb200-nvl72", "GB300": "gb300-nvl72"}
# Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py (commit 3dafb00):
# LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG and LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG (micro_batch_size 2,
# use_megatron_fsdp, cpu_offloading_num_layers 40 / 20); llama31_workload_base_configs.py (commit
# 3d277f6): LLAMA31_405B_GB200_FP8_CS_BASE_CONFIG (128 GPUs, tensor_model_parallel_size 2,
# global_batch_size 64, use_megatron_fsdp, cpu_offloading_num_layers 95); set_perf_matrix_overrides
# turns cpu_offloading on with cpu_offloading_weights False (activations only)
BRIDGE_OFFLOAD = {  # (system, model) -> layers offloaded, the config's constant, its file and commit
    ("GB200", "LLAMA3-70B"): (40, "LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG", "llama3_workload_base_configs.py", "3dafb00"),
    ("GB300", "LLAMA3-70B"): (20, "LLAMA3_70B_GB300_FP8_CS_BASE_CONFIG", "llama3_workload_base_configs.py", "3dafb00"),
    ("GB200", "LLAMA3.1-405B"): (95, "LLAMA31_405B_GB200_FP8_CS_BASE_CONFIG", "llama31_workload_base_configs.py",
                                 "3d277f6"),
}
cases, nvfp4_cases = [], []
for (container, system, name, gpus, gbs, mbs, s, fsdp, tp, pp, cp, vp, tps_gpu, tflops,
     label) in [(*row, "FP8-CS") for row in BRIDGE_BLACKWELL] + BRIDGE_BLACKWELL_MORE:
    precision, recipe, recipe_text = BRIDGE_PRECISION[label]
    model = llama_model(name)
    assert not fsdp or (system, name) in BRIDGE_OFFLOAD
    par = megatron_parallel(tp, pp, cp, vp, zero=3 if fsdp else 1)
    assert gbs % (gpus // (tp * pp * cp) * mbs) == 0
    suffix = "" if label == "FP8-CS" else f"-{label.lower().replace('-', '')}"
    family = "megatron-bridge-nvfp4-blackwell" if precision == "nvfp4" else "megatron-bridge-fp8-blackwell"
    cases.append({
        "name": f"bridge-{container}/{name.lower()}-{system.lower()}-{gpus}gpu{suffix}",
        "family": family,
        "source": (
            f"NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md (commit df0289c), DGX-{system} "
            f"pre-training, NeMo {container} container: {name} {label} on {gpus} GPUs, GBS {gbs}, MBS {mbs}, "
            f"sequence {s}, FSDP {fsdp} tp {tp} pp {pp} cp {cp} vp {vp}: {tps_gpu} tokens/s/GPU ({tflops} model "
            "TFLOP/s). measured tokens_per_s = tokens/s/GPU x gpus. Shape as published. The layout is also the recipe's preset (scripts/performance/"
            "configs/llama/, no recompute or activation offloading; the 8B presets capture the whole "
            "iteration in a CUDA graph, not modelled). ASSUMED (not stated): the recipes' overlaps "
            "(TP comm overlap, grad reduce, param gather), sequence parallel with tp, gradient accumulation "
            "fusion; attention by TransformerEngine's cuDNN backend (its backend on Blackwell). "
            + recipe_text
            + (" The 25.09 table has no precision column; its main figures are read as FP8-CS (the FP8-MX "
               "ones are in parentheses)." if container == "25.09" else "")
            + BRIDGE_GRADS
        ),
        "published": {"tokens_per_s_per_gpu": tps_gpu, "model_tflops_per_gpu": tflops, "gpus": gpus,
                      "global_batch": gbs, "seq_len": s, "container": container, "system": system},
        "scenario": megatron_h100_scenario(model, gpus, par, s, mbs, gbs, precision, "cudnn", recipe,
                                           hardware=BLACKWELL_HW[system], fp32_grads=False, fp8_params=True,
                                           comm_overlap=True),
        "measured": {"tokens_per_s": tps_gpu * gpus},
    })
    cases[-1]["scenario"]["training"]["fused_cross_entropy"] = BRIDGE_LOSS
    if fsdp:
        layers, constant, config, commit = BRIDGE_OFFLOAD[(system, name)]
        training = cases[-1]["scenario"]["training"]
        training["activation_offload_layers"] = layers
        training["grad_accum_fusion"] = False
        cases[-1]["source"] = cases[-1]["source"].replace(
            " The layout is also the recipe's preset (scripts/performance/configs/llama/, no recompute or "
            "activation offloading; the 8B presets capture the whole iteration in a CUDA graph, not modelled).",
            f" FSDP 1 is Megatron FSDP, modelled as ZeRO-3 over the {gpus // tp} data-parallel ranks. The preset "
            f"(scripts/performance/configs/llama/{config}, commit {commit}, {constant}: micro_batch_size "
            f"{mbs}, use_megatron_fsdp, cpu_offloading_num_layers {layers}; utils/helpers.py "
            "set_perf_matrix_overrides: cpu_offloading on, cpu_offloading_weights off) offloads the "
            f"activations of the first {layers} of {model['layers']} layers to "
            "the Grace CPU (training.activation_offload_layers; ASSUMED: the same count in every container "
            "listed, the config file being one version); Megatron FSDP configs turn "
            "gradient_accumulation_fusion off (grad_accum_fusion false).")
        assert "Megatron FSDP" in cases[-1]["source"]
    if name == "LLAMA3-70B" and not fsdp:
        with_userbuffers(cases[-1], "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192",
                         "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192, the preset the 70B benchmark config "
                         "imports for Blackwell at FP8 (scripts/performance/configs/llama/llama3_llm_pretrain.py; "
                         "ASSUMED for NVFP4 as well).")
    else:
        with_userbuffers(cases[-1], "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192",
                         "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192, the preset the 405B benchmark "
                         "config picks on B200 and GB200 (scripts/performance/configs/llama/llama31_llm_pretrain.py).")
    with_container_cudnn(cases[-1], f"nemo-{container}")
    if precision == "nvfp4":
        nvfp4_cases.append(cases.pop())
dump(str(ROOT / "validation" / "megatron-bridge-fp8-blackwell.yaml"),
     "# Megatron-Bridge performance summary: dense Llama 3 pre-training at FP8 (current scaling; MXFP8 in\n"
     "# the NeMo 26.02 rows marked fp8mx) on DGX B200, GB200 NVL72 and GB300 NVL72 (NeMo 25.09, 25.11, 26.02),\n"
     "# tokens/s/GPU as published. Generated by tools/generate_validation_cases.py from the table in that\n"
     "# script (source in each case).\n", cases)
dump(str(ROOT / "validation" / "megatron-bridge-nvfp4-blackwell.yaml"),
     "# Megatron-Bridge performance summary, NeMo 26.02: dense Llama 3 pre-training in NVFP4 on GB200 NVL72\n"
     "# and GB300 NVL72, each beside the same layout's MXFP8 (or FP8-CS) row in\n"
     "# megatron-bridge-fp8-blackwell.yaml, tokens/s/GPU as published. Generated by\n"
     "# tools/generate_validation_cases.py from the table in that script (source in each case).\n", nvfp4_cases)

# ---------------- NVIDIA DGX Cloud benchmarking: Grok-1 314B (mixture of experts), GB200 and H100 ----------------
# Not in published.yaml: NVIDIA/dgxc-benchmarking grok1/README.md at commit 1f6d9f4 (metadata.yaml:
# gsw 25.07, container nemo:25.04.00, NeMo commit 00b778e), measured step times (iterations 11-44
# mean, parse_train_timing.sh) on GB200 NVL72 and DGX H100. The run is NeMo's
# scripts/performance/llm/pretrain_grok1_314b.py (read at NeMo commit 01b83a7: the 25.04 commit's
# copy was not available), its layouts are the README's tables. The rows with their own settings:
GROK_SRC = ("NVIDIA/dgxc-benchmarking grok1/README.md (commit 1f6d9f4; container nemo:25.04.00, NeMo "
            "00b778e per metadata.yaml)")
GROK = [  # system, precision, gpus, tp, pp, cp, ep, etp, vp, mbs, gbs, step s, MFU % as published
    ("GB200", "bf16", 128, 4, 1, 1, 8, 4, 1, 1, 256, 7.325, 47.59),
    ("GB200", "bf16", 256, 4, 1, 1, 8, 4, 1, 1, 512, 7.39, 47.17),
    ("GB200", "bf16", 512, 4, 1, 1, 8, 4, 1, 1, 1024, 7.324, 47.6),
    ("GB200", "fp8", 128, 4, 1, 1, 8, 4, 1, 1, 256, 5.298, 32.90),
    ("GB200", "fp8", 256, 4, 1, 1, 8, 4, 1, 1, 512, 5.224, 33.36),
    ("GB200", "fp8", 512, 4, 1, 1, 8, 4, 1, 1, 1024, 5.193, 33.6),
    ("H100", "bf16", 512, 4, 8, 2, 8, 1, 8, 1, 1024, 15.933, 54.2),
    ("H100", "fp8", 512, 4, 8, 2, 8, 1, 8, 1, 1024, 13.433, 32.2),
]
# the README's MFU: gbs * 4.27e15 (its model FLOPs per 8192-token sequence) / step / gpus / peak,
# peaks 2.45 / 4.9 PFLOP/s (GB200 BF16 / FP8) and 989 / 1979 TFLOP/s (H100): tests/test_validate.py
# re-derives each row's MFU from its step time, which checks the layout's GBS and the transcription
GROK_MODEL = {  # pretrain_grok1_314b.py: MixtralConfig8x7B (SwiGLU, RMSNorm, RoPE, no biases) with
    "name": "grok-1-314b", "layers": 64, "hidden": 6144, "heads": 48, "kv_heads": 8, "ffn": 32768,
    "experts": 8, "top_k": 2, "expert_ffn": 32768, "vocab": 128256, "mlp": "swiglu", "norm": "rmsnorm",
    "position": "rope", "tied_embeddings": False,
}  # fmt: skip
GROK_SETTINGS = (
    "Model from pretrain_grok1_314b.py: MixtralConfig8x7B with 64 layers, hidden 6144, 48 heads, 8 query "
    "groups, FFN 32768, 8 experts top-2 (SwiGLU experts, RMSNorm, RoPE, untied embeddings), vocab of the "
    "Llama 3 tokenizer it loads (128256). Settings from that script: MegatronTokenDropCallback (capacity "
    "factor 1.0 with padding: moe.capacity_factor 1.0, pad_to_capacity, so every expert runs exactly its "
    "capacity and the dispatcher needs no host sync for token counts), alltoall dispatcher (MixtralConfig), "
    "TP comm overlap "
    "with userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 for every system and precision, "
    "distributed optimizer with overlapped grad reduce and param gather, grad_reduce_in_fp32 False "
    "(bf16 main gradients: training.fp32_grad_accum false), FP8 as bf16_with_fp8_mixed (delayed "
    "scaling, with the weights kept and gathered in FP8: training.fp8_param_gather), no recompute; CUDA "
    "graphs off on H100 and on for GB200 (grok1/launch.sh at 1f6d9f4: CUDA_GRAPH defaults to true for "
    "gb200, false for h100, passed as --cuda_graphs), not written: simcluster's graph scopes issue a "
    "captured part's kernels at once, and these layers' host time already hides under their GPU time "
    "(the 128-GPU FP8 row with attn, moe_router and moe_preprocess captured: 4.686 s either way); NeMo's perf helpers turn the bucket NaN check off and, with GPTConfig's "
    "cross_entropy_loss_fusion, pick TransformerEngine's cross-entropy (scripts/performance/utils.py of "
    "NeMo 2.3.0, the 25.04 release: cross_entropy_fusion_impl = \"te\"; training.fused_cross_entropy te). "
    "Expert tensor parallelism as the README's ETP column (GB200: experts split over 4 ranks; H100: 1). "
    "ASSUMED: cuDNN fused attention (TransformerEngine's default on Hopper and Blackwell)."
)
GROK_HW = {"GB200": "gb200-nvl72", "H100": "dgx-h100"}
cases = []
for system, prec, gpus, tp, pp, cp, ep, etp, vp, mbs, gbs, step, mfu in GROK:
    par = {**megatron_parallel(tp, pp, cp, vp), "ep": ep, "etp": etp}
    scenario = megatron_h100_scenario(dict(GROK_MODEL), gpus, par, 8192, mbs, gbs, prec, "cudnn",
                                      hardware=GROK_HW[system], fp32_grads=False, fp8_params=True,
                                      comm_overlap=True)
    scenario["moe"] = {"capacity_factor": 1.0, "pad_to_capacity": True}
    # set_primary_perf_configs (NeMo 2.3.0 = 25.04, scripts/performance/utils.py: "enable cross
    # entropy fusion with TE kernel", cross_entropy_fusion_impl = "te"; GPTConfig's
    # cross_entropy_loss_fusion True): TransformerEngine's parallel cross-entropy
    scenario["training"]["fused_cross_entropy"] = "te"
    cases.append({
        "name": f"dgxc-grok1/314b-{system.lower()}-{prec}-{gpus}gpu",
        "family": "nvidia-dgxc-grok1",
        "source": (
            f"{GROK_SRC}: Grok 1 314B {prec.upper()} on {gpus} {system} GPUs, sequence 8192, tp {tp} pp {pp} "
            f"cp {cp} ep {ep} etp {etp} vp {vp}, MBS {mbs}, GBS {gbs}: training step {step} s. "
            + GROK_SETTINGS
        ),
        "published": {"step_time_s": step, "mfu_pct": mfu, "gpus": gpus, "global_batch": gbs,
                      "seq_len": 8192, "precision": prec, "system": system},
        "scenario": scenario,
        "measured": {"step_time_s": step},
    })
    with_container_cudnn(cases[-1], "nemo-25.04")
    with_userbuffers(cases[-1], "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192",
                     "pretrain_grok1_314b.py sets userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 as "
                     "the TP overlap config whatever the system and precision.")
dump(str(ROOT / "validation" / "nvidia-dgxc-grok1.yaml"),
     "# NVIDIA DGX Cloud benchmarking: Grok-1 314B mixture-of-experts pre-training on GB200 NVL72 and\n"
     "# DGX H100 (BF16 and FP8), measured step times. Generated by tools/generate_validation_cases.py\n"
     "# from the table in that script (source in each case); unstated settings are assumptions.\n", cases)


# --- Swiss AI on CSCS Alps (GH200) ------------------------------------------------------------------
# swiss-ai/Megatron-LM pull requests 29 and 33 (2025-02-13), Llama 3.1 8B shapes trained with the
# fork's submit-llama3-8b.sh on Clariden (Alps GH200 nodes: 4 GPUs, 4 Slingshot-11 NICs), NGC
# PyTorch 25.01. PR 33: "Baseline (MBS 4, SEQLEN 4096, TP 2): ~8000 Tokens/Sec/GPU", "MBS 1, SEQLEN
# 8192, TP 1: ~8290 (85 GB)", "SEQLEN 4096, MBS 2, TP 1 & DataLoader num workers 2: ~8840 (87 GB)"
# on 64 nodes. PR 29: "With 2M batch size we get 32 nodes -> 413 tflops per sec per gpu, 16 nodes ->
# 430", Megatron's --log-throughput.
SWISS_SRC = ("swiss-ai/Megatron-LM pull request {pr} (2025-02-13; the fork's submit-llama3-8b.sh, NGC PyTorch "
             "25.01 on CSCS Alps/Clariden GH200 nodes)")
SWISS_SETTINGS = (
    " From the script: Llama 3.1 8B shapes (32 layers, 4096 hidden, 14336 ffn, 32 heads, 8 KV groups, "
    "untied embeddings, vocab 128256 of the Llama 3.1 tokenizer), bf16, TransformerEngine, the "
    "distributed optimizer with --overlap-grad-reduce and --overlap-param-gather, "
    "--no-check-for-nan-in-loss-and-grad (dp.nan_check false; the 1/dp scaling before each bucket's "
    "reduction stays: no --ddp-average-in-collective), --cross-entropy-loss-fusion without "
    "--cross-entropy-fusion-impl (Megatron-Core's native compiled loss: training.fused_cross_entropy "
    "native), no "
    "--sequence-parallel and no --tp-comm-overlap, no recompute, CUDA_DEVICE_MAX_CONNECTIONS=1. "
    "ASSUMED: the global batch is the 2M tokens PR 29 states (512 x 4096 or 256 x 8192: one "
    "microbatch per rank on 64 nodes), and fp32 main gradients (Megatron's default for bf16): the "
    "published 85 / 87 GB fit the model's 84 GiB with them and not the 69 GiB it gives with bf16 "
    "ones (--main-grads-dtype bf16 appears in later revisions of the script); cuDNN fused attention "
    "(TransformerEngine's default on Hopper). Hardware: alps-gh200 (sources in the profile).")
# PR 29's 430 / 413 TFLOP/s on 64 / 128 GPUs are not shipped: their layout is not stated (docs/accuracy.md
# runs them as a spot check in the PR 33 baseline layout).
SWISS_GH200 = [  # pr, gpus, tp, mbs, seq, gbs, tokens/s/GPU, published memory GB
    (33, 256, 2, 4, 4096, 512, 8000, None),
    (33, 256, 1, 1, 8192, 256, 8290, 85),
    (33, 256, 1, 2, 4096, 512, 8840, 87),
]
cases = []
for pr, gpus, tp, mbs, s, gbs, tps_gpu, memory in SWISS_GH200:
    scenario = megatron_h100_scenario(llama_model("LLAMA3-8B"), gpus, megatron_parallel(tp, 1, 1, 1), s, mbs,
                                      gbs, "bf16", "cudnn", hardware="alps-gh200")
    scenario["parallel"]["sequence_parallel"] = False
    scenario["overlap"]["tp_comm"] = False
    # --cross-entropy-loss-fusion without --cross-entropy-fusion-impl: Megatron-Core's native
    # compiled loss (parallelism/loss_kernels.py)
    scenario["training"]["fused_cross_entropy"] = "native"
    scenario["dp"]["prescale"] = True
    scenario["dp"].pop("reduce_op")  # ReduceOp.SUM without average_in_collective
    case = {
        "name": f"swissai/llama3-8b-{gpus}xgh200-tp{tp}-mbs{mbs}-s{s}",
        "family": "swissai-gh200",
        "source": (f"{SWISS_SRC.format(pr=pr)}: {gpus} GPUs, TP {tp}, MBS {mbs}, sequence {s}: ~{tps_gpu} "
                   "tokens/s/GPU (measured tokens_per_s = that x gpus)."
                   + (f" Published memory {memory} GB (allocated or reserved not stated)." if memory else "")
                   + SWISS_SETTINGS),
        "published": {"tokens_per_s_per_gpu": tps_gpu, "gpus": gpus, "seq_len": s, "micro_batch": mbs, "tp": tp,
                      "global_batch": gbs, **({"memory_gb": memory} if memory else {})},
        "scenario": scenario,
        "measured": {"tokens_per_s": tps_gpu * gpus},
    }
    if memory:
        case["peak_memory_gib"] = memory
    cases.append(case)
dump(str(ROOT / "validation" / "swissai-gh200.yaml"),
     "# Swiss AI's Megatron-LM runs on CSCS Alps (GH200): Llama 3.1 8B shapes on 256 GPUs, throughput as\n"
     "# the fork's pull requests state it. Generated by tools/generate_validation_cases.py (source in each\n"
     "# case); unstated settings are assumptions.\n", cases)

# --- MLPerf Training GPT-3 175B on DGX H100 (NVIDIA's closed-division submissions) ----------------
# mlcommons/training_results_v3.1 (commit f33f944) and _v4.0 (commit 62f111b): configs under
# NVIDIA/benchmarks/gpt3/implementations/, MLLOG result logs under NVIDIA/results/<system>/gpt3/.
# The measured step is read off the log: each block_start/block_stop pair brackets one evaluation
# interval of training (evaluation runs between blocks, outside them) and its epoch_count is the
# tokens trained in it, so a block holds epoch_count / (global batch x 2048) optimizer steps. The
# step time is the last two blocks of result_0.txt: (sum of their durations) / (their steps). It
# includes the host's per-step work between steps, which the v3.1 logs' train_step_timing leaves
# out (about 1.2% at 4096 GPUs: 1.608 s median against 1.626 s).
MLPERF_V31 = "mlcommons/training_results_v3.1 (commit f33f944)"
MLPERF_V40 = "mlcommons/training_results_v4.0 (commit 62f111b)"
MLPERF_GPT3 = (
    " GPT-3 175B as the benchmark builds it: 96 layers, h 12288, 96 heads, GeLU 4h MLP, LayerNorm "
    "(layernorm1p: the same kernel, weight + 1), biases, learned positions, tied input and output "
    "embeddings (NeMo's share_embeddings_and_output_weights default, megatron_gpt_config.yaml), no "
    "dropout (custom.yaml: hidden_dropout and attention_dropout 0.0), sequence 2048; vocab 50688: "
    "the benchmark's SentencePiece model c4_en_301_5Mexp2_spm has 50257 pieces (the MLPerf paxml "
    "reference's vocab_size for it), padded by NeMo to a multiple of 128 x tp = 512. FP8 as "
    "config_fp8.sh sets it (FP8_HYBRID, amax history 1024 with the max algorithm: delayed scaling); "
    "apex DistributedFusedAdam (USE_DIST_OPTIMIZER=True: zero 1, overlapped grad and param sync, "
    "grad_sync_dtype bf16: training.fp32_grad_accum false, buckets of every stage); no activation "
    "recompute (custom.yaml's ACT_CKPT_* unset); sequence parallel; gradient accumulation fusion; TP "
    "overlap (TP_COMM_OVERLAP=True) with the tp_overlap file custom.yaml picks; NCCL_NVLS_ENABLE=0 "
    "(cluster.nvls false); overlap_p2p_comm True and batch_p2p_comm False (overlap.pp_p2p batched, "
    "the nearest); NCCL_MIN_NCHANNELS=4 (cluster.nccl_min_nchannels: below the profile's 24 channels it "
    "changes nothing). No counterpart here: TransformerEngine's atomic GEMM reduce-scatter "
    "(NVTE_UB_ATOMIC_GEMM_RS, NVTE_RS_STRIDED_ATOMIC), userbuffers' cga_size and aggregate keys, "
    "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=8, the per-communicator CTA limits where a config names a file "
    "(NCCL_CFG_PATH; the GPT-3 folders' conf/nccl files are not stored), NCCL_P2P_NET_CHUNKSIZE, the "
    "manual Python GC interval.")
MLPERF_V31_SETTINGS = (
    " v3.1 settings: config_DGXH100_<nodes>x8x<minibs>x4x8_mbs1.sh sets MINIBS, TP 4, PP 8, "
    "MICRO_BATCH_SIZE 1, TP_COMM_OVERLAP; no INTERLEAVED_PIPELINE, so custom.yaml's default 12 (one "
    "layer per virtual stage). config_common.sh is not in the stored mlcommons copy; the same "
    "implementation as aws-samples/awsome-distributed-training redistributes it "
    "(3.test_cases/mlperf/gpt3/config_common.sh, commit ad9afb3, NGC 23.09 like the v3.1 runs) "
    "sets no INTERLEAVED_PIPELINE, ACT_CKPT_*, BUCKET_CAP_MB or FP8_PARAMS, so: vpp 12, no recompute, "
    "conf/optim/distributed_fused_adam.yaml's 100 MiB buckets (ASSUMED: v4.0's copy of that file; "
    "v3.1's is not stored), bf16 weights gathered, so NeMo's setup_optimization keeps apex's master "
    "weights as remainders of the bf16 ones (training.master_weights; ASSUMED: that rule, read in "
    "NeMo's 2023 and 2024 megatron_base_model.py, in the implementation's NeMo). ASSUMED: attention by the flash-attn 2 package "
    "(the implementation's Dockerfile installs flash-attn 2.0.8 beside TransformerEngine at 09ba842, "
    "a development revision of the 23.09 period; whether it already preferred cuDNN on Hopper, as TE "
    "1.2 does, was not checked: with cuDNN's rates the 4096-GPU row reads -5.0% for -2.5%). Userbuffers (overlap.tp_comm_cfg): conf/tp_overlap/h100tp4pp8mbs1.yaml (bulk "
    "4/8/2/4 SMs, the all-gathers as ring exchanges, proj_fprop / fc2_fprop pipelines of 24 / 4 SMs "
    "in 4 splits with a margin). The same config_common.sh sets NVTE_DP_AMAX_REDUCE_INTERVAL=0 and "
    "NVTE_ASYNC_AMAX_REDUCTION=1 ('AMAX AR overlap and disable DP'), which TransformerEngine read up to "
    "1.5 (fp8.py, module/base.py; pull request 431 of September 2023 brought the interval, 575 in 1.6 "
    "dropped both): every amax all-reduce over the module's tensor-parallel group only "
    "(training.tp_only_amax_red: the same ranks at cp 1) and issued async_op=True, waited on by the next "
    "autocast region (training.fp8_amax_async); the run's TE 09ba842 takes interval 0, which the code "
    "before 431 would divide by.")
MLPERF_V40_SETTINGS = (
    " v4.0 settings: the config sets MINIBS, TP, PP, MICRO_BATCH_SIZE, INTERLEAVED_PIPELINE and "
    "TP_COMM_OVERLAP (the log's global_batch_size gives the MINIBS the run used). config_common.sh "
    "is not in the stored mlcommons copy; two forks' copies (henrique/training_results_v4.0 at "
    "c7a8e8f, and a partner's) agree on USE_DIST_OPTIMIZER=True, BUCKET_CAP_MB=200 (bucket_mb "
    "209.7152), FP8_PARAMS=True (the weights kept in FP8 and gathered at 1 B: "
    "training.fp8_param_gather), NCCL_NVLS_ENABLE=0, MC_TP_OVERLAP_AG/RS (userbuffers over NVLink "
    "multicast, no counterpart). ASSUMED: cuDNN fused attention (the Dockerfile pins TransformerEngine "
    "v1.6rc1, which prefers it on Hopper; config_common.sh's own comment names cuDNN's flash "
    "attention as the running kernel). config_common.sh still sets NVTE_ASYNC_AMAX_REDUCTION=1 and "
    "NVTE_DP_AMAX_REDUCE_INTERVAL=0, which TransformerEngine 1.6 no longer reads (pull request 575): "
    "the amax all-reduce blocks, over Megatron-Core's amax reduction group.")
MLPERF_H100 = [  # version, nodes, config's MINIBS, tp, pp, vp, mbs, global batch, [block ms], block tokens, cuda graph
    ("v3.1", 512, 16, 4, 8, 12, 1, 2048, [19498, 19529], 50331648, False),
    ("v3.1", 1024, 16, 4, 8, 12, 1, 4096, [9868, 9875], 50331648, False),
    ("v3.1", 1344, 8, 4, 8, 12, 1, 2688, [9495, 9719], 55050240, False),
    ("v4.0", 64, 128, 4, 8, 4, 2, 2304, [119937, 119859], 51904512, False),
    ("v4.0", 1344, 6, 4, 6, 8, 1, 2688, [9203, 9207], 55050240, True),
    ("v4.0", 1452, 6, 4, 6, 8, 1, 2904, [8302, 8308], 53526528, True),
]
# the 1452-node run's config is in the v4.0 tree (mlcommons, as above) but its result log only in a
# fork of v4.1's (the log's timestamps are of May 2024, the v4.0 software: NGC 24.04)
MLPERF_LOG_ELSEWHERE = {
    ("v4.0", 1452): ("v4.1", "swsok/training_results_v4.1 (commit 8821c70, a fork of "
                             "mlcommons/training_results_v4.1)"),
}
MLPERF_GBS_EVIDENCE = {
    ("v3.1", 512): "global_batch_size 2048 in the log",
    ("v3.1", 1024): "8388608 = 4096 x 2048 tokens between consecutive train_step_timing lines",
    ("v3.1", 1344): "5505024 = 2688 x 2048 tokens between consecutive train_step_timing lines",
    ("v4.0", 64): "global_batch_size 2304 in the log (MINIBS 144 over the config's default 128)",
    ("v4.0", 1344): "MINIBS 6 x dp 448; the block of 55050240 tokens is 10 steps of it",
    ("v4.0", 1452): "MINIBS 6 x dp 484; the block of 53526528 tokens is 9 steps of it",
}


def mlperf_ub(version, cuda_graph, atomic=True):
    """The tp_overlap file a run read: v3.1's h100tp4pp8mbs1.yaml, v4.0's h100tp4mbs2.yaml (its
    defaults: proj_fprop a 24-SM pipeline with atomic_gemm ${NVTE_UB_ATOMIC_GEMM_RS_PROJ,1} and
    fp8_buf ${NVTE_UB_FP8_RS,False}, fc2_fprop a ring exchange with atomic_gemm
    ${NVTE_UB_ATOMIC_GEMM_RS_FC2,0}), or for the v4.0 MBS 1 runs the same structure with the
    config's FC2_FPROP_METHOD=pipeline, FC2_FPROP_SM=4, NVTE_UB_ATOMIC_GEMM_RS_PROJ=0,
    NVTE_UB_FP8_RS=1 and NVTE_UB_ATOMIC_GEMM_RS_FC2=1. ``atomic`` False leaves the atomic GEMMs
    out (a run whose printed settings have no such key)."""
    ring = {name: {"method": "ring_exchange"} for name in ("qkv_fprop", "proj_dgrad", "fc1_fprop", "fc2_dgrad")}
    bulk = (4, 8, 2, 4) if version == "v3.1" else (4, 4, 4, 4)
    cfg = {name: {"method": "bulk", "num_sm": n, "set_sm_margin": False}
           for name, n in zip(("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"), bulk, strict=True)}
    cfg.update(ring)
    cfg["proj_fprop"] = {"method": "pipeline", "num_sm": 24, "num_splits": 4, "set_sm_margin": True}
    if version == "v4.0" and not cuda_graph:
        if atomic:
            cfg["proj_fprop"]["atomic_gemm"] = True
        cfg["fc2_fprop"] = {"method": "ring_exchange", "set_sm_margin": True}
    else:
        cfg["fc2_fprop"] = {"method": "pipeline", "num_sm": 4, "num_splits": 4, "set_sm_margin": True}
    if version == "v4.0" and cuda_graph:
        cfg["proj_fprop"]["fp8_buf"] = True
        if atomic:
            cfg["fc2_fprop"]["atomic_gemm"] = True
    return cfg


cases = []
for version, nodes, minibs, tp, pp, vp, mbs, gbs, blocks_ms, block_tokens, cuda_graph in MLPERF_H100:
    gpus = nodes * 8
    steps = block_tokens / (gbs * 2048)
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    model = gpt3_model("175B", 2048, vocab=50688, tied_embeddings=True, dropout=False)
    scenario = megatron_h100_scenario(model, gpus, megatron_parallel(tp, pp, 1, vp), 2048, mbs, gbs, "fp8",
                                      "fa2" if version == "v3.1" else "cudnn", fp32_grads=False, dfa=True,
                                      fp8_params=version == "v4.0")
    scenario["cluster"].update(nvls=False, nccl_min_nchannels=4)
    scenario["overlap"]["tp_comm_cfg"] = mlperf_ub(version, cuda_graph)
    if version == "v4.0":
        scenario["dp"]["bucket_mb"] = 209.7152
    else:
        scenario["training"].update(tp_only_amax_red=True, fp8_amax_async=True)
    if cuda_graph:
        scenario["training"]["cuda_graphs"] = ["attn", "mlp"]
    repo = MLPERF_V31 if version == "v3.1" else MLPERF_V40
    system = (f"eos-dfw_n{nodes}_ngc23.09_nemo" if version == "v3.1"
              else f"eos{'-dfw' if nodes > 64 else ''}_n{nodes}_ngc24.04_nemo")
    impl = "pytorch" if version == "v3.1" else "nemo"
    config = f"config_DGXH100_{nodes}x8x{minibs}x{tp}x{pp}_mbs{mbs}{'_cg' if cuda_graph else ''}.sh"
    log_version, log_repo = MLPERF_LOG_ELSEWHERE.get((version, nodes), (version, repo))
    log_repo = "" if log_repo == repo else f"{log_repo} "
    source = (
        f"{repo} NVIDIA/benchmarks/gpt3/implementations/{impl}/{config} and {log_repo}NVIDIA/results/{system}/gpt3/"
        f"result_0.txt: MLPerf Training {log_version} GPT-3 175B on {nodes} DGX H100 ({gpus} GPUs), tp {tp} pp {pp} "
        f"vp {vp}, MBS {mbs}, global batch {gbs} ({MLPERF_GBS_EVIDENCE[(version, nodes)]}). Step "
        f"{step_s:.4g} s: the last two block_start/block_stop pairs last {blocks_ms[0]} and {blocks_ms[1]} ms, "
        f"each {block_tokens} tokens = {steps:g} steps of {gbs} x 2048."
        + MLPERF_GPT3 + (MLPERF_V31_SETTINGS if version == "v3.1" else MLPERF_V40_SETTINGS))
    if version == "v4.0":
        source += (" Userbuffers (overlap.tp_comm_cfg): conf/tp_overlap/h100tp4mbs2.yaml (bulk 4/4/4/4 SMs, "
                   "ring-exchange all-gathers, proj_fprop a 24-SM pipeline in 4 splits with a margin, its "
                   "atomic_gemm ${oc.env:NVTE_UB_ATOMIC_GEMM_RS_PROJ,1} and fp8_buf ${oc.env:NVTE_UB_FP8_RS,False}, "
                   "fc2_fprop a ring exchange with a margin, atomic_gemm ${oc.env:NVTE_UB_ATOMIC_GEMM_RS_FC2,0}")
        if cuda_graph:
            source += (", ASSUMED for this MBS 1 run (its h100tp4mbs1.yaml is not stored) with the config's "
                       "FC2_FPROP_METHOD=pipeline, FC2_FPROP_SM=4, NVTE_UB_ATOMIC_GEMM_RS_PROJ=0, NVTE_UB_FP8_RS=1 "
                       "(proj_fprop's FP8 buffer: fp8_buf) and NVTE_UB_ATOMIC_GEMM_RS_FC2=1 (fc2_fprop one "
                       "atomic-counter GEMM: atomic_gemm); LAYER_CUDA_GRAPH=1 (each transformer "
                       "layer in a CUDA graph: training.cuda_graphs attn and mlp); "
                       "defer_embedding_wgrad_compute (custom.yaml: on with PP > 1, MINIBS <= 256 and MBS 1): "
                       "parallel.defer_head_wgrad, every one of the 6 microbatches of a pipeline (ASSUMED: no "
                       "wgrad_deferral_limit below 6).")
            scenario["parallel"]["defer_head_wgrad"] = True
        else:
            source += " (the config sets none of these variables: proj_fprop one atomic-counter GEMM, atomic_gemm)."
    cases.append(mlperf_gpt3_case(f"mlperf-{log_version}/gpt3-175b-{gpus}xh100", "mlperf-training-h100", source,
                                  blocks_ms, block_tokens, gbs, gpus, scenario, step_s))
# --- MLPerf Training v4.1 GPT-3 175B and v5.0 Llama 3.1 405B (NVIDIA, NeMo) ------------------------
# Not in the stored mlcommons copies: read from forks that carry NVIDIA's submission tree unchanged
# (swsok/training_results_v4.1 at 8821c70; prishajain1/training_results_v5.0 at 0fdc28f). The index
# the files were read from deduplicates identical files, so an implementation folder may lack a
# file that a sibling folder of the same release holds (config_common.sh, conf/*); each case says
# which folder's copy it read. The step is the last two blocks of result_0.txt, as above.
MLPERF_V41 = "swsok/training_results_v4.1 (commit 8821c70, a fork of mlcommons/training_results_v4.1)"
MLPERF_V41_SETTINGS = (
    " v4.1 settings (NeMo 24.09): the config sets MINIBS, TP 4, PP 8, INTERLEAVED_PIPELINE=6, "
    "MICRO_BATCH_SIZE=2 and TP_COMM_OVERLAP; config_common.sh (the copy stored under "
    "b200_n8_preview_nemo/, which all v4.1 GPT-3 configs source) sets USE_DIST_OPTIMIZER=True, "
    "BUCKET_CAP_MB=200, FP8_PARAMS=True (training.fp8_param_gather), NCCL_NVLS_ENABLE=0, "
    "MC_TP_OVERLAP_AG/RS and TE_UB_ATOMIC_GEMM_RS=1, NVTE_RS_STRIDED_ATOMIC=1 (no counterpart). "
    "ASSUMED: apex DistributedFusedAdam with bf16 gradient sync and buckets of every stage as in "
    "v4.0 (conf/optim is not stored for v4.1).")
# the H100 configs set DEFER_EMBEDDING_WGRAD_COMPUTE=True and WGRAD_DEFERRAL_LIMIT=65; the B200
# config sets neither, and custom.yaml's default (defer_embedding_wgrad_compute off unless PP > 1,
# MINIBS <= 256 and MBS 1; wgrad_deferral_limit 0) is off at its MINIBS 1024 and MBS 2
MLPERF_V41_DEFER = (
    " DEFER_EMBEDDING_WGRAD_COMPUTE=True and WGRAD_DEFERRAL_LIMIT=65 in the config: "
    "parallel.defer_head_wgrad with head_wgrad_deferral_limit 65 (the output layer's weight "
    "gradients of the first 65 microbatches of a step deferred into the pipeline flush; "
    "custom.yaml passes both to NeMo's model config as defer_embedding_wgrad_compute and "
    "wgrad_deferral_limit).")
MLPERF_V41_NO_DEFER = (
    " The config sets no DEFER_EMBEDDING_WGRAD_COMPUTE: custom.yaml's default is off with MINIBS "
    "above 256 or MBS other than 1 (this run: 1024 and 2), so no parallel.defer_head_wgrad "
    "(ASSUMED: config_common_blackwell.sh, not stored, does not set it).")
MLPERF_V41_RUNS = [  # folder, nodes, hardware, config, MINIBS, gbs, [block ms], block tokens, bucket MiB
    ("eos_n32_ngc24.09_nemo", 32, "dgx-h100", "config_DGXH100_32x8x256x4x8_mbs2.sh", 256, 2048,
     [220891, 220840], 50331648, 125),
    ("eos_n64_ngc24.09_nemo", 64, "dgx-h100", "config_DGXH100_64x8x128x4x8_mbs2.sh", 128, 2048,
     [114449, 114430], 50331648, 200),
    ("b200_n8_preview_nemo", 8, "dgx-b200", "config_DGXB200_8x8x1024x4x8_mbs2_cg.sh", 1024, 2048,
     [432723, 432758], 50331648, 200),
]
# the tp_overlap file custom.yaml picks: ${GPU_ARCH,h}100tp<TP>mbs<MBS> -> h100tp4mbs2.yaml (bulk
# 2/4/2/2 SMs; proj_dgrad and fc1_fprop ring exchanges with a margin; proj_fprop a 24-SM pipeline in
# 4 splits with a margin; fc2_fprop a ring exchange with a margin: FC2_FPROP_METHOD is unset)
MLPERF_V41_UB = {
    "qkv_dgrad": {"method": "bulk", "num_sm": 2, "set_sm_margin": False},
    "qkv_wgrad": {"method": "bulk", "num_sm": 4, "set_sm_margin": False},
    "fc1_dgrad": {"method": "bulk", "num_sm": 2, "set_sm_margin": False},
    "fc1_wgrad": {"method": "bulk", "num_sm": 2, "set_sm_margin": False},
    "qkv_fprop": {"method": "ring_exchange"},
    "proj_dgrad": {"method": "ring_exchange", "set_sm_margin": True},
    "fc1_fprop": {"method": "ring_exchange", "set_sm_margin": True},
    "fc2_dgrad": {"method": "ring_exchange"},
    "proj_fprop": {"method": "pipeline", "num_sm": 24, "num_splits": 4, "set_sm_margin": True, "atomic_gemm": True},
    "fc2_fprop": {"method": "ring_exchange", "set_sm_margin": True},
}
blackwell_cases = []
for folder, nodes, hw, config, minibs, gbs, blocks_ms, block_tokens, bucket_mib in MLPERF_V41_RUNS:
    gpus, b200 = nodes * 8, hw == "dgx-b200"
    steps = block_tokens / (gbs * 2048)
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    model = gpt3_model("175B", 2048, vocab=50688, tied_embeddings=True, dropout=False)
    scenario = megatron_h100_scenario(model, gpus, megatron_parallel(4, 8, 1, 6), 2048, 2, gbs, "fp8", "cudnn",
                                      hardware=hw, fp32_grads=False, dfa=True, fp8_params=True)
    scenario["cluster"].update(nvls=False, nccl_min_nchannels=4)
    scenario["dp"]["bucket_mb"] = bucket_mib * 1.048576
    ub = copy.deepcopy(MLPERF_V41_UB)
    if b200:
        ub["proj_fprop"]["fp8_buf"] = True  # NVTE_UB_FP8_RS=1 in the config
        ub["proj_fprop"]["atomic_gemm"] = False  # TE_UB_ATOMIC_GEMM_RS_PROJ=0 in the config
        scenario["training"]["cuda_graphs"] = ["attn", "mlp"]
    scenario["overlap"]["tp_comm_cfg"] = ub
    gpu_name = "B200" if b200 else "H100"
    source = (
        f"{MLPERF_V41} NVIDIA/benchmarks/gpt3/implementations/{folder}/{config} and "
        f"NVIDIA/results/{folder}/gpt3/result_0.txt: MLPerf Training v4.1 GPT-3 175B on {nodes} DGX "
        f"{gpu_name} ({gpus} GPUs), tp 4 pp 8 vp 6, MBS 2, global batch {gbs} (MINIBS {minibs} x dp "
        f"{gpus // 32}; 4194304 = {gbs} x 2048 tokens between consecutive train_step_timing lines). Step "
        f"{step_s:.4g} s: the last two block_start/block_stop pairs last {blocks_ms[0]} and {blocks_ms[1]} ms, "
        f"each {block_tokens} tokens = {steps:g} steps of {gbs} x 2048."
        + MLPERF_GPT3 + MLPERF_V41_SETTINGS)
    if b200:
        source += MLPERF_V41_NO_DEFER
    else:
        source += MLPERF_V41_DEFER
        scenario["parallel"].update(defer_head_wgrad=True, head_wgrad_deferral_limit=65)
    if bucket_mib != 200:
        source += f" The config overrides BUCKET_CAP_MB={bucket_mib} ('Fix OOM')."
    if minibs == 128:
        source += " VBOOST_VALUE=1 (MINIBS 128: the GPU clock boost slider) has no counterpart."
    if b200:
        source += (
            " B200: config_common_blackwell.sh, which the config sources after config_common.sh, is not "
            "stored (its settings are unknown). The config sets NVTE_FUSED_ATTN=1, NVTE_FLASH_ATTN=0 "
            "(cuDNN fused attention), LAYER_CUDA_GRAPH=1 (training.cuda_graphs attn and mlp), "
            "NVTE_UB_FP8_RS=1 (proj_fprop's FP8 buffer: fp8_buf), TE_UB_ATOMIC_GEMM_RS_PROJ/FC2=0 and "
            "NVTE_RS_STRIDED_ATOMIC=0 (no atomic GEMMs). Userbuffers (overlap.tp_comm_cfg): ASSUMED "
            "conf/tp_overlap/h100tp4mbs2.yaml of this folder (custom.yaml's ${GPU_ARCH,h}100tp4mbs2 with "
            "GPU_ARCH unset; it is the file that reads the config's TE_UB_ATOMIC_GEMM_RS_PROJ and "
            "NVTE_UB_FP8_RS; b100tp4mbs2.yaml, picked by GPU_ARCH=b, would make proj_fprop a ring "
            "exchange), the same settings as below.")
    else:
        source += " ASSUMED: cuDNN fused attention (TransformerEngine's default on Hopper, as in v4.0)."
        if folder == "eos_n64_ngc24.09_nemo":
            source += (" conf/ is not stored in this folder: ASSUMED eos_n32_ngc24.09_nemo's (the same "
                       "release).")
    source += (" Userbuffers (overlap.tp_comm_cfg): conf/tp_overlap/h100tp4mbs2.yaml (bulk 2/4/2/2 SMs, "
               "proj_dgrad and fc1_fprop ring exchanges with a margin, proj_fprop a 24-SM pipeline in 4 "
               "splits with a margin, fc2_fprop a ring exchange with a margin; its cga_size keys have no "
               "counterpart; proj_fprop's atomic_gemm ${oc.env:NVTE_UB_ATOMIC_GEMM_RS_PROJ,1}, which the "
               "H100 configs do not set: one atomic-counter GEMM, tp_comm_cfg atomic_gemm; fc2_fprop's "
               "${oc.env:NVTE_UB_ATOMIC_GEMM_RS_FC2,0}).")
    case = mlperf_gpt3_case(f"mlperf-v4.1/gpt3-175b-{gpus}x{gpu_name.lower()}",
                            "mlperf-training-blackwell" if b200 else "mlperf-training-h100", source,
                            blocks_ms, block_tokens, gbs, gpus, scenario, step_s)
    (blackwell_cases if b200 else cases).append(with_container_cudnn(case, "mlperf-v4.1"))

MLPERF_V50 = "prishajain1/training_results_v5.0 (commit 0fdc28f, a fork of mlcommons/training_results_v5.0)"
MLPERF_405B_SETTINGS = (
    " Llama 3.1 405B (126 layers, h 16384, 128 heads, 8 KV heads, SwiGLU 53248, vocab 128256, RMSNorm, "
    "RoPE, untied embeddings), sequence 8192. v5.0 settings (NeMo 25.01): the config sets MINIBS, TP 8, "
    "PP 8, INTERLEAVED_PIPELINE=8, CONTEXT_PARALLEL=2, MICRO_BATCH_SIZE=1, TP_COMM_OVERLAP; "
    "config_common.sh (the copy stored under eos-dfw_n304_ngc25.01_nemo/) sets FP8=True, "
    "FP8_PARAMS=True (training.fp8_param_gather), USE_DIST_OPTIMIZER=True with OVERLAP_GRAD_REDUCE "
    "and OVERLAP_PARAM_GATHER (Megatron-Core's distributed optimizer: zero 1, its buckets), "
    "NCCL_NVLS_ENABLE=0 (cluster.nvls false). pretrain.py (eos-dfw_n64_ngc25.01_nemo/) builds "
    "Megatron-Core's DistributedDataParallelConfig with grad_reduce_in_fp32=False (bf16 gradient "
    "reduction: training.fp32_grad_accum false), check_for_nan_in_grad=True (each bucket's norm "
    "checked for NaN on the host before its reduction: dp.nan_check true) and "
    "average_in_collective=True, and hands ASYM_PP_EMBED / ASYM_PP_LOSS to MegatronStrategy as "
    "account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split "
    "(parallel.embedding_in_split and loss_in_split: 126 layers + 2 over 64 virtual stages, two "
    "each, the first and the last one layer short). ASSUMED: cuDNN fused attention, delayed FP8 "
    "scaling, and NeMo's userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192 (the run's "
    "tp_overlap settings are not stored). config_common.sh sets NCCL_CFG_PATH to "
    "conf/nccl/custom_communicator_cta.yaml (stored in eos-dfw_n64_ngc25.01_nemo/; Megatron-Core's "
    "per-communicator NCCL options: cluster.nccl_communicators with its min_ctas / max_ctas, dp, dp_cp "
    "and tp at most 8 CTAs, pp, mp and embd 2, cp, tp_dp_cp, tp_dp and tp_exp 1, each at least 1; its "
    "cga_cluster_size keys have no counterpart) and NCCL_MIN_NCHANNELS=4 (cluster.nccl_min_nchannels, "
    "which NCCL's ncclTopoPostset lets win over a max_ctas below it: the one-CTA communicators run on "
    "4 channels). config_common.sh sets OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=True, which pretrain.py hands "
    "to NeMo's MegatronCommOverlapCallback (overlap_param_gather_with_optimizer_step): Megatron-Core then "
    "wraps every model chunk with bucketing disabled (get_model's disable_bucketing=(model_chunk_idx > 0) "
    "or overlap_param_gather_with_optimizer_step; dp.bucket_stages none, each chunk one bucket). No "
    "counterpart: ALIGN_PARAM_GATHER, MC_TP_OVERLAP_AG/RS (userbuffers over NVLink multicast), "
    "NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=8, NCCL_P2P_NET_CHUNKSIZE. config_common.sh sets DEFER_EMBEDDING_WGRAD_COMPUTE=True and "
    "WGRAD_DEFERRAL_LIMIT=50, which pretrain.py hands to NeMo's MegatronCommOverlapCallback "
    "(defer_embedding_wgrad_compute, wgrad_deferral_limit): parallel.defer_head_wgrad with "
    "head_wgrad_deferral_limit 50 (the output layer's weight gradients of the first 50 microbatches "
    "of a step deferred into the pipeline flush; pretrain.py read in eos-dfw_n64_ngc25.01_nemo/).")
def mlperf_v50_405b_scenario(gpus, tp, gbs, hardware, nvls, tp_comm_cfg):
    """A v5.0 Llama 3.1 405B run of NVIDIA's implementation as MLPERF_405B_SETTINGS describes it
    (pp 8, vp 8, cp 2, MBS 1), NVIDIA's or another submitter's: ``tp``, the profile, NVLS and the
    userbuffers settings are the run's."""
    scenario = megatron_h100_scenario(llama_model("LLAMA3.1-405B"), gpus, megatron_parallel(tp, 8, 2, 8), 8192, 1,
                                      gbs, "fp8", "cudnn", hardware=hardware, fp32_grads=False, fp8_params=True)
    scenario["cluster"]["nvls"] = nvls
    scenario["overlap"]["tp_comm_cfg"] = tp_comm_cfg
    scenario["parallel"].update(defer_head_wgrad=True, head_wgrad_deferral_limit=50, embedding_in_split=True,
                                loss_in_split=True)
    scenario["dp"].update(nan_check=True, bucket_stages="none")
    # one mapping per communicator (a shared one would be dumped as YAML anchors)
    scenario["cluster"]["nccl_communicators"] = {
        name: {"min_ctas": 1, "max_ctas": ctas}
        for names, ctas in ((("dp", "dp_cp", "tp"), 8), (("pp", "mp", "embd"), 2), (("cp", "tp_dp_cp", "tp_dp", "tp_exp"), 1))
        for name in names
    }
    scenario["cluster"]["nccl_min_nchannels"] = 4
    return scenario


# folder, nodes, config, MINIBS, [block ms], block samples, the log's own train_step_time of the last
# block (mlperf_common), its slow steps. The 1024-node run is left out (8192 GPUs), and so is the
# 320-node one: five of its last block's 42 steps take 12.2-26.5 s against 11.2 (12.07 s a step).
MLPERF_V50_RUNS = [
    ("eos-dfw_n64_ngc25.01_nemo", 64, "config_DGXH100_64x8x288xtp8pp8cp2.sh", 288, [2207989, 2209515], 46080,
     55.238, ""),
    ("eos-dfw_n256_ngc25.01_nemo", 256, "config_DGXH100_256x8x72xtp8pp8cp2.sh", 72, [570559, 585459], 46080,
     14.636, " One step of the last block takes 28.0 s (the others 14.2-14.4 s); it is kept, as every block is."),
    ("eos-dfw_n304_ngc25.01_nemo", 304, "config_DGXH100_304x8x64xtp8pp8cp2.sh", 64, [484542, 499425], 46208,
     13.143, " One step of the last block takes 26.5 s (the others 12.7-13.3 s); it is kept, as every block is."),
]
for folder, nodes, config, minibs, blocks_ms, block_samples, log_step, slow_steps in MLPERF_V50_RUNS:
    gpus, seq = nodes * 8, 8192
    dp = gpus // (8 * 8 * 2)
    gbs = minibs * dp
    steps = block_samples / gbs
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    scenario = mlperf_v50_405b_scenario(gpus, 8, gbs, "dgx-h100", False,
                                        "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192")
    cases.append({
        "name": f"mlperf-v5.0/llama31-405b-{gpus}xh100",
        "family": "mlperf-training-h100",
        "source": (
            f"{MLPERF_V50} NVIDIA/benchmarks/llama31_405b/implementations/{folder}/{config} and "
            f"NVIDIA/results/{folder}/llama31_405b/result_0.txt: MLPerf Training v5.0 Llama 3.1 405B on "
            f"{nodes} DGX H100 ({gpus} GPUs), tp 8 pp 8 vp 8 cp 2, MBS 1, global batch {gbs} (MINIBS "
            f"{minibs} x dp {dp}: the config's DGXNNODES x MINIBS / 16; the step lines' samples grow by "
            f"{gbs}). Step {step_s:.4g} s: the last two block_start/block_stop pairs last {blocks_ms[0]} and "
            f"{blocks_ms[1]} ms, each {block_samples} samples = {steps:g} steps (the log's own "
            f"train_step_time for the last block: {log_step} s).{slow_steps}" + MLPERF_405B_SETTINGS),
        "slow": True,
        "published": {"blocks_ms": blocks_ms, "block_tokens": block_samples * seq, "global_batch": gbs,
                      "seq_len": seq, "gpus": gpus, "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": round(step_s, 5)},
    })
# Nebius's v5.0 submission of NVIDIA's implementation on H200 (prishajain1/training_results_v5.0,
# Nebius/benchmarks/llama31_405b/implementations/nebius_soperator_8xH200_n{64,128}_ngc25.01_nemo/):
# nodes, MINIBS, [block ms] of result_1.txt's last two blocks, the log's train_step_time of the last
# block, its slow steps
MLPERF_V50_NEBIUS_RUNS = [
    (64, 144, [2016545, 2006836], 50.17088, " Two steps of the earlier block take 57.3 and 55.4 s (the others 50.0-50.3 s); "
     "they are kept, as every block is."),
    (128, 72, [1021899, 1020318], 25.50791, " Four steps of the two blocks take 26.7-30.1 s (the others 25.3-25.4 s); "
     "they are kept, as every block is."),
]
for nodes, minibs, blocks_ms, log_step, slow_steps in MLPERF_V50_NEBIUS_RUNS:
    gpus, seq, gbs, block_samples = nodes * 8, 8192, 1152, 46080
    steps = block_samples / gbs
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    folder = f"nebius_soperator_8xH200_n{nodes}_ngc25.01_nemo"
    config = f"config_DGXH200_{nodes}x8x{minibs}xtp4pp8cp2.sh"
    # the settings its log printed were transcribed without an atomic_gemm key: not ASSUMED here
    ub = mlperf_ub("v4.0", False, atomic=False)
    scenario = mlperf_v50_405b_scenario(gpus, 4, gbs, "dgx-h200", True, ub)
    cases.append({
        "name": f"mlperf-v5.0/llama31-405b-{gpus}xh200-nebius",
        "family": "mlperf-training-h100",
        "source": (
            f"{MLPERF_V50} Nebius/benchmarks/llama31_405b/implementations/{folder}/{config} and "
            f"Nebius/results/{folder}/llama31_405b/result_1.txt (result_2.txt's last block within 0.1%): MLPerf "
            f"Training v5.0 Llama 3.1 405B, Nebius's run of NVIDIA's implementation on {nodes} nodes of 8 H200 SXM "
            f"141GB ({gpus} GPUs; 8 ConnectX-7 NDR 400 Gb/s NICs and two Xeon Platinum 8468 a node, "
            f"Nebius/systems/ in mlcommons/training_results_v5.1, whose v5.1 system files list this v5.0 software; the "
            f"v5.1 logs are not stored), tp 4 pp 8 vp 8 cp 2, MBS 1, global batch {gbs} (MINIBS {minibs} x dp "
            f"{gpus // 64}; the log's global_batch_size). Step {step_s:.4g} s: the last two block_start/block_stop "
            f"pairs last {blocks_ms[0]} and {blocks_ms[1]} ms, each {block_samples} samples = {steps:g} steps (the "
            f"log's own train_step_time for the last block: {log_step} s).{slow_steps} The log prints its "
            "configuration: tensor/pipeline/virtual/context parallel 4/8/8/2, sequence_parallel true, "
            "account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split true "
            "(parallel.embedding_in_split, loss_in_split), defer_embedding_wgrad_compute true with "
            "wgrad_deferral_limit 50 (parallel.defer_head_wgrad, head_wgrad_deferral_limit 50), "
            "activations_checkpoint null, enable_cuda_graph false, fp8 true with fp8_hybrid false and fp8_recipe "
            "delayed (training.fp8_recipe delayed), optim.fp8_params true (training.fp8_param_gather), "
            "ub_tp_comm_overlap true with the userbuffers settings it loaded (bulk 4 SMs for the four backward "
            "overlaps, ring exchanges for qkv_fprop, proj_dgrad, fc1_fprop and fc2_dgrad, proj_fprop a 24-SM "
            "pipeline in 4 splits with a margin, fc2_fprop a ring exchange with a margin: overlap.tp_comm_cfg), "
            "optim overlap_grad_reduce, overlap_param_gather and overlap_param_gather_with_optim_step true "
            "(handed to NeMo's MegatronCommOverlapCallback by pretrain.py: every model chunk one bucket, "
            "dp.bucket_stages none). The README exports NCCL_NVLS_ENABLE=1 (cluster.nvls true; its "
            "config_common.sh has the NVLS line commented out), which otherwise matches NVIDIA's v5.0 one "
            "(NCCL_MIN_NCHANNELS=4: cluster.nccl_min_nchannels; NCCL_CFG_PATH to the communicator CTA file). Not "
            "in Nebius's folder, so ASSUMED NVIDIA's v5.0 copies, which its run_and_time.sh reaches at the same "
            "paths: pretrain.py (DistributedDataParallelConfig with check_for_nan_in_grad=True: dp.nan_check, "
            "grad_reduce_in_fp32=False, average_in_collective=True) and conf/nccl/custom_communicator_cta.yaml "
            "(dp, dp_cp and tp at most 8 CTAs, pp, mp and embd 2, the rest 1: cluster.nccl_communicators); "
            "cuDNN fused attention. Llama 3.1 405B (126 layers, h 16384, 128 heads, 8 KV heads, SwiGLU 53248, "
            "vocab 128256, RMSNorm, RoPE, untied embeddings), sequence 8192."),
        "slow": True,
        "published": {"blocks_ms": blocks_ms, "block_tokens": block_samples * seq, "global_batch": gbs,
                      "seq_len": seq, "gpus": gpus, "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": round(step_s, 5)},
    })
MLPERF_V51 = "mlcommons/training_results_v5.1 (commit 4da2d1c)"
MLPERF_8B_SETTINGS = (
    " Llama 3.1 8B (32 layers, h 4096, 32 heads, 8 KV heads, SwiGLU 14336, vocab 128256, RMSNorm, RoPE, "
    "untied embeddings: the benchmark's model, Llama31Config8B in the reference implementation, "
    "mlcommons/training small_llm_pretraining/nemo/pretrain_llama31.py), sequence 8192 (the log's "
    "max_sequence_length). v5.1 settings (NeMo 25.09), from NVIDIA's implementation as the submitters "
    "store it: config_common.sh (NVIDIA's and Lambda's copies) sets FP8=True with FP8_RECIPE=tensorwise "
    "(per-tensor current scaling: training.fp8_recipe current), FP8_PARAM_GATHER=True "
    "(training.fp8_param_gather), USE_DIST_OPTIMIZER=True with OVERLAP_GRAD_REDUCE and OVERLAP_PARAM_GATHER "
    "(Megatron-Core's distributed optimizer: zero 1, both overlapped), NCCL_NVLS_ENABLE=0 (cluster.nvls "
    "false), NCCL_MIN_NCHANNELS=4, NCCL_MIN_CTAS=16 and NCCL_MAX_CTAS=32 (cluster.nccl_min_nchannels, "
    "nccl_min_ctas, nccl_max_ctas, which replace the per-communicator CTA file's limits: NCCL's "
    "envConfigOverride). config_common_8b.sh, sourced after it (not in NVIDIA's folder; Lambda's, "
    "Lenovo's and HPE's copies agree on these) sets CE_FUSION_IMPL=te (TransformerEngine's parallel "
    "cross-entropy: training.fused_cross_entropy te), DEFER_EMBEDDING_WGRAD_COMPUTE=False, "
    "OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=False and ALIGN_PARAM_GATHER=False; its USE_TE_OPS=True and "
    "FUSED_QKV_ROPE=True have no counterpart. config_common_cg.sh (not in NVIDIA's folder; Nebius's copy, "
    "Nebius/benchmarks/llama31_8b/config_common_cg.sh) sets FULL_CUDA_GRAPH=1 and MCORE_CUDA_GRAPH=1, and "
    "the logs that print their configuration (HPE's XD670 H200 and Dell's XE9680L B200 runs) show "
    "enable_cuda_graph 1 with cuda_graph_scope full_iteration (every microbatch's forward and backward one "
    "graph): training.cuda_graphs full_iteration (no op of them issued by the host; attn and mlp, each "
    "layer's kernels by graph launches, before it was modelled); those logs also show no activation recompute (recompute_granularity None). pretrain.py "
    "(Lambda's copy, the 0922 package of the same benchmark) builds DistributedDataParallelConfig with "
    "check_for_nan_in_grad=False (dp.nan_check false), grad_reduce_in_fp32=False (training.fp32_grad_accum "
    "false) and average_in_collective=True, and attaches NeMo's MegatronCommOverlapCallback, whose own "
    "128 Mi parameters per bucket (its _get_optimizer_overlap_cfgs at dp > 1) go to the DDP config unless "
    "it is handed a bucket size: where the run's configuration sets no BUCKET_SIZE, dp.bucket_mb "
    "comm-overlap (HPE's log prints the result for such a config, DistributedDataParallelConfig(... "
    "bucket_size=134217728 ...)); where it does, that size, as the pretrain.py copies of the lineage that "
    "hand optim.bucket_size to the callback keep it (Lambda's hands it none, so there the 128 Mi would "
    "stand; the run's own pretrain.py is not stored: ASSUMED the size its configuration asks for). "
    "ASSUMED: cuDNN fused attention (TransformerEngine's backend choice on Hopper and Blackwell; "
    "attention_backend auto in the printed configs). No counterpart: MC_TP_OVERLAP_AG/RS (userbuffers over "
    "NVLink multicast), NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=16, NCCL_P2P_NET_CHUNKSIZE, "
    "NCCL_SHARP_GROUP_SIZE_THRESH.")


def mlperf_v51_8b_scenario(gpus, hardware, tp, cp, mbs, gbs, tp_overlap):
    """A v5.1 Llama 3.1 8B run as MLPERF_8B_SETTINGS describes it."""
    scenario = megatron_h100_scenario(llama_model("LLAMA3-8B"), gpus, megatron_parallel(tp, 1, cp, 1), 8192, mbs,
                                      gbs, "fp8", "cudnn", "current", hardware=hardware, fp32_grads=False,
                                      fp8_params=True, comm_overlap=True)
    scenario["cluster"].update(nvls=False, nccl_min_nchannels=4, nccl_min_ctas=16, nccl_max_ctas=32)
    scenario["training"].update(cuda_graphs=["full_iteration"], fused_cross_entropy="te")
    scenario["overlap"]["tp_comm"] = tp_overlap
    return scenario


# folder, GPU (BLACKWELL_HW), nodes, config, tp, cp, TP_COMM_OVERLAP, BUCKET_SIZE (parameters, None unset),
# SEGMENT, [block ms], block samples, the log's train_step_time of the last block, whether the
# folder's own config is stored (the GB200 ones are not: their GB300 twin's settings, same name)
MLPERF_V51_8B_RUNS = [
    ("theia_ngpu72_ngc25.09_nemo", "GB300", 18, "config_GB300_18x4x1xtp1pp1cp2_8b.sh", 1, 2, False, None,
     18, [50589, 50594], 12312, 0.147934, True),
    ("theia_ngpu512_ngc25.09_nemo", "GB300", 128, "config_GB300_128x4x1xtp2pp1cp4_8b.sh", 2, 4, True,
     768000000, 16, [16616, 16631], 12288, 0.0866188, True),
    ("tyche_ngpu72_ngc25.09_nemo", "GB200", 18, "config_GB200_18x4x1xtp1pp1cp2_8b.sh", 1, 2, False, None,
     18, [57998, 57962], 12312, 0.169475, False),
    ("tyche_ngpu512_ngc25.09_nemo", "GB200", 128, "config_GB200_128x4x1xtp2pp1cp4_8b.sh", 2, 4, True,
     768000000, 16, [17317, 17314], 12288, 0.0901748, False),
]
for (folder, gpu, nodes, config, tp, cp, tp_overlap, bucket, segment, blocks_ms, block_samples, log_step,
     stored) in MLPERF_V51_8B_RUNS:
    gpus, seq, hardware = nodes * 4, 8192, BLACKWELL_HW[gpu]
    dp = gpus // (tp * cp)
    gbs = dp  # MINIBS 1
    steps = block_samples / gbs
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    scenario = mlperf_v51_8b_scenario(gpus, hardware, tp, cp, 1, gbs, tp_overlap)
    scenario["cluster"]["segment_nodes"] = segment
    layout = (f"TENSOR_MODEL_PARALLEL={tp}, SEQ_PARALLEL={tp > 1}, CONTEXT_PARALLEL={cp}, "
              f"TP_COMM_OVERLAP={tp_overlap}, NVTE_DPA_FP8_RECIPE=F16 (attention in 16 bits), SEGMENT={segment} "
              "(cluster.segment_nodes)")
    if bucket:
        # Megatron-Core's DistributedDataParallelConfig.bucket_size counts parameters; bf16 on the wire
        scenario["dp"]["bucket_mb"] = bucket * 2 / 1e6
        layout += f", BUCKET_SIZE={bucket} (parameters: dp.bucket_mb {bucket * 2 / 1e6:g}, bf16 on the wire; below)"
    own = (f"the config sets {layout}" if stored else
           f"the folder's README names {config}, which is not stored: its layout is the name's (nodes x GPUs x "
           f"MINIBS x tp x pp x cp, as every NVIDIA config is named; the log's global_batch_size agrees), and "
           f"ASSUMED the rest as the GB300 config of the same name sets it ({layout})"
           + ("; in Lambda's package of the implementation the GB300 config of this layout only sources "
              "the GB200 one, config_GB200_18x4x1xtp1pp1cp2_8b.sh: one config under two names" if nodes == 18 else ""))
    system = f"{gpu} NVL72 ({folder.split('_')[0].title()})"  # NVIDIA's system: theia, tyche
    blackwell_cases.append({
        "name": f"mlperf-v5.1/llama31-8b-{gpus}x{gpu.lower()}",
        "family": "mlperf-training-blackwell",
        "source": (
            f"{MLPERF_V51} NVIDIA/benchmarks/llama31_8b/implementations/nemo/{config} and "
            f"NVIDIA/results/{folder}/llama31_8b/result_0.txt: MLPerf Training v5.1 Llama 3.1 8B on {nodes} "
            f"{system} trays ({gpus} GPUs), tp {tp} cp {cp}, MBS 1, global batch {gbs} (MINIBS 1 x dp {dp}; the "
            f"log's global_batch_size). Step {step_s:.4g} s: the last two block_start/block_stop pairs last "
            f"{blocks_ms[0]} and {blocks_ms[1]} ms, each {block_samples} samples = {steps:g} steps (the log's own "
            f"train_step_time for the last block: {log_step} s). Of the run's own settings, {own}."
            + MLPERF_8B_SETTINGS),
        "slow": True,
        "published": {"blocks_ms": blocks_ms, "block_tokens": block_samples * seq, "global_batch": gbs,
                      "seq_len": seq, "gpus": gpus, "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": float(f"{step_s:.6g}")},  # six digits of a sub-second step
    })
# Other submitters' runs of the same implementation (mlcommons/training_results_v5.1, <Org>/...):
# name suffix, family, hardware, GPUs, tp, cp, MBS, GBS, [block ms], block samples, the log's
# train_step_time of the last block, SEGMENT or None, BUCKET_SIZE (parameters) or None, profile
# overrides, and the run's evidence.
# Left out: the B300 runs (8 GPUs, MBS 2: Lenovo 0.406, Dell 0.548, Supermicro 0.551 s a step on
# the same layout, 35% apart), Cisco's two H100 runs (no configuration in their logs; their stored
# pretrain.py never attaches the comm-overlap callback; 5.5-7 s tails in every block) and the 8-GPU
# B200 runs (Lenovo, Oracle, Supermicro, Dell: 0.444-0.458 s a step with MBS 2), whose precision is
# not known: Dell's, as fast as the rest, runs a config that sources config_common_fp4.sh (FP4=True,
# FP8=False in Lambda's copy) and config_common_fp8attn.sh, the others' configs are not stored, and no
# log prints it (as FP8 with Datacrunch's config_DGXB200_1x8x2xtp1pp1cp1_8b.sh: +18.7%); likewise
# Nebius's B300 run.
MLPERF_V51_8B_PARTNER_RUNS = [
    ("64xh200-hpe", "mlperf-training-h100", "dgx-h200", 64, 1, 2, 1, 32, [90619, 90533], 8192, 0.353644, None, None,
     None,
     "HPE/benchmarks/llama3_8b/implementations/nemo-x86_64/config_XD670_8x8x1xtp1pp1cp2_8b.sh and "
     "HPE/results/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09/llama31_8b/result_1.txt (the folder has no result_0; "
     "result_2's last block 0.353818 s): 8 HPE Cray XD670 nodes of 8 H200 SXM 141GB "
     "(HPE/systems/HPE-Cray-XD670-H200-SXM5-141GB_n8_25.09.json), blocks of steps 5632-5888 and 5888-6144. "
     "The log names its config (DLPAL ... XD670_8x8x1xtp1pp1cp2_8b) and prints the configs in effect: "
     "Llama31Config8B(tensor_model_parallel_size=1, sequence_parallel=False, context_parallel_size=2, "
     "tp_comm_overlap=False, cross_entropy_fusion_impl='te', recompute_granularity=None, fp8='hybrid', "
     "fp8_recipe='tensorwise', fp8_param=True, fp8_dot_product_attention=False, enable_cuda_graph=1, "
     "cuda_graph_scope='full_iteration') and DistributedDataParallelConfig(grad_reduce_in_fp32=False, "
     "overlap_grad_reduce=True, overlap_param_gather=True, use_distributed_optimizer=True, "
     "check_for_nan_in_grad=False, bucket_size=134217728, average_in_collective=True, fp8_param_gather=True). "
     "The config also sources config_common_fp8attn.sh (FP8_DPA=True), yet the printed config keeps "
     "fp8_dot_product_attention False: attention in 16 bits. HPE's config_common.sh is not stored: ASSUMED "
     "NVIDIA's (its run.sub passes NCCL_NVLS_ENABLE into the container). Each node has 8 ConnectX-7 NDR "
     "400 Gb/s adapters beside 8 Slingshot 200 Gb/s NICs: ASSUMED NCCL on the InfiniBand ones (its IB "
     "transport; Slingshot needs the libfabric plugin), the dgx-h200 profile's 8 x 400 Gb/s; Intel hosts "
     "(Xeon Platinum 8562Y+), as the profile."),
    ("16xb200-dell", "mlperf-training-blackwell", "dgx-b200", 16, 1, 1, 2, 32, [455869, 456560], 24576, 0.594479,
     None, 768000000, None,
     "Dell/benchmarks/llama31_8b/implementations/nemo/config_2xXE9680Lx8B200-SXM-180GB_2x8x2xtp1pp1cp1_8b.sh "
     "and Dell/results/2xXE9680Lx8B200-SXM-180GB/llama31_8b/result_0.txt (result_1's last block 0.589930 s): "
     "two Dell PowerEdge XE9680L of 8 B200 SXM 180GB (Intel Xeon Platinum 8562Y+ hosts), blocks of steps "
     "4608-5376 and 5376-6144. The log prints the experiment configuration: micro_batch_size 2, TP 1, CP 1, "
     "sequence_parallel false, global_batch_size 32, enable_cuda_graph 1 with cuda_graph_scope "
     "full_iteration, fp8 tensorwise with fp8_param_gather, ub_tp_comm_overlap false, "
     "cross_entropy_fusion_impl te, defer_embedding_wgrad_compute false, activations_checkpoint null, "
     "optim.bucket_size 768000000 (dp.bucket_mb 1536; below). Its system file names no NICs: ASSUMED 8 x "
     "400 Gb/s, the dgx-b200 profile's, as the NCCL log of its twin run on two XE9685L (AMD hosts, the same "
     "config, 0.5869 s a step) lists its mlx5 devices at 400000 Mb/s."),
    ("64xb200-oracle", "mlperf-training-blackwell", "dgx-b200", 64, 1, 2, 1, 32, [73860], 12288, 0.192342, None,
     None, None,
     "Oracle/benchmarks/llama31_8b/run_llama31-8b.sh and Oracle/results/8xBM.GPU.B200.8/llama31_8b/result_0.txt: "
     "8 OCI BM.GPU.B200.8 nodes of 8 B200 (Intel Xeon Platinum 8592+ hosts), the last block (steps "
     "5376-5760). The script sources config_DGXB200_8x8x1xtp1pp1cp2_8b.sh, which Oracle does not store; "
     "the copy of that name under Supermicro/benchmarks/llama31_8b/implementations/SYS-422GS-NBRT-LCC/ sets "
     "MINIBS=1, TENSOR_MODEL_PARALLEL=1, SEQ_PARALLEL=False, CONTEXT_PARALLEL=2, TP_COMM_OVERLAP=False, "
     "NVTE_DPA_FP8_RECIPE=F16 and sources config_common, config_common_8b and config_common_cg (global "
     "batch 64 / 2 x 1 = 32, the log's). The script's NCCL_IB_HCA lists 8 RoCE adapters: ASSUMED 400 Gb/s "
     "each, the dgx-b200 profile's. Datacrunch's run of the same config on 64 B200 "
     "(Datacrunch/results/b200_8x8_ngc25.09/, its log naming DGXB200_8x8x1xtp1pp1cp2_8b) takes 0.19352 "
     "and 0.19193 s a step over its last two blocks."),
    ("72xgb300-lambda", "mlperf-training-blackwell", "gb300-nvl72", 72, 1, 2, 1, 36, [55791, 55814], 12312, 0.163197,
     18, None, None,
     "Lambda/benchmarks/llama31_8b/implementations/gb300_0922/ and Lambda/results/gb300_n18_ngc25.04_nemo/"
     "llama31_8b/result_1.txt (the folder has no result_0; result_2's last block 0.16347 s): 18 GB300 NVL72 "
     "trays (72 GPUs, 1400 W, Grace hosts: the log's SYSJSON reads Neoverse-V2), blocks of steps 4446-4788 "
     "and 4788-5130, each 342 steps of 36. The log names GB300_18x4x1xtp1pp1cp2_8b, whose Lambda copy only "
     "sources config_GB200_18x4x1xtp1pp1cp2_8b.sh, not stored: ASSUMED as NVIDIA's config of the GB300 name "
     "sets it (TENSOR_MODEL_PARALLEL=1, SEQ_PARALLEL=False, CONTEXT_PARALLEL=2, TP_COMM_OVERLAP=False, "
     "NVTE_DPA_FP8_RECIPE=F16, SEGMENT=18: cluster.segment_nodes). The same config on NVIDIA's own 72 GB300 "
     "(theia_ngpu72, above) takes 0.1479 s, 10% less."),
]
for (suffix, family, hardware, gpus, tp, cp, mbs, gbs, blocks_ms, block_samples, log_step, segment, bucket,
     overrides, evidence) in MLPERF_V51_8B_PARTNER_RUNS:
    steps = block_samples / gbs
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    scenario = mlperf_v51_8b_scenario(gpus, hardware, tp, cp, mbs, gbs, False)
    if segment:
        scenario["cluster"]["segment_nodes"] = segment
    if overrides:
        scenario["cluster"]["profile"] = overrides
    if bucket:
        scenario["dp"]["bucket_mb"] = bucket * 2 / 1e6
    blocks = (f"the last two blocks last {blocks_ms[0]} and {blocks_ms[1]} ms" if len(blocks_ms) == 2
              else f"the block lasts {blocks_ms[0]} ms")
    case = {
        "name": f"mlperf-v5.1/llama31-8b-{suffix}",
        "family": family,
        "source": (
            f"{MLPERF_V51} {evidence} MLPerf Training v5.1 Llama 3.1 8B, tp {tp} cp {cp}, MBS {mbs}, global batch "
            f"{gbs}. Step {step_s:.4g} s: {blocks}, each {block_samples} samples = {steps:g} steps (the log's own "
            f"train_step_time for the last block: {log_step} s)." + MLPERF_8B_SETTINGS),
        "slow": True,
        "published": {"blocks_ms": blocks_ms, "block_tokens": block_samples * 8192, "global_batch": gbs,
                      "seq_len": 8192, "gpus": gpus, "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": float(f"{step_s:.6g}")},
    }
    (cases if family == "mlperf-training-h100" else blackwell_cases).append(case)
# The University of Florida's v5.1 Llama 3.1 405B runs of NVIDIA's implementation on DGX B200
# (University-of-Florida/benchmarks/llama31_405b/implementations/hpg.dgxb200x8/): nodes, [block ms] of
# result_1.txt's last two blocks (result_0's last block was cut short at its max_steps), steps a block,
# the log's train_step_time of the last block
def mlperf_v51_405b_scenario(gpus, tp, gbs, hardware, precision):
    """A v5.1 Llama 3.1 405B run of NVIDIA's implementation (NeMo 25.09): pp 8, vp 8, cp 2, MBS 1,
    full-iteration CUDA graphs, no TP overlap, config_common.sh's NCCL limits. ``precision`` fp8: FP8
    tensorwise with FP8 parameters; nvfp4: config_common_fp4.sh's 'Vanilla recipe' (no Hadamard
    transform, no stochastic rounding, 16-bit parameters)."""
    fp8 = precision == "fp8"
    scenario = megatron_h100_scenario(llama_model("LLAMA3.1-405B"), gpus, megatron_parallel(tp, 8, 2, 8), 8192, 1, gbs,
                                      precision, "cudnn", "current", hardware=hardware, fp32_grads=False,
                                      fp8_params=fp8, comm_overlap=True)
    scenario["cluster"].update(nvls=False, nccl_min_nchannels=4, nccl_min_ctas=16, nccl_max_ctas=32)
    scenario["training"].update(cuda_graphs=["full_iteration"], fused_cross_entropy="native")
    if not fp8:
        scenario["training"].update(nvfp4_hadamard=False, nvfp4_stochastic_rounding=False)
    scenario["overlap"]["tp_comm"] = False
    # config_common.sh's TP_PP_DP_MAPPING=True: custom.yaml's use_tp_pp_dp_mapping, which NeMo 2's
    # init_model_parallel turns into Megatron-Core's rank order tp-cp-ep-pp-dp (data parallel last)
    scenario["parallel"].update(embedding_in_split=True, loss_in_split=True, order="tp,cp,pp,dp")
    scenario["dp"]["bucket_stages"] = "first"  # OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=False
    return scenario


MLPERF_V51_UF_RUNS = [(32, [884488, 884090], 32, 27.62779), (56, [531819, 531276], 19, 27.96189)]
for nodes, blocks_ms, steps, log_step in MLPERF_V51_UF_RUNS:
    gpus, seq = nodes * 8, 8192
    dp = gpus // 64
    gbs = 144 * dp
    step_s = sum(blocks_ms) / 1000 / (len(blocks_ms) * steps)
    scenario = mlperf_v51_405b_scenario(gpus, 4, gbs, "dgx-b200", "fp8")
    blackwell_cases.append({
        "name": f"mlperf-v5.1/llama31-405b-{gpus}xb200-uf",
        "family": "mlperf-training-blackwell",
        "source": (
            f"{MLPERF_V51} University-of-Florida/benchmarks/llama31_405b/implementations/hpg.dgxb200x8/"
            f"config_DGXB200_{nodes}x8x144xtp4pp8cp2_cg.sh and University-of-Florida/results/hpg.dgxb200x8.n{nodes}/"
            f"llama31_405b/result_1.txt: MLPerf Training v5.1 Llama 3.1 405B, the University of Florida's run of "
            f"NVIDIA's implementation (NeMo 25.09) on {nodes} DGX B200 of HiPerGator ({gpus} GPUs; "
            f"University-of-Florida/systems/hpg.dgxb200x8.n{nodes}.json: B200 SXM 180GB at 1000 W, air-cooled, "
            f"Xeon Platinum 8570 hosts, InfiniBand without a NIC count: ASSUMED the dgx-b200 profile's 8 x 400 Gb/s), "
            f"tp 4 pp 8 vp 8 cp 2, MBS 1, global batch {gbs} (MINIBS 144 x dp {dp}; the log's global_batch_size). "
            f"Step {step_s:.4g} s: the last two block_start/block_stop pairs last {blocks_ms[0]} and {blocks_ms[1]} ms, "
            f"each {steps} steps (the log's own train_step_time for the last block: {log_step} s; result_0.txt's "
            "last full block within 0.1%). The config sets TENSOR_MODEL_PARALLEL=4, PIPELINE_MODEL_PARALLEL=8, "
            "INTERLEAVED_PIPELINE=8, CONTEXT_PARALLEL=2, MINIBS=144, ASYM_PP_EMBED and ASYM_PP_LOSS "
            "(parallel.embedding_in_split, loss_in_split), and has TP_COMM_OVERLAP commented out (custom.yaml's "
            "default, False); it sources config_common.sh, config_common_405b.sh and config_common_cg.sh, which "
            "UF does not store: as NVIDIA's 405B config_common.sh (theia_ngpu512_ngc25.09_nemo/), Oracle's copy "
            "of config_common_405b.sh (no layer kept in 16 bits) and Nebius's of config_common_cg.sh (FULL_CUDA_GRAPH=1, "
            "MCORE_CUDA_GRAPH=1: training.cuda_graphs full_iteration; OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP "
            "and DEFER_EMBEDDING_WGRAD_COMPUTE False, so Megatron-Core buckets the first stage's first chunk: "
            "dp.bucket_stages first), which set FP8=True with FP8_RECIPE=tensorwise (training.fp8_recipe "
            "current), FP8_PARAM_GATHER=True, the distributed optimizer with both overlaps, NCCL_NVLS_ENABLE=0 "
            "(cluster.nvls false), NCCL_MIN_NCHANNELS=4, NCCL_MIN_CTAS=16 and NCCL_MAX_CTAS=32, and TP_PP_DP_MAPPING=True "
            "(custom.yaml's use_tp_pp_dp_mapping, which NeMo 2's init_model_parallel turns into Megatron-Core's "
            "rank order tp-cp-ep-pp-dp: parallel.order tp,cp,pp,dp). No FP4 file is "
            "sourced. Not stored, so ASSUMED: pretrain.py as Lambda's and the other copies of the lineage build "
            "DistributedDataParallelConfig (check_for_nan_in_grad=False, grad_reduce_in_fp32=False, "
            "average_in_collective=True), NeMo's comm-overlap buckets of 128 Mi parameters (no BUCKET_SIZE is "
            "set; dp.bucket_mb comm-overlap, as HPE's printed DDP config shows for such a config), sequence "
            "parallelism (custom.yaml's SEQ_PARALLEL default, True), Megatron-Core's fused cross-entropy "
            "(custom.yaml's CE_FUSION_IMPL default, native) and cuDNN fused attention. Llama 3.1 405B (126 "
            "layers, h 16384, 128 heads, 8 KV heads, SwiGLU 53248, vocab 128256, RMSNorm, RoPE, untied "
            "embeddings), sequence 8192."),
        "slow": True,
        "published": {"blocks_ms": blocks_ms, "block_tokens": steps * gbs * seq, "global_batch": gbs,
                      "seq_len": seq, "gpus": gpus, "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": round(step_s, 5)},
    })
# NVIDIA's v5.1 Llama 3.1 405B runs in NVFP4 (NVIDIA/benchmarks/llama31_405b/implementations/): folder,
# profile, trays (4 GPUs each), tp, MINIBS, the folder storing the config, the sums of result_0.txt's
# per-step train_step_time lines over its last two blocks (s), steps a block, the blocks' durations (ms),
# the gaps from each block's last step line to its block_stop (ms), the system
MLPERF_V51_FP4_RUNS = [
    ("tyche_ngpu512", "gb200-nvl72", 128, 4, 144, "hsg_ngpu2560", [275.736160, 275.742411], 16, [276181, 276190],
     [494, 486], ""),
    ("theia_ngpu512", "gb300-nvl72", 128, 2, 72, "hsg_ngpu2560", [210.349310, 210.319156], 16, [210600, 210569],
     [301, 299], "; the log's submission_platform reads '128xNVIDIA GB200'"),
    ("hsg_ngpu2560", "gb200-nvl72", 640, 4, 24, "hsg_ngpu2560", [63.985810, 63.747782], 20, [66749, 66476],
     [2803, 2764], "; result_2.txt's last two blocks 3.158 s a step"),
    ("hsg_ngpu5120", "gb200-nvl72", 1280, 4, 16, "hsg_ngpu5120", [33.530221, 33.396215], 15, [38814, 38721],
     [5323, 5360], ""),
]
#: each profile's system file: the GPU and the tray's NICs
MLPERF_V51_FP4_SYSTEMS = {"gb200-nvl72": ("GB200", "ConnectX-7 IB NDR 400 Gb/s"),
                          "gb300-nvl72": ("GB300", "ConnectX-8 IB XDR 800 Gb/s")}
MLPERF_V51_FP4_SETTINGS = (
    " The config sets TENSOR_MODEL_PARALLEL as named, PIPELINE_MODEL_PARALLEL=8, INTERLEAVED_PIPELINE=8, "
    "CONTEXT_PARALLEL=2, MICRO_BATCH_SIZE=1, ASYM_PP_EMBED and ASYM_PP_LOSS (parallel.embedding_in_split, "
    "loss_in_split), TP_COMM_OVERLAP=False (overlap.tp_comm false; the hsg configs' userbuffers SM and "
    "NCCL_NVLS lines then have no effect) and SEGMENT 16 (cluster.segment_nodes 16: each 64-GPU model replica "
    "in one NVLink domain), and sources config_common.sh (stored under theia_ngpu512_ngc25.09_nemo/), "
    "config_common_fp4.sh, config_common_405b.sh and config_common_cg.sh, which NVIDIA's folders do not store: "
    "the copies the index keeps once for every submitter (Lambda/benchmarks/llama31_8b/implementations/"
    "gb300_0922/config_common_fp4.sh, Oracle/benchmarks/llama31_8b/config_common_405b.sh, "
    "Nebius/benchmarks/llama31_8b/config_common_cg.sh; the logs' MIN_LR, eval samples and target agree with "
    "the 405B file). They set FP4=True with FP4_RECIPE=nvfp4 and the 'Vanilla recipe' "
    "NVTE_NVFP4_DISABLE_RHT=1, NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1 and NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1 "
    "(training.precision nvfp4, nvfp4_hadamard false, nvfp4_stochastic_rounding false), FP8=False and "
    "FP8_PARAM_GATHER=False (16-bit parameters gathered), no FIRST_LAST_LAYERS_BF16 (every layer in NVFP4), "
    "NVTE_DPA_FP8_RECIPE=F16 without FP8_DPA (16-bit attention), FULL_CUDA_GRAPH=1 and MCORE_CUDA_GRAPH=1 "
    "(training.cuda_graphs full_iteration), OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=False (Megatron-Core "
    "buckets the first stage's first chunk: dp.bucket_stages first), DEFER_EMBEDDING_WGRAD_COMPUTE=False, the "
    "distributed optimizer with both overlaps, NCCL_NVLS_ENABLE=0 (cluster.nvls false), NCCL_MIN_NCHANNELS=4, "
    "NCCL_MIN_CTAS=16, NCCL_MAX_CTAS=32, and TP_PP_DP_MAPPING=True (custom.yaml's use_tp_pp_dp_mapping, which "
    "NeMo 2's init_model_parallel turns into Megatron-Core's rank order tp-cp-ep-pp-dp: parallel.order "
    "tp,cp,pp,dp). Not stored, so ASSUMED: pretrain.py and conf/custom.yaml as the copies whose LR-decay formula "
    "reproduces the logged decay steps (DistributedDataParallelConfig with check_for_nan_in_grad=False, "
    "grad_reduce_in_fp32=False, average_in_collective=True; custom.yaml's default bucket_size 134217728 handed "
    "to NeMo's comm-overlap callback: dp.bucket_mb comm-overlap), sequence parallelism (SEQ_PARALLEL default "
    "True), Megatron-Core's fused cross-entropy (CE_FUSION_IMPL default native) and cuDNN fused attention. "
    "Llama 3.1 405B (126 layers, h 16384, 128 heads, 8 KV heads, SwiGLU 53248, vocab 128256, RMSNorm, RoPE, "
    "untied embeddings), sequence 8192.")
for (folder, hardware, trays, tp, minibs, stored, sums, steps, blocks_ms, gaps_ms,
     remark) in MLPERF_V51_FP4_RUNS:
    gpu, nics = MLPERF_V51_FP4_SYSTEMS[hardware]
    system = (f"{gpu} NVL72 (NVIDIA/systems/{folder}_ngc25.09_nemo.json: {trays} compute trays of 4 {gpu}, "
              f"4x {nics} a tray{remark})")
    gpus, seq = trays * 4, 8192
    dp = gpus // (tp * 16)
    gbs = minibs * dp
    step_s = sum(sums) / (len(sums) * steps)
    config = f"config_{hardware[:5].upper()}_{trays}x4x{minibs}xtp{tp}pp8cp2_cg_fp4.sh"
    scenario = mlperf_v51_405b_scenario(gpus, tp, gbs, hardware, "nvfp4")
    scenario["cluster"]["segment_nodes"] = 16
    blackwell_cases.append({
        "name": f"mlperf-v5.1/llama31-405b-{gpus}x{hardware[:5]}-nvfp4",
        "family": "mlperf-training-blackwell",
        "source": (
            f"{MLPERF_V51} NVIDIA/benchmarks/llama31_405b/implementations/{stored}_ngc25.09_nemo/{config} (the "
            f"config {folder}_ngc25.09_nemo/README names) and NVIDIA/results/{folder}_ngc25.09_nemo/llama31_405b/"
            f"result_0.txt: MLPerf Training v5.1 Llama 3.1 405B on {gpus} GPUs of {system}, tp {tp} pp 8 vp 8 cp 2, "
            f"MBS 1, global batch {gbs} (MINIBS {minibs} x dp {dp}; the log's global_batch_size). Step "
            f"{step_s:.4g} s: the per-step train_step_time lines of the last two blocks, {steps} steps each, sum to "
            f"{sums[0]:.3f} and {sums[1]:.3f} s. The blocks last {blocks_ms[0]} and {blocks_ms[1]} ms: each "
            f"block_stop comes {gaps_ms[0]} and {gaps_ms[1]} ms after the block's last step line, time the log "
            "charges to the next eval's first validation_step_time (equal within 4 ms), not to a training "
            "step." + MLPERF_V51_FP4_SETTINGS),
        "slow": True,
        "published": {"blocks_ms": blocks_ms, "step_time_sums_s": sums, "block_tokens": steps * gbs * seq,
                      "global_batch": gbs, "seq_len": seq, "gpus": gpus, "precision": "nvfp4"},
        "scenario": scenario,
        "measured": {"step_time_s": round(step_s, 5)},
    })
dump(str(ROOT / "validation" / "mlperf-training-blackwell.yaml"),
     "# MLPerf Training, NVIDIA's Blackwell submissions: GPT-3 175B of v4.1 (preview, DGX B200, NeMo, FP8, 64\n"
     "# GPUs) and Llama 3.1 8B of v5.1 (GB200 and GB300 NVL72, 72 and 512 GPUs; and other submitters' runs of\n"
     "# NVIDIA's implementation on 16 and 64 B200 and 72 GB300; the University of Florida's v5.1 Llama 3.1\n"
     "# 405B runs on 256 and 448 B200; NVIDIA's v5.1 Llama 3.1 405B NVFP4 runs on 512 GB200, 512 GB300, 2,560\n"
     "# and 5,120 GB200), the step time read off each result log's\n"
     "# training blocks. Generated by tools/generate_validation_cases.py\n"
     "# (source in each case); every case is marked slow, so the family stays out of validate --quick.\n",
     [with_container_cudnn(case, "mlperf-v5.1") if case["name"].startswith("mlperf-v5.1/") else case
      for case in blackwell_cases])
dump(str(ROOT / "validation" / "mlperf-training-h100.yaml"),
     "# MLPerf Training, NVIDIA's DGX H100 submissions: GPT-3 175B of v3.1, v4.0 and v4.1 (NeMo, FP8, 256\n"
     "# to 10752 GPUs) and Llama 3.1 405B of v5.0 (512 GPUs), and HPE's v5.1 Llama 3.1 8B run of NVIDIA's\n"
     "# implementation on 64 H200 and Nebius's v5.0 Llama 3.1 405B runs on 512 and 1024 H200, the step time\n"
     "# read off each result log's\n"
     "# training blocks. Generated by\n"
     "# tools/generate_validation_cases.py from the table in that script (source in each case); every\n"
     "# case is marked slow, so the family stays out of validate --quick.\n", cases)

# --- AMD's PyTorch FSDP training benchmark on 8 MI300X -------------------------------------------
# rocm/pytorch-training:v25.2 overview ("ROCm PyTorch Training Container (v25.2)", AMD Infinity Hub,
# MI300X table): Llama 3.1 8B with FSDP, TFLOPS/s/GPU as published, run by
# AMD-AIG-AIMA/pytorch-training-benchmark train_fsdp.py (read at 7112e27) and llama.py (65783cb).
AMD_FSDP_PAGE = ("rocm/pytorch-training:v25.2 container overview (AMD Infinity Hub, '{table} platform "
                 "performance results': ROCm 6.3.0, PyTorch 2.7.0a0, Transformer Engine 1.11, Flash "
                 "Attention 2.6.3; {system}), run by "
                 "AMD-AIG-AIMA/pytorch-training-benchmark train_fsdp.py (commit 7112e27) and llama.py "
                 "(commit 65783cb)")
AMD_FSDP_SYSTEMS = {  # the page's reference systems, by its table
    "MI300X": ("amd-mi300x", "one Supermicro AS-8125GS-TNMR2 node of 8 MI300X 750 W"),
    "MI325X": ("amd-mi325x", "one Dell PowerEdge XE9680 of 8 MI325X 256 GB 1000 W (2x Xeon Platinum 8480+, a "
                             "pre-release build of ROCm 6.3)"),
}
AMD_FSDP_ROWS = {  # table -> [(precision, batch per GPU, sequence, TFLOPS/s/GPU as published)]
    "MI300X": [("bf16", 3, 8192, 542.94), ("fp8", 3, 8192, 737.40), ("bf16", 6, 4096, 523.79),
               ("fp8", 6, 4096, 735.44)],
    "MI325X": [("bf16", 3, 8192, 643.01), ("fp8", 5, 8192, 893.68), ("bf16", 8, 4096, 625.96),
               ("fp8", 10, 4096, 894.98)],
}
AMD_FSDP_ACCUMULATION = 8  # train_fsdp.py grad_accumlate_pre_steps: an optimizer step every 8 batches


def amd_fsdp_flops_per_token(n_layers, h, heads, kv, ffn, vocab, s):
    """llama.py estimate_flops_per_token: 3 x (the linears' 2 x weights per layer + the LM head)
    plus 3 x 4 s h per layer of attention, counted without causality."""
    head_dim = h // heads
    linears = 2 * (3 * ffn * h + h * (heads + 2 * kv) * head_dim + h * heads * head_dim)
    return 3 * (n_layers * linears + 2 * h * vocab) + 3 * n_layers * 4 * s * heads * head_dim


def amd_fsdp_case(table, precision, batch, seq, tflops):
    """One row of the page's table for ``table`` (MI300X or MI325X) as a case."""
    hardware, system = AMD_FSDP_SYSTEMS[table]
    model = llama_model("LLAMA3-8B")
    per_token = amd_fsdp_flops_per_token(*LLAMA["LLAMA3-8B"], seq)
    tokens_per_s = tflops * 1e12 * 8 / per_token
    return {
        "name": f"amd-fsdp/llama31-8b-{precision}-s{seq}-b{batch}-8x{table.lower()}",
        "family": f"amd-fsdp-{table.lower()}",
        "source": (
            f"{AMD_FSDP_PAGE.format(table=table, system=system)}: Llama 3.1 8B with FSDP, {precision.upper()}, "
            f"batch size {batch}, sequence "
            f"{seq}: {tflops} TFLOPS/s/GPU; TP 1, PP 1, DP 8 (the overview). measured tokens_per_s = "
            f"TFLOPS/s/GPU x 8 / llama.py's FLOPs per token ({per_token:,}: 3 x the linears' and LM "
            "head's 2 FLOPs per weight, plus 3 x 4 s h per layer of attention without causality), "
            "the script's own count. From the code: FSDP1 FULL_SHARD, one unit per LLaMABlock "
            "(transformer_auto_wrap_policy) and the root, MixedPrecision bf16 parameters and reductions "
            "(parallel.fsdp FULL_SHARD under framework pytorch-fsdp), no activation checkpointing, "
            "fused AdamW; the loss divided for 8-batch gradient accumulation, the optimizer stepping "
            "every 8 batches without no_sync (each batch's gradients reduce-scattered), so a step is "
            f"8 batches (global batch {batch * 8 * AMD_FSDP_ACCUMULATION}); the TFLOP/s is each "
            "batch's FLOPs over the mean batch time of the second half of 64 (four of those 31 "
            "batches end in an optimizer step, about one in 8). "
            + ("BF16: the model in plain PyTorch (fp32 RMSNorm, complex rotary) under torch.compile "
               "(training.elementwise fused), flash_attn_func on MI3xx (Flash Attention 2.6.3's CK "
               "backend: the profile's attention), bf16 logits into an fp32 cross-entropy."
               if precision == "bf16" else
               "FP8: Transformer Engine TransformerLayers (fused QKV, RMSNorm and SwiGLU kernels; "
               "torch.compile off), DelayedScaling HYBRID with amax history 16 "
               "(training.fp8_recipe delayed), weights cast to FP8 on each step's first batch "
               "(is_first_microbatch), TE's LayerNormLinear LM head; the amax reduction over the 8 "
               "ranks each forward (a few kB) is not modelled.")
            + " The global batch is read from the code, not stated on the page."
        ),
        "published": {"tflops_per_gpu": tflops, "batch_per_gpu": batch, "seq_len": seq, "gpus": 8,
                      "precision": precision, "flops_per_token": per_token},
        "scenario": {
            "model": model,
            "framework": "pytorch-fsdp",
            "cluster": {"hardware": hardware, "gpus": 8},
            "parallel": {"fsdp": "FULL_SHARD"},
            "training": {"seq_len": seq, "micro_batch": batch,
                         "global_batch": batch * 8 * AMD_FSDP_ACCUMULATION, "precision": precision,
                         "recompute": "none", "elementwise": "fused"},
        },
        "measured": {"tokens_per_s": round(tokens_per_s, 1)},
    }


cases = [amd_fsdp_case("MI300X", *row) for row in AMD_FSDP_ROWS["MI300X"]]
dump(str(ROOT / "validation" / "amd-fsdp-mi300x.yaml"),
     "# AMD's PyTorch FSDP training benchmark (Llama 3.1 8B, BF16 and FP8) on one node of 8 MI300X, as\n"
     "# the rocm/pytorch-training:v25.2 overview publishes it. Generated by\n"
     "# tools/generate_validation_cases.py from the table in that script (source in each case).\n", cases)
# The same page's MI325X table: the same code on a 1,000 W MI325X node, batches as large as fit
dump(str(ROOT / "validation" / "amd-fsdp-mi325x.yaml"),
     "# AMD's PyTorch FSDP training benchmark (Llama 3.1 8B, BF16 and FP8) on one node of 8 MI325X, as\n"
     "# the rocm/pytorch-training:v25.2 overview publishes it. Generated by\n"
     "# tools/generate_validation_cases.py from the table in that script (source in each case).\n",
     [amd_fsdp_case("MI325X", *row) for row in AMD_FSDP_ROWS["MI325X"]])

# --- MLPerf Training v5.1 Llama 3.1 8B on AMD Instinct MI355X ----------------------------------------
# AMD's own submission (one node of 8 MI355X): NeMo 2 (v2.5.0rc0) on ROCm's Megatron-LM and
# TransformerEngine forks, read from mlcommons/training_results_v5.1. Partners' runs of the same code
# on MI355X (Supermicro 1.0766, Dell 1.0908, GigaComputing 1.0988 s a step: 3-5% slower than AMD's on
# one config) are in the source text, not shipped as cases of their own; the MI350X runs (AMD 1.2797,
# Cisco 1.3279 s) need an MI350X profile (the same die at 2.2 GHz and 1000 W), not built.
MLPERF_AMD_SRC = (
    f"{MLPERF_V51} AMD/benchmarks/llama31_8b/implementations/MI355X_EPYC_9575F_pytorch_llama3_8b/"
    "config_MI355X_1x8x1_8b.sh and AMD/results/MI355X_EPYC_9575F_pytorch/llama31_8b/result_0.txt: MLPerf "
    "Training v5.1 Llama 3.1 8B on one Supermicro AS-4126GS-NMR-LCC of 8 AMD Instinct MI355X (2x EPYC 9575F; "
    "AMD/systems/MI355X_EPYC_9575F_pytorch.json: ROCm 7.0.0, PyTorch 2.8.0, hipBLASLt 1.1.0, 'Nemo 2.3.0, "
    "megatron_lm, TransformerEngine-d0ef413b', sw_notes 'FP8 Training'; the container rocm/amd-mlperf:"
    "llama31_8b_training_5.1 builds NeMo v2.5.0rc0 on ROCm's Megatron-LM and TransformerEngine forks). Step "
    "{step:.6g} s: the last two block_start/block_stop pairs last 400260 and 400428 ms, each 12288 samples = "
    "384 steps of 32 (the log prints no per-step time; its tracked_stats throughput, 30.71 and 30.69 samples/s, "
    "agrees). The config sets NNODES=1, GPUS_PER_NODE=8, GBS=32, MBS=2, TP=1, PP=1, CP=1 (dp 8, 2 microbatches: "
    "the log's gradient_accumulation_steps 2), FP8_PARAMS=1, TP_COMM_OVERLAP=False, NCCL_MIN_CTAS=32 "
    "(cluster.nccl_min_ctas; inert at the profile's 56 channels), CHECK_FOR_NAN_IN_GRAD=0 (dp.nan_check false), "
    "NVTE_FUSED_ATTN_CK=1 with NVTE_CK_USES_FWD_V3=1, NVTE_CK_USES_BWD_V3=1 and NVTE_CK_IS_V3_ATOMIC_FP32=0 "
    "(AITER's assembly attention with bf16 dQ atomics: training.attention_kernel ck-a16), NVTE_USE_HIPBLASLT=1. "
    "src/train.py (Dell's copy, Dell/benchmarks/llama31_8b/implementations/AMD/src/train.py; AMD's own is not "
    "stored) builds Llama31Config8B at sequence 8192 with fp8 'hybrid' delayed scaling (amax history 4, "
    "most_recent: training.fp8_recipe delayed) and tp_only_amax_red=True (training.tp_only_amax_red: the amax "
    "all-reduce over the TP group of one), MegatronMixedPrecision(fp8_params, fp8_dot_product_attention=False: "
    "attention in 16 bits, grad_reduce_in_fp32=False: training.fp32_grad_accum false), the distributed "
    "optimizer (zero 1, clip_grad 1.0) and DistributedDataParallelConfig(grad_reduce_in_fp32=False, "
    "average_in_collective=True (dp.reduce_op avg), use_distributed_optimizer=True, fp8_param_gather=True) "
    "with overlap_grad_reduce, overlap_param_gather and bucket_size left at Megatron-Core's defaults (False, "
    "False, None): one bucket, reduced after the last backward and gathered after the optimizer step "
    "(overlap.dp_grad_reduce and param_gather false); the trainer attaches no MegatronCommOverlapCallback, "
    "no CUDA graphs and no recompute (none configured). ASSUMED: Megatron-Core's native fused cross-entropy "
    "(NeMo's GPTConfig sets cross_entropy_loss_fusion=True and, in the releases read, no fusion impl, so "
    "Megatron-Core's default 'native'; TransformerEngine's would be 2.5% faster here) and gradient-accumulation "
    "fusion (NeMo's default where the fused wgrad kernel imports; off: 0.9% slower). Partners' runs of the "
    "same code and settings (their logs' hyperparameters match AMD's) on MI355X: Supermicro "
    "(8xMI355X_2xEPYC_9575F, liquid-cooled) 1.0766, Dell (XE9785L_8xMI355X, air-cooled, accelerator_frequency "
    "1980MHz in its system file) 1.0908, GigaComputing (G893-ZX1-AAX4, air-cooled) 1.0988 s a step over their "
    "last two blocks: 3-5% slower than AMD's on one config, a spread the model has no input for.")
MLPERF_AMD_BLOCKS_MS = [400260, 400428]
_amd_step = sum(MLPERF_AMD_BLOCKS_MS) / 1000 / (2 * 12288 / 32)
_amd_scenario = megatron_h100_scenario(llama_model("LLAMA3-8B"), 8, megatron_parallel(1, 1, 1, 1), 8192, 2, 32, "fp8",
                                       "ck-a16", "delayed", hardware="amd-mi355x", fp32_grads=False, fp8_params=True)
_amd_scenario["cluster"]["nccl_min_ctas"] = 32
_amd_scenario["training"].update(tp_only_amax_red=True, fused_cross_entropy="native")
_amd_scenario["overlap"] = {"dp_grad_reduce": False, "param_gather": False, "tp_comm": False}
dump(str(ROOT / "validation" / "mlperf-training-amd.yaml"),
     "# MLPerf Training v5.1, AMD's Llama 3.1 8B submission on one node of 8 MI355X (NeMo 2 on ROCm, FP8),\n"
     "# the step time read off its result log's training blocks. Generated by\n"
     "# tools/generate_validation_cases.py from the table in that script (source in the case).\n", [{
         "name": "mlperf-v5.1/llama31-8b-8xmi355x",
         "family": "mlperf-training-amd",
         "source": MLPERF_AMD_SRC.format(step=_amd_step),
         "published": {"blocks_ms": MLPERF_AMD_BLOCKS_MS, "block_tokens": 12288 * 8192, "global_batch": 32,
                       "seq_len": 8192, "gpus": 8, "precision": "fp8"},
         "scenario": _amd_scenario,
         "measured": {"step_time_s": float(f"{_amd_step:.6g}")},
     }])

# --- MLPerf Training llama2_70b_lora: LoRA fine-tuning of Llama 2 70B on one 8-GPU node ------------
# The benchmark fine-tunes Llama 2 70B on GovReport at sequence 8192 with rank-16 LoRA adapters on the
# fused QKV and the output projection (lora: rank 16, targets qkv and proj, dropout 0.1 on the adapter
# input), every base weight frozen and held in FP8 (te.fp8_model_init / NeMo's fp8_params). Rows whose
# settings were read from the submission's own config and code; evidence gathered 2026-12-05.
MLPERF_LORA_COMMON = (
    " LoRA as the implementation sets it (lora: rank 16, targets qkv and proj, dropout 0.1): adapter_dim 16, "
    "alpha 32, adapter_dropout 0.1 at dropout_position 'pre', target_modules 'attention' (NeMo: linear_qkv and "
    "linear_proj; no MLP adapters), 44.6 M trained parameters; the base model, embedding and LM head frozen "
    "(TransformerEngine runs a linear's weight-gradient GEMM only when its weight requires a gradient: "
    "ctx.requires_wgrad = weight.requires_grad) and built in FP8 (fp8_params / te.fp8_model_init: "
    "training.fp8_param_gather, the frozen weights at 1 B). Sequence 8192 (packed GovReport), MBS 1.")
MLPERF_LORA_AMD_SRC = (
    f"{MLPERF_V51} AMD/results/{{system}}/llama2_70b_lora/result_0.txt with AMD's config_{{gpu}}_1x8x1.sh (the "
    "index stores it once, under {config_copy}, MLPERF_SUBMISSION_ORG=AMD inside) and src/conf/"
    "megatron_gpt_peft_tuning_config.yaml: MLPerf Training v5.1 llama2_70b_lora on one node of 8 AMD Instinct "
    "{gpu} ({system_note}; ROCm 7.0.0, PyTorch 2.8.0, hipBLASLt 1.1.0, NeMo 2.3.0, ROCm's Megatron-LM bc0be960 and "
    "TransformerEngine d0ef413b). Step {step:.6g} s = 8 / the mean of the log's last two tracked_stats "
    "throughputs, {thr0} and {thr1} samples/s (custom_callbacks.py: the global batch over the summed wall "
    "time from on_train_batch_start to on_train_batch_end, the optimizer step included; {other}). The config "
    "sets TP=PP=CP=1, SP=False, MBS=1, MINIBS=1 (global batch 8 = dp 8, no accumulation: the log's "
    "global_batch_size 8), FP8=True with delayed scaling (fp8_hybrid, FP8_AMAX_ALGO most_recent, history 4) and "
    "FP8_REDUCE_AMAX=False (no amax all-reduce: training.tp_only_amax_red over the TP group of one), FP8_DPA=0 "
    "(attention in 16 bits) through TransformerEngine's CK fused attention with NVTE_CK_USES_FWD_V3=1, "
    "NVTE_CK_USES_BWD_V3=1 and NVTE_CK_IS_V3_ATOMIC_FP32=0 (AITER's assembly kernels with bf16 dQ atomics: "
    "training.attention_kernel ck-a16), ENABLE_TRANSPOSE_CACHE=0 with the yaml's disable_parameter_transpose_cache "
    "(training.fp8_weight_cache false: each frozen FP8 weight's transpose made for every microbatch and not "
    "kept), TP_COMM_OVERLAP=False, NCCL_MIN_CTAS=32, {recompute} and no HIP graphs; the yaml: megatron_amp_O2 "
    "(fp32 main gradients), fused_adam without the distributed optimizer on one node (zero 0), gradient clip "
    "0.3." + MLPERF_LORA_COMMON + " FP8_ACTIVATION=True sets the yaml's model.fp8_activation_input_store (copied "
    "from NVIDIA's v4.0 yaml), a key no code reads: NeMo's config builder copies only keys named as Megatron-Core's "
    "TransformerConfig fields, whose is activation_func_fp8_input_store (NVIDIA's v5.0 yaml spells it so), so the "
    "SwiGLU input stays 16-bit (training.activation_fp8_store false, INFERRED); USE_TE_SWIGLU=1 runs the SwiGLU as "
    "TransformerEngine's op in ROCm's Megatron-LM fused_bias_swiglu.py, the same bytes. ASSUMED as in the Llama 3.1 8B case: "
    "Megatron-Core's native fused cross-entropy.{partners}")
MLPERF_LORA_AMD = [  # gpu, profile, results folder, config copy, system note, throughputs, other runs, recompute
    ("MI355X", "amd-mi355x", "MI355X_EPYC_9575F_pytorch",
     "Quanta_Cloud_Technology/benchmark/llama2_70b_lora/implementations/pytorch_D75T-7U/",
     "a Supermicro AS-4126GS-NMR-LCC, AMD/systems/MI355X_EPYC_9575F_pytorch.json",
     [5.875013494167505, 5.874360352283764],
     "result_1 gives 1.3618 s, the 1536-1920-sample block's wall clock 65.323 s / 48 steps = 1.3609", 0,
     " Partners' MI355X runs of the same config: Dell 1.373, Supermicro 1.365 s."),
    ("MI325X", "amd-mi325x", "MI325X_EPYC_9575F_pytorch_llama2_70b",
     "Supermicro/benchmarks/llama2_70b_lora/implementations/AS-8126GS-TNMR_8xMI325X/llama2_70b_training5.1/"
     "llama2_sft/nemo/",
     "AMD/systems/MI325X_EPYC_9575F_pytorch_llama2_70b.json, 2x EPYC 9575F",
     [2.835753421805253, 2.836143134902168],
     "result_1 gives 2.8207 s over its blocks; v5.0's MI325X run on TransformerEngine 1.9 2.929 s", 0,
     " MiTAC's v5.1 MI325X run of the same config 2.817 s. The profile's attention is the MI300X column of "
     "AITER's table (ASSUMPTION, hardware/amd-mi325x.yaml)."),
    ("MI300X", "amd-mi300x", "MI300X_EPYC_9575F_pytorch_llama2_70b",
     "ASUSTeK/benchmarks/llama2_70b_lora/implementations/ESC_A8A_MI325X_pytorch/",
     "AMD/systems/MI300X_EPYC_9575F_pytorch_llama2_70b.json, 2x EPYC 9575F",
     [2.1152532771651043, 2.1150869069678278],
     "result_1 gives 3.7767 s over its blocks; v5.0's MI300X run 3.945 s", 21,
     " Krai's v5.1 MI300X run (LR 0.00055) 3.842 s."),
]
MLPERF_LORA_B200_SRC = (
    f"{MLPERF_V50} NVIDIA/results/nyx_n1_ngc25.04_nemo/llama2_70b_lora/result_0.txt with the README's "
    "config_DGXB200_1x8x1xtp1pp1cp1.sh (stored once, under GigaComputing/benchmarks/llama2_70b_lora/"
    "implementations/pytorch/) and nyx_n1_ngc25.04_nemo's train.py and custom_llama.py: MLPerf Training v5.0 "
    "llama2_70b_lora on one DGX B200 (NVIDIA/systems/nyx_n1_ngc25.04_nemo.json; container pytorch 25.04, NeMo and "
    "Megatron-Core 25.04-alpha.rc1, cuDNN 9.9.0, CUDA 12.9, NCCL 2.26.3). Step {step:.6g} s: the mean of "
    "result_0's two logged train_step_time values, 1.5408691637135234 and 1.5421426771663391 s (each the mean "
    "over a block between evaluations; result_1 logs 1.4985-1.5001 s, 3% faster, a spread the model has no input "
    "for). The config sets TP=1, CP=1, SP=0, MINIBS=1 (global batch 8 = dp 8, one microbatch: the log's "
    "gradient_accumulation_steps 1), FP8_ACT=1, LAYER_CUDA_GRAPH=0 and MCORE_CUDA_GRAPH=0 (no CUDA graphs), "
    "NCCL_NVLS_ENABLE=0, no recompute setting (the yaml has none); train.py: fp8 'hybrid' delayed scaling, "
    "gradient_accumulation_fusion, LoRA(dim 16, alpha 32, dropout 0.1, dropout_position 'pre', target_modules "
    "linear_proj and linear_qkv), cross_entropy_loss_fusion=False (Megatron's unfused loss: "
    "training.fused_cross_entropy false); custom_llama.py builds the model under te.fp8_model_init. FP8_ACT=1 is "
    "the yaml's activation_func_fp8_input_store (Megatron-Core's fused SwiGLU keeps its input as an FP8 cast: "
    "training.activation_fp8_store). FP8 attention (training.fp8_attention, the profile's cudnn-fp8 curves): the "
    "yaml reads fp8_dot_product_attention from FP8_DPA (default 0) and train.py passes it to the model config and "
    "MegatronMixedPrecision; NVIDIA's own v5.0 config_common.sh is not stored, but the two partner copies of the "
    "v5.0 B200/GB200 code's (Lambda/benchmarks/llama2_70b_lora/implementations/1cc_b200_0416/config_common.sh, "
    "Oracle's 1xBM.GPU.GB200.4 one) export FP8_DPA=1 and NVTE_FP8_DPA_BWD=1, as NVIDIA's CUDA-graph guide quotes "
    "tyche_ngpu512_ngc25.04_nemo/config_common.sh lines 21-25 (FP8_DPA=1, 'FP8 dot product attention'). Those "
    "copies export NEMO_LORA_USE_THUNDER_DROPOUT=1, which no v5.0 code reads (the dropout_recompute option that "
    "uses thunder appears in v5.1): PyTorch's dropout with its mask, as modelled. The log's max_memory_usage "
    "168.827 (units not stated; the callback that logs it is not stored)." + MLPERF_LORA_COMMON + " ASSUMED: the "
    "distributed optimizer (zero 1, NeMo 2's default; over the adapters alone either way).")
MLPERF_LORA_B200_STEPS = [1.5408691637135234, 1.5421426771663391]
MLPERF_LORA_GB200_SRC = (
    f"{MLPERF_V50} NVIDIA/results/tyche_ngpu8_ngc25.04_nemo/llama2_70b_lora/result_0.txt with "
    "config_GB200_2x4x1xtp1pp1cp1.sh (stored once, under GigaComputing/benchmarks/llama2_70b_lora/implementations/"
    "pytorch/) and tyche_ngpu8_ngc25.04_nemo's train.py and custom_llama.py: MLPerf Training v5.0 llama2_70b_lora on "
    "8 GB200 of a GB200 NVL72, two compute trays of 4 (DGXNNODES=2, DGXNGPU=4; NVIDIA/systems/"
    "tyche_ngpu8_ngc25.04_nemo.json: container pytorch 25.04, NeMo and Megatron-Core 25.04-alpha.rc1, cuDNN 9.9.0, "
    "CUDA 12.9, NCCL 2.26.3). Step {step:.6g} s: the mean of result_0's two logged train_step_time values, "
    "1.469008400838599 and 1.470604118833459 s (result_1 logs 1.4843-1.4903 s). The config sets TP=1, SP=0, CP=1, "
    "MINIBS=1 (global batch 8 = dp 8 over the two trays' NVLink, one microbatch: the log's "
    "gradient_accumulation_steps 1), FP8_ACT=1, LAYER_CUDA_GRAPH=0 and MCORE_CUDA_GRAPH=0 (no CUDA graphs), "
    "BINDCMD bindpcie --cpu=node; the rest as the DGX B200 row of the same release (its train.py and "
    "custom_llama.py: unfused cross-entropy, FP8_ACT as training.activation_fp8_store; FP8 attention, "
    "training.fp8_attention, from the v5.0 config_common.sh copies that export FP8_DPA=1, Oracle's for a GB200 "
    "among them). The profile's FP8 attention curves are cuDNN 9.17's (the run's 9.9 is older: on Blackwell a "
    "newer cuDNN is faster, so they may be optimistic). The log's max_memory_usage 168.83." + MLPERF_LORA_COMMON
    + " ASSUMED: the distributed optimizer (zero 1).")
MLPERF_LORA_GB200_STEPS = [1.469008400838599, 1.470604118833459]
_lora = {"rank": 16, "targets": ["qkv", "proj"], "dropout": 0.1}


def _add_lora(scenario, **options):
    """MLPerf's llama2_70b_lora adapters (rank 16 on QKV and the output projection, dropout 0.1,
    and ``options``) on ``scenario``, without the first-stage bucketing, inert at pp 1."""
    scenario["lora"] = {**_lora, "targets": list(_lora["targets"]), **options}
    scenario["dp"].pop("bucket_stages", None)


def lora_step(thr):
    """The step of a llama2_70b_lora log's tracked_stats throughputs: the global batch of 8 over
    their mean (samples/s)."""
    return 8 / (sum(thr) / 2)


def lora_throughput_case(name, source, thr, scenario):
    """A llama2_70b_lora row whose log gives tracked_stats throughputs (AMD's v5.1, NVIDIA's v4.0)."""
    return {
        "name": name,
        "family": "mlperf-lora-70b",
        "source": source,
        "published": {"throughput_samples_per_s": thr, "global_batch": 8, "seq_len": 8192, "gpus": 8,
                      "precision": "fp8"},
        "scenario": scenario,
        "measured": {"step_time_s": float(f"{lora_step(thr):.6g}")},
    }


lora_cases = []
for gpu, profile, system, stored_at, note, thr, other, layers, partners in MLPERF_LORA_AMD:
    scenario = megatron_h100_scenario(llama_model("LLAMA2-70B"), 8, megatron_parallel(1, 1, 1, 1, zero=0), 8192, 1, 8,
                                      "fp8", "ck-a16", "delayed", hardware=profile, fp8_params=True)
    scenario["cluster"]["nccl_min_ctas"] = 32
    scenario["training"].update(tp_only_amax_red=True, fused_cross_entropy="native", fp8_weight_cache=False)
    if layers:
        scenario["training"].update(recompute="full", recompute_num_layers=layers)
    scenario["overlap"] = {"dp_grad_reduce": False, "tp_comm": False}
    _add_lora(scenario)
    step = lora_step(thr)
    recompute = (f"ACG=full, ACM=block, ACL={layers} (the first {layers} layers recomputed whole: training.recompute "
                 f"full, recompute_num_layers {layers}; the MI325X and MI355X configs recompute none)" if layers else
                 "no activation recompute (no ACG/ACM/ACL: MI300X's config alone recomputes 21 layers)")
    src = MLPERF_LORA_AMD_SRC.format(config_copy=stored_at, system_note=note, other=other, recompute=recompute,
                                     partners=partners, system=system, gpu=gpu, step=step, thr0=thr[0], thr1=thr[1])
    lora_cases.append(lora_throughput_case(f"mlperf-v5.1/llama2-70b-lora-8x{gpu.lower()}", src, thr, scenario))
def nvidia_lora_scenario(hardware):
    """NVIDIA's v5.0 llama2_70b_lora layout (nyx / tyche ngc25.04): dp 8, FP8 with its weights and
    cuDNN's FP8 attention, the SwiGLU input kept in FP8, the unfused loss, Megatron-Core's DDP
    overlaps, rank-16 adapters on QKV and the projection."""
    scenario = megatron_h100_scenario(llama_model("LLAMA2-70B"), 8, megatron_parallel(1, 1, 1, 1), 8192, 1, 8,
                                      "fp8", "cudnn", "delayed", hardware=hardware, fp8_params=True)
    scenario["training"].update(fused_cross_entropy=False, fp8_attention=True, activation_fp8_store=True)
    scenario["overlap"] = {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False}
    _add_lora(scenario)
    return scenario


def lora_step_time_case(name, source, steps, scenario):
    """A llama2_70b_lora row whose log gives train_step_time values (NVIDIA's mlperf_common
    callback): the step their mean, ``source`` formatted with it."""
    step = sum(steps) / len(steps)
    case = {
        "name": name,
        "family": "mlperf-lora-70b",
        "source": source(step),
        "published": {"train_step_time_s": steps, "global_batch": 8, "seq_len": 8192, "gpus": 8,
                      "precision": scenario["training"]["precision"]},
        "scenario": scenario,
        "measured": {"step_time_s": float(f"{step:.6g}")},
    }
    release = name.split("/")[0]  # NVIDIA's code in its round's container (CONTAINER_CUDNN)
    return with_container_cudnn(case, release) if release in CONTAINER_CUDNN else case


def nvidia_lora_case(name, hardware, source, steps):
    """An NVIDIA v5.0 llama2_70b_lora row: the step the mean of result_0's train_step_time values."""
    return lora_step_time_case(name, lambda step: source.format(step=step), steps, nvidia_lora_scenario(hardware))


def v51_lora_scenario(hardware, cp, fp4, fp8_store=False):
    """NVIDIA's v5.1 llama2_70b_lora layout (NeMo 25.09): dp over 8 GPUs with ``cp`` over the a2a
    attention, NVFP4 with its frozen weights quantised once (``fp4``; no Hadamard transform) or FP8
    with FP8 weights and FP8 attention, no gradient-accumulation or loss fusion, the op-fused adapters."""
    parallel = megatron_parallel(1, 1, 1, 1)
    parallel["cp"] = cp
    if cp > 1:
        parallel["cp_comm"] = "a2a"
    scenario = megatron_h100_scenario(llama_model("LLAMA2-70B"), 8, parallel, 8192, 1, 8, "nvfp4" if fp4 else "fp8",
                                      "cudnn", "delayed", hardware=hardware, fp8_params=not fp4)
    scenario["training"].update(grad_accum_fusion=False, fused_cross_entropy=False)
    if fp4:
        scenario["training"].update(nvfp4_hadamard=False, fp4_param=True)
    else:
        scenario["training"]["fp8_attention"] = True
    if fp8_store:
        scenario["training"]["activation_fp8_store"] = True
    scenario["overlap"] = {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False}
    _add_lora(scenario, op_fuser=True)
    return scenario


#: the op-fused adapter's dropout (NeMo's TEFusedLoRALinear appends te.ops.Dropout for dropout_position 'pre')
TE_FUSED_DROPOUT_NOTE = (
    "its te.ops.Dropout runs TransformerEngine's fused kernel on the 16-bit input, a 1-bit mask "
    "(tex.dropout_fwd allocates numel / 8 bytes; TransformerEngine pull request 2014, 'Dropout with 8-bit RNG', "
    "July-August 2025, shipped in the 2.9.0.dev0+3f5b4754 build GigaComputing's v5.1 folder stores; ASSUMED in the "
    "release_v2.8 branch NVIDIA's Dockerfile builds, TE_REVISION=release_v2.8)")


MLPERF_LORA_NVFP4_SRC = (
    f"{MLPERF_V51} NVIDIA/results/{{system}}/llama2_70b_lora/result_0.txt with the README's {{config}} (stored "
    "under {config_copy}), config_common.sh and config_common_fp4.sh (the index stores NVIDIA's v5.1 copies under "
    "partners' paths: Supermicro/benchmarks/llama2_70b_lora/implementations/Blackwell_lora/config_common.sh, "
    "Nebius/benchmarks/llama2_70b_lora/configs/nebius_b200_n4/config_common_fp4.sh), the v5.1 train.py "
    "(Lenovo/benchmarks/llama2_70b_lora/train.py), custom_llama.py and custom_callbacks.py (Dell/.../nemo/, "
    "University-of-Florida/.../b200_nemo/): MLPerf Training v5.1 llama2_70b_lora on 8 {gpu} of a {gpu} NVL72, two "
    "compute trays of 4 (NVIDIA/systems/{system}.json: NeMo 25.09 container, CUDA 13.0.1, cuDNN 9.13.1, NCCL "
    "2.28.3, TransformerEngine release_v2.8). Step {step:.6g} s: the mean of result_0's train_step_time values of "
    "the last two blocks before healing, {steps0} and {steps1} s (the blocks ending at steps 288 and 336; "
    "mlperf_common's per-block wall clock over 48 steps, the optimizer step and data loading in it). At step 350 "
    "the run switches to FP8 (HEALING_ITER=350, HEALING_PRECISION=FP8_DS: the FP8 weights copied back from host "
    "memory and the full-iteration CUDA graph dropped), so the block ending at 384 ({healed} s) is not used. The "
    "configs set TP=1, PP=1, SP=0, {layout}, FP4=True, FP8=False, FP4_RECIPE=nvfp4 with NVTE_NVFP4_DISABLE_RHT=1 "
    "(training.nvfp4_hadamard false; stochastic rounding of gradients left on, its disabling line commented "
    "out) and NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1, FP4_PARAM=False with PRE_QUANTIZED_MODEL=True: the callback's "
    "on_train_start quantises every decoder linear's weight once and replaces it with an NVFP4 tensor holding "
    "both directions ('We now have NVFP4 parameters in GPU memory (for training) and FP8 parameters in host "
    "memory (for healing)'), so no weight is cast in a step and no 16-bit copy stays (training.fp4_param). "
    "FP8_DPA=1 with NVTE_DPA_FP8_RECIPE=DelayedScaling is set, but Megatron-Core's get_fp4_recipe builds "
    "NVFP4BlockScaling() without fp8_dpa (its default False) and the v5.1 callback does not patch it (a later "
    "Megatron-Bridge callback builds NVFP4BlockScaling(fp8_dpa=...)): attention in BF16 before healing "
    "(training.fp8_attention false, INFERRED from the code; FP8 attention would make the simulated step 4% shorter on GB300, 1% on GB200). "
    "MCORE_CUDA_GRAPH=1 (cuda_graph_scope full_iteration: the host issues nothing per kernel; the simulated host "
    "is not on the step's path either way), USE_TE_OPS=1 (NeMo's TEFusedLoRALinear at tp 1, lora.op_fuser: "
    "the base linear and its adapter as TransformerEngine op sequences, the adapter in BF16 outside the FP4 "
    "autocast, its scale and add into the base output the B GEMM's epilogue (ForwardLinearScaleAdd), the "
    "backward scale that GEMM's alpha (BackwardLinearScale), the adapter's input gradient accumulated by the "
    "base input-gradient GEMM (BackwardLinearAdd); " + TE_FUSED_DROPOUT_NOTE + "), FUSED_SINGLE_QKV_ROPE=1, NCCL_NVLS_ENABLE=1, TP_COMM_OVERLAP "
    "unset (False); train.py: gradient_accumulation_fusion=False, cross_entropy_loss_fusion=False (Megatron's "
    "unfused loss: training.fused_cross_entropy false), the distributed optimizer (zero 1, over the adapters), no "
    "recompute, no CPU offloading, no BF16 first/last layers (the embedding and LM head outside the FP4 "
    "context, BF16). LoRA(dim=16, alpha=32, dropout=0.1, dropout_position 'pre', target_modules linear_proj and "
    "linear_qkv): rank-16 adapters on QKV and the projection, 44.6 M trained parameters; the base frozen "
    "(TransformerEngine quantises a frozen linear's input for its forward GEMM only: backward_needs_input = "
    "is_grad_enabled and weight.requires_grad). Sequence 8192 (packed GovReport), MBS 1. The logs print no "
    "memory; NVIDIA's GB200 config needs cp 2 to fit (dp 8 at cp 1 would not: simcluster memory).{extra}")
MLPERF_LORA_NVFP4 = [
    ("gb300-nvl72", "GB300", "theia_ngpu8_ngc25.09_nemo", "config_GB300_2x4x1xtp1pp1cp1_fp4.sh",
     "Supermicro/benchmarks/llama2_70b_lora/implementations/SYS-422GS-NBRT-LCC/", 1,
     "CP=1, MINIBS=1 (global batch 8 = dp 8, one microbatch: the log's gradient_accumulation_steps 1)",
     [0.7456289133745789, 0.7458845753341544], 1.1185414322911431,
     " The log labels its platform '2xNVIDIA GB200' (the system JSON: Theia, 1x NVIDIA GB300 NVL72, 2 nodes x 4 "
     "GPUs). Earlier blocks 0.7429 and 0.7455 s."),
    ("gb200-nvl72", "GB200", "tyche_ngpu8_ngc25.09_nemo", "config_GB200_2x4x2xtp1pp1cp2_fp4.sh",
     "Dell/benchmarks/llama2_70b_lora/implementations/nemo/", 2,
     "CP=2 with the yaml's cp_comm_type a2a (parallel.cp_comm a2a, TransformerEngine's all-to-all attention), "
     "MINIBS=2 (global batch 8 = dp 4 x 2 microbatches: the log's gradient_accumulation_steps 2)",
     [1.028948866041598, 1.029137257437469], 2.362249212937362, " Earlier blocks 1.0285 and 1.0291 s."),
]


def nvidia_nvfp4_lora_case(hardware, gpu, system, config, stored_at, cp, layout, steps, healed, extra):
    """NVIDIA's v5.1 llama2_70b_lora row (NVFP4 with pre-quantised frozen weights) on 8 GPUs of a
    GB200 / GB300 NVL72: the step the mean of the last two pre-healing blocks' train_step_time."""
    def source(step):
        return MLPERF_LORA_NVFP4_SRC.format(system=system, config=config, config_copy=stored_at, gpu=gpu, step=step,
                                            steps0=steps[0], steps1=steps[1], healed=healed, layout=layout,
                                            extra=extra)

    return lora_step_time_case(f"mlperf-v5.1/llama2-70b-lora-8x{gpu.lower()}", source, steps,
                               v51_lora_scenario(hardware, cp, fp4=True))


MLPERF_LORA_PARTNER_SRC = (
    f"{MLPERF_V51} {{submitter}}/results/{{system}}/llama2_70b_lora/{{result}} with {{config}}: MLPerf Training v5.1 "
    "llama2_70b_lora, {submitter}'s run of NVIDIA's NeMo 25.09 implementation on one node of 8 {gpu} "
    "({submitter}/systems/{system}.json: {system_note}). Step {step:.6g} s: the mean of the log's train_step_time "
    "values of the blocks ending at steps {ends}, {steps0} and {steps1} s (mlperf_common's per-block wall clock, the "
    "optimizer step and data loading in it). {precision_note} The rest as NVIDIA's v5.1 config_common.sh (the copy "
    "under Supermicro/benchmarks/llama2_70b_lora/implementations/Blackwell_lora/; {common_note}): TP=1, PP=1, SP=0, "
    "USE_TE_OPS=1 (NeMo's TEFusedLoRALinear at tp 1: lora.op_fuser; " + TE_FUSED_DROPOUT_NOTE + "), FP8_DPA=1, "
    "LORA_A2A=1 (inert at tp 1), "
    "CG_WEIGHT_CACHING=0; train.py: gradient_accumulation_fusion=False, cross_entropy_loss_fusion=False (the unfused "
    "loss), the distributed optimizer (zero 1, over the adapters), no recompute; LoRA(dim=16, alpha=32, dropout=0.1, "
    "dropout_position 'pre', target_modules linear_proj and linear_qkv), sequence 8192 (packed GovReport), MBS 1. "
    "Found by a research helper among the partners' v5.1 results; the settings written before simulating.{extra}")
MLPERF_LORA_FP4_NOTE = (
    "The config sources config_common_fp4.sh (the copy under Nebius/benchmarks/llama2_70b_lora/configs/nebius_b200_n4/): "
    "FP4=True, FP8=False, FP4_RECIPE=nvfp4 with NVTE_NVFP4_DISABLE_RHT=1 (training.nvfp4_hadamard false), "
    "PRE_QUANTIZED_MODEL=True (the callback quantises every frozen decoder weight once: training.fp4_param), "
    "HEALING_ITER=350 (the run switches to FP8 at step 350, so the block ending at 384, {healed} s, is not used); "
    "attention in BF16 before healing, INFERRED as for NVIDIA's own NVFP4 rows (Megatron-Core's NVFP4BlockScaling() "
    "carries no fp8_dpa). It sets {config_vars}.")
MLPERF_LORA_FP8_NOTE = (
    "FP8 (config_common.sh: FP8=True, delayed scaling with FP8_AMAX_ALGO=max, FP8_REDUCE_AMAX=True, FP8_AMAX_HISTORY=4; "
    "FP8_DPA=1 and NVTE_FP8_DPA_BWD=1, Megatron-Core's DelayedScaling recipe carrying fp8_dpa: training.fp8_attention "
    "on the profile's cudnn-fp8 curves), the model built under te.fp8_model_init (v5.1 custom_llama.py, when "
    "cfg.model.fp8: training.fp8_param_gather, the frozen weights at 1 B). It sets {config_vars}.")
MLPERF_LORA_PARTNERS = [
    # submitter, system, result file, config, gpu, hardware, system note, steps (block ends), healed, config vars,
    # FP8_ACT store, cp, common note, extra
    ("Dell", "1xXE9680Lx8B200-SXM-180GB", "result_0.txt",
     "Dell/benchmarks/llama2_70b_lora/implementations/nemo/config_1xXE9680Lx8B200-SXM-180GB.sh", "B200", "dgx-b200",
     "NVIDIA Blackwell GPU (B200-SXM-180GB), 1 node x 8, 'NVIDIA NGC Pytorch 25.04 HugeCTR Nemo 25.09'",
     ("288 and 336", [1.1111137004584937, 1.1114746473958803]), 1.7778932785831785,
     "MAX_STEPS=700, LR=0.0006, MINIBS=2 and CP=2 (the log's gradient_accumulation_steps 2: dp 4 x 2 microbatches, "
     "cp 2 over the yaml's cp_comm_type a2a, parallel.cp_comm a2a), MCORE_CUDA_GRAPH=1, NUM_WORKERS=4, as NVIDIA's "
     "GB200 config_GB200_2x4x2xtp1pp1cp2_fp4.sh", False, 2, "Dell's implementation folder is NVIDIA's", ""),
    ("Nebius", "nebius_b300_n1", "result_1.txt",
     "Nebius/benchmarks/llama2_70b_lora/configs/nebius_b300_n1/config_DGXB200_1x8x1xtp1pp1cp1.sh", "B300", "dgx-b300",
     "NVIDIA Blackwell Ultra GPU (B300-SXM-270GB), 1 node x 8, NeMo 25.09; the log prints the config name "
     "DGXB200_1x8x1xtp1pp1cp1", ("288 and 336", [0.9244468325002041, 0.9227604620634035]), 1.7920153877688183,
     "MAX_STEPS=800, LR=0.00055, MINIBS=1, CP=1 (dp 8, one microbatch: the log's gradient_accumulation_steps 1), "
     "NCCL_NVLS_ENABLE=0, VBOOST_VALUE=0, '# export FP8_ACT=1' commented out (no FP8 SwiGLU store); no "
     "MCORE_CUDA_GRAPH line", False, 1, "ASSUMED: Nebius's own config_common.sh is not stored", ""),
    ("Nebius", "nebius_b200_n1", "result_1.txt",
     "Nebius/benchmarks/llama2_70b_lora/configs/nebius_b200_n1/config_DGXB200_1x8x1xtp1pp1cp1_fp4.sh", "B200",
     "dgx-b200", "NVIDIA Blackwell GPU (B200-SXM-180GB), 1 node x 8, NeMo 25.09",
     ("288 and 336", [1.0419110924412962, 1.0405839411638833]), 1.7480043161873862,
     "MAX_STEPS=800, LR=0.0006, MINIBS=1, CP=1 (dp 8, one microbatch), FP8_ACT=1 (the SwiGLU input kept in FP8: "
     "training.activation_fp8_store), NCCL_NVLS_ENABLE=0, MCORE_CUDA_GRAPH=0", True, 1,
     "ASSUMED: Nebius's own config_common.sh is not stored",
     " The memory walk puts this row at 183.4 GiB of 179 (the run fit): its activations are overcounted by at least "
     "4.4 GiB somewhere in NVIDIA's v5.1 LoRA layer (not found)."),
    ("Supermicro", "SYS-422GS-NBRT-LCC", "result_1.txt",
     "Supermicro/benchmarks/llama2_70b_lora/implementations/SYS-422GS-NBRT-LCC/config_DGXB200_1x8x1xtp1pp1cp1.sh", "B200",
     "dgx-b200", "NVIDIA Blackwell GPU (B200-SXM-180GB), 1 node x 8, liquid-cooled, NeMo 25.09",
     ("384 and 432", [1.2971547613125647, 1.2970344382083567]), None,
     "MAX_STEPS=800, LR=0.00055, MINIBS=1, CP=1 (dp 8, one microbatch), FP8_ACT=1 (training.activation_fp8_store), "
     "NCCL_NVLS_ENABLE=0, NCCL_NET=Socket (no inter-node traffic here), no MCORE_CUDA_GRAPH line (the yaml's False); "
     "the other B200 FP8 runs of this config: Supermicro AS-A126GS-TNBR 1.303, Dell XE9685L 1.294, Lenovo SR680aV3 "
     "1.292 and SR780aV3 1.315, GigaComputing G894-AD1 1.301 s; NVIDIA's v5.0 DGX B200 on its 25.04 stack 1.542 s",
     True, 1, "the config's own folder, stored there", ""),
    ("Supermicro", "SYS-822GS-NB3RT", "result_01.txt",
     "Supermicro/benchmarks/llama2_70b_lora/implementations/Blackwell_lora/config_SYS-822GS-NB3RT_1x8x1xtp1pp1cp1.sh",
     "B300", "dgx-b300",
     "NVIDIA Blackwell Ultra GPU (B300-SXM-270GB; the log's 'NVIDIA B300 SXM6 AC'), 1 node x 8, two Xeon 6787P, "
     "air-cooled, 'NeMo Framework NVIDIA Release 25.09'; the folder holds result_01 to result_10",
     ("336 and 384", [1.264972010353328, 1.2644421805622794]), None,
     "MAX_STEPS=800, LR=0.00055, MINIBS=1, CP=1 (dp 8, one microbatch), FP8_ACT=1 (training.activation_fp8_store), "
     "NCCL_NVLS_ENABLE=0, NCCL_NET=Socket (no inter-node traffic here), FULL_CUDA_GRAPH=0 and MCORE_CUDA_GRAPH=0; the "
     "log's printed configuration agrees (fp8 delayed, amax history 4 with max, fp8_dot_product_attention 1, "
     "activation_func_fp8_input_store 1, use_transformer_engine_op_fuser 1, enable_cuda_graph 0). Supermicro's "
     "AS-8126GS-NB3RT (two AMD EPYC 9965) ran the same config at 1.2688 / 1.2686 s, Lenovo's SR680a V4 (no config or "
     "printed configuration stored) 1.264 / 1.262 s; these B300 FP8 rows run on dgx-b300's cudnn-fp8 curves "
     "(gb300-nvl72's FP8 rows at cudnn-frontend's measured B300 / GB300 share)",
     True, 1, "the config sources that copy", ""),
    ("Dell", "1xXE9780x8B300-SXM-270GB", "result_0.txt",
     "the config its log names, XE9780x8B300-SXM-280GB_1x8x1xtp1pp1cp1, which is not stored (the folder's "
     "config_XE9780x8B300-SXM-270GB_1x8x1xtp1pp1cp1.sh sets LR=0.00055 where the run logged 0.0005, its "
     "config_DGXB300_1x8x1xtp1pp1cp1.sh MCORE_CUDA_GRAPH=1 where the log shows CUDA graphs off), so the settings are "
     "the configuration the log prints", "B300", "dgx-b300",
     "NVIDIA Blackwell Ultra GPU (B300-SXM-270GB), 1 node x 8, two Xeon 6767P, 'NVIDIA NGC Pytorch 25.04 HugeCTR Nemo "
     "25.09' (the log: CUDA 13.0.1)",
     ("336 and 384", [1.299987996895652, 1.3000767467498615]), None,
     "as its log prints them: fp8 delayed with amax history 4 (max), fp8_dot_product_attention 1, "
     "activation_func_fp8_input_store 1 (training.activation_fp8_store), use_transformer_engine_op_fuser 1, "
     "enable_cuda_graph false, TP, PP and CP 1, micro batch 1, global batch 8 (dp 8), learning rate 0.0005",
     True, 1, "ASSUMED: Dell's copy, not stored under its folder", ""),
]


def partner_lora_case(submitter, system, result, config, gpu, hardware, system_note, ends_steps, healed, config_vars,
                      fp8_store, cp, common_note, extra):
    """A partner's v5.1 llama2_70b_lora row on NVIDIA's NVFP4 config (``healed``: the block after the switch to FP8)
    or its FP8 one (``healed`` None): 8 B200 or B300 in one node."""
    ends, steps = ends_steps
    fp4 = healed is not None  # the NVFP4 config heals to FP8; the FP8 one runs FP8 throughout
    note = (MLPERF_LORA_FP4_NOTE.format(healed=healed, config_vars=config_vars) if fp4 else
            MLPERF_LORA_FP8_NOTE.format(config_vars=config_vars))

    def source(step):
        return MLPERF_LORA_PARTNER_SRC.format(submitter=submitter, system=system, result=result, config=config,
                                              gpu=gpu, system_note=system_note, step=step, ends=ends,
                                              steps0=steps[0], steps1=steps[1], precision_note=note,
                                              common_note=common_note, extra=extra)

    name = (f"mlperf-v5.1/llama2-70b-lora-{submitter.lower()}-8x{gpu.lower()}" + ("-cp2" if cp > 1 else "")
            + ("" if fp4 else "-fp8"))
    return lora_step_time_case(name, source, steps, v51_lora_scenario(hardware, cp, fp4, fp8_store))


MLPERF_LORA_H100_SRC = (
    f"{MLPERF_V40} NVIDIA/results/eos_ngc24.04_nemo/llama2_70b_lora/result_0.txt with NVIDIA/benchmarks/llama2_70b_lora/"
    "implementations/nemo/config_DGXH100_1x8x4xtp4pp1cp1.sh, configs/config_common.sh, "
    "conf/megatron_gpt_peft_tuning_config.yaml and Dockerfile: MLPerf Training v4.0 llama2_70b_lora on one DGX H100 "
    "(NVIDIA/systems/eos_ngc24.04_nemo.json: NeMo Framework 24.04, CUDA 12.4.1, cuDNN 9.1.0, NCCL 2.21.5; the "
    "Dockerfile's NeMo v2.0.0.rc0.beta (its NeMo 1.x MegatronGPTSFTModel), Megatron-Core core_v0.7.0.beta, "
    "TransformerEngine v1.6rc2 with userbuffers). Step {step:.6g} s = 8 / the mean of the log's last two tracked_stats "
    "throughputs, {thr0} and {thr1} samples/s (custom_callbacks.py, HPE's identical copy: samples over the summed time "
    "from on_train_batch_start to on_train_batch_end; the blocks' wall clock 178.242 / 48 = 3.713 s agrees; "
    "result_1 gives 3.743 s). The config sets TP=4, PP=1, CP=1, SP=1, MINIBS=4 (global batch 8 = MBS 1 x dp 2 x 4 "
    "accumulation steps: the log's gradient_accumulation_steps 4), FP8=True (fp8 and fp8_params: the base built in "
    "FP8, training.fp8_param_gather), FP8_AMAX_ALGO=max, FP8_AMAX_HISTORY=32, FP8_REDUCE_AMAX=False (NeMo passes "
    "no amax group: ASSUMED the model's TP-group reduction, training.tp_only_amax_red, a few small all-reduces), "
    "TP_COMM_OVERLAP=True; config_common.sh FP8_DPA=1 and NVTE_FP8_DPA_BWD=1 (training.fp8_attention: the Hopper "
    "cudnn-fp8 curve, cuDNN 9.19's FP8/BF16 ratio on this profile's cuDNN curve; the run's cuDNN is 9.1), "
    "NVTE_FUSED_ATTN=1, LORA_A2A=1 (lora.a2a: tp 4 with sequence parallelism, where it acts), MC_TP_OVERLAP_AG=True, "
    "MC_TP_OVERLAP_RS=True, MC_TP_OVERLAP_RS_DGRAD=False, NCCL_MIN_CTAS=32, NCCL_NVLS_ENABLE=0, no FP8_ACTIVATION (the "
    "yaml's fp8_activation_input_store defaults to 0), no CUDA graphs, no recompute (ACG/ACM/ACL unset). The yaml: "
    "megatron_amp_O2, fused_adam without the distributed optimizer (zero 0), disable_parameter_transpose_cache: True "
    "(training.fp8_weight_cache false: each frozen FP8 weight's transpose made for every microbatch), no "
    "cross-entropy fusion key (Megatron's unfused loss), userbuffers from conf/tp_overlap/h100tp4mbs1.yaml (stored "
    "once, under smc-dc-power's folder): the four all-gathers as ring exchanges, proj_fprop a pipeline of 32 SMs and "
    "fc2_fprop of 16 in 4 splits with a margin, both atomic_gemm: 1 (each GEMM one atomic-counter kernel, tp_comm_cfg "
    "atomic_gemm; no fp8_buf), qkv_dgrad / fc1_dgrad bulk on 4 / 2 SMs. The yaml's "
    "tp_comm_disable_qkv: ${{MC_TP_DISABLE_QKV,True}} is a Megatron-Core core_v0.7.0 ModelParallelConfig field ('If "
    "true, the AllGather -> Gemm overlap for QKV gets disabled'; model_parallel_config.py at 3c0f3ef; NeMo's "
    "build_model_parallel_config copies every cfg key named as a field), later renamed tp_comm_overlap_disable_qkv "
    "(v4.1's spelling): overlap.tp_comm_disable_qkv, the QKV input gathered by a blocking NCCL call in 16 bits and "
    "returned gathered to the adapter (NeMo's self-attention adapter mixin asks for return_layernorm_output_gathered "
    "where linear_qkv.ub_overlap_ag is off; NeMo pull request 9072 'disable overlap for qkv', April 2024, in this "
    "NeMo: ASSUMED, its merge date not found). The frozen QKV and fc1 linears reduce-scatter their input "
    "gradients with a plain NCCL call waited at once (TransformerEngine pull request 702, 'Disable UB bulk wgrad "
    "when weights are frozen', March 2024, before v1.5: no weight-gradient GEMM to hide it under); TE 1.6 still "
    "runs their bulk re-gathers, whose results nothing reads (not modelled)."
    + MLPERF_LORA_COMMON.replace(" and built in FP8 (fp8_params / te.fp8_model_init: training.fp8_param_gather, the "
                                 "frozen weights at 1 B)", " and built in FP8 (NeMo 1.x builds the model under "
                                 "fp8_model_init with fp8_params; the adapters are added after, in bf16)"))
MLPERF_LORA_H100_THR = [2.154987, 2.155219]


def nvidia_h100_lora_case():
    """NVIDIA's v4.0 llama2_70b_lora row on one DGX H100: tp 4 with sequence parallelism and
    userbuffers, dp 2, four microbatches, FP8 attention, the adapters' all-to-all."""
    scenario = megatron_h100_scenario(llama_model("LLAMA2-70B"), 8, megatron_parallel(4, 1, 1, 1, zero=0), 8192, 1, 8,
                                      "fp8", "cudnn", "delayed", hardware="dgx-h100", fp8_params=True)
    scenario["cluster"].update(nvls=False, nccl_min_ctas=32)
    scenario["training"].update(fused_cross_entropy=False, fp8_attention=True, fp8_weight_cache=False,
                                tp_only_amax_red=True)
    scenario["overlap"] = {"dp_grad_reduce": False, "tp_comm": True, "tp_comm_disable_qkv": True, "tp_comm_cfg": {
        "qkv_fprop": {"method": "ring_exchange"}, "fc1_fprop": {"method": "ring_exchange"},
        "proj_dgrad": {"method": "ring_exchange"}, "fc2_dgrad": {"method": "ring_exchange"},
        "proj_fprop": {"method": "pipeline", "num_sm": 32, "num_splits": 4, "set_sm_margin": True, "atomic_gemm": True},
        "fc2_fprop": {"method": "pipeline", "num_sm": 16, "num_splits": 4, "set_sm_margin": True, "atomic_gemm": True},
        "qkv_dgrad": {"method": "bulk", "num_sm": 4, "set_sm_margin": False},
        "fc1_dgrad": {"method": "bulk", "num_sm": 2, "set_sm_margin": False}}}
    _add_lora(scenario, a2a=True)
    thr = MLPERF_LORA_H100_THR
    source = MLPERF_LORA_H100_SRC.format(step=lora_step(thr), thr0=thr[0], thr1=thr[1])
    return lora_throughput_case("mlperf-v4.0/llama2-70b-lora-8xh100", source, thr, scenario)


MLPERF_LORA_V41_H200_SRC = (
    f"{MLPERF_V41} {{submitter}}/results/{{system}}/llama2_70b_lora/{{result}} with NVIDIA's v4.1 implementation "
    "(NVIDIA/benchmarks/llama2_70b_lora/implementations/h200_ngc24.09_nemo: its README names "
    "config_DGXH200_1x8x2xtp1pp1cp2.sh, stored under Lenovo's configs/ folder and UNARY-Lab's copy of the repository; "
    "eos_ngc24.09_nemo's conf/megatron_gpt_peft_tuning_config.yaml; the Dockerfile builds on "
    "nvcr.io/nvidia/pytorch:24.09-py3 with NeMo and Megatron-Core 24.09-alpha.rc0 and the container's "
    "TransformerEngine, TE_REVISION=SKIP): MLPerf Training v4.1 llama2_70b_lora on one node of 8 H200 SXM 141GB "
    "({system_note}). Step {step:.6g} s = 8 / the mean of the log's last two tracked_stats throughputs, {thr0} and "
    "{thr1} samples/s (custom_callbacks.py, b200_preview_nemo's stored copy: samples over the summed time from "
    "on_train_batch_start to on_train_batch_end){extra}. The config sets TP=1, CP=2, SP=0, MINIBS=2 (global batch "
    "8 = MBS 1 x dp 4 x 2 accumulation steps: the log's gradient_accumulation_steps 2), FP8_ACTIVATION=True (the "
    "yaml's activation_func_fp8_input_store: training.activation_fp8_store), FP8_DPA=0 (attention in 16 bits), "
    "NVTE_FUSED_ATTN=1 with NVTE_FLASH_ATTN=0 (cuDNN), TP_COMM_OVERLAP=1 (nothing to overlap at tp 1), "
    "NCCL_MIN_CTAS=32; v4.1's config_common.sh (b200_preview_nemo's stored copy) FP8=True (fp8 and fp8_params), "
    "FP8_AMAX_ALGO=max, FP8_AMAX_HISTORY=32, FP8_REDUCE_AMAX=False (delayed scaling), NCCL_NVLS_ENABLE=0, "
    "LORA_A2A=1 (inert at tp 1) and NEMO_LORA_USE_THUNDER_DROPOUT=1 (the adapter code that reads it was not found: "
    "ASSUMED PyTorch's dropout with its 1-byte mask). No CUDA graphs (LAYER_CUDA_GRAPH unset), no recompute "
    "(ACG/ACM/ACL unset). The yaml: megatron_amp_O2, Megatron-Core's distributed optimizer (mcore_distributed_optim "
    "with overlap_grad_sync and overlap_param_sync: zero 1 over the adapters, both overlapped), "
    "disable_parameter_transpose_cache True (training.fp8_weight_cache false), no cross-entropy fusion key (NeMo "
    "1.x's unfused loss), no cp_comm_type (Megatron-Core's p2p ring). Lenovo's log prints the configuration in "
    "effect: context_parallel_size 2, sequence_parallel 0, fp8 true, fp8_dot_product_attention 0, "
    "activation_func_fp8_input_store true, enable_cuda_graph false. Found by a research helper; the settings "
    "written before simulating."
    + MLPERF_LORA_COMMON.replace(" and built in FP8 (fp8_params / te.fp8_model_init: training.fp8_param_gather, the "
                                 "frozen weights at 1 B)", " and built in FP8 (NeMo 1.x builds the model under "
                                 "fp8_model_init with fp8_params: training.fp8_param_gather; the adapters are added "
                                 "after, in bf16)"))
MLPERF_LORA_V41_H200 = [  # name suffix, submitter, system, result, system note, [throughputs], extra
    ("8xh200", "NVIDIA", "h200_ngc24.09_nemo", "result_0.txt",
     "NVIDIA/systems/h200_ngc24.09_nemo.json: DGX H200, two Xeon Platinum 8480CL, NeMo Framework 24.09, CUDA 12.6.1, "
     "cuDNN 9.4.0, NCCL 2.22.3", [2.4714305683388513, 2.471846281008912],
     "; result_1 gives 2.477-2.480 samples/s, 3.23 s"),
    ("dell-8xh200", "Dell", "XE9680x8H200-SXM-141GB", "result_0.txt",
     "Dell/systems/XE9680x8H200-SXM-141GB.json: PowerEdge XE9680, two Xeon Platinum 8480+, 700 W H200, NGC PyTorch "
     "and NeMo 24.09, cuDNN 9.4.0, NCCL 2.22.3; its MLLOG-only log names no config: the DGXH200 one ASSUMED from its "
     "logged gradient_accumulation_steps 2, learning rate 5e-4 and 896 training steps",
     [2.54646619541077, 2.5471699712005695], ""),
    ("lenovo-8xh200", "Lenovo", "SR685aV3-8xH200_SXM_141GB_700W", "result_1.txt",
     "Lenovo/systems/SR685aV3-8xH200_SXM_141GB_700W.json: ThinkSystem SR685a V3, two AMD EPYC 9454 (the profile's "
     "Intel host ASSUMED: nothing on this layout crosses it), 700 W H200; its log's DLPAL line names the container "
     "mlperfv41/lora:20241003 and config DGXH200_1x8x2xtp1pp1cp2",
     [2.574363967061138, 2.576746846002648], ""),
]


def v41_h200_lora_case(suffix, submitter, system, result, system_note, thr, extra):
    """A v4.1 llama2_70b_lora row on one node of 8 H200 (NVIDIA's or a partner's run of NVIDIA's
    NeMo 24.09 code): tp 1, cp 2 over the p2p ring, dp 4, two microbatches, 16-bit attention, the
    SwiGLU input kept in FP8, the distributed optimizer over the adapters."""
    parallel = megatron_parallel(1, 1, 1, 1)
    parallel["cp"] = 2
    scenario = megatron_h100_scenario(llama_model("LLAMA2-70B"), 8, parallel, 8192, 1, 8, "fp8", "cudnn", "delayed",
                                      hardware="dgx-h200", fp8_params=True)
    scenario["cluster"].update(nvls=False, nccl_min_ctas=32)
    scenario["training"].update(fused_cross_entropy=False, fp8_weight_cache=False, activation_fp8_store=True)
    scenario["overlap"] = {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False}
    _add_lora(scenario)
    source = MLPERF_LORA_V41_H200_SRC.format(submitter=submitter, system=system, result=result,
                                             system_note=system_note, step=lora_step(thr), thr0=thr[0], thr1=thr[1],
                                             extra=extra)
    return lora_throughput_case(f"mlperf-v4.1/llama2-70b-lora-{suffix}", source, thr, scenario)


MLPERF_LORA_V41_H100_SRC = (
    f"{MLPERF_V41} {{submitter}}/results/{{system}}/llama2_70b_lora/{{result}} with NVIDIA's v4.1 implementation "
    "(eos_ngc24.09_nemo's README names config_DGXH100_1x8x4xtp4pp1cp1.sh, stored under Supermicro's "
    "benchmarks/llama2_70b_lora/implementations/nemo/configs/; config_common.sh and conf/tp_overlap/h100tp4mbs1.yaml "
    "as ASUSTeK's copies; eos_ngc24.09_nemo's conf/megatron_gpt_peft_tuning_config.yaml; the Dockerfile builds on "
    "nvcr.io/nvidia/pytorch:24.09-py3 with NeMo and Megatron-Core 24.09-alpha.rc0 (NeMo 2.0.0rc2, megatron_core "
    "0.9.0rc0) and the container's TransformerEngine, TE_REVISION=SKIP): MLPerf Training v4.1 llama2_70b_lora on "
    "one node of 8 H100 SXM 80GB ({system_note}). Step {step:.6g} s = 8 / the mean of the log's last two "
    "tracked_stats throughputs, {thr0} and {thr1} samples/s (custom_callbacks.py: samples over the summed time "
    "from on_train_batch_start to on_train_batch_end). Supermicro's log prints the configuration in effect, the "
    "settings used here: tensor_model_parallel_size 4, sequence_parallel 1, global batch 8 at MBS 1 (dp 2, 4 "
    "microbatches), fp8 and fp8_params true (the base built in FP8: training.fp8_param_gather), "
    "fp8_amax_compute_algo max, history 32, reduce_amax false (ASSUMED the model's TP-group amax reduction, "
    "training.tp_only_amax_red, as the v4.0 row), fp8_dot_product_attention 1 (with config_DGXH100's "
    "NVTE_FP8_DPA_BWD=1: training.fp8_attention, the Hopper cudnn-fp8 curve; the run's cuDNN is 9.4), "
    "activation_func_fp8_input_store 0, disable_parameter_transpose_cache true (training.fp8_weight_cache false), "
    "enable_cuda_graph false, no recompute, mcore_distributed_optim with overlap_grad_sync and overlap_param_sync "
    "(zero 1 over the adapters, both overlapped), ub_tp_comm_overlap 1 with tp_comm_overlap_ag, _rs and _rs_dgrad "
    "true (config_common.sh MC_TP_OVERLAP_RS_DGRAD=True: overlap.tp_comm_rs_dgrad) and "
    "tp_comm_overlap_disable_qkv true (Megatron-Core's TELayerNormColumnParallelLinear passes ub_overlap_ag and "
    "ub_overlap_rs_dgrad false for the QKV linear: overlap.tp_comm_disable_qkv, its input gathered by a blocking "
    "16-bit NCCL call and handed gathered to the adapter, NeMo's self-attention adapter mixin asking for "
    "return_layernorm_output_gathered where ub_overlap_ag is off), and the userbuffers of h100tp4mbs1.yaml: the "
    "four all-gathers as ring exchanges, proj_fprop a pipeline of 32 SMs (fp8_buf 1) and fc2_fprop of 16, both in "
    "4 splits with a margin and atomic_gemm 1 (the yaml's ${{oc.env:NVTE_UB_ATOMIC_GEMM_RS_PROJ,1}} / _FC2,1, which the "
    "stored configs do not set: each GEMM one atomic-counter kernel, tp_comm_cfg atomic_gemm; fc2's fp8_buf 0, 'FP8 "
    "does not improve perf'), qkv_dgrad bulk on 4 SMs, fc1_dgrad "
    "a ring exchange of 1 SM with a margin (TransformerEngine's initialize_ub makes a non-bulk fc1_dgrad the "
    "reduce-scatter buffer that ub_overlap_rs_dgrad uses: the frozen fc1's input-gradient reduce-scatter beside its "
    "GEMM). The frozen QKV linear reduce-scatters its input gradient with a plain NCCL call waited at once "
    "(TransformerEngine turns bulk wgrad off for a frozen weight, pull request 702); LORA_A2A=1 (lora.a2a), "
    "NCCL_MIN_CTAS=32, NCCL_NVLS_ENABLE=0. Found by research helpers; the settings written before simulating."
    + MLPERF_LORA_COMMON.replace(" and built in FP8 (fp8_params / te.fp8_model_init: training.fp8_param_gather, the "
                                 "frozen weights at 1 B)", " and built in FP8 (NeMo 1.x builds the model under "
                                 "fp8_model_init with fp8_params; the adapters are added after, in bf16)"))
MLPERF_LORA_V41_H100 = [  # name suffix, submitter, system, result, system note, [throughputs]
    ("8xh100", "NVIDIA", "eos_ngc24.09_nemo", "result_0.txt",
     "NVIDIA/systems/eos_ngc24.09_nemo.json: DGX H100, NeMo Framework 24.09, CUDA 12.6.1, cuDNN 9.4.0, NCCL 2.22.3",
     [2.169706145748328, 2.170172175983888]),
    ("supermicro-8xh100", "Supermicro", "AS-8125GS-TNHR-1", "result_1.txt",
     "Supermicro/systems/AS-8125GS-TNHR-1.json: two AMD EPYC 9474F (the profile's Intel host ASSUMED: nothing on "
     "this layout crosses it), PyTorch NVIDIA Release 24.09, cuDNN 9.4.0, NCCL 2.22.3; its log's DLPAL line names the "
     "container mlperfv41/lora:20240923 and config AS-8125GS-TNHR_1x8x4xtp4pp1cp1",
     [2.1780451292683227, 2.1778062814930172]),
    ("dell-8xh100", "Dell", "XE9680x8H100-SXM-80GB", "result_0.txt",
     "Dell/systems/XE9680x8H100-SXM-80GB.json: PowerEdge XE9680, NGC PyTorch and NeMo 24.09, cuDNN 9.4.0, NCCL "
     "2.22.3; its MLLOG-only log names no config: the DGXH100 one ASSUMED from its logged gradient_accumulation_steps "
     "4 and 800 training steps", [2.1710151948564413, 2.170806234456606]),
]


def v41_h100_lora_case(suffix, submitter, system, result, system_note, thr):
    """A v4.1 llama2_70b_lora row on one node of 8 H100 (NVIDIA's or a partner's run of NVIDIA's
    NeMo 24.09 code): tp 4 with sequence parallelism and userbuffers (QKV's off, fc1's input
    gradient reduce-scattered beside its GEMM), dp 2, four microbatches, FP8 attention."""
    scenario = megatron_h100_scenario(llama_model("LLAMA2-70B"), 8, megatron_parallel(4, 1, 1, 1), 8192, 1, 8,
                                      "fp8", "cudnn", "delayed", hardware="dgx-h100", fp8_params=True)
    scenario["cluster"].update(nvls=False, nccl_min_ctas=32)
    scenario["training"].update(fused_cross_entropy=False, fp8_attention=True, fp8_weight_cache=False,
                                tp_only_amax_red=True)
    scenario["overlap"] = {
        "dp_grad_reduce": True, "param_gather": True, "tp_comm": True, "tp_comm_rs_dgrad": True,
        "tp_comm_disable_qkv": True, "tp_comm_cfg": {
            "qkv_fprop": {"method": "ring_exchange"}, "fc1_fprop": {"method": "ring_exchange"},
            "proj_dgrad": {"method": "ring_exchange"}, "fc2_dgrad": {"method": "ring_exchange"},
            "proj_fprop": {"method": "pipeline", "num_sm": 32, "num_splits": 4, "set_sm_margin": True, "fp8_buf": True,
                           "atomic_gemm": True},
            "fc2_fprop": {"method": "pipeline", "num_sm": 16, "num_splits": 4, "set_sm_margin": True,
                          "atomic_gemm": True},
            "qkv_dgrad": {"method": "bulk", "num_sm": 4, "set_sm_margin": False},
            "fc1_dgrad": {"method": "ring_exchange", "num_sm": 1, "set_sm_margin": True}}}
    _add_lora(scenario, a2a=True)
    source = MLPERF_LORA_V41_H100_SRC.format(submitter=submitter, system=system, result=result,
                                             system_note=system_note, step=lora_step(thr), thr0=thr[0], thr1=thr[1])
    return lora_throughput_case(f"mlperf-v4.1/llama2-70b-lora-{suffix}", source, thr, scenario)


dump(str(ROOT / "validation" / "mlperf-lora-70b.yaml"),
     "# MLPerf Training llama2_70b_lora: LoRA fine-tuning of Llama 2 70B (rank-16 adapters on QKV and the\n"
     "# output projection, the base frozen in FP8) on one node of 8 GPUs: AMD's v5.1 runs on MI355X, MI325X and\n"
     "# MI300X, NVIDIA's v5.0 runs on a DGX B200 and 8 GB200, its v4.0 run on a DGX H100 (tp 4) and its v5.1\n"
     "# NVFP4 runs on 8 GB300 and 8 GB200 (cp 2), its partners' v5.1 runs on 8 B200 and 8 B300 and the v4.1\n"
     "# runs of NVIDIA's code on 8 H200 (cp 2) and 8 H100 (tp 4), the step time read off each result log.\n"
     "# Generated by\n"
     "# tools/generate_validation_cases.py (source in each case).\n", lora_cases + [
         nvidia_lora_case("mlperf-v5.0/llama2-70b-lora-8xb200", "dgx-b200", MLPERF_LORA_B200_SRC, MLPERF_LORA_B200_STEPS),
         nvidia_lora_case("mlperf-v5.0/llama2-70b-lora-8xgb200", "gb200-nvl72", MLPERF_LORA_GB200_SRC,
                          MLPERF_LORA_GB200_STEPS),
         nvidia_h100_lora_case(),
         *[nvidia_nvfp4_lora_case(*row) for row in MLPERF_LORA_NVFP4],
         *[partner_lora_case(*row) for row in MLPERF_LORA_PARTNERS],
         *[v41_h200_lora_case(*row) for row in MLPERF_LORA_V41_H200],
         *[v41_h100_lora_case(*row) for row in MLPERF_LORA_V41_H100],
     ])

# --- Megatron-LM's own MoE recipes (examples/moe_recipes/) and their measured throughput ------------
# Each recipe file is self-contained (container, environment, every argument); NVIDIA/Megatron-LM pull
# request 5728 ("docs: refresh Qwen3 MoE recipe performance", 2026-07-09, open when read) measured each
# with the matching Megatron-Bridge recipes: "the median model TFLOP/s/GPU over steady-state iterations
# 30-45". Megatron-LM's num_floating_point_operations of that era (megatron/training/training.py) counts
# per token 6 x [layers x (h (q + 2 kv) + q h + q s / 2 x 2 + h x moe_ffn x topk x 3) + h V]: causal
# scores, the routed experts' SwiGLU, the logits; no router, no norms.
MOE_RECIPE_SRC = (
    "NVIDIA/Megatron-LM examples/moe_recipes/{path} (commit {commit}; PyTorch {image}, TransformerEngine "
    "release_v2.14, DeepEP's hybrid-ep branch): {what}. Measured: NVIDIA/Megatron-LM pull request 5728 "
    "(2026-07-09, open when read): {tflops} model TFLOP/s per GPU, 'the median model TFLOP/s/GPU over "
    "steady-state iterations 30-45' with 'the same GPU count, parallelism, batch sizes, sequence length, "
    "precision, and CUDA graph mode as its linked recipe' (previously {previous}). measured tokens_per_s = "
    "TFLOP/s x gpus / F, F = {flops:.4f} GFLOP per token by Megatron-LM's num_floating_point_operations "
    "(causal scores; routed experts x top-k; logits over the padded 151,936 vocabulary). Settings from the "
    "file: {settings} Common to the recipes: flex token dispatcher with the hybridep backend "
    "(moe.dispatcher hybridep: one copy per GPU holding a token's experts, at HybridEP's measured "
    "kernel rate where the profile has one; in FP8 aligned_dispatch, its "
    "pad_multiple), "
    "moe_grouped_gemm, moe_permute_fusion, moe_router_fusion, moe_router_dtype fp32, "
    "moe_router_force_load_balancing (evenly loaded experts: moe.load_imbalance 1.0), aux-loss balancing, "
    "distributed optimizer (zero 1), TransformerEngine's fused cross-entropy (cross_entropy_fusion_impl te), "
    "no dropout, manual_gc every 5 steps, NCCL_NVLS_ENABLE=0 (cluster.nvls false), bf16 with fp32 main "
    "gradients (Megatron's default for bf16), mock data. Not modelled: log_params_norm and "
    "log_num_zeros_in_grad every step, manual_gc.")


def megatron_moe_flops_per_token(layers, h, heads, groups, kv_channels, s, moe_ffn, topk, vocab):
    q, kv = kv_channels * heads, kv_channels * groups
    per_layer = h * (q + 2 * kv) + q * h + q * s / 2 * 2 + h * moe_ffn * topk * 3
    return 6 * (layers * per_layer + h * vocab)


def qwen3_moe_model(name):
    """Qwen3's MoE shapes as the recipes give them (every layer MoE, QK norms, untied embeddings)."""
    layers, h, heads, moe_ffn = {"qwen3-30b-a3b": (48, 2048, 32, 768), "qwen3-235b-a22b": (94, 4096, 64, 1536)}[name]
    return {"name": name, "layers": layers, "hidden": h, "heads": heads, "kv_heads": 4, "head_dim": 128,
            "vocab": 151936, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "bias": False,
            "dropout": False, "tied_embeddings": False, "qk_norm": True, "experts": 128, "top_k": 8,
            "expert_ffn": moe_ffn}


def tflops_row(name, source, tflops, flops, scenario):
    """A megatron-moe-recipes case measured in model TFLOP/s per GPU: tokens/s = TFLOP/s x gpus / F
    (``flops`` per token by Megatron-LM's own count)."""
    gpus, training = scenario["cluster"]["gpus"], scenario["training"]
    return {
        "name": name,
        "family": "megatron-moe-recipes",
        "source": source,
        "published": {"tflops_per_gpu": tflops, "gpus": gpus, "global_batch": training["global_batch"],
                      "seq_len": training["seq_len"]},
        "scenario": scenario,
        "measured": {"tokens_per_s": tflops * 1e12 * gpus / flops},
    }


def moe_recipe_case(key, hardware, gpus, parallel, training, overlap, tflops, previous, path, commit, image, what,
                    settings):
    model = qwen3_moe_model(key.split("/")[0])
    flops = megatron_moe_flops_per_token(model["layers"], model["hidden"], model["heads"], 4, 128, 4096,
                                         model["expert_ffn"], 8, 151936)
    scenario = {
        "framework": "megatron-core",
        "model": model,
        "cluster": {"hardware": hardware, "gpus": gpus, "nvls": False},
        "parallel": {"tp": 1, "pp": 1, "etp": 1, "zero": 1, **parallel},
        "training": {"seq_len": 4096, "precision": "bf16", "recompute": "none", "fp32_grad_accum": True,
                     "fused_cross_entropy": "te", **training},
        "overlap": {"tp_comm": False, **overlap},
        # hybridep's pad_multiple aligns the experts' rows for FP8 (moe.aligned_dispatch: inert in BF16)
        "moe": {"dispatcher": "hybridep", **({"aligned_dispatch": True} if "fp8_recipe" in training else {}),
                "router_dtype": "fp32"},
    }
    source = MOE_RECIPE_SRC.format(path=path, commit=commit, image=image, what=what, tflops=tflops,
                                   previous=previous, flops=flops / 1e9, settings=settings)
    return tflops_row(f"megatron-moe-recipes/{key}", source, tflops, flops, scenario)


MOE_RECIPE_ROWS = [
    moe_recipe_case(
        "qwen3-30b-a3b/h100-bf16-32gpu", "dgx-h100", 32, {"ep": 8},
        {"micro_batch": 1, "global_batch": 256}, {"dp_grad_reduce": True, "param_gather": True}, 240.5, 234.1,
        "qwen3_30b/h100/bf16_32GPU_TP1PP1EP8.yaml", "256f606", "26.03", "Qwen3-30B-A3B on 32 H100 in BF16",
        "TP 1, PP 1, EP 8, ETP 1, MBS 1, GBS 256, 4,096 tokens, overlap_grad_reduce and overlap_param_gather, "
        "no recomputation, no CUDA graphs, CUDA_DEVICE_MAX_CONNECTIONS=1."),
    moe_recipe_case(
        "qwen3-30b-a3b/h100-fp8-blockwise-32gpu", "dgx-h100", 32, {"ep": 8},
        {"micro_batch": 1, "global_batch": 256, "precision": "fp8", "fp8_recipe": "block", "fp8_param_gather": True,
         "cuda_graphs": ["attn", "moe_router", "moe_preprocess"], "optimizer_moments": "bf16"},
        {"dp_grad_reduce": True, "param_gather": True}, 242.9, 232.4,
        "qwen3_30b/h100/fp8_32GPU_TP1PP1EP8.yaml", "59bbfaf", "26.03",
        "Qwen3-30B-A3B on 32 H100 in FP8 (blockwise)",
        "TP 1, PP 1, EP 8, ETP 1, MBS 1, GBS 256, 4,096 tokens, fp8_recipe blockwise (training.fp8_recipe block), "
        "fp8_format e4m3, fp8_param_gather, TransformerEngine CUDA graphs over attn, moe_router and "
        "moe_preprocess (training.cuda_graphs), overlap_grad_reduce and overlap_param_gather, no recomputation, "
        "CUDA_DEVICE_MAX_CONNECTIONS=1, use_precision_aware_optimizer with exp_avg_dtype and exp_avg_sq_dtype bf16 "
        "(training.optimizer_moments bf16) and fp32 main parameters and gradients."),
    moe_recipe_case(
        "qwen3-30b-a3b/gb200-bf16-16gpu", "gb200-nvl72", 16, {"ep": 16},
        {"micro_batch": 4, "global_batch": 512}, {"dp_grad_reduce": False, "param_gather": False}, 504.2, 528.0,
        "qwen3_30b/gb200/bf16_16GPU_TP1PP1EP16.yaml", "8a2ac1f", "26.03", "Qwen3-30B-A3B on 16 GB200 in BF16",
        "TP 1, PP 1, EP 16, ETP 1, MBS 4, GBS 512, 4,096 tokens, neither overlap_grad_reduce nor "
        "overlap_param_gather (Megatron's defaults: off), no recomputation, no CUDA graphs, "
        "CUDA_DEVICE_MAX_CONNECTIONS=1."),
    moe_recipe_case(
        "qwen3-30b-a3b/gb200-mxfp8-partial-cg-16gpu", "gb200-nvl72", 16, {"ep": 16},
        {"micro_batch": 4, "global_batch": 512, "precision": "fp8", "fp8_recipe": "block",
         "cuda_graphs": ["attn", "moe_router", "moe_preprocess"]},
        {"dp_grad_reduce": False, "param_gather": False}, 480.3, 514.0,
        "qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_partial_cg.yaml", "256f606", "26.03",
        "Qwen3-30B-A3B on 16 GB200 in MXFP8 with partial CUDA graphs",
        "TP 1, PP 1, EP 16, ETP 1, MBS 4, GBS 512, 4,096 tokens, fp8_recipe mxfp8 (training.fp8_recipe block) "
        "with fp8_format e4m3 and no fp8_param_gather, TransformerEngine CUDA graphs over attn, moe_router and "
        "moe_preprocess (external_cuda_graph, training.cuda_graphs), neither overlap_grad_reduce nor "
        "overlap_param_gather, no recomputation, cuDNN fused attention (NVTE_FUSED_ATTN=1; the container's "
        "cuDNN is past 9.17: the default curves), CUDA_DEVICE_MAX_CONNECTIONS=1. The same layout in BF16 "
        "(the row above) measured 504.2: this MXFP8 run is slower."),
    moe_recipe_case(
        "qwen3-235b-a22b/h100-bf16-256gpu", "dgx-h100", 256,
        {"tp": 2, "pp": 8, "ep": 32, "sequence_parallel": True, "vpp": 4, "schedule": "interleaved",
         "layers_per_stage": [2, *[3] * 30, 2]},
        {"micro_batch": 1, "global_batch": 2048, "recompute": "selective", "recompute_modules": ["moe_act", "layernorm"],
         "cuda_graphs": ["moe_router", "moe_preprocess"]},
        {"dp_grad_reduce": False, "param_gather": False, "ep_comm": True}, 302.0, 214.3,
        "qwen3_235b/h100/bf16_256GPU_TP2PP8EP32.yaml", "256f606", "26.03", "Qwen3-235B-A22B on 256 H100 in BF16",
        "TP 2 with sequence parallelism, PP 8 with num_layers_per_virtual_pipeline_stage 3 and the embedding and "
        "the loss accounted in the split (32 virtual stages: 2, 30 x 3, 2 layers), EP 32, ETP 1, MBS 1, GBS 2,048, "
        "4,096 tokens, selective recomputation of moe_act and layernorm, overlap_moe_expert_parallel_comm "
        "(overlap.ep_comm) with delay_wgrad_compute (not modelled), TransformerEngine CUDA graphs over "
        "moe_router and moe_preprocess, no overlap_grad_reduce or overlap_param_gather, "
        "CUDA_DEVICE_MAX_CONNECTIONS=32 and NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=24."),
]

def megatron_mla_flops_per_token(layers, dense, h, heads, ffn, moe_ffn, topk, shared, vocab, s, q_lora, kv_lora, qk,
                                 rope, v):
    """Megatron-LM's num_floating_point_operations for an MLA MoE model (training.py, the
    multi_latent_attention branch): per layer the query and key/value LoRA projections with their
    norms, the rope key, the output projection and the causal scores (``/ 2``), the dense layers'
    and the routed (x top-k) and shared experts' SwiGLU, the logits; x 6 (fwd + bwd, 2 FLOPs)."""
    attn = (q_lora * (h + heads * (qk + rope) + 1) + kv_lora * (h + heads * (qk + v) + 1) + h * rope
            + heads * v * h + s * heads * (qk + rope) / 2 + s * heads * v / 2)
    mlp = h * 3 * (ffn * dense + (moe_ffn * topk + shared) * (layers - dense))
    return 6 * (layers * attn + mlp + h * vocab)


DSV3_GB200_SRC = (
    "NVIDIA/Megatron-LM docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md "
    "(commit 1d9edcf), Summary table, last row: DeepSeek-V3, GB200, MXFP8, HybridEP, 970.01 TFLOPS/GPU on 256 "
    "GB200 (TP1/PP8/VPP4/EP32/MBS1/GBS2048), the run of the same folder's deepseek-v3-gb200-reproduce-guide.md "
    "(commit 32ea0af; NGC PyTorch 25.09 with cuDNN 9.14 and TransformerEngine 2.9 plus CPU and quantization "
    "patches, HybridEP at DeepEP 3f601f7, Megatron-LM dev effebd8), whose launch script the scenario is "
    "(simcluster import megatron of it gives these settings): TP 1, PP 8 with --pipeline-model-parallel-layout "
    "'Et|(tt|)*30L' (32 virtual stages, vpp 4: the embedding with one layer, 30 of two layers, the loss alone), "
    "EP 32, ETP 1, MBS 1, GBS 2,048, 4,096 tokens, no MTP module, distributed optimizer with overlap_grad_reduce "
    "and overlap_param_gather, fp8_recipe mxfp8 (training.fp8_recipe block), fp8_param_gather, "
    "use_precision_aware_optimizer with bf16 moments and fp32 main parameters and gradients, selective "
    "recomputation of moe_act and mlp, TransformerEngine CUDA graphs over attn, moe_router and moe_preprocess, "
    "flex dispatcher with the hybridep backend (moe.dispatcher hybridep), moe_router_padding_for_quantization "
    "(moe.aligned_dispatch), moe_router_dtype fp32, group-limited routing (--moe-router-num-groups 8, "
    "--moe-router-group-topk 4: model.router_groups, group_topk), moe_permute_fusion, moe_router_fusion, "
    "moe_router_force_load_balancing, cross_entropy_fusion_impl te, no NaN check, NCCL_NVLS_ENABLE=0 "
    "(cluster.nvls false), 'every 32 GB200 GPUs (8 nodes) in the same NVL domain' (Slurm --segment 8: "
    "cluster.segment_nodes 8). measured tokens_per_s = TFLOP/s x gpus / F, F = {flops:.3f} GFLOP per token by "
    "Megatron-LM's num_floating_point_operations (MLA with causal scores; 3 dense and 58 MoE layers, routed "
    "experts x top-k plus the shared expert; logits over the padded 129,280 vocabulary). ASSUMED: attention on "
    "the profile's cudnn-9.13 curves (cuDNN 9.14, older than the default curves' 9.17). HybridEP on 32 SMs "
    "(--moe-hybridep-num-sms 32: moe.dispatch_sms 32, held beside compute and rated by the profile's 32-SM "
    "rows). Not modelled: bindpcie's NUMA binding, PDL and the fused "
    "quantization kernels, the CUDA graphs' capture of the shared experts, manual_gc every 10 steps; which "
    "iterations the TFLOPS average is not stated.")


def dsv3_gb200_case():
    """The DeepSeek-V3 MXFP8 run on 256 GB200 of Megatron-LM's optimization guide (970.01 TFLOPS/GPU)."""
    model = {"name": "deepseek-v3", "layers": 61, "hidden": 7168, "heads": 128, "experts": 256, "top_k": 8,
             "expert_ffn": 2048, "mlp": "swiglu", "ffn": 18432,
             "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                     "v_head_dim": 128},
             "norm": "rmsnorm", "bias": False, "position": "rope", "tied_embeddings": False, "dropout": False,
             "shared_experts": 1, "dense_layers": 3, "vocab": 129280, "router_groups": 8, "group_topk": 4}
    flops = megatron_mla_flops_per_token(61, 3, 7168, 128, 18432, 2048, 8, 2048, 129280, 4096, 1536, 512, 128, 64,
                                         128)
    scenario = {
        "framework": "megatron-core",
        "model": model,
        "cluster": {"hardware": "gb200-nvl72", "gpus": 256, "nvls": False, "segment_nodes": 8},
        "parallel": {"tp": 1, "pp": 8, "ep": 32, "etp": 1, "zero": 1, "sequence_parallel": False, "vpp": 4,
                     "schedule": "interleaved", "layers_per_stage": [1, *[2] * 30, 0]},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 2048, "precision": "fp8",
                     "fp8_recipe": "block", "fp32_grad_accum": True, "recompute": "selective",
                     "recompute_modules": ["moe_act", "mlp"], "fused_cross_entropy": "te", "fp8_param_gather": True,
                     "cuda_graphs": ["attn", "moe_router", "moe_preprocess"], "optimizer_moments": "bf16",
                     "attention_kernel": "cudnn-9.13"},
        "overlap": {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False},
        "dp": {"nan_check": False},
        "moe": {"dispatcher": "hybridep", "aligned_dispatch": True, "router_dtype": "fp32", "dispatch_sms": 32},
    }
    return tflops_row("megatron-moe-recipes/deepseek-v3/gb200-mxfp8-256gpu", DSV3_GB200_SRC.format(flops=flops / 1e9),
                      970.01, flops, scenario)


MOE_RECIPE_ROWS.append(dsv3_gb200_case())


QWEN3_235B_B200_SRC = (
    "NVIDIA/Megatron-LM examples/moe_recipes/qwen3_235b/b200/mxfp8_128GPU_TP2PP4EP16.yaml (commit 6cb71dbc; "
    "PyTorch 26.03, TransformerEngine release_v2.14): Qwen3-235B-A22B on 128 B200 in MXFP8. Measured: the same "
    "commit's examples/moe_recipes/README.md, 'Median TFLOP/s/GPU' 633.9, added by NVIDIA/Megatron-LM pull request "
    "5289 (2026-06-11, merged) from the W&B run it names (megatron-core-moe-dev/Qwen3_235B_benchmark lyzcoho5, "
    "'VPP12 with num_layers_per_virtual_pipeline_stage: 2, MBS3/GBS3072, DeepEP'); which iterations the median "
    "takes is not stated. measured tokens_per_s = TFLOP/s x gpus / F, F = {flops:.4f} GFLOP per token by "
    "Megatron-LM's num_floating_point_operations (causal scores; routed experts x top-k; logits over the padded "
    "151,936 vocabulary). Settings from the file: TP 2 with sequence parallelism, PP 4 with "
    "num_layers_per_virtual_pipeline_stage 2 and the embedding and the loss accounted in the split (48 virtual "
    "stages: 1, 46 x 2, 1 layers), EP 16, ETP 1, MBS 3, GBS 3,072, 4,096 tokens, no recomputation, no CUDA graphs, "
    "overlap_moe_expert_parallel_comm (overlap.ep_comm) with delay_wgrad_compute (not modelled), overlap_p2p_comm, "
    "flex dispatcher with the deepep backend and moe_deepep_num_sms 20 (moe.dispatcher deepep, at its default 20 "
    "SMs), moe_router_padding_for_quantization (moe.aligned_dispatch), moe_grouped_gemm, moe_permute_fusion, "
    "moe_router_fusion, moe_router_dtype fp32, moe_router_force_load_balancing (moe.load_imbalance 1.0), aux-loss "
    "balancing, fp8_recipe mxfp8 (training.fp8_recipe block) with fp8_format e4m3, fp8_param_gather and "
    "reuse_grad_buf_for_mxfp8_param_ag, distributed optimizer with overlap_grad_reduce and overlap_param_gather, "
    "use_precision_aware_optimizer with bf16 moments and fp32 main parameters and gradients, TransformerEngine's "
    "fused cross-entropy (cross_entropy_fusion_impl te), no dropout, NCCL_NVLS_ENABLE=0 (cluster.nvls false), "
    "CUDA_DEVICE_MAX_CONNECTIONS=32, cuDNN fused attention and norms (NVTE_FUSED_ATTN=1, NVTE_NORM_*_USE_CUDNN=1; "
    "the container's cuDNN is past 9.17: the default curves), mock data. Not modelled: manual_gc every 5 steps, "
    "log_params_norm and log_num_zeros_in_grad every step, the run's evaluation and checkpoint intervals (500 / 100 "
    "steps).")


def qwen3_235b_b200_case():
    """Megatron-LM's Qwen3-235B-A22B MXFP8 recipe on 128 B200 with DeepEP (633.9 TFLOP/s/GPU)."""
    model = qwen3_moe_model("qwen3-235b-a22b")
    flops = megatron_moe_flops_per_token(94, 4096, 64, 4, 128, 4096, 1536, 8, 151936)
    scenario = {
        "framework": "megatron-core",
        "model": model,
        "cluster": {"hardware": "dgx-b200", "gpus": 128, "nvls": False},
        "parallel": {"tp": 2, "pp": 4, "ep": 16, "etp": 1, "zero": 1, "sequence_parallel": True, "vpp": 12,
                     "schedule": "interleaved", "layers_per_stage": [1, *[2] * 46, 1]},
        "training": {"seq_len": 4096, "micro_batch": 3, "global_batch": 3072, "precision": "fp8",
                     "fp8_recipe": "block", "fp32_grad_accum": True, "recompute": "none", "fused_cross_entropy": "te",
                     "fp8_param_gather": True, "optimizer_moments": "bf16",
                     # PyTorch 26.03's cuDNN is past 9.17: B200's default (9.13.1 graph) curves, written
                     # as every B200 row names its release's
                     "attention_kernel": "cudnn"},
        "overlap": {"dp_grad_reduce": True, "param_gather": True, "ep_comm": True, "tp_comm": False},
        "moe": {"dispatcher": "deepep", "aligned_dispatch": True, "router_dtype": "fp32"},
    }
    return tflops_row("megatron-moe-recipes/qwen3-235b-a22b/b200-mxfp8-128gpu",
                      QWEN3_235B_B200_SRC.format(flops=flops / 1e9), 633.9, flops, scenario)


MOE_RECIPE_ROWS.append(qwen3_235b_b200_case())


ZOO_SRC = (
    "yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md (commit 020b8136), {table} table: Qwen3-235B-A22B "
    "with the HybridEP dispatcher on {what}, {tflops} TFLOPS (Megatron-LM's logged TFLOP/s per GPU); the same run in "
    "NVIDIA's report 'Scalable Training of Mixture-of-Experts Models with Megatron Core' (arXiv 2603.07685, Table "
    "11: Megatron-Core v0.16, the dev branch with the latest TransformerEngine, HybridEP from DeepEP's hybrid-ep "
    "branch, force-balanced routing){paper}. measured tokens_per_s = TFLOP/s x gpus / F, F = {flops:.4f} GFLOP per "
    "token by Megatron-LM's num_floating_point_operations (causal scores; routed experts x top-k; logits over the "
    "padded 151,936 vocabulary). Settings: the readme's command ({command}) through the zoo's "
    "sbatch_benchmarking.sh (commit 38ce2ed) and model_configs/benchmarking/Qwen3-235B-A22B.yaml (commit 1ed4179): "
    "{settings} Common to the zoo's runs: 94 layers with the embedding and the loss accounted in the pipeline split "
    "(account_for_embedding/loss_in_pipeline_split), distributed optimizer (zero 1) with overlap_grad_reduce and "
    "overlap_param_gather, flex dispatcher with the hybridep backend (moe.dispatcher hybridep) on 32 SMs "
    "(--moe-hybridep-num-sms 32: moe.dispatch_sms 32, held beside compute and rated by the profile's 32-SM rows), "
    "ETP 1, "
    "moe_router_force_load_balancing (moe.load_imbalance 1.0), aux-loss balancing, moe_grouped_gemm, "
    "moe_permute_fusion, moe_router_fusion, moe_router_dtype fp32, cross_entropy_fusion_impl te, no dropout, "
    "NCCL_NVLS_ENABLE=0 (cluster.nvls false), Slurm --segment {segment} trays (cluster.segment_nodes). ASSUMED: "
    "attention on the profile's default cuDNN curves (the container is not named). Not modelled: manual_gc "
    "every 5 steps; which iterations the figure takes is not stated.")


def zoo_case(key, hardware, gpus, segment, parallel, training, tflops, seq, table, what, command, settings, paper="",
             ep_comm=False):
    """A Qwen3-235B-A22B run of the Megatron-MoE model zoo's best-practice table (HybridEP on an NVL72 rack)."""
    model = qwen3_moe_model("qwen3-235b-a22b")
    flops = megatron_moe_flops_per_token(94, 4096, 64, 4, 128, seq, 1536, 8, 151936)
    fp8 = training.get("precision") == "fp8"
    scenario = {
        "framework": "megatron-core",
        "model": model,
        "cluster": {"hardware": hardware, "gpus": gpus, "nvls": False, "segment_nodes": segment},
        "parallel": {"tp": 1, "etp": 1, "zero": 1, **parallel},
        "training": {"seq_len": seq, "fp32_grad_accum": True, "fused_cross_entropy": "te", **training},
        "overlap": {"dp_grad_reduce": True, "param_gather": True, "tp_comm": False, **({"ep_comm": True} if ep_comm else {})},
        "moe": {"dispatcher": "hybridep", **({"aligned_dispatch": True} if fp8 else {}), "router_dtype": "fp32",
                "dispatch_sms": 32},
    }
    source = ZOO_SRC.format(table=table, what=what, tflops=tflops, paper=paper, flops=flops / 1e9, command=command,
                            settings=settings, segment=segment)
    return tflops_row(f"megatron-moe-recipes/zoo/{key}", source, tflops, flops, scenario)


_ZOO_MXFP8 = {"precision": "fp8", "fp8_recipe": "block", "fp8_param_gather": True, "optimizer_moments": "bf16"}
_ZOO_MXFP8_TEXT = (
    "PR=mxfp8: fp8_recipe mxfp8 (training.fp8_recipe block) with fp8_format e4m3, fp8_param_gather with "
    "reuse_grad_buf_for_mxfp8_param_ag, use_precision_aware_optimizer with bf16 moments (training.optimizer_moments) "
    "and fp32 main parameters and gradients, moe_router_padding_for_quantization (moe.aligned_dispatch);")

MOE_RECIPE_ROWS += [
    zoo_case(
        "qwen3-235b-a22b-gb200-bf16-256gpu", "gb200-nvl72", 256, 2,
        {"pp": 8, "ep": 8, "layers_per_stage": [11, *[12] * 6, 11]},
        {"micro_batch": 1, "global_batch": 8192, "precision": "bf16", "recompute": "none",
         "cuda_graphs": ["attn", "moe_router", "moe_preprocess"]},
        750, 4096, "GB200", "64 GB200 trays (256 GPUs) in BF16",
        "PR=bf16 DISPATCHER=hybridep SEGMENT=2 A2A_OVERLAP=0 TP=1 PP=8 VPP=1 EP=8 NNODES=64 MBS=1 GBS=8192, "
        "--moe-router-force-load-balancing --cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router "
        "moe_preprocess; best_practice/qwen3/run_gb200_235b.sh, 'GB200 config, BF16, 750 TFLOPS'",
        "TP 1, PP 8 without virtual stages (96 accounted layers: 11 + the embedding, 6 x 12, 11 + the loss), EP 8, "
        "MBS 1, GBS 8,192, 4,096 tokens, no recomputation, TransformerEngine CUDA graphs over attn, moe_router and "
        "moe_preprocess (training.cuda_graphs), bf16 with fp32 main gradients, --tp-comm-overlap (inert at TP 1), "
        "CUDA_DEVICE_MAX_CONNECTIONS=1.",
        paper=" (its Table 20 prints TP1 PP4 EP32 VPP12 for this row, unlike the command and the readme's own "
              "table: the command is taken)"),
    zoo_case(
        "qwen3-235b-a22b-gb300-mxfp8-256gpu", "gb300-nvl72", 256, 8,
        {"pp": 4, "ep": 32, "layers_per_stage": [23, 24, 24, 23]},
        {"micro_batch": 2, "global_batch": 8192, "recompute": "none",
         "cuda_graphs": ["attn", "moe_router", "moe_preprocess"], **_ZOO_MXFP8},
        974, 4096, "GB300", "64 GB300 trays (256 GPUs) in MXFP8",
        "PR=mxfp8 MBS=2 DISPATCHER=hybridep SEGMENT=8 A2A_OVERLAP=0 TP=1 PP=4 VPP=1 EP=32 NNODES=64 GBS=8192, "
        "--moe-router-force-load-balancing --cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router "
        "moe_preprocess; best_practice/qwen3/run_gb300_235b.sh",
        "TP 1, PP 4 without virtual stages (23 + the embedding, 24, 24, 23 + the loss), EP 32, MBS 2, GBS 8,192, "
        "4,096 tokens, no recomputation, TransformerEngine CUDA graphs over attn, moe_router and moe_preprocess "
        "(training.cuda_graphs), " + _ZOO_MXFP8_TEXT + " CUDA_DEVICE_MAX_CONNECTIONS=1.",
        paper=" (its Table 20 prints EP64 VPP6 GBS3072 for this row, unlike the command and the readme's own "
              "table: the command is taken)"),
    zoo_case(
        "qwen3-235b-a22b-gb300-mxfp8-128k-128gpu", "gb300-nvl72", 128, 8,
        {"tp": 4, "pp": 4, "cp": 4, "ep": 32, "sequence_parallel": True, "vpp": 12, "schedule": "interleaved",
         "layers_per_stage": [1, *[2] * 46, 1]},
        {"micro_batch": 1, "global_batch": 1024, "recompute": "selective",
         "recompute_modules": ["moe_act", "layernorm"], **_ZOO_MXFP8},
        1150, 131072, "GB300 long-context", "32 GB300 trays (128 GPUs) in MXFP8 at 131,072 tokens",
        "PR=mxfp8 SEQ_LEN=131072 CP=4 DISPATCHER=hybridep SEGMENT=8 A2A_OVERLAP=0 TP=4 PP=4 VPP=12 EP=32 NNODES=32 "
        "MBS=1 GBS=1024, --recompute-granularity selective --recompute-modules moe_act layernorm "
        "--moe-router-force-load-balancing",
        "TP 4 with sequence parallelism, CP 4 (Megatron's default p2p ring), PP 4 with "
        "num_layers_per_virtual_pipeline_stage 2 (48 virtual stages: 1 + the embedding, 46 x 2, 1 + the loss), EP 32, "
        "MBS 1, GBS 1,024, 131,072 tokens, selective recomputation of moe_act and layernorm, no CUDA graphs, "
        + _ZOO_MXFP8_TEXT + " CUDA_DEVICE_MAX_CONNECTIONS=1.",
        paper=" (Table 20: TP4 PP4 CP4 EP32 VPP12 MBS1 GBS1024, as the command)"),
    zoo_case(
        "qwen3-235b-a22b-gb200-mxfp8-256gpu", "gb200-nvl72", 256, 16,
        {"pp": 4, "ep": 64, "vpp": 6, "schedule": "interleaved", "layers_per_stage": [3, *[4] * 22, 3]},
        {"micro_batch": 3, "global_batch": 3072, "recompute": "selective", "recompute_modules": ["moe_act", "layernorm"],
         "cuda_graphs": ["attn", "moe_router", "moe_preprocess"], "offload_modules": ["expert_fc1", "moe_act"],
         **_ZOO_MXFP8},
        919, 4096, "GB200", "64 GB200 trays (256 GPUs) in MXFP8",
        "PR=mxfp8 MBS=3 DISPATCHER=hybridep A2A_OVERLAP=1 TP=1 PP=4 VPP=6 EP=64 SEGMENT=16 NNODES=64 GBS=3072, "
        "--recompute-granularity selective --recompute-modules moe_act layernorm --moe-router-force-load-balancing "
        "--cuda-graph-impl transformer_engine --cuda-graph-scope attn moe_router moe_preprocess "
        "--fine-grained-activation-offloading --offload-modules expert_fc1 moe_act --delay-offload-until-cuda-graph "
        "--use-separate-send-recv-groups; best_practice/qwen3/run_gb200_235b.sh, 'GB200 config, MXFP8, 919 TFLOPS', "
        "'activation offloading required'",
        "TP 1, PP 4 with num_layers_per_virtual_pipeline_stage 4 (24 virtual stages: 3 + the embedding, 22 x 4, 3 + "
        "the loss), EP 64, MBS 3, GBS 3,072, 4,096 tokens, selective recomputation of moe_act and layernorm, "
        "TransformerEngine CUDA graphs over attn, moe_router and moe_preprocess (training.cuda_graphs), Megatron-Core's "
        "fine-grained activation offloading of expert_fc1 and moe_act (training.offload_modules; "
        "delay_offload_until_cuda_graph, which only moves the copies' host issue, not modelled), A2A_OVERLAP=1: "
        "overlap_moe_expert_parallel_comm (overlap.ep_comm) with delay_wgrad_compute (not modelled), "
        "CUDA_DEVICE_MAX_CONNECTIONS=32 and NVTE_FWD/BWD_LAYERNORM_SM_MARGIN=24, use_separate_send_recv_groups (not "
        "modelled), " + _ZOO_MXFP8_TEXT,
        paper=" (Table 20: TP1 PP4 EP64 VPP6 MBS3 GBS3072, as the command)", ep_comm=True),
]

dump(str(ROOT / "validation" / "megatron-moe-recipes.yaml"),
     "# Megatron-LM's own MoE recipes (examples/moe_recipes/: Qwen3-30B-A3B on H100 and GB200, Qwen3-235B-A22B\n"
     "# on H100 and B200), each run's settings read from its recipe file and its throughput from Megatron-LM pull\n"
     "# requests 5728 and 5289, its DeepSeek-V3 GB200 optimization guide's final run, and the Megatron-MoE model\n"
     "# zoo's Qwen3-235B-A22B runs on GB200 and GB300 racks. Generated by tools/generate_validation_cases.py (source in each case).\n",
     MOE_RECIPE_ROWS)
