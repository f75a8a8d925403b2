"""The memory-bound work of a transformer layer: norms, rotary embedding, activation, residuals.

How a framework runs it is a *style* (``training.elementwise``, registry :data:`STYLES`):

- ``fused`` (Megatron-Core with TransformerEngine, a ``torch.compile``d model): each block's
  norm (and a query/key norm, ``model.qk_norm``, an output norm, ``model.post_norms``), rotary
  embedding, activation and residual add read their input and write their output once,
  16-bit; learned or ALiBi positions have no rotary pass. With the flash-attn 2 kernel (``training.attention_kernel: fa2``)
  TransformerEngine copies Q, K and V to batch-first first; cuDNN's fused attention reads
  Megatron's sequence-first layout in place.
- ``compiled-blocks`` (``torch.compile`` on each transformer block only): the blocks cost
  what ``fused`` costs; the loss is left to PyTorch eager, whose ``cross_entropy(pred.float())``
  keeps the out-of-place fp32 tensors ``eager`` counts for it (``memory.loss_transient_bytes``).
  torchtitan ran so from pytorch/torchtitan#755 (2024-12-19, "TODO: compiling loss function
  causes CUDA errors, turning off for now"; pytorch/pytorch#143774) to #1033 (2025-04-01),
  which covers its ``docs/performance.md`` H100 runs (torchtitan 9dec370, 2024-12-26), and
  does with ``[compile] components = ["model"]``; with the loss compiled too it is ``fused``.
- ``eager`` (PyTorch eager mode: torchtitan without ``torch.compile``, Hugging Face
  Transformers models): every tensor operation of the model code is its own kernel, and the
  Llama-style RMSNorm and rotary embedding upcast to fp32 first. Per element:

  - RMSNorm as the Llama reference code writes it (``x.float()``, ``pow(2)``, ``mean``,
    ``x * rsqrt``, ``type_as``, ``* weight``): 2+4, 4+4, 4, 4+4, 4+2, 2+2 = 36 bytes in bf16;
    eight kernels, counting the two (``+ eps``, ``rsqrt``) on per-token scalars. ``torch.nn.functional.layer_norm`` is one
    native kernel even in eager mode, so LayerNorm costs what it costs fused.
  - rotary embedding on Q and K through complex numbers (``xq.float()``,
    ``view_as_complex(...) * freqs_cis``, ``type_as``): 2+4, 4+4, 4+2 = 20 bytes per element.
  - grouped-query attention's ``repeat_kv`` materialises K and V at the query width.
  - the attention output's ``transpose(1, 2).contiguous()`` copies it.
  - SwiGLU's ``silu(w1(x)) * w3(x)``: silu 2+2 per gate element, the product 2+2+2.
  - dropout (when the model has it): the output and a one-byte mask.
- ``nanotron`` (huggingface/nanotron ``models/llama.py``, training path): the norms are one
  Triton kernel (``TritonRMSNorm``) and the rotary embedding is flash-attn's Triton kernel, as
  fused; but the attention inputs are re-laid out in PyTorch ops first (multi-head: the QKV
  output ``view(...).permute(2, 1, 0, 3, 4).contiguous()``, one copy of Q, K and V; then K and
  V are stacked with ``torch.cat`` and ``permute(1, 2, 0, 3, 4).contiguous()`` for
  ``flash_rotary_embedding(q, kv=...)``, two more copies of K and V; the rotary kernel writes a
  new Q and rotates K in place), the attention output is transposed to sequence-first and, with
  more than one sequence per microbatch, copied by the output projection's matmul, and
  ``GLUActivation`` is ``act(gate) * up`` in two kernels.

The backward moves twice the forward's bytes in every style (the gradient of each op reads the
incoming gradient and what it saved, and writes one gradient): an assumption of this model.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.layout import Layout
from simcluster.model import ModelSpec

FP32 = 4.0


@dataclass(frozen=True)
class Traffic:
    """Bytes one token moves through HBM in a group of memory-bound kernels (forward)."""

    bytes_per_token: float
    kernels: int = 1

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.bytes_per_token + other.bytes_per_token, self.kernels + other.kernels)


@dataclass(frozen=True)
class ElementwiseStyle:
    """Which memory-bound operations a framework leaves unfused (see the module docstring)."""

    name: str
    norm_fp32_ops: bool = False  # Llama-reference RMSNorm as separate fp32 ops
    rotary_fp32_ops: bool = False  # rotary through complex fp32 ops
    repeat_kv: bool = False  # GQA K/V materialised at the query width
    attention_output_copy: bool = False  # core attention output made contiguous
    gate_unfused: bool = False  # SwiGLU as act(gate), then the product
    dropout_unfused: bool = False
    qkv_relayout: bool = False  # nanotron's permute/cat copies around flash rotary
    kernel_per_op: bool = False  # every operation its own launch
    # the unfused loss makes a new fp32 tensor of the logits (logits - max, or log_softmax)
    # while its fp32 input is still alive; Megatron subtracts in place (memory.py)
    loss_out_of_place: bool = False
    # PyTorch's cross_entropy backward writes two fp32 gradients of the logits (nll_loss's,
    # then log_softmax's) while the saved log_softmax output is alive; nanotron's and
    # Megatron's losses compute theirs in place in the saved softmax (memory.py)
    loss_backward_out_of_place: bool = False
    # TransformerEngine's FlashAttention backend takes Q, K, V batch-first and contiguous: from
    # Megatron's sequence-first layout it copies them (``x.transpose(0, 1).contiguous()``, or
    # the fused ``_PrepareQKVForFA``); cuDNN's fused attention reads the strided layout as is
    fa2_qkv_copy: bool = False


STYLES: dict[str, ElementwiseStyle] = {
    "fused": ElementwiseStyle("fused", fa2_qkv_copy=True),
    "compiled-blocks": ElementwiseStyle(
        "compiled-blocks", fa2_qkv_copy=True, loss_out_of_place=True, loss_backward_out_of_place=True
    ),
    "eager": ElementwiseStyle(
        "eager",
        norm_fp32_ops=True,
        rotary_fp32_ops=True,
        repeat_kv=True,
        attention_output_copy=True,
        gate_unfused=True,
        dropout_unfused=True,
        kernel_per_op=True,
        loss_out_of_place=True,
        loss_backward_out_of_place=True,
    ),
    "nanotron": ElementwiseStyle(
        "nanotron", gate_unfused=True, qkv_relayout=True, kernel_per_op=True, loss_out_of_place=True
    ),
}


@dataclass(frozen=True)
class Elementwise:
    """Forward traffic of a layer's memory-bound parts on one GPU (widths after TP/SP)."""

    model: ModelSpec
    layout: Layout
    elt: float  # bytes of an activation element
    style: ElementwiseStyle
    micro_batch: int = 1
    attention_kernel: str | None = None  # the scenario's training.attention_kernel
    fp8_attention: bool = False  # training.fp8_attention
    fp8_swiglu_store: bool = False  # fp8_store.fp8_swiglu_store: the SwiGLU input kept in FP8

    @property
    def eager(self) -> bool:
        """Whether each operation is its own kernel (pays its own launch gap)."""
        return self.style.kernel_per_op

    @property
    def _sp(self) -> int:
        return self.layout.tp if self.layout.sequence_parallel else 1

    def _cast(self) -> float:
        """One upcast (or downcast) pass per element; free when activations are fp32 already."""
        return 0.0 if self.elt >= FP32 else self.elt + FP32

    def norm(self) -> Traffic:
        """One pre-block norm over the hidden state (SP-sharded)."""
        return self._rmsnorm(self.model.hidden / self._sp, fp32_ops=self.model.norm != "layernorm")

    def mlp_norm(self) -> Traffic:
        """The pre-MLP norm: none in a parallel block whose one norm feeds both branches
        (``model.parallel_norms: 1``; GPT-J's ``ln_1``, Falcon-7B's ``input_layernorm``)."""
        return Traffic(0.0, kernels=0) if self.model.shared_norm else self.norm()

    def branch_gradient_sum(self) -> Traffic:
        """What a fused parallel block's backward adds over the residual terms: it sums the
        two branches' input gradients, each the whole sequence wide, before its one
        reduce-scatter (autograd sums the gradients of a tensor used twice: the gathered norm
        output, read by QKV and by fc1), where the residual terms count that sum on the token
        shard. Two reads and a write of h per token, less the shard's h/t counted already;
        nothing without sequence parallelism."""
        return Traffic(3 * self.elt * self.model.hidden * (1 - 1 / self._sp))

    def branch_bias_add(self) -> Traffic:
        """GPT-NeoX's parallel block adds the attention's output bias by itself, a read and a
        write of the hidden state (``bias_dropout_fn(attention_output, bias=..., residual=None)``
        in megatron/model/transformer.py, gpt_j_residual), then the MLP's output and bias onto
        it and the residual onto their sum: one pass more than the sequential block's two
        bias-dropout-adds. Nothing for a model without that bias (GPT-NeoX's attention_bias false)."""
        if not self.model.has_bias("attn_out"):
            return Traffic(0.0, kernels=0)
        return Traffic(2 * self.elt * self.model.hidden / self._sp)

    def _rmsnorm(self, width: float, fp32_ops: bool = True) -> Traffic:
        """A norm over ``width`` elements per token: one fused read and write, or in the eager
        style the Llama reference RMSNorm's fp32 ops (``fp32_ops`` false: a native kernel)."""
        if not self.style.norm_fp32_ops or not fp32_ops:
            return Traffic(2 * self.elt * width)
        casts = 2 * self._cast()
        per_elem = casts + 2 * FP32 + FP32 + 2 * FP32 + 2 * self.elt  # pow, mean, *rsqrt, *weight
        return Traffic(per_elem * width, kernels=8 if casts else 6)

    def residual(self) -> Traffic:
        """x + block(x): two reads and a write of the hidden state; dropout first if any, and
        the block's output norm first with ``model.post_norms`` (Gemma 2 and 3)."""
        width = self.model.hidden / self._sp
        out = Traffic(3 * self.elt * width)
        if self.style.dropout_unfused and self.model.dropout:
            out = out + Traffic((2 * self.elt + 1) * width)
        if self.model.post_norms:
            out = self.norm() + out
        return out

    def attention_inputs(self, index: int = 0) -> Traffic:
        """Between layer ``index``'s QKV projection and its core attention: the query/key
        norms, the rotary embedding (and GQA copies); a NoPE layer (``model.nope_global``) has
        neither norm nor rotation."""
        nope = self.model.nope_global and self.model.is_global_layer(index)
        return (Traffic(0.0, kernels=0) if nope else self._qk_norm()) + self._rotary(not nope)

    def _qk_norm(self) -> Traffic:
        """RMSNorm over the queries and over the keys (``model.qk_norm``): a norm's traffic on
        each, two kernels (Megatron's q_layernorm / k_layernorm modules, the two calls of the
        Hugging Face and OLMo code)."""
        m, t = self.model, self.layout.tp
        if not m.has_qk_norm:  # weights or not (Llama 4's L2 norm), the same pass
            return Traffic(0.0, kernels=0)
        return self._rmsnorm(m.heads * m.d_head / t) + self._rmsnorm(m.kv_heads * m.d_head / t)

    def _rotary(self, rotary: bool = True) -> Traffic:
        m, t, st = self.model, self.layout.tp, self.style
        rotary = rotary and m.position == "rope"
        q = m.heads * m.d_head / t
        kv = m.kv_heads * m.d_head / t
        if st.qkv_relayout:
            # Q, K, V copied heads-major; K and V stacked, then permuted (two copies); the
            # rotary kernel reads Q and writes a new one, and rotates K in place
            copies = Traffic(2 * self.elt * (q + 2 * kv) + 2 * (2 * self.elt * 2 * kv), kernels=3)
            if not rotary:
                return copies
            return copies + Traffic(2 * self.elt * (q + kv), kernels=2)
        if not st.rotary_fp32_ops:
            # one fused rotary kernel over Q and K (and V carried along, as TE's fused RoPE
            # reads the QKV output); learned or ALiBi positions leave nothing to do here
            out = Traffic(2 * self.elt * (q + 2 * kv)) if rotary else Traffic(0.0, kernels=0)
            if st.fa2_qkv_copy and self.attention_kernel == "fa2":
                out = out + Traffic(2 * self.elt * (q + 2 * kv))
            return out
        out = Traffic(0.0, kernels=0)
        if rotary:
            per_elem = 2 * self._cast() + 2 * FP32
            out = out + Traffic(per_elem * (q + kv), kernels=6 if self._cast() else 2)
        if st.repeat_kv and m.kv_heads < m.heads:
            out = out + Traffic(2 * self.elt * (kv + q), kernels=2)
        return out

    def attention_output(self) -> Traffic:
        """The core attention's output made contiguous for the output projection (eager; in
        nanotron's sequence-first layout only when a microbatch holds several sequences)."""
        m, st = self.model, self.style
        if st.attention_output_copy or (st.qkv_relayout and self.micro_batch > 1):
            return Traffic(2 * self.elt * m.heads * m.d_head / self.layout.tp)
        return Traffic(0.0, kernels=0)

    def fp8_attention_casts(self, widths: tuple[int, int, int, int]) -> Traffic:
        """FP8 attention's casts around its kernel, each pass once (not doubled backward):
        forward Q, K, V to FP8 (one kernel on the packed QKV) and the FP8 output back to 16
        bits for the output projection; backward dO to FP8 and dQ, dK, dV back (TE's
        FusedAttnFunc with fp8_mha off), over ``widths`` (``memory.attention_widths``: Q, K,
        V, output). Nothing without ``training.fp8_attention``."""
        if not self.fp8_attention:
            return Traffic(0.0, kernels=0)
        return Traffic((self.elt + 1.0) * sum(widths) / self.layout.tp, kernels=2)

    def fp8_store_casts(self, width: float) -> Traffic:
        """The SwiGLU input's FP8 copy (``training.activation_fp8_store``): cast down after
        the forward's fc1, back up before the backward's SwiGLU gradient, each pass once."""
        if not self.fp8_swiglu_store:
            return Traffic(0.0, kernels=0)
        return Traffic((self.elt + 1.0) * self.model.up_width(width))

    def activation(self, width: float) -> Traffic:
        """The MLP activation on a (per-GPU) intermediate width; SwiGLU multiplies the gate in."""
        gated = self.model.mlp == "swiglu"
        if not self.eager or (gated and not self.style.gate_unfused):
            return Traffic(self.elt * (self.model.up_width(width) + width))
        if gated:
            return Traffic(2 * self.elt * width + 3 * self.elt * width, kernels=2)
        return Traffic(2 * self.elt * width)
