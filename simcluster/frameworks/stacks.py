"""The frameworks that run Megatron-Core underneath: one list for every rule that follows
Megatron-Core's code rather than one framework's recipes.

NeMo 2 and Megatron-Bridge build their models from Megatron-Core's modules and train them
with its schedules, optimizer and DistributedDataParallel, so what Megatron-Core's code
offers, refuses or overlaps holds for the three alike; what only their recipes set lives in
each framework's preset instead (:mod:`simcluster.frameworks.megatron`).
"""

from __future__ import annotations

#: framework names whose training loop is Megatron-Core's
MEGATRON_CORE_STACKS: frozenset[str] = frozenset({"megatron-core", "nemo", "megatron-bridge"})


def runs_megatron_core(framework: str | None) -> bool:
    """Whether a scenario's framework trains with Megatron-Core's code. A scenario that names
    no framework runs simcluster's Megatron-like defaults, so its rules are Megatron-Core's."""
    return framework is None or framework in MEGATRON_CORE_STACKS
