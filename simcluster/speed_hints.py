"""What `run` says under its table about where a step loses time and what would win it back.

Each hint is a rule over the step's summary and its context (:data:`SPEED_HINTS`), silent
below its threshold: a Python-bound host; exposed TP communication that TransformerEngine's
overlap or an NVLink domain would hide; exposed all-to-alls with expert TP defaulted to tp or
with Megatron-Core's EP overlap off, or DeepEP's / HybridEP's kernels on fewer SMs than their
fastest measured count; exposed DP communication with Megatron's gradient or
parameter overlap off; a pipeline bubble that more interleaved chunks would shrink
(Narayanan et al. 2021's analytic bubbles) or that the framework's zero-bubble schedules would
fill (Qi et al. 2024), or that Megatron-DeepSpeed's ZB-H1 would idle less without its exact
semantics under DeepSpeed's blocking transfers. Each names the field to change and, where a
layout change is the fix, the `simcluster sweep` that compares it. A change is offered only
where the layout checks accept it for this scenario.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from simcluster.context import Context
from simcluster.engine.breakdown import busiest
from simcluster.frameworks.schedules import framework_runs, runs_with_sequence_parallel
from simcluster.frameworks.stacks import runs_megatron_core
from simcluster.parallelism.expert import dispatch_sms, faster_sm_count, hidden_row_bytes
from simcluster.schedules.zb_h1_ds import EXACT_NAME as ZBH1_DS_EXACT
from simcluster.schedules.zb_h1_ds import NAME as ZBH1_DS
from simcluster.units import format_bytes

#: a host-bound share of the step from which the host hint speaks
HOST_HINT = 0.05
#: an exposed-TP share of the step from which TransformerEngine's TP overlap is named
TP_HINT = 0.05
#: an exposed-EP share of the step above which a defaulted expert TP is pointed out
EP_HINT = 0.05
#: an exposed-DP share of the step from which the gradient/parameter overlap is named
DP_HINT = 0.05
#: a pipeline bubble (share of the step) from which interleaving is offered
BUBBLE_HINT = 0.10
#: the interleaving degrees the bubble hint tries
VPP_TRIED = (2, 3, 4, 6, 8)
#: the schedules whose bubble is Narayanan et al.'s (p - 1) / (v m + p - 1): 1F1B, GPipe
#: (all forwards, all backwards) and Megatron's interleaved 1F1B
BUBBLE_SCHEDULES = ("1f1b", "afab", "interleaved")
#: the zero-bubble schedules offered, cheapest in memory first, where the scenario's framework
#: runs them (frameworks.FRAMEWORKS' ``schedules``): sail-sg's fork and a scenario without a
#: framework run ZB-1p, ZB-V and ZB-2p; torch.distributed.pipelining its fixed ZB-V
#: (``ScheduleZBVZeroBubble``), offered where the cost-aware ZB-V is not; Megatron-DeepSpeed
#: its ZB-H1 (``ZeroBubbleH1Pipeline``), offered where ZB-1p is not
ZERO_BUBBLE_TRIED = ("zb-1p", "zbv", "zb-2p", "zbv-fixed", "zb-h1-ds")
#: a framework's own variant, offered only where the schedule it stands in for is not run:
#: PyTorch's fixed ZB-V for the cost-aware one, Megatron-DeepSpeed's ZB-H1 for ZB-1p
STANDS_IN_FOR = {"zbv-fixed": "zbv", "zb-h1-ds": "zb-1p"}


@dataclass(frozen=True)
class Rerun:
    """What a command re-running this scenario needs: the SCENARIO argument as given and its
    options (``--hardware``, every ``--set``, quoted for a shell)."""

    scenario: str
    options: str = ""
    hardware: str | None = None  # --hardware as given, for the layouts a hint checks

    def sweep(self, axes: str) -> str:
        """A ``simcluster sweep`` of this scenario over ``axes``."""
        return f"simcluster sweep {shlex.quote(self.scenario)} {axes}" + (f" {self.options}" if self.options else "")


SpeedHint = Callable[[dict, Context, Rerun], "str | None"]


def share_of_step(s: dict, seconds: float) -> float:
    """``seconds`` as a share of the step (0 for an empty step)."""
    return seconds / s["step_time_s"] if s["step_time_s"] > 0 else 0.0


def busiest_share(s: dict, part: str) -> float:
    """The busiest stage's ``part`` of the breakdown (``host``, ``comm_tp``, ...) as a share of
    the step: what the hints quote, the table's stage rather than the worst rank's exposure."""
    return share_of_step(s, busiest(s).get(part, 0.0))


def _host(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    host = busiest_share(s, "host")
    if host < HOST_HINT:
        return None
    if ctx.scenario.training.launch_blocking:
        return (
            f"host-bound {100 * host:.0f}% of the step: training.launch_blocking "
            "(CUDA_LAUNCH_BLOCKING=1) makes every kernel wait for Python to issue it; without it "
            "the host would run ahead"
        )
    return (
        f"host-bound {100 * host:.0f}% of the step: the GPU waits for Python to issue its "
        "kernels; CUDA graphs (training.cuda_graphs), a larger micro-batch or a faster host "
        "(efficiency.host_op_us, which calibrate measures) would hide it"
    )


def _scale_up(ctx: Context) -> int:
    node = ctx.profile.node
    return node.nvlink_domain or node.gpus_per_node


def _tp_overlap(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    # the hints quote the breakdown's stage (the table above), not exposed_comm_s's worst rank:
    # with a straggler, its TP peers' wait for it is exposed TP that no overlap would hide
    tp = busiest_share(s, "comm_tp")
    par, ov = ctx.scenario.parallel, ctx.scenario.overlap
    # TransformerEngine's overlap needs sequence parallelism; nanotron's async linears are their
    # own; userbuffers run inside an NVLink domain (a wider group needs a smaller tp first)
    off = par.tp > 1 and par.sequence_parallel and not ov.tp_comm and not ov.tp_async
    if tp < TP_HINT or not off or par.tp > _scale_up(ctx):
        return None
    return (
        f"exposed TP communication is {100 * tp:.0f}% of the step: overlap.tp_comm: true "
        "(TransformerEngine's userbuffers overlap, which NVIDIA's recipes turn on; Megatron-LM "
        "leaves it off by default) would hide part of it"
    )


def _tp_domain(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    tp = busiest_share(s, "comm_tp")
    size, scale_up = ctx.scenario.parallel.tp, _scale_up(ctx)
    if tp < TP_HINT or size <= scale_up:
        return None
    # TP is innermost in the rank grid, so a group wider than the NVLink domain leaves it
    inside = ",".join(str(1 << k) for k in range(scale_up.bit_length()) if 1 << k <= scale_up)
    return (
        f"tp {size} spans {-(-size // scale_up)} scale-up domains of {scale_up} GPUs, so its "
        f"collectives cross the network: exposed TP communication is {100 * tp:.0f}% of the step; "
        f"tp <= {scale_up} keeps them on NVLink (compare: {rerun.sweep('--tp ' + inside)})"
    )


def _etp(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    etp = s["parallel"].get("etp", 1)
    ep = busiest_share(s, "comm_ep")
    if ctx.scenario.parallel.etp is not None or etp <= 1 or ep < EP_HINT:
        return None
    return (
        f"exposed EP communication is {100 * ep:.0f}% of the step with each expert split over "
        f"etp={etp} GPUs, Megatron-Core's default (etp = tp); parallel.etp: 1 keeps whole experts "
        f"per GPU and smaller expert groups (compare: {rerun.sweep(f'--etp 1,{etp}')})"
    )


def _accepts(ctx: Context, hardware: str | None, overrides: list[tuple[str, object]]) -> bool:
    """Whether the layout checks accept this scenario with ``overrides`` (a hint offers only
    what runs)."""
    from simcluster.fit_hints import changed_context, rewritable

    return changed_context(rewritable(ctx.scenario), overrides, hardware) is not None


def _ep_overlap(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    ep = busiest_share(s, "comm_ep")
    sc = ctx.scenario
    if ep < EP_HINT or sc.overlap.ep_comm or not runs_megatron_core(sc.framework):
        return None
    if not _accepts(ctx, rerun.hardware, [("overlap.ep_comm", True)]):
        return None  # with pp > 1 it needs the interleaved schedule, say
    return (
        f"exposed EP communication is {100 * ep:.0f}% of the step: overlap.ep_comm: true "
        "(Megatron-Core's --overlap-moe-expert-parallel-comm: one microbatch's forward runs beside "
        "another's backward, each hiding the other's all-to-alls) would hide part of it "
        f"(compare: {rerun.sweep('--ep-comm false,true')})"
    )


def _token_work(ctx: Context, dispatcher: str) -> str:
    """Where the profile has the kernels' fixed work a token, its field, which the gain reads too."""
    field = f"{dispatcher}_token_sm_ns"
    return f" and {field}" if getattr(ctx.profile.efficiency, field) else ""


