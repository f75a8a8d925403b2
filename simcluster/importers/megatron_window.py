"""Megatron-Core's sliding-window attention flags as ``model.sliding_window`` / ``global_every``.

``--window-size LEFT,RIGHT`` hands TransformerEngine's attention a window: a query attends to the
LEFT keys before it and itself (``get_sliding_window_causal_mask``; -1: no bound), RIGHT after it,
which a causal model leaves at 0. ``--window-attn-skip-freq`` says which layers keep the whole
sequence (``transformer/utils.py`` ``is_layer_window_attention``, layers counted from 1): an
integer N makes every N-th layer global, a list (1 = windowed, 0 = global, arguments.py's
``moe_freq_type``) gives each layer; without it every layer is windowed. simcluster's
``model.sliding_window`` counts the keys a query sees, itself included, and ``global_every`` k makes
layer i (from 0) global when (i + 1) % k == 0: the same layers as Megatron's integer N = k.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import UserError
from simcluster.importers.flags import Flags
from simcluster.importers.megatron_moe import every_nth, freq_pattern
from simcluster.importers.result import Imported


def sliding_window(flags: Flags, model: dict[str, Any], out: Imported) -> None:
    """``model.sliding_window`` and ``model.global_every`` from the window flags."""
    text = flags.text("window-size")
    skip = flags.text("window-attn-skip-freq")
    if text is None:
        if skip is not None:
            out.notes.append(f"--window-attn-skip-freq {skip} without --window-size: every layer attends globally")
        return
    left, right = _window(text)
    if left < 0:
        out.notes.append(f"--window-size {text}: no bound on the left, every layer attends globally")
        return
    model["sliding_window"] = left + 1  # the LEFT keys before a query and its own
    every = _global_every(skip, model["layers"])
    if every == 1:
        model.pop("sliding_window")
        out.notes.append(f"--window-attn-skip-freq {skip}: every layer is global, no window")
    elif every:
        model["global_every"] = every


def _window(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"\(?\s*(-?\d+)\s*,\s*(-?\d+)\s*\)?", text)
    if match is None:
        raise UserError("--window-size", f"'{text}' is not LEFT,RIGHT (e.g. 4096,0)")
    left, right = int(match[1]), int(match[2])
    if right not in (0, -1):
        raise UserError(
            "--window-size",
            f"({left}, {right}) lets a query attend {right} keys after it; a causal GPT attends none: "
            f"give {left},0",
        )
    return left, right


def _global_every(skip: str | None, layers: int) -> int:
    """simcluster's ``global_every`` for ``--window-attn-skip-freq`` (0: every layer windowed)."""
    if skip is None:
        return 0
    if re.fullmatch(r"\d+", skip):
        return int(skip)
    global_layers = [1 - v for v in freq_pattern(skip, "--window-attn-skip-freq", layers)]  # 1 = global
    if not any(global_layers):
        return 0
    period = every_nth(global_layers)  # 1 where every layer is global
    if period is None:
        raise UserError(
            "--window-attn-skip-freq",
            f"'{skip}' is not every N-th layer global among windowed ones; give the layout with "
            "--set model.global_every=N",
        )
    return period
