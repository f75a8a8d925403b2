"""Which head dimensions each named fused-attention kernel trains, and what runs when the
kernel in use cannot.

The published curves of :mod:`simcluster.attention_kernels` stop at head dimension 128 and the
lookup clamps beyond, so without this check a model with 512-wide heads would be costed as a
FlashAttention kernel that refuses to launch. The limits, for a training step (forward and
backward) on 16-bit Q/K/V:

- ``fa2``, the flash-attn 2 package: head dims up to 256 (csrc/flash_attn/flash_api.cpp:
  "FlashAttention forward only supports head dimension at most 256", the backward likewise),
  one for query, key and value alike (``CHECK_SHAPE(v, ..., head_size_og)``; TransformerEngine
  drops it for MLA's unequal ones, "Disabling FlashAttention as it does not support MLA.");
  TransformerEngine's ``get_attention_backend`` also drops it above 192 except on sm80, sm90,
  sm100 and sm120 ("head_dim_qk <= 256 (>192 requires sm80/90/100+)"), the GPUs whose shared
  memory holds the 224/256 backward tiles;
- ``fa3``, FlashAttention-3 (hopper/flash_api.cpp): kernels for head dims 64, 96, 128, 192 and
  256, "FlashAttention forward only supports head dimension at most 256"; a value head dim
  unlike the query-key one only for query-key in (128, 192] with value in (96, 128] (MLA's
  192/128), or query-key up to 64 with value up to 512, and only on Hopper;
- ``cudnn``, cuDNN's fused attention as TransformerEngine's FusedAttention dispatches it
  (transformer_engine/common/fused_attn/fused_attn.cpp, ``nvte_get_fused_attn_backend``,
  training): both head dims multiples of 8 and at most 128 on any GPU from sm80; up to 256 on
  Hopper (sm90, cuDNN >= 9.5), except unequal query/key and value dims above 128 other than
  192/128 (a cuDNN >= 9.11 bug TE fences off); on Blackwell (sm100 to sm10x) beyond 128 only
  192/128 (MLA, cuDNN >= 9.11) and 256/256 (cuDNN >= 9.23).

A kernel the scenario names itself (``training.attention_kernel``) is a demand: a shape it cannot
run is refused with the kernels that can. Otherwise the framework's attention decides
(:data:`DISPATCH`):

- TransformerEngine's ``DotProductAttention`` (the Megatron family, AutoModel, and a scenario
  naming no framework) falls back as its ``get_attention_backend`` does: to its other backend
  (cuDNN's FusedAttention or flash-attn 2's FlashAttention) where the profile has its curves and
  the shape fits, else to ``UnfusedDotProductAttention`` (batched GEMMs over the full scores,
  simcluster's unfused path), said in a note. Context parallelism's ring and all-gather run only
  inside the fused backends (TE's unfused attention takes no cp group), so that fallback is
  refused there;
- PyTorch's ``scaled_dot_product_attention`` (torchtitan, plain PyTorch loops) skips its flash
  backend above head dim 256 (aten sdp_utils, ``check_head_dim_size_flash``) for the
  memory-efficient or math one; no curves exist for the memory-efficient kernel, so it is costed
  as the math backend's unfused GEMMs, an upper bound, said in the note;
- a framework that calls the flash-attn package itself (nanotron's CoreAttention, Megatron-
  DeepSpeed's FlashSelfAttention) has no other path and stops with flash-attn's error: refused. A calibrated
profile's own kernel (``measured``) timed whatever the user's GPUs ran and a kernel name this
table does not know is not checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simcluster.attention_kernels import MEASURED
from simcluster.errors import UserError
from simcluster.kernel_versions import family
from simcluster.model import ModelSpec

#: compute capabilities whose flash-attn 2 backward TransformerEngine runs above head dim 192
#: (get_attention_backend: device_compute_capability in ((8, 0), (9, 0), (10, 0), (12, 0)))
_FA2_WIDE = (8.0, 9.0, 10.0, 12.0)


@dataclass(frozen=True)
class KernelHeadDims:
    """One kernel's head-dimension limits in training and where they are read."""

    #: its limits in words, for messages
    why: str
    #: (query/key head dim, value head dim, compute capability or None) -> trains it
    runs: Callable[[int, int, float | None], bool]


def _fa2(d_qk: int, d_v: int, cc: float | None) -> bool:
    # one head size for q, k and v (flash_api.cpp: CHECK_SHAPE(v, ..., head_size_og)); TE drops
    # it for MLA ("Disabling FlashAttention as it does not support MLA.")
    if d_qk != d_v:
        return False
    return d_qk <= 256 and (d_qk <= 192 or cc is None or cc in _FA2_WIDE)


def _fa3(d_qk: int, d_v: int, cc: float | None) -> bool:
    if d_qk != d_v:
        # hopper/flash_api.cpp: "If V headdim is different from Q/K dim, we only support Q/K
        # headdim in (128, 192] and V headdim in (96, 128], or (Q/K <= 64 and V <= 512)" and
        # "Only Hopper supports different V headdim"
        mla = 128 < d_qk <= 192 and 96 < d_v <= 128
        return (mla or (d_qk <= 64 and d_v <= 512)) and (cc is None or 9.0 <= cc < 10.0)
    return d_qk <= 256


def _cudnn(d_qk: int, d_v: int, cc: float | None) -> bool:
    if d_qk % 8 or d_v % 8:
        return False
    if d_qk <= 128 and d_v <= 128:
        return True
    if max(d_qk, d_v) > 256:
        return False
    if cc is None:  # a GPU whose generation the profile does not say: the widest any arch runs
        return True
    if cc == 9.0:
        return d_qk == d_v or (d_qk, d_v) == (192, 128)
    if 10.0 <= cc < 11.0:
        return (d_qk, d_v) in ((192, 128), (256, 256))
    return False


