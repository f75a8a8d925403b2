"""Megatron-LM's mixture-of-experts and multi-head latent attention flags, as its
``arguments.py`` and Megatron-Core read them, mapped to ``model:`` and ``moe:`` fields."""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import UserError
from simcluster.importers.flags import Flags
from simcluster.importers.result import Imported

#: --moe-token-dispatcher-type (arguments.py choices; allgather is its default) -> moe.dispatcher
DISPATCHERS = {"alltoall": "alltoall", "flex": "deepep", "allgather": None}
#: MLA flags -> model.mla keys, with arguments.py's defaults (_add_mla_args / MLATransformerConfig
#: via core_transformer_config_from_args); --q-lora-rank absent: queries not compressed (0)
MLA_FLAGS = {
    "q-lora-rank": ("q_lora_rank", 0),
    "kv-lora-rank": ("kv_lora_rank", 32),
    "qk-head-dim": ("qk_nope_head_dim", 128),
    "qk-pos-emb-head-dim": ("qk_rope_head_dim", 64),
    "v-head-dim": ("v_head_dim", 128),
}


def mla(flags: Flags, model: dict[str, Any], out: Imported) -> None:
    """``--multi-latent-attention``: ``model.mla`` from the rank and head-dimension flags. Its
    ``--qk-layernorm`` is MLASelfAttention's norms of the compressed query and key-value latents
    (Megatron-Core multi_latent_attention.py q_layernorm / kv_layernorm), which model.mla costs
    already: not model.qk_norm."""
    if not flags.has("multi-latent-attention"):
        return
    dims = {}
    for flag, (key, default) in MLA_FLAGS.items():
        value = flags.integer(flag)
        dims[key] = default if value is None else value
    model["mla"] = dims
    model.pop("head_dim", None)  # --kv-channels: MLA's heads are sized by the flags above
    if model.pop("qk_norm", None):
        out.notes.append(
            "--qk-layernorm with --multi-latent-attention: the latents' norms model.mla costs"
        )


def layer_pattern(flags: Flags, model: dict[str, Any], out: Imported) -> None:
    """``--moe-layer-freq``: an integer N puts experts on layers 0, N, 2N, ... (Megatron-Core
    gpt_layer_specs ``i % moe_layer_freq == 0``); a Python list expression (``'([0]*3+[1]*58)'``)
    gives each layer (1 = MoE). Read as ``model.dense_layers`` (leading dense layers) and
    ``model.moe_every`` (MoE on layers i with (i + 1) % moe_every == 0)."""
    text = flags.text("moe-layer-freq")
    if text is None:
        return
    if re.fullmatch(r"\d+", text):
        every = int(text)
        if every > 1:
            model["moe_every"] = every
            out.notes.append(
                f"--moe-layer-freq {every}: Megatron puts experts on layers 0, {every}, "
                f"{2 * every}, ...; model.moe_every {every} on layers {every - 1}, "
                f"{2 * every - 1}, ... (the same count when {every} divides the layers)"
            )
        return
    layers = model["layers"]
    pattern = freq_pattern(text, "--moe-layer-freq", layers)
    dense = next((i for i, v in enumerate(pattern) if v), layers)
    period = every_nth(pattern, dense)
    if period is None or dense == layers:
        raise UserError(
            "--moe-layer-freq",
            f"'{text}' is not leading dense layers then every N-th layer MoE; give the layout "
            "with --set model.dense_layers=N --set model.moe_every=M",
        )
    if dense:
        model["dense_layers"] = dense
    if period > 1:
        model["moe_every"] = period


def every_nth(pattern: list[int], start: int = 0) -> int | None:
    """The k for which layers from ``start`` on are 1 exactly when (i + 1) % k == 0 (simcluster's
    model.moe_every and global_every, counted from layer 0); None where no k fits."""
    return next(
        (
            k
            for k in range(1, len(pattern) - start + 1)
            if all(v == int((i + 1) % k == 0) for i, v in enumerate(pattern) if i >= start)
        ),
        None,
    )


def freq_pattern(text: str, flag: str, layers: int) -> list[int]:
    """A list expression of 0s and 1s as arguments.py's moe_freq_type evaluates it (for
    ``--moe-layer-freq`` and ``--window-attn-skip-freq``, named by ``flag``): lists of digits,
    ``*`` repeats and ``+`` joins, nothing else; one value for each of the ``layers``."""
    if not re.fullmatch(r"[\[\]()0-9*+, ]+", text):
        raise UserError(flag, f"'{text}' is neither a whole number nor a list such as [0]*3+[1]*58")
    try:
        value = eval(text, {"__builtins__": {}})  # noqa: S307 - brackets, digits, * + only
    except SyntaxError:
        raise UserError(flag, f"'{text}' is not a list expression") from None
    if not isinstance(value, list) or any(v not in (0, 1) for v in value):
        raise UserError(flag, f"'{text}' must give a list of 0s and 1s")
    if len(value) != layers:
        raise UserError(flag, f"gives {len(value)} layers, --num-layers {layers}")
    return [int(v) for v in value]


def _router_dtype(flags: Flags, section: dict[str, Any], out: Imported) -> None:
    """``--moe-router-dtype`` fp32 as ``moe.router_dtype``; fp64 said skipped."""
    router_dtype = flags.text("moe-router-dtype")
    if router_dtype == "fp32":
        section["router_dtype"] = "fp32"
    elif router_dtype is not None:
        out.skip(
            f"--moe-router-dtype {router_dtype}",
            "only fp32 is modelled (moe.router_dtype); simulated with the 16-bit router",
        )


