"""How close simcluster has come to published runs on each GPU, for `run` to say beside a result.

The table (``validation/accuracy-by-gpu.json``) is the shipped quick set's error per GPU as
``simcluster validate --quick --json`` computes it (n, MAPE, median, speed bias), written by
``tools/write_accuracy_table.py`` and kept true by the full ratchet test. A GPU with no shipped
case gets no figure: a prediction on it is one without an accuracy record.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from simcluster.data import data_dir

TABLE_NAME = "accuracy-by-gpu.json"


@lru_cache(maxsize=1)
def load_table() -> dict[str, Any]:
    """The shipped table: ``{"cases": ..., "by_gpu": {gpu name: {n, mape_pct, ...}}}``."""
    path = data_dir("validation") / TABLE_NAME
    if not path.is_file():
        return {"by_gpu": {}}
    return json.loads(path.read_text())


def accuracy_line(gpu_name: str, precision: str | None = None) -> str:
    """One line on the published-run record of ``gpu_name`` (a profile's ``gpu.name``), and of
    its runs in ``precision`` where the GPU's runs span several precisions."""
    table = load_table()
    row = table.get("by_gpu", {}).get(gpu_name)
    if not row:
        return (
            f"no published training run on {gpu_name} is among simcluster's validation cases: "
            "this prediction has no accuracy record (docs/accuracy.md; calibrate measures your GPUs)"
        )
    line = (
        f"on {gpu_name}, {row['n']} published runs: MAPE {row['mape_pct']:.1f}% (median "
        f"{row['median_ape_pct']:.1f}%), simulated steps {_lean(row)} than measured on average"
    )
    rows = table.get("by_gpu_precision", {}).get(gpu_name, {})
    if precision and rows:
        same = rows.get(precision)
        line += (
            f"; in {precision}, {same['n']}: MAPE {same['mape_pct']:.1f}%, {_lean(same)}"
            if same
            else f"; none in {precision}"
        )
    return line + " (simcluster validate)"


def _lean(row: dict[str, Any]) -> str:
    bias = row["speed_bias_pct"]
    return f"{abs(bias):.1f}% {'faster' if bias >= 0 else 'slower'}"
