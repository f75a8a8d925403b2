"""The measuring run: kernels on every rank, collectives per scope, profile on rank 0.

Steps run in the same order on every rank (collectives need all members). After each step
rank 0 rewrites ``PROFILE.partial.yaml``; on success it writes ``PROFILE.yaml`` and removes the
partial file. Kernels are timed on every rank at once (as GPUs in training run together) and
rank 0's numbers are recorded, with every rank's rate of the reference GEMM (the default grid's
largest; the spread between GPUs, ``gpu.speed_spread``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from calibrate import (
    attention,
    channels,
    collectives,
    gemm,
    hostlink,
    interference,
    membw,
    moe,
    soak,
    spread,
)
from calibrate.dist import DistContext, init, shutdown
from calibrate.moe_alltoall import measure_all_to_all
from calibrate.moe_shapes import MoeShape
from calibrate.precisions import cube_dtype, default_dtypes
from calibrate.profile_writer import (
    Machine,
    Measurements,
    build_profile,
    partial_path,
    write_yaml_atomic,
)
from calibrate.provenance import (
    device_compute_capability,
    device_memory_bytes,
    device_name,
    device_sm_count,
    host_cpu,
    host_memory_bytes,
    provenance,
)
from calibrate.shapes import GemmShape, default_grid
from calibrate.summary import summary_lines
from calibrate.timers import Timer, timer_for
from calibrate.watchdog import FailureReport, Watchdog
from simcluster.errors import UserError
from simcluster.progress import progress_bar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RunConfig:
    """Validated command-line options of a measuring run."""

    device: str
    quick: bool
    out: Path
    base: str | None
    timeout_s: float
    gemm_shapes: tuple[GemmShape, ...]
    #: the shape table's cube, timed in its dtype only (calibrate/shapes.py)
    cube_shapes: tuple[GemmShape, ...] = ()
    #: MoE layers whose grouped GEMMs, permutes, router and dispatch are timed (moe_shapes.py)
    moe_shapes: tuple[MoeShape, ...] = ()
    #: the reference GEMM of the heat soak, the per-rank spread and the interference run: the
    #: default grid's largest (cli.py), never a --scenario or --shapes extra, whose LM head at
    #: full sequence takes minutes a call on a CPU (the soak then ran for minutes, not its 2 s);
    #: one fixed shape also keeps those figures alike with and without --scenario. None: the
    #: largest of ``gemm_shapes``
    reference: GemmShape | None = None
    #: the GEMM precisions to time (--dtypes); empty: the device's default (precisions.py)
    dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """One measurement; ``run`` appends its row(s) to the Measurements."""

    label: str
    #: its return value is ignored (a measurement appends to, or sets on, the Measurements)
    run: Callable[[Measurements], object]
    #: its expected time in units of the rest's, for the progress's time left: a GEMM larger
    #: than the reference takes longer in proportion to its FLOPs (an 8B model's LM head is 500
    #: reference GEMMs on a CPU, whose 1-a-step estimate said 18 minutes left of 1.5 hours)
    cost: float = 1.0


def _appends(rows: str, measure: Callable[[], object]) -> Callable[[Measurements], None]:
    """A step's body that appends the row ``measure()`` returns to ``Measurements.<rows>``
    (bound with :func:`functools.partial`, so each step keeps its own shape or size)."""

    def run(m: Measurements) -> None:
        getattr(m, rows).append(measure())

    return run


def plan_steps(cfg: RunConfig, ctx: DistContext) -> list[Step]:
    """Every measurement of the run, in the order all ranks execute them."""
    dev, timer = ctx.device, timer_for(cfg.device)
    budget = 0.02 if cfg.quick else 0.3  # seconds of timed calls per measurement
    largest = cfg.reference or max(cfg.gemm_shapes, key=lambda s: s.flops)

    def reference_rows(m: Measurements) -> list[dict[str, object]]:
        """The timed rows of the reference shape (one per dtype), for the spread's rerun."""
        return [
            r for r in m.gemm
            if (r["m"], r["n"], r["k"]) == (largest.m, largest.n, largest.k) and not r.get("role")
        ]  # fmt: skip

    soak_dtype = "bf16" if cfg.device == "cuda" else "fp32"  # CPUs run bf16 matmul slowly
    seconds = soak.soak_seconds(cfg.quick)
    grid = set(default_grid(cfg.device, cfg.quick))
    extra = [s for s in cfg.gemm_shapes if s not in grid]  # --scenario and --shapes
    dtypes = run_dtypes(cfg, dev)
    cube = cube_dtype(dtypes)
    cube_only = [s for s in cfg.cube_shapes if s not in cfg.gemm_shapes]  # the rest are timed in the grid

    def soak_and_estimate(m: Measurements) -> None:
        start = time.perf_counter()
        calls = soak.heat_soak(largest, soak_dtype, dev, seconds)
        note = soak.extra_gemm_note(extra, len(dtypes), calls * largest.flops / (time.perf_counter() - start))
        if note and ctx.is_main:
            print(note, file=sys.stderr, flush=True)
        if cfg.device == "cuda" or cfg.quick:
            return  # a GPU runs every precision on its own units; a quick grid takes seconds
        others = [d for d in dtypes if d != soak_dtype]
        base = soak.probe_rate(soak_dtype, dev) if others else 0.0
        for d in others:
            shapes = list(cfg.gemm_shapes) + (cube_only if d == cube else [])
            slow = soak.slow_dtype_note(d, soak.probe_rate(d, dev), soak_dtype, base, shapes)
            if slow and ctx.is_main:
                print(slow, file=sys.stderr, flush=True)

    steps = [Step(f"heat soak {seconds:g} s", soak_and_estimate)]
    steps += [
        Step(
            f"gemm {d} {s.m}x{s.n}x{s.k}" + (f" {s.role}" if s.role else ""),
            _appends("gemm", partial(gemm.measure_gemm, s, d, dev, timer, budget)),
            max(1.0, s.flops / largest.flops),
        )
        for d in dtypes
        for s in cfg.gemm_shapes
    ]
    if cube is not None:  # None: fp8 alone, whose curve takes no cube
        steps += [
            Step(
                f"gemm {cube} {s.m}x{s.n}x{s.k} (shape cube)",
                _appends("gemm", partial(gemm.measure_gemm, s, cube, dev, timer, budget)),
            )
            for s in cube_only
        ]
    if ctx.distributed and ctx.world >= 2:
        steps.append(
            Step(
                "gemm rate on every rank",
                lambda m: setattr(
                    m, "gemm_ranks", spread.time_together(reference_rows(m), ctx.world, dev, timer, budget)
                ),
            )
        )
    att_dtype = "bf16" if cfg.device == "cuda" else "fp32"
    steps += [
        Step(
            f"attention s={a.seq} h={a.heads}/{a.kv_heads} d={a.head_dim}",
            _appends(
                "attention", partial(attention.measure_attention, a, att_dtype, dev, timer, budget)
            ),
        )
        for a in attention.default_shapes(cfg.device, cfg.quick)
    ]
    steps += [
        Step(
            f"memory {k.name} {n} elements",
            _appends("memory", partial(membw.measure_kernel, k, n, dev, timer, budget)),
        )
        for k in membw.KERNELS.values()
        for n in membw.default_sizes(cfg.device, cfg.quick)
    ]
    steps += moe_steps(cfg, ctx, timer, budget, dtypes)
    steps.append(
        Step("kernel launch", lambda m: setattr(m, "launch_s", membw.measure_launch(dev, timer)))
    )
    steps.append(Step("host op", lambda m: setattr(m, "host_op_s", membw.measure_host_op(dev))))
    link_bytes = hostlink.default_bytes(cfg.device, cfg.quick)
    steps.append(
        Step(
            f"host link {link_bytes} B",
            lambda m: setattr(m, "host_link", hostlink.measure_host_link(dev, link_bytes)),
        )
    )
    steps.append(
        Step(
            f"host optimizer update {link_bytes // 4} parameters",
            lambda m: setattr(m, "host_update", hostlink.measure_host_update(link_bytes // 4)),
        )
    )
    steps += collective_steps(cfg, ctx, timer, budget, largest, soak_dtype)
    return steps


def collective_steps(
    cfg: RunConfig, ctx: DistContext, timer: Timer, budget: float, largest: GemmShape, gemm_dtype: str
) -> list[Step]:
    """Every collective of every group scope at every size, then, with >= 2 ranks, the
    ``largest`` GEMM in ``gemm_dtype`` timed under an all-reduce (their interference)."""
    dev = ctx.device
    steps: list[Step] = []
    for scope, (group, size) in ctx.groups.items():
        steps += [
            Step(
                f"{op} {scope} {nbytes} B",
                _appends(
                    "collectives",
                    partial(
                        collectives.measure_collective,
                        op,
                        nbytes,
                        scope,
                        group,
                        size,
                        ctx.nodes,
                        dev,
                        timer,
                        budget,
                    ),
                ),
            )
            for op in collectives.BUILDERS
            for nbytes in collectives.default_sizes(cfg.device, cfg.quick)
        ]
    steps += channel_steps(cfg, ctx, timer, budget)
    if ctx.distributed and ctx.world >= 2:
        nbytes = interference.default_bytes(cfg.device, cfg.quick)
        steps.append(
            Step(
                f"gemm under all_reduce {nbytes} B",
                lambda m: setattr(
                    m,
                    "interference",
                    interference.measure_interference(
                        largest, gemm_dtype, nbytes, dev, timer, budget
                    ),
                ),
            )
        )
    return steps


def channel_steps(cfg: RunConfig, ctx: DistContext, timer: Timer, budget: float) -> list[Step]:
    """With NCCL and >= 2 ranks a node, the all-reduce on communicators held to 1, 2, 4, 8 CTAs
    (``efficiency.channel_busbw``); otherwise none, and a line saying why."""
    if not ctx.distributed:
        return []
    why = channels.unsupported(ctx.backend, ctx.local_world)
    if why is not None:
        if ctx.is_main:
            print(f"note: no CTA sweep (efficiency.channel_busbw): {why}", file=sys.stderr, flush=True)
        return []
    nbytes = channels.default_bytes(cfg.quick)
    return [
        Step(
            f"all_reduce {nbytes} B at {', '.join(map(str, channels.CHANNELS))} CTAs",
            lambda m: setattr(
                m, "channels",
                channels.measure_channels(ctx.local_world, ctx.nodes, nbytes, ctx.device, timer, budget),
            ),
            float(len(channels.CHANNELS)),
        )
    ]


def run_dtypes(cfg: RunConfig, dev: torch.device) -> list[str]:
    """The GEMM precisions the run times: ``--dtypes``, else the device's default (a GPU's
    with fp8 where its tensor cores run it); fp8 asked of a device without it is an error."""
    dtypes = list(cfg.dtypes)
    if not dtypes:
        return default_dtypes(cfg.device, fp8=cfg.device == "cuda" and gemm.fp8_missing(dev) is None)
    if "fp8" in dtypes and (why := gemm.fp8_missing(dev)):
        raise UserError("--dtypes", f"fp8 GEMMs do not run on this device ({why}); leave fp8 out")
    return dtypes


def moe_steps(cfg: RunConfig, ctx: DistContext, timer: Timer, budget: float, dtypes: list[str]) -> list[Step]:
    """The MoE measurements (calibrate/moe.py): grouped GEMMs by every implementation this
    torch runs, permutes, router, the counts' read-back and, with >= 2 ranks, the uneven
    all-to-all; what cannot run here is said in ``measured.moe.notes``. ``dtypes``: the run's
    GEMM precisions (:func:`run_dtypes`); with fp8 among them the grouped GEMMs in fp8 too."""
    if not cfg.moe_shapes:
        return []
    dev = ctx.device
    dtype = "bf16" if cfg.device == "cuda" else "fp32"  # CPUs run bf16 matmul through slow paths
    missing = moe.grouped_mm_missing(dev, dtype)
    impls = tuple(i for i in moe.IMPLS if i != "grouped_mm" or missing is None)
    notes = [f"grouped_mm not timed: {missing}"] if missing else []
    # an FP8 layer's experts run TransformerEngine's GroupedLinear: an FP8 GEMM per expert
    fp8 = "fp8" in dtypes
    if fp8:
        notes.append("grouped_mm not timed in fp8: torch._grouped_mm takes 16-bit operands; the loop is")
    if not (ctx.distributed and ctx.world >= 2):
        notes.append("all_to_all not timed: one process; launch >= 2 ranks with torchrun to time it")
    steps = [Step("moe notes", lambda m: m.moe_notes.extend(notes))] if notes else []

    def grouped(shape: MoeShape, dtype: str, impls: tuple[str, ...], m: Measurements) -> None:
        rows, refused = moe.measure_grouped(shape, dtype, dev, timer, budget, impls)
        m.moe_grouped_gemm.extend(rows)
        m.moe_notes.extend(refused)

    steps += [Step(f"moe grouped gemm {s.text()}", partial(grouped, s, dtype, impls)) for s in cfg.moe_shapes]
    if fp8:
        steps += [
            Step(f"moe grouped gemm {s.text()} fp8", partial(grouped, s, "fp8", ("loop",))) for s in cfg.moe_shapes
        ]
    permutes = {(s.tokens, s.top_k, s.k, s.experts): s for s in cfg.moe_shapes}
    steps += [
        Step(
            f"moe permute {s.routed_rows} rows x {s.k}",
            _appends("moe_permute", partial(moe.measure_permute, s, dtype, dev, timer, budget)),
        )
        for s in permutes.values()
    ]
    routers = {(s.tokens, s.experts, s.top_k): s for s in cfg.moe_shapes}
    steps += [
        Step(
            f"moe router {s.tokens} tokens over {s.experts} experts",
            _appends("moe_router", partial(moe.measure_router, s, dev, timer, budget)),
        )
        for s in routers.values()
    ]
    experts = max(s.experts for s in cfg.moe_shapes)
    steps.append(
        Step("moe counts read-back", lambda m: setattr(m, "moe_count_read_s", moe.measure_count_read(experts, dev)))
    )
    if ctx.distributed and ctx.world >= 2:
        group, _ = ctx.groups["world"]
        sizes = sorted({(s.routed_rows, s.k) for s in cfg.moe_shapes})
        steps += [
            Step(
                f"moe uneven all_to_all {rows} rows x {k}",
                _appends(
                    "moe_all_to_all",
                    partial(measure_all_to_all, rows, k, gemm.DTYPES[dtype], group, dev, timer, budget),
                ),
            )
            for rows, k in sizes
        ]
    return steps


def _provenance(cfg: RunConfig, ctx: DistContext) -> dict[str, object]:
    prov = provenance(ctx.device, ctx.world, ctx.nodes, ctx.hostnames, ctx.backend, cfg.quick)
    return prov | {"heat_soak_s": soak.soak_seconds(cfg.quick)}


@dataclass
class _PartialSaver:
    """Writes what is measured so far (and ``error``, when a run failed) to the partial file
    ``path``; on rank 0 only, a no-op on the other ranks."""

    ctx: DistContext
    path: Path
    measured: Measurements
    prov: dict[str, object]

    def __call__(self, error: str | None = None) -> None:
        if self.ctx.is_main:
            doc = {"partial": True, "error": error, "measured": self.measured.as_dict()}
            write_yaml_atomic(self.path, doc | {"provenance": self.prov})


#: exit status of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130


def run(cfg: RunConfig) -> int:
    """Measure, then write the profile (rank 0). Returns the process exit status."""
    ctx = init(cfg.device, cfg.timeout_s)
    partial = partial_path(cfg.out)
    prov = _provenance(cfg, ctx)
    measured = Measurements()
    save_partial = _PartialSaver(ctx, partial, measured, prov)

    # only rank 0 keeps a partial file: another rank's report does not name one
    report = FailureReport(ctx.rank, str(partial) if ctx.is_main else None, save_partial)
    # The backend's own collective timeout is --timeout too; the grace lets its exception (which
    # unwinds and reports the step) come first, the watchdog catching only what it cannot see.
    watchdog = Watchdog(cfg.timeout_s, report, grace_s=max(2.0, 0.1 * cfg.timeout_s))
    current = "setup"

    def on_term(signum: int, frame: object) -> None:
        # torchrun sends SIGTERM to the survivors when a rank fails: record it in the partial
        # file (rewritten after every step), say where, and stop.
        if report.reporting:  # this thread is reporting already (Ctrl-C reaches every rank)
            return
        report.fail(
            f"stopped by signal {signum} during '{current}' (another rank failed or the run was "
            "cancelled)"
        )
        os._exit(1)

    signal.signal(signal.SIGTERM, on_term)
    steps = plan_steps(cfg, ctx)
    started = time.monotonic()
    try:
        total = sum(step.cost for step in steps)
        show = None if ctx.is_main else False
        with progress_bar("calibrate", len(steps), total, show=show, unit="measurements") as advance:
            for step in steps:
                current = step.label
                advance(step.label, cost=0.0, count=0)  # names the measurement under way
                with watchdog.guard(step.label):
                    step.run(measured)
                save_partial()
                advance(step.label, cost=step.cost)
        current = "barrier before writing"
        with watchdog.guard(current):
            ctx.barrier()
        current = "writing the profile"
        if ctx.is_main:
            _write_and_summarise(cfg, ctx, measured, prov, partial, len(steps), started)
        # The other ranks leave only once the profile is on disk: torchrun stops every rank as
        # soon as one exits non-zero, and a gloo rank's exit now and then aborts in its C++
        # teardown (calibrate/__main__.py), which had stopped rank 0 while it wrote: the
        # profile lost after the whole run.
        current = "waiting for rank 0 to write the profile"
        with watchdog.guard(current):
            ctx.barrier()
        return 0
    except UserError:
        raise
    except KeyboardInterrupt:  # Ctrl-C: the same report as a failure, recorded in the file
        report.fail(f"interrupted (Ctrl-C) during '{current}'")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a failed rank, a broken peer connection, a device error
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        report.fail(f"during '{current}': {detail}")
        return 1
    finally:
        shutdown(ctx)


def _write_and_summarise(
    cfg: RunConfig, ctx: DistContext, measured: Measurements, prov: dict[str, object], partial: Path,
    steps: int, started: float,
) -> None:  # fmt: skip
    """Rank 0's end of a run: build the profile from the measurements, write it (dropping the
    ``partial`` file) and print what it holds."""
    machine = Machine(
        name=device_name(ctx.device),
        memory_bytes=device_memory_bytes(ctx.device, ctx.local_world),
        gpus_per_node=ctx.local_world,
        sm_count=device_sm_count(ctx.device),
        compute_capability=device_compute_capability(ctx.device),
        host_cpu=host_cpu(),
        host_memory_bytes=host_memory_bytes(),
    )
    profile = build_profile(measured, prov, cfg.base, machine)
    _write_profile(cfg.out, partial, profile)
    print(f"wrote {cfg.out}", file=sys.stderr)
    if not ctx.groups:
        print(
            "note: one process times no collectives (the profile's NVLink and NIC "
            "figures are not measured: see its sources:); to time them, launch a rank "
            "per GPU: torchrun --nproc-per-node N -m calibrate ...",
            file=sys.stderr,
        )
    elapsed = time.monotonic() - started
    try:
        lines = summary_lines(profile, measured, cfg.out, elapsed, steps, cfg.base)
    except (KeyError, TypeError, ValueError) as exc:  # the profile is on disk: a gap in
        # its digest must not turn the finished run into a failure
        lines = [f"note: no summary ({type(exc).__name__}: {exc}); the profile's sources: section says what was measured"]
    for line in lines:
        print(line, file=sys.stderr)


def _write_profile(out: Path, partial: Path, profile: dict[str, object]) -> None:
    """Write the finished profile and drop the partial file; if ``out`` cannot be written
    after all (checked before measuring, but a disk can fill), say where the measurements are."""
    try:
        write_yaml_atomic(out, profile)
    except UserError as exc:
        if partial.is_file():
            raise UserError(exc.field, f"{exc.message}; the measurements are in {partial}") from None
        raise
    partial.unlink(missing_ok=True)
