"""What a measuring run measured, said in a few lines once the profile is written.

The profile YAML holds every row and, in ``sources:``, where each field came from; this is the
digest a person reads at the end of the run (rank 0, on stderr): how long it took on which
ranks, the best rate of each kind of kernel and collective this run timed (collectives as
nccl-tests' bus bandwidth, calibrate/busbw.py), which fields were kept from the base or the
fallback profile instead of measured, and the command that simulates with the profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from calibrate.profile_writer import FALLBACK_BASE, Measurements, raw_profile
from calibrate.spread import spread
from simcluster.progress import clock_text

Row = Mapping[str, Any]

#: fields named before "... and N more" in the kept-from-the-base line
KEPT_SHOWN = 6


def _g(x: float) -> str:
    """Three significant figures: a CPU's rates are hundredths of a GPU's."""
    return f"{x:.3g}"


def _best(rows: Sequence[Row], key: str) -> Row:
    return max(rows, key=lambda r: float(r[key]))


def _gemm_line(rows: Sequence[Row], peaks: Mapping[str, float]) -> str:
    """Each dtype's best rate, with its share of the profile's peak where that peak is not the
    best rate itself (a datasheet peak kept for a GPU a shipped profile describes, or --base's)."""
    dtypes = list(dict.fromkeys(str(r["dtype"]) for r in rows))
    best = []
    for d in dtypes:
        r = _best([r for r in rows if r["dtype"] == d], "tflops")
        tflops, peak = float(r["tflops"]), float(peaks.get(d) or 0.0)
        share = f", {_g(100 * tflops / peak)}% of the profile's {_g(peak)} peak" if peak > tflops * 1.001 else ""
        best.append(f"{d} {_g(tflops)} TFLOP/s ({r['m']}x{r['n']}x{r['k']}{share})")
    return f"GEMMs         {len(rows)} timed; best {', '.join(best)}"


def _attention_line(rows: Sequence[Row]) -> str:
    dims = sorted({int(r["head_dim"]) for r in rows})
    seqs = sorted({int(r["seq"]) for r in rows})
    fwd = [float(r["fwd_tflops"]) for r in rows]
    bwd = [float(r["bwd_tflops"]) for r in rows]
    return (
        f"attention     {len(rows)} timed (head dim {', '.join(map(str, dims))}; sequence "
        f"{seqs[0]}-{seqs[-1]}): forward {_g(min(fwd))}-{_g(max(fwd))}, backward "
        f"{_g(min(bwd))}-{_g(max(bwd))} TFLOP/s"
    )


def _memory_line(rows: Sequence[Row]) -> str:
    r = _best(rows, "bytes_per_s")
    return f"memory-bound  {len(rows)} timed; best {_g(float(r['bytes_per_s']) / 1e9)} GB/s ({r['kernel']})"


def _collective_lines(rows: Sequence[Row]) -> list[str]:
    """One line per scope (world, or intra- and inter-node): each op's best bus bandwidth."""
    lines = []
    for scope in dict.fromkeys(str(r["scope"]) for r in rows):
        of_scope = [r for r in rows if r["scope"] == scope]
        first = of_scope[0]
        where = f"{first['gpus']} ranks on {first['nodes']} node" + ("s" if int(first["nodes"]) > 1 else "")
        best = ", ".join(
            f"{op} {_g(float(_best([r for r in of_scope if r['op'] == op], 'busbw_GBps')['busbw_GBps']))}"
            for op in dict.fromkeys(str(r["op"]) for r in of_scope)
        )
        lines.append(f"collectives   {len(of_scope)} timed, {scope} ({where}); best busbw GB/s: {best}")
    return lines


def _host_line(m: Measurements) -> str | None:
    parts = []
    if m.launch_s is not None:
        parts.append(f"kernel launch {_g(m.launch_s * 1e6)} us")
    if m.host_op_s is not None:
        parts.append(f"one PyTorch op from Python {_g(m.host_op_s * 1e6)} us")
    if m.host_link:
        slower = min(float(m.host_link["d2h_bytes_per_s"]), float(m.host_link["h2d_bytes_per_s"]))
        parts.append(f"device<->host copy {_g(slower / 1e9)} GB/s")
    return "host          " + ", ".join(parts) if parts else None


def _ranks_line(m: Measurements, on_gpu: bool) -> str | None:
    parts = []
    if m.gemm_ranks:  # as measured (the profile's gpu.speed_spread may be capped to the schema's range)
        rates = [float(r) for r in m.gemm_ranks["tflops_per_rank"]]
        parts.append(f"GEMM rate spread between ranks {100 * spread(rates):.1f}%")
    if m.interference:
        ran = f"a GEMM under all-reduces ran at {100 * float(m.interference['rate']):.0f}% of its rate alone"
        # on a CPU the two share cores, not SMs: the profile writes efficiency.collective_sms 0
        # whatever this was (a shared machine's noise read 154% on 2026-12-01)
        parts.append(ran if on_gpu else f"{ran} (not used: a CPU has no SMs to lend, collective_sms 0)")
    return "ranks         " + "; ".join(parts) if parts else None


def _moe_line(m: Measurements) -> str | None:
    counts = [
        (len(m.moe_grouped_gemm), "grouped expert GEMMs"),
        (len(m.moe_permute), "permutes"),
        (len(m.moe_router), "routers"),
        (len(m.moe_all_to_all), "uneven all-to-alls"),
    ]
    said = [f"{n} {what}" for n, what in counts if n]
    return "MoE           " + ", ".join(said) + " timed" if said else None


def kept_fields(profile: Mapping[str, Any], base: str | None) -> list[str]:
    """The profile's fields this run did not measure: those the writer marks 'not measured'
    (copied from the fallback profile, or a curve scaled from it), and with ``--base`` those
    whose source is still the base's own."""
    sources: Mapping[str, str] = profile.get("sources") or {}
    base_sources: Mapping[str, str] = (raw_profile(base).get("sources") or {}) if base else {}
    return [
        key for key, text in sources.items()
        if str(text).startswith("not measured") or (key in base_sources and base_sources[key] == text)
    ]  # fmt: skip


def summary_lines(
    profile: Mapping[str, Any],
    m: Measurements,
    out: Path,
    elapsed_s: float,
    measurements: int,
    base: str | None,
) -> list[str]:
    """The digest printed after ``wrote OUT``; see the module docstring."""
    prov = profile.get("provenance") or {}
    ranks = int(prov.get("device_count") or 1)
    nodes = int(prov.get("nodes") or 1)
    on = f"{ranks} ranks on {nodes} node{'s' if nodes > 1 else ''}" if ranks > 1 else "one process"
    lines = [
        f"calibrate: {measurements:,} measurements in {clock_text(elapsed_s)}, {on} ({prov.get('backend')}), "
        f"{prov.get('device')}:"
    ]
    body: list[str | None] = []
    if m.gemm:
        body.append(_gemm_line(m.gemm, (profile.get("gpu") or {}).get("peak_tflops") or {}))
    if m.attention:
        body.append(_attention_line(m.attention))
    if m.memory:
        body.append(_memory_line(m.memory))
    body += _collective_lines(m.collectives)
    on_gpu = prov.get("backend") == "nccl"  # dist.py: NCCL on CUDA, gloo on CPU
    body += [_host_line(m), _ranks_line(m, on_gpu), _moe_line(m)]
    lines += [f"  {line}" for line in body if line]
    kept = kept_fields(profile, base)
    if kept:
        shown = ", ".join(kept[:KEPT_SHOWN]) + (f" and {len(kept) - KEPT_SHOWN} more" if len(kept) > KEPT_SHOWN else "")
        lines.append(
            f"not measured, kept from {base or FALLBACK_BASE}: {shown} (the profile's "
            "sources: section says where each field came from)"
        )
    lines.append(f"simulate with it: simcluster run SCENARIO --hardware {out}")
    return lines
