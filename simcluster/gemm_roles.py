"""The role a GEMM plays in a training step, and a calibrated profile's timings looked up by it.

``torch.nn.Linear`` keeps its weight as ``[out, in]``, so autograd issues the three GEMMs of a
linear layer with different operand layouts (``torch.nn.functional.linear`` forward; the
backward of ``aten::mm``: ``grad @ mat2.t()`` and ``self.t() @ grad``), and cuBLAS runs each with
its own transpose setting, tile choice and, for the weight gradient, a reduction over the
tokens. A calibrated table of plain ``A @ B`` timings therefore times the backward GEMMs in a
layout the training step never uses. With ``calibrate --scenario`` every GEMM of the step is
timed in the layout of its role, in the simulator's (M, N, K):

==========  ================================  =====================================
role        product                            simulator's M, N, K
==========  ================================  =====================================
``fwd``     ``y = x @ W.t()``, W ``[n, k]``     tokens, out, in
``dgrad``   ``dx = dy @ W``, W ``[k, n]``        tokens, in, out
``wgrad``   ``dW = dy.t() @ x`` (``[n, m]``)    in, out, tokens
==========  ================================  =====================================

A timed row without a role is a plain ``A @ B`` (the calibrate grid, or a profile written before
roles existed). The lookup takes the row of the GEMM's own role, else a plain row of the same
shape, else the fastest row of that shape in any role: each is a measurement of that exact
shape on the GPU, closer than the size curve.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simcluster.errors import UserError

#: the roles of a linear layer's GEMMs, in the order a step first runs them
ROLES = ("fwd", "dgrad", "wgrad")

#: the role of the dense GEMMs of each phase: forward, input gradient (B), weight gradient (W)
PHASE_ROLES = {"F": "fwd", "B": "dgrad", "W": "wgrad"}


def check_role(role: object, field_name: str) -> str | None:
    """``role`` as a timed row or a shape gives it (None for a plain ``A @ B``), or a one-line
    error naming ``field_name`` and the roles."""
    if role is None:
        return None
    if role not in ROLES:
        raise UserError(field_name, f"role '{role}' is not one of {', '.join(ROLES)} (or none for a plain A @ B)")
    return str(role)


Key = tuple[str, int, int, int]


@dataclass
class TimedGemms:
    """A calibrated profile's ``measured.gemm`` rows: seconds per (dtype, M, N, K, role)."""

    by_role: dict[tuple[str, int, int, int, str | None], float] = field(default_factory=dict)
    by_shape: dict[Key, float] = field(default_factory=dict)

    @classmethod
    def of_rows(cls, rows: Iterable[Mapping[str, Any]]) -> TimedGemms:
        """The fastest time of each (dtype, M, N, K, role) among ``rows``."""
        table = cls()
        for i, row in enumerate(rows):
            key: Key = (str(row["dtype"]), int(row["m"]), int(row["n"]), int(row["k"]))
            role = check_role(row.get("role"), f"measured.gemm[{i}].role")
            seconds = float(row["time_s"])
            table.by_role[(*key, role)] = min(seconds, table.by_role.get((*key, role), math.inf))
            table.by_shape[key] = min(seconds, table.by_shape.get(key, math.inf))
        return table

    def seconds(self, dtype: str, m: float, n: float, k: float, role: str | None = None) -> float | None:
        """The measured time of this GEMM (module docstring: own role, plain, any), or None."""
        key: Key = (dtype, round(m), round(n), round(k))
        for found in (self.by_role.get((*key, role)), self.by_role.get((*key, None))):
            if found is not None:
                return found
        return self.by_shape.get(key)
