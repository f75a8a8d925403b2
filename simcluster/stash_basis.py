"""The per-microbatch quantities every count of a layer's kept activations starts from: the
rank's tokens, the byte widths by precision, the divisors of the replicated and gathered terms,
and which recomputation leaves out what. :func:`simcluster.memory.layer_activation_bytes` sums
a layer's stash from them and :mod:`simcluster.module_offload` splits the same terms by the
module that saves them, so both read one definition."""

from __future__ import annotations

from dataclasses import dataclass

from simcluster.activation_widths import act_bytes, attention_widths, gemm_input_bytes
from simcluster.fp8_store import fp8_swiglu_store
from simcluster.layout import Layout
from simcluster.model import ModelSpec
from simcluster.parallelism.saved_gather import gathered_factor
from simcluster.scenario import TrainingSection


@dataclass(frozen=True)
class StashBasis:
    """A layer's stash terms for one microbatch on one rank (Korthikanti et al. 2022, Table 2's
    s, b, h, t, with the byte widths TransformerEngine keeps)."""

    s: float  # tokens of one sequence on this rank (seq_len / cp)
    b: int  # micro-batch size
    sbh: float  # s * b * hidden
    t: int  # tensor-parallel degree
    e: int  # bytes per 16-bit (or fp32) activation element
    g: float  # bytes per element of a linear's kept input (an FP8 / NVFP4 cast where it runs so)
    rep: int  # divisor of the replicated terms (norms, dropout): tp under sequence parallelism
    kg: int  # the column linears' kept input: tp shards where the gathered input is kept
    redo: frozenset[str]  # the recomputed modules (training.recomputed)
    norm_out: float  # bytes per element of a norm's output kept as the next GEMM's input (0: rerun)
    act_in: float  # bytes per element of the SwiGLU input (1 where kept in FP8, fp8_store.py)
    widths: tuple[int, int, int, int]  # Q, K, V and attention-output widths per token

    @classmethod
    def of(cls, model: ModelSpec, layout: Layout, training: TrainingSection) -> StashBasis:
        """The terms for ``model`` under ``layout`` and ``training``."""
        s = training.seq_len / layout.cp
        b = training.micro_batch
        e = act_bytes(training.precision)
        g = gemm_input_bytes(training.precision)
        redo = training.recomputed
        return cls(
            s=s,
            b=b,
            sbh=s * b * model.hidden,
            t=layout.tp,
            e=e,
            g=g,
            rep=layout.tp if layout.sequence_parallel else 1,
            kg=gathered_factor(layout),
            redo=redo,
            norm_out=0.0 if "layernorm" in redo else g,
            act_in=1.0 if fp8_swiglu_store(model, training) else e,
            widths=attention_widths(model),
        )