#: kernel name (a profile's ``efficiency.attention_kernels`` key) -> its head-dimension limits
KERNELS: dict[str, KernelHeadDims] = {
    "fa2": KernelHeadDims(
        "flash-attn 2 runs equal query-key and value head dims up to 256, above 192 only on sm80/90/100/120", _fa2
    ),
    "fa3": KernelHeadDims(
        "FlashAttention-3 runs head dims up to 256, unequal query-key and value ones only as 129-192/97-128 "
        "or up to 64/512, on Hopper",
        _fa3,
    ),
    "cudnn": KernelHeadDims(
        "cuDNN's fused attention trains head dims up to 128 (multiples of 8), up to 256 on Hopper, "
        "and only 192/128 or 256/256 beyond 128 on Blackwell",
        _cudnn,
    ),
}

#: how each framework's attention picks a kernel (see above); any other: TransformerEngine's
DISPATCH: dict[str, str] = {
    "nanotron": "flash-attn", "deepspeed": "flash-attn",
    "torchtitan": "sdpa", "pytorch-ddp": "sdpa", "pytorch-fsdp": "sdpa",
}  # fmt: skip

#: TransformerEngine's two fused backends in the order its dispatch prefers them: FusedAttention
#: (cuDNN) on Hopper and later ("Disabling FlashAttention to give FusedAttention preference on
#: Hopper+"), flash-attn 2's FlashAttention before it
_TE_ORDER_HOPPER = ("cudnn", "fa2")
_TE_ORDER_OLDER = ("fa2", "cudnn")


def _shape(d_qk: int, d_v: int) -> str:
    return f"head dim {d_qk}" if d_qk == d_v else f"head dims {d_qk}/{d_v} (query-key/value)"


def runs(kernel: str, d_qk: int, d_v: int, cc: float | None) -> bool:
    """Whether ``kernel`` trains this shape (a kernel this table does not know: yes)."""
    limits = KERNELS.get(family(kernel))
    return limits is None or limits.runs(d_qk, d_v, cc)


@dataclass(frozen=True)
class KernelChoice:
    """What runs the attention core: a fused kernel (``kernel``), or the unfused path
    (``fused`` false); ``note`` says why it is not the kernel the profile or framework named."""

    kernel: str | None
    fused: bool
    note: str | None = None


def choose(
    model: ModelSpec,
    kernel: str | None,
    pinned: bool,
    available: list[str],
    cc: float | None,
    cp_ring: bool,
    framework: str | None = None,
) -> KernelChoice:
    """The kernel that trains ``model``'s heads, starting from ``kernel`` (the one in use).

    ``pinned``: the scenario named ``kernel`` itself; ``available``: the kernels the profile has
    curves for; ``cc``: the GPU's compute capability; ``cp_ring``: context parallelism runs
    inside the fused backend (cp > 1 with a ring or all-gather); ``framework``: whose attention
    falls back (:data:`DISPATCH`)."""
    d_qk, d_v = model.qk_v_head_dims
    if kernel is None or kernel == MEASURED or runs(kernel, d_qk, d_v, cc):
        return KernelChoice(kernel, True)
    shape = _shape(d_qk, d_v)
    why = KERNELS[family(kernel)].why
    able = [k for k in sorted(available) if family(k) in KERNELS and runs(k, d_qk, d_v, cc)]
    if pinned:
        pick = f"pick one that can ({', '.join(able)}), or " if able else ""
        raise UserError(
            "training.attention_kernel",
            f"'{kernel}' cannot train {shape} on this GPU: {why}; {pick}drop the key to fall back as "
            "TransformerEngine does, or set training.flash_attention: false (unfused attention)",
        )
    dispatch = DISPATCH.get(framework or "", "te")
    if dispatch == "flash-attn":
        if runs("fa2", d_qk, d_v, cc):  # its own kernel runs the shape: costed on the profile's curves
            return KernelChoice(kernel, True)
        raise UserError(
            "framework",
            f"{framework} calls the flash-attn package itself, which cannot train {shape} "
            f"({KERNELS['fa2'].why}) and has "
            "no other attention path; use a model with narrower heads, or a framework on TransformerEngine "
            "(megatron-core) or PyTorch SDPA (torchtitan)",
        )
    if dispatch == "te":
        order = _TE_ORDER_HOPPER if cc is not None and cc >= 9.0 else _TE_ORDER_OLDER
        other = next((k for k in order if k != kernel and k in able), None)
        if other is not None:
            return KernelChoice(
                other, True, f"attention: '{kernel}' cannot train {shape} ({why}); costed as '{other}', "
                "TransformerEngine's other fused backend, as its get_attention_backend falls back",
            )  # fmt: skip
    if cp_ring:
        raise UserError(
            "parallel.cp_comm",
            f"no fused attention kernel trains {shape} ('{kernel}': {why}), and context parallelism's "
            "ring and all-gather are modelled only around a fused kernel (TransformerEngine's unfused "
            "attention takes no cp group); use parallel.cp_comm: a2a, or cp=1",
        )
    if dispatch == "sdpa":
        return KernelChoice(
            None, False, f"attention: PyTorch SDPA's flash backend cannot train {shape} ({why}); it falls "
            "back to its memory-efficient or math backend, costed as the math backend's unfused GEMMs over "
            "the full scores (no curves for the memory-efficient kernel: an upper bound)",
        )  # fmt: skip
    return KernelChoice(
        None, False, f"attention: no fused kernel trains {shape} ('{kernel}': {why}); costed as "
        "TransformerEngine's UnfusedDotProductAttention (batched GEMMs over the full scores), where its "
        "get_attention_backend falls back",
    )  # fmt: skip

