"""How close simcluster has come to published runs on each GPU, for `run` to say beside a result.

The table (``validation/accuracy-by-gpu.json``) is the shipped quick set's error per GPU as
``simcluster validate --quick --json`` computes it (n, MAPE, median, speed bias), written by
``tools/write_accuracy_table.py`` and kept true by the full ratchet test. A GPU with no shipped
case gets no figure: a prediction on it is one without an accuracy record.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from functools import lru_cache
from typing import Any

from simcluster.data import data_dir
from simcluster.full_iteration import captures_iteration
from simcluster.model import ModelSpec

TABLE_NAME = "accuracy-by-gpu.json"


@lru_cache(maxsize=1)
def load_table() -> dict[str, Any]:
    """The shipped table: ``{"cases": ..., "by_gpu": {gpu name: {n, mape_pct, ...}}}``."""
    path = data_dir("validation") / TABLE_NAME
    if not path.is_file():
        return {"by_gpu": {}}
    table: dict[str, Any] = json.loads(path.read_text())
    return table


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
    if row["n"] == 1:  # one run: its error, not an average
        line = f"on {gpu_name}, 1 published run: its step simulated {_lean(row)} than measured"
    else:
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


#: routed experts whose two dimensions multiply to less than this (expert_ffn x hidden) are
#: "small" here: Qwen3-30B-A3B (768 x 2048 = 1.6M), Qwen3-235B-A22B (1536 x 4096 = 6.3M) and
#: gpt-oss-120b (2880 x 2880 = 8.3M), whose published Megatron-Bridge runs simulate up to 4.4x
#: as fast as measured (docs/accuracy.md, spot checks), while DeepSeek-V3 (2048 x 7168 = 14.7M, -19...+7%;
#: Megatron-LM's GB200 guide's final run +2.6%, shipped, though its eager all-to-all baseline is +113%),
#: Mixtral 8x7B (14336 x 4096, +4...+16%) and Grok-1 (shipped, within 12%) are not. The same
#: Qwen3-30B-A3B under NeMo AutoModel (PyTorch, TransformerEngine, DeepEP) is 3-15% fast, so the
#: caveat is about the Megatron-Core recipes' runs, whose missing cost is not found (Megatron-LM's
#: 2026 recipes with HybridEP and its fused permute and router too: +20...+23%, shipped). Megatron-Core's
#: own model-zoo runs (MoE Parallel Folding) bound it from both sides: Qwen2-57B-A14B (2560 x 3584
#: = 9.2M, but a shared expert as wide as its eight routed ones) is within -2...+6%, and
#: Mixtral-8x22B-G8T8 (2048 x 6144 = 12.6M, no shared expert) 10-18% fast, some 10 points more
#: than the coarse Mixtral layer at the same layouts (optimistic, not far)
SMALL_EXPERT = 1.2e7


def small_expert_line(model: ModelSpec, graphs: Collection[str] = ()) -> str | None:
    """A caveat for a mixture of experts whose routed experts are small (:data:`SMALL_EXPERT`)
    and carry most of its expert work (a token's routed experts outnumber its shared ones:
    Qwen2-57B-A14B's 8 + 8 is the counter-example of the zoo runs), where the published runs
    are far faster in the model than measured; None otherwise, and None under a full-iteration
    CUDA graph (``graphs``: ``training.cuda_graphs``), whose published runs of such models
    (Megatron-Bridge's Qwen3-30B-A3B on 8 to 256 GB200 and GB300, -3...+1%; Qwen3-235B-A22B on
    256, -6...-1.5%) do not simulate fast."""
    if model.experts <= 1 or model.expert_ffn * model.hidden >= SMALL_EXPERT:
        return None
    if model.shared_experts >= model.top_k or captures_iteration(graphs):
        return None
    return (
        f"each of the {model.experts} routed experts is {model.expert_ffn} x {model.hidden}: "
        "Megatron-Bridge's published runs of MoE models with experts this small simulate faster than "
        "measured (Qwen3-30B-A3B +10...+344%, gpt-oss-120b +30...+114%, Qwen3-235B-A22B -10...+121%), "
        "Megatron-LM's own Qwen3 recipes (HybridEP or DeepEP, fused permute and router) are 21-22% fast on "
        "H100 (34% on B200, 16% in MXFP8 on GB200) and Megatron-Bridge 26.06's tuned Qwen3-30B-A3B recipe on 16 "
        "H100 25%, while NeMo AutoModel's Qwen3-30B-A3B run on 8 H100 simulates only 3-15% fast and Megatron-Bridge's "
        "recipes with every forward and backward op in one CUDA graph on GB200/GB300 are not fast at all "
        "(Qwen3-30B-A3B -3...+1% on 8-256 GPUs, Qwen3-235B-A22B -6...-1.5% on 256): the eager host's work looks "
        "undercounted (docs/accuracy.md); on an eager or partly graphed Megatron-Core stack read this step time "
        "as a lower bound"
    )


def _lean(row: dict[str, Any]) -> str:
    bias = row["speed_bias_pct"]
    return f"{abs(bias):.1f}% {'faster' if bias >= 0 else 'slower'}"
