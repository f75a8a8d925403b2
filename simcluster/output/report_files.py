"""A command's result as three files written together: a CSV table, a JSON document, a figure.

``sweep --out`` and ``validate --out`` both leave ``<stem>.csv`` (one row per layout or case),
``<stem>.json`` (the ``--json`` document) and ``<stem>.png``, atomically as one set.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from simcluster.output.atomic import write_output_files
from simcluster.output.style import figure_bytes


def write_report_files(
    out_dir: str | os.PathLike[str], stem: str, table: pd.DataFrame, json_text: str, figure: Figure
) -> dict[str, Path]:
    """Write ``stem``.csv/.json/.png into ``out_dir`` atomically; returns file name -> final path."""
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, float_format="%.9g")
    files = {
        f"{stem}.csv": buffer.getvalue().encode(),
        f"{stem}.json": json_text.encode(),
        f"{stem}.png": figure_bytes(figure, "png"),
    }
    return write_output_files(out_dir, files)
