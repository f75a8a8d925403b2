"""What ``simcluster validate --out`` writes: validate.csv, validate.json and validate.png.

The picture shows where a simulator can be trusted at a glance: one row per family, one dot
per case at its signed error (prediction over measurement, in percent), the ±10% and ±25%
bands of the issue's targets shaded, each family's MAPE at the right. Cases beyond the axis
are drawn at its edge as triangles with their value, so no case disappears; failed cases
are counted in the row label.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from simcluster.output.report_files import write_report_files
from simcluster.validate import CaseResult
from simcluster.validate_report import by_family, summarize

_LIMIT = 60.0  # the error axis spans ±_LIMIT %; beyond it, cases sit at the edge
_BANDS = ((25.0, "#FFF3C4", "±25%"), (10.0, "#D9F0D3", "±10%"))


def validation_frame(results: Sequence[CaseResult]) -> pd.DataFrame:
    """One row per case: family, metric, predicted, measured, signed error; memory if published."""
    rows = []
    for r in results:
        rows.append(
            {
                "name": r.case.name,
                "family": r.case.family,
                "metric": r.case.metric,
                "predicted": r.predicted,
                "measured": r.case.measured,
                "error_pct": r.error_pct,
                "failed": r.error,
                "peak_memory_gib_predicted": r.predicted_memory_gib,
                "peak_memory_gib_published": r.case.peak_memory_gib,
                "peak_memory_error_pct": r.memory_error_pct,
                "largest_after_gemm": r.largest_after_gemm[0] if r.largest_after_gemm else None,
                "largest_after_gemm_share": r.largest_after_gemm[1] if r.largest_after_gemm else None,
            }
        )
    return pd.DataFrame(rows)


def draw_errors(results: Sequence[CaseResult], title: str = "") -> Figure:
    """Signed error of every case, one row per family, target bands shaded."""
    families = by_family(results)
    names = list(families)
    fig = Figure(figsize=(9.0, 1.1 + 0.42 * max(len(names), 1)), layout="constrained")
    ax = fig.subplots()
    for half_width, color, label in _BANDS:
        ax.axvspan(-half_width, half_width, color=color, zorder=0, label=label)
    ax.axvline(0.0, color="#555555", linewidth=0.8, zorder=1)
    for row, family in enumerate(names):
        errors = [r.error_pct for r in results if r.case.family == family and r.error_pct is not None]
        inside = [e for e in errors if abs(e) <= _LIMIT]
        ax.scatter(inside, [row] * len(inside), s=22, color="#4C78A8", edgecolor="black",
                   linewidth=0.4, zorder=3)  # fmt: skip
        for sign in (1, -1):
            beyond = sorted((e for e in errors if sign * e > _LIMIT), key=abs)
            if not beyond:
                continue
            edge = sign * _LIMIT
            ax.scatter([edge], [row], marker=">" if sign > 0 else "<", s=40, color="#C62828", zorder=4)
            text = ", ".join(f"{e:+.0f}" for e in beyond) + "%"  # one label per side: no overlap
            ax.annotate(text, (edge, row), xytext=(-6 * sign, 7), textcoords="offset points",
                        ha="right" if sign > 0 else "left", fontsize=7, color="#C62828")  # fmt: skip
        s = families[family]
        mape = "—" if s["mape_pct"] is None else f"{s['mape_pct']:.1f}%"
        ax.annotate(f"MAPE {mape}", (1.0, row), xycoords=("axes fraction", "data"), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8)  # fmt: skip
    labels = [
        f"{f} (n={families[f]['n']}" + (f", {families[f]['failed']} failed)" if families[f]["failed"] else ")")
        for f in names
    ]
    ax.set_yticks(range(len(names)), labels, fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(-_LIMIT, _LIMIT)
    ax.set_xlabel("prediction error, % of the measured value (+ = predicted higher; for step-time cases, slower)")
    ax.grid(axis="x", color="#DDDDDD", linewidth=0.6)
    ax.set_axisbelow(True)
    total = summarize(results)
    mape = "—" if total["mape_pct"] is None else f"{total['mape_pct']:.1f}%"
    noun = "case" if total["n"] == 1 else "cases"
    headline = f"{total['n']} {noun}, MAPE {mape}" + (f", {total['failed']} failed" if total["failed"] else "")
    fig.suptitle(f"{title}\n{headline}" if title else headline, fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="outside lower right", ncols=2)
    return fig


def write_validation(
    out_dir: str | os.PathLike[str],
    results: Sequence[CaseResult],
    json_text: str,
    title: str = "",
) -> dict[str, Path]:
    """Write validate.csv, validate.json (``json_text``, the ``--json`` document) and
    validate.png into ``out_dir`` atomically; returns file name -> final path."""
    return write_report_files(out_dir, "validate", validation_frame(results), json_text, draw_errors(results, title))