def _dispatch_sms(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    ep = busiest_share(s, "comm_ep")
    moe = ctx.scenario.moe
    found = faster_sm_count(ctx.profile, ctx.layout, moe, hidden_row_bytes(ctx.model, ctx.scenario.training.precision)) if ep >= EP_HINT and ctx.model.is_moe else None
    if found is None:
        return None
    sms, gain = found
    now = dispatch_sms(moe)
    return (
        f"exposed EP communication is {100 * ep:.0f}% of the step: {moe.dispatcher}'s kernels on {sms} SMs "
        f"run at {gain:.2f}x their rate on {now} here (moe.dispatch_sms; the profile's "
        f"efficiency.{moe.dispatcher}_nvlink_by_sms{_token_work(ctx, moe.dispatcher)}), leaving fewer SMs to the "
        "compute they overlap "
        f"(compare: {rerun.sweep(f'--dispatch-sms {now},{sms}')})"
    )


def _dp_overlap(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    dp = busiest_share(s, "comm_dp")
    sc = ctx.scenario
    if dp < DP_HINT or not runs_megatron_core(sc.framework):
        return None
    lay, ov = ctx.layout, sc.overlap
    if not ov.dp_grad_reduce:
        what = (
            "overlap.dp_grad_reduce: true (each gradient bucket reduced as the last microbatch's "
            "backward fills it, Megatron's --overlap-grad-reduce)"
        )
    elif lay.zero >= 1 and not ov.param_gather:
        what = (
            "overlap.param_gather: true (each bucket's updated parameters gathered under the next "
            "step's forward, Megatron's --overlap-param-gather)"
        )
    else:
        return None
    return f"exposed DP communication is {100 * dp:.0f}% of the step: {what} would hide most of it"


def analytic_bubble(pp: int, microbatches: int, vpp: int = 1) -> float:
    """The bubble's share of a step of equal stages (Narayanan et al. 2021, sec. 2.2): 1F1B
    idles (p - 1) forward-backward slots beside m, interleaving v chunks per stage cuts them to
    (p - 1) / v, so (p - 1) / (v m + p - 1)."""
    return (pp - 1) / (vpp * microbatches + pp - 1)


def interleavings(ctx: Context, hardware: str | None = None) -> list[int]:
    """The interleaving degrees of :data:`VPP_TRIED` the layout checks accept for this
    scenario (its layers split evenly over pp x vpp chunks, its microbatches grouped as the
    schedule needs)."""
    interleaved = ("parallel.schedule", "interleaved")
    return [vpp for vpp in VPP_TRIED if _accepts(ctx, hardware, [("parallel.vpp", vpp), interleaved])]


def _large_bubble(s: dict, ctx: Context) -> bool:
    """A pipeline of a 1F1B-family schedule idling :data:`BUBBLE_HINT` of its step or more."""
    lay = ctx.layout
    return lay.pp >= 2 and s["bubble_fraction"] >= BUBBLE_HINT and lay.schedule in BUBBLE_SCHEDULES


def _bubble(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    lay = ctx.layout
    if not _large_bubble(s, ctx):
        return None
    p, m, v = lay.pp, lay.microbatches, lay.vpp
    chunks = f", {v} chunks each" if v > 1 else ""
    text = (
        f"pipeline bubble {100 * s['bubble_fraction']:.0f}% of the step ({m} microbatches over {p} "
        f"stages{chunks}; analytic (p-1)/(v*m+p-1) = {100 * analytic_bubble(p, m, v):.0f}%)"
    )
    vpps = [more for more in interleavings(ctx, rerun.hardware) if more > v]
    if not vpps:
        return text + ": more microbatches a step (a smaller micro-batch or a larger global batch) shrink it"
    shares = ", ".join(f"vpp {more} {100 * analytic_bubble(p, m, more):.0f}%" for more in vpps)
    what = "more interleaved chunks" if v > 1 else "interleaved stages"
    return (
        f"{text}: {what} (parallel.vpp) cut it: {shares} "
        f"(compare: {rerun.sweep(f'--vpp {v},' + ','.join(map(str, vpps)))})"
    )


def zb_h1_bubble(pp: int, microbatches: int, f: float, b: float, w: float) -> float:
    """The bubble's share of a ZB-H1 step (Qi et al. 2024, sec. 2.1): with each backward split
    into its input-gradient pass B and its weight-gradient pass W, and the W passes moved into
    the cool-down, a stage idles (p - 1)(F + B - W) beside m (F + B + W) of work, against
    1F1B's (p - 1)(F + B + W); a third of 1F1B's at equal F, B and W (communication aside)."""
    idle = (pp - 1) * max(f + b - w, 0.0)
    return idle / (microbatches * (f + b + w) + idle)


def _passes(s: dict) -> tuple[float, float, float]:
    """The step's F, B and W per microbatch (seconds), as ZB-H1's idle share takes them."""
    per = s["compute_per_microbatch_s"]
    return per["forward"], per["backward_input"], per["backward_weight"]


@dataclass(frozen=True)
class ZeroBubbleOption:
    """A zero-bubble schedule the hint offers: its peak memory per GPU (static walk, bytes)
    and whether it runs only with sequence parallelism off (``without_sp``: Megatron-DeepSpeed's
    ZB-H1, ``frameworks.schedules.check_framework_sequence_parallel``)."""

    name: str
    peak_bytes: float
    without_sp: bool = False


def zero_bubble_options(ctx: Context, hardware: str | None = None) -> list[ZeroBubbleOption]:
    """The zero-bubble schedules of :data:`ZERO_BUBBLE_TRIED` this scenario's framework
    runs that the layout checks and the schedule's planner accept and that fit the GPU; one
    its framework runs only without sequence parallelism is tried with it off."""
    from simcluster.fit_hints import rewritable, walk_changed

    sc = ctx.scenario
    runs = [s for s in ZERO_BUBBLE_TRIED if framework_runs(sc.framework, s)]
    runs = [s for s in runs if STANDS_IN_FOR.get(s) not in runs]
    out = []
    for name in runs:
        # each of them runs one chunk a stage or its own fixed two: the interleaving goes
        overrides: list[tuple[str, object]] = [
            ("parallel.schedule", name), ("parallel.vpp", None), ("parallel.microbatch_group", None),
        ]  # fmt: skip
        without_sp = sc.parallel.sequence_parallel and not runs_with_sequence_parallel(sc.framework, name)
        if without_sp:
            overrides.append(("parallel.sequence_parallel", False))
        changed = walk_changed(rewritable(sc), overrides, hardware)
        if changed is not None and changed[1]["fits"]:
            out.append(ZeroBubbleOption(name, changed[1]["total_bytes"], without_sp))
    return out


def _zero_bubble(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    lay = ctx.layout
    if not _large_bubble(s, ctx):
        return None
    options = zero_bubble_options(ctx, rerun.hardware)
    if not options:
        return None
    f, b, w = _passes(s)
    named = []
    for option in options:
        # the memory walk's peak says what each holds (ZB-2p up to twice 1F1B's activations)
        said = f"peak {format_bytes(option.peak_bytes)}"
        if option.name in ("zb-1p", ZBH1_DS):
            said += f"; ZB-H1's (p-1)(F+B-W) idle {100 * zb_h1_bubble(lay.pp, lay.microbatches, f, b, w):.0f}%"
        if option.without_sp:
            said = f"sequence parallelism off, as {ctx.scenario.framework} runs it; {said}"
        named.append(f"{option.name} ({said})")
    schedules = ",".join([lay.schedule, *(option.name for option in options)])
    # swept with the schedules, vpp holds for interleaved only (the others run at theirs)
    vpps = f" --vpp {lay.vpp}" if lay.vpp > 1 else ""
    # the sweep skips each schedule the other way round (with the reason), so both are seen
    sp = " --sequence-parallel true,false" if any(option.without_sp for option in options) else ""
    return (
        f"zero-bubble schedules (Qi et al. 2024) would fill the {100 * s['bubble_fraction']:.0f}% "
        "pipeline bubble with each backward's weight-gradient passes (W): "
        f"{', '.join(named)}; this step's F, B, W per microbatch {1e3 * f:.0f}, {1e3 * b:.0f}, "
        f"{1e3 * w:.0f} ms (compare: {rerun.sweep(f'--schedule {schedules}{vpps}{sp}')})"
    )


def _exact_semantics(s: dict, ctx: Context, rerun: Rerun) -> str | None:
    """Megatron-DeepSpeed's ZB-H1 with exact semantics on blocking transfers: each steady
    exchange waits for a weight pass (``schedules/zb_h1_ds.py``), which the default order,
    splitting only the last forward's and the cool-down's backwards, does not."""
    lay = ctx.layout
    steady = lay.microbatches > lay.pp
    if lay.schedule != ZBH1_DS_EXACT or ctx.scenario.overlap.pp_p2p != "serial" or not steady:
        return None
    if s["bubble_fraction"] < BUBBLE_HINT:
        return None
    ideal = zb_h1_bubble(lay.pp, lay.microbatches, *_passes(s))
    return (
        f"pipeline bubble {100 * s['bubble_fraction']:.0f}% of the step, against ZB-H1's (p-1)(F+B-W) "
        f"{100 * ideal:.0f}%: with exact semantics (--enable-zbh1-exact-semantics) each steady "
        "gradient send under DeepSpeed's blocking transfers waits for the previous stage's forward, "
        "and that stage then waits a weight pass to send its next activation; without the flag "
        f"(schedule {ZBH1_DS}) the steady backwards run whole and send after them "
        f"(compare: {rerun.sweep(f'--schedule {ZBH1_DS_EXACT},{ZBH1_DS}')})"
    )


#: the rules, in the order `run` prints them
SPEED_HINTS: tuple[SpeedHint, ...] = (
    _host, _tp_overlap, _tp_domain, _etp, _ep_overlap, _dispatch_sms, _dp_overlap, _bubble, _zero_bubble,
    _exact_semantics,
)


def speed_hints(s: dict, ctx: Context, rerun: Rerun) -> list[str]:
    """What each rule of :data:`SPEED_HINTS` says about this step (the silent ones left out)."""
    return [text for rule in SPEED_HINTS if (text := rule(s, ctx, rerun))]
