"""Write validation/accuracy-by-gpu.json from a `simcluster validate --quick --json` document.

    simcluster validate --quick --json --jobs 2 > /tmp/validate.json
    python tools/write_accuracy_table.py /tmp/validate.json

`run` prints the row of its GPU beside every result (simcluster/accuracy_table.py); the full
ratchet test (tests/test_validate.py) fails when the table no longer matches the cases.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEYS = ("n", "mape_pct", "median_ape_pct", "max_ape_pct", "speed_bias_pct")


def _rounded(row: dict) -> dict:
    return {k: (row[k] if k == "n" else round(row[k], 1)) for k in KEYS}


def table_from(document: dict) -> dict:
    """The per-GPU rows of a validate JSON document, and per GPU and precision where a GPU has
    runs in more than one, rounded to 0.1 point."""
    by_gpu = {gpu: _rounded(row) for gpu, row in sorted(document["gpus"].items())}
    by_precision = {
        gpu: {p: _rounded(row) for p, row in sorted(rows.items())}
        for gpu, rows in sorted(document["gpu_precisions"].items())
        if len(rows) > 1
    }
    summary = document["summary"]
    return {
        "cases": f"the shipped quick set ({summary['n']} cases, {summary['failed']} failed)",
        "by_gpu": by_gpu,
        "by_gpu_precision": by_precision,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    table = table_from(json.loads(Path(argv[0]).read_text()))
    out = ROOT / "validation" / "accuracy-by-gpu.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=2) + "\n")
    tmp.replace(out)  # written whole or not at all
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
