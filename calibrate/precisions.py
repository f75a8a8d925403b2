"""Which precisions a calibration run times its GEMMs in (no torch import: checked up front)."""

from __future__ import annotations

from simcluster.errors import UserError

#: the precisions calibrate can time (calibrate/gemm.py DTYPES holds their torch dtypes)
PRECISIONS = ("bf16", "fp16", "fp32")


def default_dtypes(device: str) -> list[str]:
    """Precisions worth timing: CPUs run fp16 matmul through slow paths, so skip it there."""
    return ["bf16", "fp16", "fp32"] if device == "cuda" else ["bf16", "fp32"]


def parse_dtypes(text: str) -> list[str]:
    """``--dtypes 'fp32,bf16'`` as a list in the written order, each once."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in PRECISIONS]
    if unknown or not names:
        got = f"unknown precision '{unknown[0]}'" if unknown else "no precision given"
        raise UserError("--dtypes", f"{got}; write some of {', '.join(PRECISIONS)}, comma-separated")
    return list(dict.fromkeys(names))


def cube_dtype(dtypes: list[str]) -> str:
    """The dtype the shape cube is timed in: bf16, the precision LLM training runs its GEMMs
    in, when the run times it; else the run's first."""
    return "bf16" if "bf16" in dtypes else dtypes[0]
