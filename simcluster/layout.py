"""The parallel layout: degrees, validation against model and cluster, and the rank grid.

Ranks are laid out on one explicit grid (as picotron does with ``arange(world).view(...)``):
``parallel.order`` lists the dimensions innermost first (default ``tp,cp,dp,pp``, Megatron's
``tp-cp-ep-dp-pp`` without ep), so a TP group is a run of consecutive ranks and stays inside a
node. Expert groups follow Megatron-Core's expert rank order (``tp-ep-dp-pp`` with the expert
TP innermost): a stage's ranks are cut into ETP groups of ``etp`` consecutive ranks, and an EP
group takes one rank from each of ``ep`` consecutive ETP groups, so with etp = 1 and tp innermost
an EP group of 8 fills a node; ``parallel.ep_placement: spread`` strides them across nodes
instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simcluster.divisors import divisors, one_of
from simcluster.errors import UserError
from simcluster.limits import MAX_MICROBATCHES
from simcluster.model import ModelSpec
from simcluster.parallelism.context import check_algorithm
from simcluster.parallelism.saved_gather import keeps_gather
from simcluster.scenario import ParallelSection, Scenario
from simcluster.schedules import get_schedule
from simcluster.schedules.base import VShapeSchedule
from simcluster.schedules.partition import (
    check_interleaved_ranks,
    check_megatron_pipeline_split,
    check_megatron_virtual_split,
)
from simcluster.size_bounds import check_sizes

DIMS = ("tp", "cp", "dp", "pp")

# dp.grad_collective each ZeRO stage admits: ZeRO-0 keeps no shard to scatter to; ZeRO-3 keeps
# only a gradient shard, so the full gradient never exists to be all-reduced. ZeRO-2 keeps only a
# shard too, but DeepSpeed's default (use_multi_rank_bucket_allreduce) all-reduces each bucket
# that spans several ranks' partitions and then copies its own slices. The first entry is what
# "auto" picks (PyTorch DDP / Megatron: all-reduce; distributed optimizer: reduce-scatter).
GRAD_COLLECTIVES: dict[int, tuple[str, ...]] = {
    0: ("all_reduce",),
    1: ("reduce_scatter", "all_reduce"),
    2: ("reduce_scatter", "all_reduce"),
    3: ("reduce_scatter",),
}


@dataclass(frozen=True)
class Layout:
    """Validated parallel degrees and the derived per-step quantities."""

    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    vpp: int
    zero: int
    sequence_parallel: bool
    schedule: str
    order: tuple[str, ...]
    micro_batch: int
    global_batch: int
    seq_len: int
    gpus_per_node: int
    ep_placement: str = "packed"
    etp: int = 1  # expert tensor parallelism: ranks that split each routed expert's matrices
    grad_collective: str = "all_reduce"  # dense/expert gradient reduction (dp.grad_collective)
    fsdp2_copies: bool = False  # ZeRO-3 with FSDP2's per-parameter copies (zero3.buffers)
    # ZeRO-3 as PyTorch FSDP keeps its state, FSDP1 or FSDP2 (Scenario.torch_fsdp): fp32 shards
    # stepped in place, no master copy
    torch_fsdp: bool = False
    # FSDP1's root unit (zero3.buffers: flat): embedding and LM head one FlatParameter, gathered
    # once per forward and kept for the backward
    fsdp1_root: bool = False
    shard_accumulate: bool = False  # ZeRO-2/3: only the reduced shard is accumulated (dp.shard_accumulate)
    zero_shard: int = 0  # ranks sharding the ZeRO state (0: all dp x cp ranks)
    cp_comm: str = "p2p"  # context-parallel attention algorithm (parallelism/context.py)
    # a parallel attention + MLP block's TP collectives (parallelism/parallel_block.py)
    parallel_block_comm: str = "separate"
    cp_a2a: int = 1  # a2a+p2p: the all-to-all groups' size (consecutive cp ranks)
    cp_a2a_impl: str = "te"  # a2a: TransformerEngine's or DeepSpeed's all-to-all attention
    microbatch_group: int = 0  # interleaved: contiguous microbatches per chunk (0: pp)
    # ZeRO-3: a layer's gathered parameters are kept from its forward to its backward
    zero3_keep_for_backward: bool = False
    # ZeRO++ hpZ: ranks of the secondary weight partition (zero3.hpz_partition_size; 1: none)
    hpz: int = 1
    # FSDP2 without a pipeline: gradients reduce-scattered only in the last microbatch
    # (zero3.gradient_sync), and parameters kept gathered from a backward into the next forward
    # (zero3.reshard_after_backward false); parallelism/fsdp2_accumulation.py
    zero3_deferred_sync: bool = False
    zero3_keep_after_backward: bool = False
    # sequence parallelism whose column-parallel linears keep the all-gathered input from the
    # forward for their weight gradients (parallel.sp_regather false): no backward re-gather,
    # the gathered bytes in the stash (simcluster.parallelism.saved_gather)
    sp_keeps_gather: bool = False

    @property
    def zero3_pipelined(self) -> bool:
        """ZeRO-3 (FSDP2) under a pipeline, as torch.distributed.pipelining runs it: parameters
        gathered once per step and kept (with reshard_after_forward off), gradients accumulated
        unsharded and reduce-scattered after each stage's last backward."""
        return self.zero == 3 and self.pp > 1

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def microbatches(self) -> int:
        """Microbatches per pipeline per step (gradient-accumulation steps)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def expert_shard(self) -> int:
        """Ranks among which one layer's routed experts are split: ep (whole experts) x etp
        (each expert's matrices)."""
        return self.ep * self.etp

    @property
    def edp(self) -> int:
        """Expert-data-parallel degree: replicas of each expert shard."""
        return self.dp * self.cp * self.tp // self.expert_shard

    @property
    def zero_group(self) -> int:
        """Ranks over which ZeRO shards dense state (Megatron's distributed optimizer: dp x cp;
        ``zero_shard`` of them with hybrid sharding)."""
        return self.zero_shard or self.dp * self.cp

    @property
    def expert_zero_group(self) -> int:
        """Ranks over which ZeRO shards the routed experts' state: their expert-data-parallel
        group, cut into the dense state's replicas under hybrid sharding (torchtitan shards
        experts on the (dp_replicate, efsdp) mesh, Megatron-Core keeps an intra-instance expert
        data-parallel group per distributed-optimizer instance)."""
        return self.edp // self.zero_replicas

    @property
    def zero_replicas(self) -> int:
        """Copies of the sharded state (HSDP's replicate degree; 1 without hybrid sharding)."""
        return self.dp * self.cp // self.zero_group

    def describe(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp > 1:
            parts.append(f"etp{self.etp}")
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
        if self.zero:
            parts.append(f"zero{self.zero}")
            if self.zero_replicas > 1:
                parts.append(f"shard{self.zero_group}x{self.zero_replicas}")
        if self.sequence_parallel and self.tp > 1:
            parts.append("sp")
        parts.append(self.schedule)
        return " ".join(parts)

    # --- the rank grid ------------------------------------------------------------------
    @cached_property
    def grid(self) -> np.ndarray:
        """grid[tp, cp, dp, pp] -> global rank."""
        sizes = {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}
        # order lists innermost first; numpy's last axis is innermost
        outer_first = list(reversed(self.order))
        arr = np.arange(self.world).reshape([sizes[d] for d in outer_first])
        return arr.transpose([outer_first.index(d) for d in DIMS])

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of a global rank on the grid."""
        idx = np.argwhere(self.grid == rank)[0]
        return dict(zip(DIMS, (int(i) for i in idx), strict=True))

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return int(self.grid[tp, cp, dp, pp])

    def group(self, dim: str, rank: int) -> list[int]:
        """The ranks of ``rank``'s group along ``dim`` (tp, cp, dp, pp, ep, etp, dpcp, cpa, cpr,
        dps, dpr, edp, edps, edpr, embd, and ZeRO++'s dph, dpl, dpx)."""
        c = self.coords(rank)
        if dim == "embd":
            return self.tied_pair(rank)
        if dim in DIMS:
            sl = [c[d] if d != dim else slice(None) for d in DIMS]
            return [int(r) for r in self.grid[tuple(sl)].ravel()]
        if dim == "dpcp":
            return [int(r) for r in self.grid[c["tp"], :, :, c["pp"]].T.ravel()]
        if dim in ("cpa", "cpr"):
            # hierarchical context parallelism (Megatron-Core create_hierarchical_parallel_groups):
            # the cp group cut into all-to-all runs of cp_a2a consecutive ranks (cpa); the ranks
            # at the same place of every run form the ring (cpr)
            return _run_or_stride(self.group("cp", rank), rank, self.cp_a2a, dim == "cpa")
        if dim in ("dps", "dpr"):
            # hybrid sharding: the dp x cp group (cp innermost) cut into runs of zero_group
            # ranks that shard the state (dps); the ranks at the same place in every run hold
            # the same shard and all-reduce it (dpr)
            return _run_or_stride(self.group("dpcp", rank), rank, self.zero_group, dim == "dps")
        if dim == "dph":
            # ZeRO++ hpZ: runs of hpz consecutive ranks of the ZeRO group (DeepSpeed's
            # _create_zero_param_parallel_group: consecutive ranks, inside a node)
            return _run_or_stride(self.group("dps", rank), rank, self.hpz, True)
        if dim in ("dpl", "dpx"):
            # ZeRO++ qgZ: the ZeRO group's ranks in rank's node (dpl) and those at the same place
            # in every node (dpx), all_to_all_quant_reduce's local_ and global_ groups
            full = self.group("dps", rank)
            local = sum(1 for r in full if r // self.gpus_per_node == rank // self.gpus_per_node)
            return _run_or_stride(full, rank, local, dim == "dpl")
        if dim in ("ep", "edp", "etp"):
            return self._expert_group(dim, c["pp"], rank)
        if dim in ("edps", "edpr"):
            # hybrid sharding of the experts: the expert-data-parallel ranks inside rank's
            # dense replica (edps), and those at the same place in every replica (edpr)
            by_replica: dict[int, list[int]] = {}
            for r in self.group("edp", rank):
                by_replica.setdefault(self.replica_of(r), []).append(r)
            mine = by_replica[self.replica_of(rank)]
            if dim == "edps":
                return mine
            k = mine.index(rank)
            return [by_replica[q][k] for q in sorted(by_replica)]
        raise ValueError(f"unknown group dimension {dim}")

    def replica_of(self, rank: int) -> int:
        """Which copy of the dense ZeRO state ``rank`` belongs to under hybrid sharding (its
        place in the dp x cp group, cp innermost, over the replica size; 0 without)."""
        return self.group("dpcp", rank).index(rank) // self.zero_group

    def _expert_group(self, dim: str, stage: int, rank: int) -> list[int]:
        """``rank``'s expert group of one pipeline stage (Megatron-Core's expert rank order,
        etp innermost). The stage's ranks, in rank order, are cut into ETP groups of etp
        consecutive ranks; the EP groups take one rank of each of ep ETP groups: "packed" ep
        consecutive ETP groups (inside a node while they fit), "spread" every (n/ep)-th one
        (across nodes). The expert-data-parallel groups are the ranks holding the same expert
        shard: the complement of both."""
        block = self.stage_ranks(stage)
        pos = block.index(rank)
        if dim == "etp":
            start = (pos // self.etp) * self.etp
            return block[start : start + self.etp]
        lane, slot = pos % self.etp, pos // self.etp
        slots = len(block) // self.etp
        run = self.ep if self.ep_placement == "packed" else slots // self.ep
        if (dim == "ep") == (self.ep_placement == "packed"):
            start = (slot // run) * run
            picked = range(start, start + run)
        else:
            picked = range(slot % run, slots, run)
        return [block[s * self.etp + lane] for s in picked]

    def groups(self, dim: str, stage: int | None = None) -> list[list[int]]:
        """All distinct groups along ``dim`` (optionally only those of pipeline stage ``stage``)."""
        seen: set[int] = set()
        out = []
        ranks = range(self.world) if stage is None else self.stage_ranks(stage)
        for r in ranks:
            if r in seen:
                continue
            g = self.group(dim, r)
            seen.update(g)
            out.append(g)
        return out

    def tied_pair(self, rank: int) -> list[int]:
        """The first and last pipeline stage's ranks at ``rank``'s tp/cp/dp coordinates (the
        group that all-reduces a tied word embedding's gradient); [rank] off those stages."""
        c = self.coords(rank)
        if self.pp < 2 or c["pp"] not in (0, self.pp - 1):
            return [rank]
        return [
            self.rank(c["tp"], c["cp"], c["dp"], 0),
            self.rank(c["tp"], c["cp"], c["dp"], self.pp - 1),
        ]

    def stage_ranks(self, stage: int) -> list[int]:
        return sorted(int(r) for r in self.grid[:, :, :, stage].ravel())

    def representative(self, stage: int) -> int:
        """The rank simulated for a stage in symmetric mode: tp=cp=dp=0."""
        return self.rank(pp=stage)


def _run_or_stride(full: list[int], rank: int, size: int, run: bool) -> list[int]:
    """``full`` cut into consecutive runs of ``size`` ranks: ``rank``'s run (``run``), or the
    ranks at ``rank``'s place in every run: the two levels of hierarchical CP (all-to-all, ring)
    and of hybrid sharding (shard, replicas), where a run and a stride share exactly one rank,
    so the outer collective combines one result of each inner one."""
    pos = full.index(rank)
    if run:
        start = (pos // size) * size
        return full[start : start + size]
    return full[pos % size :: size]


def build_layout(scenario: Scenario, model: ModelSpec, gpus_per_node: int) -> Layout:
    """Check the layout against the model and cluster; derive dp and microbatches."""
    par, tr, cl = scenario.parallel, scenario.training, scenario.cluster
    gpus = cl.gpus
    inner = par.tp * par.pp * par.cp
    if par.dp is None:
        if gpus % inner:
            raise UserError(
                "parallel",
                f"tp*pp*cp = {inner} does not divide cluster.gpus={gpus}; change the degrees or the GPU count",
            )
        dp = gpus // inner
    else:
        dp = par.dp
        if dp * inner != gpus:
            fix = (
                f"set dp={gpus // inner} or omit dp to derive it"
                if gpus % inner == 0
                else f"tp*pp*cp = {inner} does not divide it either; change the degrees or the GPU count"
            )
            raise UserError(
                "parallel.dp",
                f"dp*tp*pp*cp = {dp}*{par.tp}*{par.pp}*{par.cp} = {dp * inner} != cluster.gpus={gpus}; {fix}",
            )
    order = tuple(d.strip() for d in par.order.split(","))
    if sorted(order) != sorted(DIMS):
        raise UserError(
            "parallel.order", f"must list each of {', '.join(DIMS)} once, e.g. 'tp,cp,dp,pp'"
        )
    if model.heads % par.tp:
        raise UserError(
            "parallel.tp", f"tp={par.tp} must divide the model's heads={model.heads}{_tp_choices(model, gpus, par.pp * par.cp)}"
        )
    if model.mla is None and model.kv_heads % par.tp:
        raise UserError(
            "parallel.tp",
            f"tp={par.tp} must divide kv_heads={model.kv_heads} (Megatron's query groups){_tp_choices(model, gpus, par.pp * par.cp)}",
        )
    if par.pp * par.vpp > model.layers + 2:
        raise UserError(
            "parallel.pp",
            f"pp*vpp={par.pp * par.vpp} exceeds the model's {model.layers} layers + embedding + head; "
            f"use pp*vpp <= {model.layers + 2}",
        )
    if par.microbatch_group is not None and par.schedule != "interleaved":
        raise UserError(
            "parallel.microbatch_group",
            f"sets how many microbatches go through a chunk in a row in schedule 'interleaved' "
            f"(got schedule '{par.schedule}'); drop it or use schedule: interleaved",
        )
    schedule = get_schedule(par.schedule)
    if par.vpp > 1 and not schedule.uses_vpp:
        raise UserError("parallel.vpp", _vpp_refusal(par.schedule, par.vpp))
    if schedule.uses_vpp:
        check_interleaved_ranks(par.pp, par.vpp, scenario.framework, scenario.overlap.pp_comm)
    if par.schedule == "interleaved" and par.layers_per_stage is None and par.partition == "megatron":
        check_megatron_virtual_split(model.layers, par.pp, par.vpp, scenario.framework)
    one_chunk = par.vpp == 1 and not isinstance(schedule, VShapeSchedule)
    if one_chunk and par.layers_per_stage is None and par.partition == "megatron":
        check_megatron_pipeline_split(model.layers, par.pp, scenario.framework, gpus // (par.tp * par.cp))
    check_cp_comm(par.cp_comm, par.cp, par.tp, model, tr.flash_attention, par.cp_a2a)
    check_parallel_block_comm(scenario, model)
    windowed = any(model.attention_span(i, tr.seq_len) < tr.seq_len for i in range(model.layers))
    if par.cp > 1 and windowed and par.cp_comm != "a2a":
        local_field = "sliding_window" if model.sliding_window else "attention_chunk"
        local_size = model.sliding_window or model.attention_chunk
        raise UserError(
            "parallel.cp_comm",
            f"'{par.cp_comm}' context parallelism is not modelled for sliding-window or chunked layers "
            f"(model.{local_field}={local_size} < seq_len); use a2a, or cp=1",
        )
    if par.cp > 1 and tr.seq_len % (2 * par.cp):
        raise UserError(
            "training.seq_len",
            f"seq_len={tr.seq_len} must be divisible by 2*cp={2 * par.cp} (load-balanced causal chunks: "
            f"each rank takes 2 of the 2*cp chunks); use seq_len {_multiples(tr.seq_len, 2 * par.cp)} or a cp "
            "that fits",
        )
    if par.sequence_parallel and par.tp > 1 and (tr.seq_len // par.cp) % par.tp:
        # Megatron-Core's _split_along_first_dim scatters each rank's s/cp tokens over tp:
        # "First dimension of the tensor should be divisible by tensor parallel size"
        raise UserError(
            "training.seq_len",
            f"seq_len/cp = {tr.seq_len // par.cp} tokens per context-parallel rank must divide by tp={par.tp} "
            "(sequence parallelism splits them over the TP group); change seq_len, cp or tp, or turn "
            "sequence_parallel off",
        )
    if par.ep > 1:
        if not model.is_moe:
            raise UserError(
                "parallel.ep", "ep>1 needs a mixture-of-experts model (model.experts > 0)"
            )
        stage = dp * par.cp * par.tp
        # the degrees both checks pass: a fix named for one is not refused by the other
        fixes = one_of(divisors(model.experts, lambda d: stage % d == 0))
        if model.experts % par.ep:
            raise UserError(
                "parallel.ep", f"ep={par.ep} must divide the model's experts={model.experts}; use ep {fixes}"
            )
        if stage % par.ep:
            raise UserError(
                "parallel.ep",
                f"ep={par.ep} must divide dp*cp*tp={stage}, the ranks of one pipeline stage "
                f"(EP groups are carved from them); use ep {fixes}",
            )
    etp = _expert_tp(par, model, dp)
    if par.zero == 3 and par.pp > 1 and scenario.framework in ("deepspeed", "megatron-core", "megatron-lm-2021", "nanotron"):
        # DeepSpeed's PipelineEngine asserts ZeRO < 2; Megatron's FSDP and nanotron's ZeRO do not
        # pipeline: only torch.distributed.pipelining composes FSDP with pipeline stages
        raise UserError(
            "parallel.zero",
            f"zero=3 with pp={par.pp} is not run by framework {scenario.framework}; use zero<=1, pp=1, "
            "or framework torchtitan (FSDP2 under torch.distributed.pipelining)",
        )
    if scenario.fsdp1 and par.pp > 1:
        # torch.distributed.pipelining composes with FSDP2 (fully_shard) only: its stages call
        # FSDPModule methods (set_requires_gradient_sync, set_reshard_after_backward)
        raise UserError(
            "zero3.buffers",
            f"flat (PyTorch FSDP1) with pp={par.pp}: FSDP1 does not run under pipeline stages; "
            "use zero3.buffers copies (FSDP2, framework torchtitan) or pp=1",
        )
    if par.zero == 2 and par.pp > 1:
        raise UserError(
            "parallel.zero",
            f"zero=2 with pp={par.pp} is not supported by DeepSpeed/Megatron pipelines; use zero<=1, "
            "zero=3 (FSDP under torch.distributed.pipelining, as torchtitan runs it) or pp=1",
        )
    allowed = GRAD_COLLECTIVES[par.zero]
    grad_collective = (
        allowed[0] if scenario.dp.grad_collective == "auto" else scenario.dp.grad_collective
    )
    if grad_collective not in allowed:
        raise UserError(
            "dp.grad_collective",
            f"'{grad_collective}' does not fit zero={par.zero}; use {' or '.join(allowed)} (or auto)",
        )
    if scenario.dp.reduce_dtype is not None and par.zero == 3:
        raise UserError(
            "dp.reduce_dtype",
            "casts ZeRO 0-2's gradient buckets; at zero=3 the reduce-scatter's dtype is the "
            "accumulated one (set training.fp32_grad_accum instead), or drop dp.reduce_dtype",
        )
    if scenario.dp.reduce_dtype == "16bit" and scenario.training.precision == "fp32":
        raise UserError(
            "dp.reduce_dtype",
            "16bit needs a 16-bit training.precision (bf16 or fp16); use fp32 or drop it",
        )
    if scenario.dp.shard_accumulate and par.zero < 2:
        raise UserError(
            "dp.shard_accumulate",
            f"accumulates a gradient shard, which zero={par.zero} does not keep; set parallel.zero "
            "to 2 or 3, or drop it",
        )
    if scenario.dp.param_unpack == "per_tensor" and par.zero not in (1, 2):
        raise UserError(
            "dp.param_unpack",
            f"per_tensor unpacks ZeRO-1/2's parameter all-gather; zero={par.zero} has none "
            "(set parallel.zero to 1 or 2, or drop it)",
        )
    if scenario.dp.param_unpack == "per_tensor" and scenario.overlap.param_gather:
        raise UserError(
            "dp.param_unpack",
            "per_tensor unpacks the blocking all-gather after the optimizer (nanotron); set "
            "overlap.param_gather false, or dp.param_unpack flat",
        )
    zero_shard = _zero_shard(par, min(gpus_per_node, gpus))  # a job inside one node: its GPUs
    if zero_shard:
        if par.zero == 0:
            raise UserError("parallel.zero_shard", "shards ZeRO state; set parallel.zero to 1, 2 or 3 (or drop it)")
        if (dp * par.cp) % zero_shard:
            raise UserError(
                "parallel.zero_shard",
                f"{zero_shard} must divide dp*cp = {dp * par.cp} (the replicas split the group evenly); "
                f"use {one_of(divisors(dp * par.cp))}",
            )
        if grad_collective != "reduce_scatter":
            raise UserError(
                "parallel.zero_shard",
                "hybrid sharding reduce-scatters within a replica, then all-reduces the shard across "
                "replicas; it needs dp.grad_collective: reduce_scatter (or auto)",
            )
        if zero_shard == dp * par.cp:
            zero_shard = 0  # one replica: plain ZeRO
    per_step = dp * tr.micro_batch
    if tr.global_batch % per_step:
        # a smaller micro-batch that divides is often the fix a user means: an imported launch
        # script's case run on more nodes than its own (512 sequences over dp 512 at MBS 16)
        smaller = _smaller_micro_batch(tr.global_batch, dp, tr.micro_batch)
        also = f", or training.micro_batch={smaller}" if smaller else ""
        raise UserError(
            "training.global_batch",
            f"{tr.global_batch} is not divisible by dp*micro_batch = {dp}*{tr.micro_batch} = {per_step}; "
            f"use a multiple of {per_step}{also}",
        )
    if tr.grad_accum is not None and tr.grad_accum != tr.global_batch // per_step:
        raise UserError(
            "training.grad_accum",
            f"{tr.grad_accum} microbatches per rank, but global_batch {tr.global_batch} / (dp*micro_batch = "
            f"{per_step}) = {tr.global_batch // per_step}; give one of them",
        )
    if tr.global_batch // per_step > MAX_MICROBATCHES:
        raise UserError(
            "training.global_batch",
            f"{tr.global_batch} sequences are {tr.global_batch // per_step:,} microbatches of "
            f"{tr.micro_batch} per step on each of dp={dp}, more than the {MAX_MICROBATCHES:,} "
            "simcluster can simulate; lower the global batch or raise training.micro_batch",
        )
    if gpus > gpus_per_node and gpus % gpus_per_node:
        raise UserError(
            "cluster.gpus",
            f"{gpus} is not a multiple of gpus_per_node={gpus_per_node}; use whole nodes",
        )
    # FSDP2's microbatch controls act without a pipeline and with more than one microbatch
    # (the last one syncs and reshards as usual)
    fsdp2_unpiped = par.zero == 3 and scenario.fsdp2 and par.pp == 1 and tr.global_batch > dp * tr.micro_batch
    layout = Layout(
        dp=dp,
        tp=par.tp,
        pp=par.pp,
        cp=par.cp,
        ep=par.ep,
        vpp=par.vpp,
        zero=par.zero,
        sequence_parallel=par.sequence_parallel and par.tp > 1,
        schedule=par.schedule,
        order=order,
        micro_batch=tr.micro_batch,
        global_batch=tr.global_batch,
        seq_len=tr.seq_len,
        gpus_per_node=gpus_per_node,
        ep_placement=par.ep_placement,
        etp=etp,
        grad_collective=grad_collective,
        fsdp2_copies=scenario.fsdp2,
        torch_fsdp=scenario.torch_fsdp,
        fsdp1_root=scenario.fsdp1,
        shard_accumulate=scenario.dp.shard_accumulate,
        zero3_keep_for_backward=par.zero == 3 and _keep_for_backward(scenario),
        zero_shard=zero_shard,
        cp_comm=par.cp_comm,
        parallel_block_comm=par.parallel_block_comm or "separate",
        cp_a2a=par.cp_a2a or 1,
        cp_a2a_impl=par.cp_a2a_impl,
        microbatch_group=par.microbatch_group or 0,
        hpz=scenario.zero3.hpz_partition_size if par.zero == 3 else 1,
        zero3_deferred_sync=fsdp2_unpiped and scenario.zero3.gradient_sync == "last_microbatch",
        zero3_keep_after_backward=fsdp2_unpiped and not scenario.zero3.reshard_after_backward,
        sp_keeps_gather=keeps_gather(scenario, par.tp),
    )
    if layout.zero_replicas > 1 and model.is_moe:
        _check_expert_replicas(layout)
    check_sizes(model, layout)
    return layout


def _check_expert_replicas(layout: Layout) -> None:
    """Under hybrid sharding every replica must hold the same number of each expert shard's
    data-parallel ranks, so the experts shard inside it as the dense state does (torchtitan
    requires ep to divide dp_shard x cp: expert parallelism is carved from the sharding
    dimension, never across replicas)."""
    for group in layout.groups("edp", 0):
        counts: dict[int, int] = {}
        for r in group:
            counts[layout.replica_of(r)] = counts.get(layout.replica_of(r), 0) + 1
        if len(counts) != layout.zero_replicas or len(set(counts.values())) != 1:
            raise UserError(
                "parallel.zero_shard",
                f"{layout.zero_group} leaves some replicas without a copy of an expert shard (ep*etp = "
                f"{layout.expert_shard} over tp = {layout.tp}); use a zero_shard whose replicas hold "
                "whole expert-parallel groups (a multiple of ep*etp/tp data-parallel ranks), or drop it",
            )


def _expert_tp(par: ParallelSection, model: ModelSpec, dp: int) -> int:
    """``parallel.etp`` resolved and checked: Megatron-Core's default is the attention's tp
    (``expert_tensor_parallel_size`` None -> ``tensor_model_parallel_size``); a dense model has
    no experts to split. ETP x EP groups are carved from one stage's dp*cp*tp ranks and each
    ETP rank holds expert_ffn/etp of every local expert's hidden width."""
    if not model.is_moe:
        if par.etp is not None and par.etp > 1:
            raise UserError("parallel.etp", "etp>1 splits routed experts; it needs a mixture-of-experts model")
        return 1
    etp = par.tp if par.etp is None else par.etp
    stage = dp * par.cp * par.tp
    # the etp values both checks pass (ep divides the stage's ranks: checked before), so 1 is one
    fixes = one_of(divisors(stage // par.ep, lambda d: model.expert_ffn % d == 0))
    if stage % (par.ep * etp):
        default = " (etp defaults to tp, as Megatron-Core's expert_tensor_parallel_size)" if par.etp is None else ""
        raise UserError(
            "parallel.etp",
            f"ep*etp = {par.ep}*{etp} must divide dp*cp*tp={stage}, the ranks of one pipeline stage "
            f"(expert groups are carved from them){default}; use etp {fixes}",
        )
    if model.expert_ffn % etp:
        raise UserError(
            "parallel.etp",
            f"etp={etp} must divide the experts' hidden width expert_ffn={model.expert_ffn}; use etp {fixes}",
        )
    return etp


def _zero_shard(par: ParallelSection, gpus_per_node: int) -> int:
    """``parallel.zero_shard`` in ranks (0: none); ``node`` is the data-parallel ranks of one
    node, as FSDP1's HYBRID_SHARD builds its intra-node process group from the ranks of a node
    (``_init_intra_and_inter_node_groups``: ``_get_default_group`` split by
    ``torch.cuda.device_count()``); with tp or cp > 1 a node holds gpus_per_node / tp of them."""
    if par.zero_shard != "node":
        return par.zero_shard or 0
    if gpus_per_node % par.tp:
        raise UserError(
            "parallel.zero_shard",
            f"node: tp={par.tp} does not divide gpus_per_node={gpus_per_node}; give zero_shard in ranks",
        )
    return gpus_per_node // par.tp


def _keep_for_backward(scenario: Scenario) -> bool:
    """``zero3.reshard_after_forward`` resolved: torchtitan's default policy keeps the gathered
    parameters for the backward under a pipeline (to avoid a gather per microbatch) and frees
    them after the forward otherwise."""
    reshard = scenario.zero3.reshard_after_forward
    if reshard is None:
        reshard = scenario.parallel.pp == 1
    return not reshard


def check_cp_comm(
    name: str, cp: int, tp: int, model: ModelSpec, fused: bool = True, cp_a2a: int | None = None
) -> None:
    """``parallel.cp_comm`` must be known and runnable as the frameworks run it:

    - the ring and the all-gather live inside TransformerEngine's fused attention; Megatron's
      unfused ``DotProductAttention`` asserts "Context parallelism is only supported by
      TEDotProductAttention!" (``fused`` = ``training.flash_attention``). Ulysses' all-to-alls
      wrap any local attention (DeepSpeed's ``DistributedAttention``), so a2a takes either;
    - MLA's unequal K and V head dims go only through TE's ring (its tests skip the others:
      "MLA CP currently only support KV P2P!");
    - Ulysses' all-to-all splits whole heads: TE's ``AttnFuncWithCPAndQKVOA2A`` asserts the
      query and key/value heads of a tp rank divide by its group's size (cp, or ``cp_a2a``
      under a2a+p2p, whose all-to-all groups must cut cp into runs and leave a ring)."""
    check_algorithm(name)
    if cp_a2a is not None and name != "a2a+p2p":
        raise UserError("parallel.cp_a2a", f"sizes a2a+p2p's all-to-all groups (cp_comm is '{name}'); drop it")
    if cp == 1:
        return
    if not fused and name != "a2a":
        raise UserError(
            "training.flash_attention",
            f"cp={cp} with cp_comm '{name}' runs inside TransformerEngine's fused attention, which "
            "flash_attention: false turns off; set training.flash_attention: true, or use "
            "parallel.cp_comm: a2a, or cp=1",
        )
    if model.attention_sinks and fused and name != "a2a":
        # TransformerEngine runs softmax_type learnable under cp only through the all-to-all
        # (NVIDIA/TransformerEngine#2148; its tests skip the rest, and #2541: p2p refuses it)
        raise UserError(
            "parallel.cp_comm",
            f"'{name}' does not run attention sinks (model.attention_sinks: TransformerEngine takes "
            "them under context parallelism only with a2a); use a2a, or cp=1",
        )
    if model.mla is not None and "p2p" not in name:
        raise UserError(
            "parallel.cp_comm",
            f"'{name}' does not run MLA attention (TransformerEngine takes its unequal K and V head "
            "dims only in its p2p ring); use p2p",
        )
    if name == "a2a+p2p":
        if cp_a2a is None or cp_a2a < 2 or cp_a2a >= cp or cp % cp_a2a:
            raise UserError(
                "parallel.cp_a2a",
                f"a2a+p2p needs the all-to-all group size, a divisor of cp={cp} between 2 and cp/2 "
                f"(got {cp_a2a}); set parallel.cp_a2a",
            )
        cp = cp_a2a
    elif name != "a2a":
        return
    for what, heads in (("heads", model.heads), ("kv_heads", model.kv_heads)):
        if (heads // tp) % cp:
            raise UserError(
                "parallel.cp_comm",
                f"{name}'s all-to-all splits each tp rank's {what} ({heads}/tp={heads // tp}) over {cp} "
                "ranks, which does not divide them; use p2p or all_gather, or a group size that divides them",
            )


def check_parallel_block_comm(scenario: Scenario, model: ModelSpec) -> None:
    """``parallel.parallel_block_comm`` needs a parallel block, and each implementation runs
    only where its code does: GPT-NeoX's layer all-reduces the summed branch outputs
    (``reduce_from_model_parallel_region``), which has no sequence-parallel form there; a fused
    block gathers one norm output for both branches (PaLM's one shared norm), so
    with sequence parallelism it needs ``model.parallel_norms: 1``; nanotron's async TP linears
    keep each branch's own collectives."""
    par = scenario.parallel
    comm = par.parallel_block_comm
    if comm is None:
        return
    field = "parallel.parallel_block_comm"
    if not model.parallel_block:
        raise UserError(
            field, "sets a parallel attention + MLP block's collectives, but the model's layers are "
            "sequential; drop it, or set model.parallel_block: true",
        )  # fmt: skip
    if par.tp == 1 or comm == "separate":
        return
    if comm == "gpt-neox" and par.sequence_parallel:
        raise UserError(
            field, "gpt-neox all-reduces the summed branch outputs and has no sequence-parallel form; "
            "set parallel.sequence_parallel: false, or parallel_block_comm: fused",
        )  # fmt: skip
    if comm == "fused" and par.sequence_parallel and model.parallel_norms == 2:
        raise UserError(
            field, "a fused block with sequence parallelism gathers one shared norm output; with "
            "model.parallel_norms: 2 use separate, or parallel_norms: 1",
        )  # fmt: skip
    if scenario.overlap.tp_async and par.sequence_parallel:
        raise UserError(
            field, f"nanotron's async TP linears (overlap.tp_async) keep each branch's collectives; "
            f"{comm} needs overlap.tp_async: false, or use separate",
        )  # fmt: skip


def _smaller_micro_batch(global_batch: int, dp: int, micro_batch: int) -> int | None:
    """The largest micro-batch below ``micro_batch`` whose dp-wide step divides
    ``global_batch``, among layouts of at most :data:`MAX_MICROBATCHES` microbatches (more are
    refused below): searched by the microbatch count, so a micro-batch typed with extra zeros
    does not walk every smaller one (300,000,000 of them took 22 s)."""
    if micro_batch < 2 or global_batch % dp:
        return None
    per_rank = global_batch // dp
    first = -(-per_rank // (micro_batch - 1))  # the fewest microbatches at a micro-batch below the given
    for count in range(first, min(per_rank, MAX_MICROBATCHES) + 1):
        if per_rank % count == 0:
            return per_rank // count
    return None


def _tp_choices(model: ModelSpec, gpus: int, others: int) -> str:
    """'; tp 1, 2, 4 or 8 divide both': the degrees that split the heads (and, without MLA,
    Megatron's query groups) evenly and fit the GPUs beside the layout's other model-parallel
    degrees (``others`` = pp x cp: tp x pp x cp must divide the GPUs), so the error names a fix
    that is not refused next."""
    heads = model.heads if model.mla is not None else math.gcd(model.heads, model.kv_heads)
    fits = divisors(heads, lambda d: gpus % (d * others) == 0)
    both = "" if model.mla is not None or model.kv_heads == model.heads else " both"
    return f"; tp {one_of(fits)} divide{both}" if len(fits) > 1 else ""


def _vpp_refusal(schedule: str, vpp: int) -> str:
    """Why ``schedule`` does not take ``vpp`` chunks per stage, and the schedules that do (from
    the registry: a schedule added there is named here too)."""
    from simcluster.schedules import SCHEDULES

    takers = ", ".join(f"'{name}'" for name, s in sorted(SCHEDULES.items()) if s.uses_vpp)
    if isinstance(SCHEDULES[schedule], VShapeSchedule):
        return (
            f"schedule '{schedule}' always runs 2 chunks per stage (a V), whatever vpp says; drop "
            f"parallel.vpp, or for vpp={vpp} loops use {takers}"
        )
    return (
        f"vpp={vpp} needs a schedule that loops over chunks: {takers} (got '{schedule}', one "
        "chunk per stage); drop parallel.vpp or change parallel.schedule"
    )


def _multiples(value: int, step: int) -> str:
    """The multiples of ``step`` on either side of ``value`` ('4096 or 4104'), for a fix."""
    below = value // step * step
    return f"{below} or {below + step}" if below > 0 else str(step)
