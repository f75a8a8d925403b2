"""Split the model's layers over the pipeline's virtual stages, as the frameworks do."""

from __future__ import annotations

from simcluster.errors import UserError


def layers_per_stage(
    layers: int, p: int, v: int = 1, explicit: list[int] | None = None
) -> list[int]:
    """Layers of each of the V = p*v virtual stages, in model order.

    Even when divisible; else, if (layers + 2) divides by V, the first and last virtual stage get
    one fewer (they hold the embedding and the LM head: Llama 3 405B puts 126 layers on 16 stages
    as 7, 8 x 14, 7); else the remainder goes to the middle stages.
    """
    stages = p * v
    if explicit is not None:
        if len(explicit) != stages:
            raise UserError(
                "parallel.layers_per_stage",
                f"has {len(explicit)} entries; give one per virtual stage ({stages})",
            )
        if any(n <= 0 for n in explicit):
            raise UserError("parallel.layers_per_stage", "every stage needs at least one layer")
        if sum(explicit) != layers:
            raise UserError(
                "parallel.layers_per_stage",
                f"sums to {sum(explicit)}; it must sum to the model's {layers} layers",
            )
        return list(explicit)
    if layers < stages:
        raise UserError("parallel.pp", f"{stages} virtual stages but only {layers} layers")
    if layers % stages == 0:
        return [layers // stages] * stages
    if stages > 2 and (layers + 2) % stages == 0:
        n = (layers + 2) // stages
        return [n - 1] + [n] * (stages - 2) + [n - 1]
    base, rem = divmod(layers, stages)
    counts = [base] * stages
    middle = list(range(1, stages - 1)) or list(range(stages))
    for i in range(rem):
        counts[middle[i % len(middle)]] += 1
    return counts
