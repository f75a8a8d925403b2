"""Which precisions a calibration run times its GEMMs in (no torch import: checked up front)."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.spellings import SYNONYMS

#: the precisions calibrate can time (calibrate/gemm.py: DTYPES, fp8_format for fp8); fp8
#: where the device runs it (a GPU before compute capability 8.9 has no FP8 tensor cores)
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")


def default_dtypes(device: str, fp8: bool = False) -> list[str]:
    """Precisions worth timing: CPUs run fp16 matmul through slow paths, so skip it there; a
    GPU with FP8 tensor cores (``fp8``: Hopper, Ada and later) times fp8 too, as most large
    runs on them now train in it."""
    if device != "cuda":
        return ["bf16", "fp32"]
    return ["bf16", "fp16", "fp32", *(["fp8"] if fp8 else [])]


def parse_dtypes(text: str) -> list[str]:
    """``--dtypes 'fp32,bf16'`` as a list in the written order, each once; a name is read as
    ``training.precision`` reads it (``BF16``, ``bfloat16``, ``half``, ``float32``)."""
    synonyms = SYNONYMS[("training", "precision")]
    names = [synonyms.get(n, n) for n in (part.strip().lower() for part in text.split(",")) if n]
    unknown = [n for n in names if n not in PRECISIONS]
    if unknown or not names:
        got = f"unknown precision '{unknown[0]}'" if unknown else "no precision given"
        raise UserError("--dtypes", f"{got}; write some of {', '.join(PRECISIONS)}, comma-separated")
    return list(dict.fromkeys(names))


def cube_dtype(dtypes: list[str]) -> str | None:
    """The dtype the shape cube is timed in: bf16, the precision LLM training runs its GEMMs
    in, when the run times it; else the run's first but fp8, whose curve the profile keeps
    apart (``efficiency.gemm_fp8``); None (no cube) when fp8 is all the run times."""
    if "bf16" in dtypes:
        return "bf16"
    return next((d for d in dtypes if d != "fp8"), None)
