"""The parallel layout: degrees, the rank grid, and ``build_layout``, which checks them against
the model and cluster (the checks themselves are in ``layout_checks.py``).

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

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simcluster import layout_checks as checks
from simcluster.errors import UserError
from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.frameworks.startup import check_framework_startup
from simcluster.layout_checks import DIMS
from simcluster.lora import Adapters
from simcluster.model import ModelSpec
from simcluster.parallelism.saved_gather import keeps_gather
from simcluster.scenario import Scenario
from simcluster.size_bounds import check_sizes


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
    # GPUs one NVLink domain joins (several nodes on NVL72-style racks; 0: one node), set by
    # the context from the cluster's topology (topology.job_domain)
    nvlink_domain: int = 0
    etp: int = 1  # expert tensor parallelism: ranks that split each routed expert's matrices
    grad_collective: str = "all_reduce"  # dense/expert gradient reduction (dp.grad_collective)
    fsdp2_copies: bool = False  # ZeRO-3 with FSDP2's per-parameter copies (zero3.buffers)
    # ZeRO-3 as PyTorch FSDP keeps its state, FSDP1 or FSDP2 (Scenario.torch_fsdp): fp32 shards
    # stepped in place, no master copy
    torch_fsdp: bool = False
    # ZeRO-3 as Megatron FSDP: a Megatron-Core stack's zero 3 that is not PyTorch's FSDP
    # (parallelism/fp8_weights.py: what its FP8 parameter gathers leave to each backward)
    megatron_fsdp: bool = False
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
    #: LoRA adapters on a frozen model (``lora:``); None: every weight is trained
    lora: Adapters | None = None

    @property
    def regathers_input(self) -> bool:
        """Whether sequence parallelism's backward all-gathers a column-parallel linear's input
        again for its weight gradient: not where the linear kept the gathered input
        (``sp_keeps_gather``), nor beside a LoRA run's frozen linears, whose weights take none."""
        return not self.sp_keeps_gather and self.lora is None

    @property
    def zero3_pipelined(self) -> bool:
        """ZeRO-3 (FSDP2) under a pipeline, as torch.distributed.pipelining runs it: parameters
        gathered once per step and kept (with reshard_after_forward off), gradients accumulated
        unsharded and reduce-scattered after each stage's last backward."""
        return self.zero == 3 and self.pp > 1

    @property
    def domain_size(self) -> int:
        """GPUs per NVLink domain: ``nvlink_domain``, or one node where it is unset."""
        return self.nvlink_domain or self.gpus_per_node

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
        dps, dpr, edp, edps, edpr, embd, stage: every rank of its pipeline stage, tpcp: its
        tensor- and context-parallel ranks together, and ZeRO++'s dph, dpl, dpx)."""
        c = self.coords(rank)
        if dim == "embd":
            return self.tied_pair(rank)
        if dim == "stage":
            return self.stage_ranks(c["pp"])
        if dim == "tpcp":
            return sorted(int(r) for r in self.grid[:, :, c["dp"], c["pp"]].ravel())
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
        if dim in ("ep", "edp", "etp"):
            return self._expert_group(dim, c["pp"], rank)
        return self._sharding_group(dim, rank)

    def _sharding_group(self, dim: str, rank: int) -> list[int]:
        """``rank``'s group of a sharded data-parallel level: hybrid sharding's (dps, dpr,
        edps, edpr) and ZeRO++'s (dph, dpl, dpx)."""
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
    """Check the layout against the model and cluster; derive dp and microbatches. The checks
    run in ``layout_checks``' order, so an error names the first field to change."""
    par, tr = scenario.parallel, scenario.training
    dp = checks.resolve_dp(par, scenario.cluster.gpus)
    order = checks.rank_order(par)
    checks.check_model_split(scenario, model)
    checks.check_sequence_split(scenario, model)
    etp = checks.check_experts(par, model, dp)
    check_framework_startup(scenario, model, dp, etp)
    grad_collective = checks.resolve_grad_collective(scenario)
    zero_shard = checks.resolve_zero_shard(scenario, dp, gpus_per_node, grad_collective)
    checks.check_batch(tr, dp)
    checks.check_whole_nodes(scenario.cluster.gpus, gpus_per_node)
    # FSDP2's microbatch controls act without a pipeline and with more than one microbatch
    # (the last one syncs and reshards as usual)
    fsdp2_unpiped = (
        par.zero == 3 and scenario.fsdp2 and par.pp == 1 and tr.global_batch > dp * tr.micro_batch
    )
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
        megatron_fsdp=par.zero == 3 and runs_megatron_core(scenario.framework) and not scenario.torch_fsdp,
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
        lora=checks.check_lora(scenario, model),
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


def _keep_for_backward(scenario: Scenario) -> bool:
    """``zero3.reshard_after_forward`` resolved: torchtitan's default policy keeps the gathered
    parameters for the backward under a pipeline (to avoid a gather per microbatch) and frees
    them after the forward otherwise."""
    reshard = scenario.zero3.reshard_after_forward
    if reshard is None:
        reshard = scenario.parallel.pp == 1
    return not reshard
