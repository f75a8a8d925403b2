"""Megatron-Core's ``--pipeline-model-parallel-layout`` as ``parallel.vpp`` and
``parallel.layers_per_stage``.

The layout names each virtual pipeline stage's layers in model order, stages split by ``|``:
``E`` the embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction module, ``L`` the
loss (the LM head); ``(...)*n`` repeats a group and ``x*n`` a character, commas are cosmetic
(``transformer/pipeline_parallel_layer_layout.py``, ``parse_str_to_list``). Its stage count over
the pipeline size is the virtual pipeline size (``training/arguments.py``: the layout sets
``virtual_pipeline_model_parallel_size``), stage ``i`` running on rank ``i % pp`` as chunk
``i // pp``, which is ``layers_per_stage``'s order. ``validate_layer_layout`` asserts the embedding
first and the loss last, each once, and the transformer layers numbering ``--num-layers``.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import UserError

FLAG = "--pipeline-model-parallel-layout"

#: the layer characters Megatron-Core's parser knows (``char2layer_type``)
_KNOWN = frozenset("ELtm")
#: flags that split the pipeline another way, which the layout replaces
_OTHER_SPLITS = (
    "decoder-first-pipeline-num-layers",
    "decoder-last-pipeline-num-layers",
    "num-layers-per-virtual-pipeline-stage",
    "num-virtual-stages-per-pipeline-rank",
    "account-for-embedding-in-pipeline-split",
    "account-for-loss-in-pipeline-split",
)


def parse_stages(layout: str) -> list[str]:
    """The layout's virtual stages in model order, each a string of layer characters."""
    text = layout.replace(",", "")
    # Megatron unrolls the groups first, then single characters, as these two substitutions do
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
    stages = text.split("|")
    for stage in stages:
        unknown = set(stage) - _KNOWN
        if unknown:
            raise UserError(
                FLAG,
                f"'{layout}' has {''.join(sorted(unknown))!r}, which Megatron-Core does not know; "
                "use E (embedding), t (transformer layer), m (MTP module), L (loss), | between stages",
            )
    return stages


def layout_split(layout: str, pp: int, layers: int, mtp: int = 0) -> tuple[int, list[int]]:
    """(vpp, layers of each of the pp*vpp virtual stages) of ``layout`` for a ``pp``-rank
    pipeline of ``layers`` transformer layers and ``mtp`` MTP modules; a layout Megatron-Core
    refuses is an error, and so is an MTP module outside the last stage, where the model keeps
    it with the LM head."""
    stages = parse_stages(layout)
    if len(stages) % pp:
        raise UserError(
            FLAG, f"has {len(stages)} stages, which do not divide over pp {pp}; give a multiple of {pp}"
        )
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1 or not flat.endswith("L") or flat.count("L") != 1:
        raise UserError(
            FLAG, f"'{layout}' must start with the embedding E and end with the loss L, each once"
        )
    if flat.count("t") != layers:
        raise UserError(
            FLAG,
            f"places {flat.count('t')} transformer layers (t) but the model has {layers}; make them match",
        )
    if "m" in "".join(stages[:-1]):
        raise UserError(
            FLAG,
            "places an MTP module (m) before the last stage; the model keeps MTP with the LM head: "
            "move it into the last stage",
        )
    if flat.count("m") != mtp:
        # validate_layer_layout: the layout's MTP modules number --mtp-num-layers
        raise UserError(FLAG, f"places {flat.count('m')} MTP modules (m) but --mtp-num-layers gives {mtp}; make them match")
    return len(stages) // pp, [stage.count("t") for stage in stages]


def apply_layout(text: str | None, given: set[str], sc: dict[str, Any]) -> None:
    """Write ``--pipeline-model-parallel-layout`` into ``sc['parallel']`` (``vpp`` when above
    one, ``layers_per_stage``); ``given`` = the launch line's flags, refused beside it where they
    split the pipeline too."""
    if text is None:
        return
    for other in _OTHER_SPLITS:
        if other in given:
            raise UserError(FLAG, f"Megatron takes one way to split the pipeline: drop it or --{other}")
    parallel = sc["parallel"]
    pp = parallel.get("pp", 1)
    vpp, counts = layout_split(text, pp, sc["model"]["layers"], sc["model"].get("mtp_layers") or 0)
    if vpp > 1:
        parallel["vpp"] = vpp
    parallel["layers_per_stage"] = counts