def _shared_experts(flags: Flags, model: dict[str, Any]) -> None:
    """``--moe-shared-expert-intermediate-size`` as a whole number of experts' FFN widths."""
    shared = flags.integer("moe-shared-expert-intermediate-size")
    if shared is None:
        return
    expert_ffn = model.get("expert_ffn") or model["ffn"]
    if shared % expert_ffn:
        raise UserError(
            "--moe-shared-expert-intermediate-size",
            f"{shared} is not a whole number of experts of {expert_ffn}",
        )
    model["shared_experts"] = shared // expert_ffn


def _dispatch_sms(flags: Flags, dispatcher: str | None, section: dict[str, Any]) -> None:
    """The SMs of the flex dispatcher's backend (moe.dispatch_sms): --moe-flex-dispatcher-num-sms
    (later Megatron-Core, any backend), else the running backend's --moe-deepep-num-sms /
    --moe-hybridep-num-sms (earlier releases read only that one; later ones forward either to
    the flex flag), so the other backend's flag stays among the flags left, its reason saying so."""
    if dispatcher not in ("deepep", "hybridep"):
        return
    sms = flags.integer("moe-flex-dispatcher-num-sms")
    own = flags.integer(f"moe-{dispatcher}-num-sms")
    if sms is None:
        sms = own
    if sms is not None:
        section["dispatch_sms"] = sms


def moe(flags: Flags, sc: dict[str, Any], out: Imported) -> None:
    """The MoE flags: dispatcher, capacity, shared experts and the layer pattern."""
    model = sc["model"]
    section: dict[str, Any] = {}
    given = flags.text("moe-token-dispatcher-type")
    dispatcher = flags.choice("moe-token-dispatcher-type", DISPATCHERS)
    if dispatcher is not None:
        section["dispatcher"] = dispatcher
    elif "experts" in model:
        out.skip(
            f"--moe-token-dispatcher-type {given or 'allgather (its default)'}",
            "Megatron's allgather dispatcher is not modelled: simulated as alltoall "
            "(moe.dispatcher), --set moe.dispatcher=deepep for the flex one",
        )
    # rows already aligned for FP8 (moe.aligned_dispatch): the router pads its routing map
    # (--moe-router-padding-for-fp8, renamed _for_quantization in core 0.16) or the flex
    # dispatcher's hybridep backend aligns inside its dispatch (pad_multiple), so
    # TEGroupedMLP's Fp8Padding has nothing to copy
    padded = flags.has("moe-router-padding-for-fp8") | flags.has("moe-router-padding-for-quantization")
    backend = flags.choice("moe-flex-dispatcher-backend", {"deepep": "deepep", "hybridep": "hybridep"})
    if dispatcher == "deepep" and backend == "hybridep":
        # the flex dispatcher's HybridEP backend: DeepEP's routing at HybridEP's kernel rates
        section["dispatcher"] = dispatcher = "hybridep"
    if padded or dispatcher == "hybridep":
        section["aligned_dispatch"] = True
    _dispatch_sms(flags, dispatcher, section)
    # --moe-router-dtype (arguments.py choices fp32, fp64): fp32 runs the gating GEMM's
    # gradients in FP32 (parallelism/expert.py router_gemm_seconds); fp64 is torch.mm in FP64
    _router_dtype(flags, section, out)
    # --moe-shared-expert-overlap: the shared experts on a side stream under the all-to-alls
    # (moe.shared_expert_overlap; Megatron-Core refuses it with a dispatcher other than alltoall)
    if flags.has("moe-shared-expert-overlap"):
        section["shared_expert_overlap"] = True
    capacity = flags.number("moe-expert-capacity-factor")
    if capacity is not None:
        section["capacity_factor"] = capacity
    if sc.get("moe", {}).get("pad_to_capacity"):
        section["pad_to_capacity"] = True
    if flags.number("moe-expert-rank-capacity-factor") is not None and flags.has("moe-paged-stash"):
        # the static receive budget per expert-parallel rank (HybridEP's num_permuted_tokens),
        # with paged stash holding the valid rows: no token counts read back to the host
        section["host_sync"] = False
    _shared_experts(flags, model)
    layer_pattern(flags, model, out)
    _kernel_flags(flags, model, out)
    sc["moe"] = section


#: Megatron-Core's MoE kernel switches, which the model times one way whichever is set: how it
#: times them, and what Megatron runs without the flag
KERNEL_FLAGS = {
    "moe-grouped-gemm": (
        "the local experts' GEMMs as one grouped GEMM",
        "SequentialMLP, each expert's linears in a Python loop",
    ),
    "moe-permute-fusion": (
        "the permute and unpermute as one memory pass each",
        "the permutes as unfused PyTorch ops",
    ),
    "moe-router-fusion": (
        "the router's softmax and top-k as one memory pass",
        "the router's score function and top-k as separate kernels",
    ),
}


def _kernel_flags(flags: Flags, model: dict[str, Any], out: Imported) -> None:
    """Notes for :data:`KERNEL_FLAGS` on a MoE model, given or not, and for forced balancing
    (``moe.load_imbalance`` 1.0, the default, is what it makes)."""
    if "experts" not in model:
        return
    for flag, (timed, without) in KERNEL_FLAGS.items():
        if flags.has(flag):
            out.notes.append(f"--{flag}: simulated so ({timed})")
        else:
            out.notes.append(f"no --{flag}: Megatron runs {without}; simulated with {timed} all the same")
    if flags.has("moe-router-force-load-balancing"):
        out.notes.append("--moe-router-force-load-balancing: evenly loaded experts, moe.load_imbalance 1.0 (its default)")
