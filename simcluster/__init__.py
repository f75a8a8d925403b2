"""simcluster: a discrete-event simulator of distributed LLM training on GPU clusters."""

__version__ = "0.1.0"


def simulate(scenario, hardware=None, all_ranks=None):  # noqa: ANN001, ANN201 - thin re-export
    """Simulate one training step of a scenario (a :class:`simcluster.scenario.Scenario`)."""
    from simcluster.engine import simulate as _simulate

    return _simulate(scenario, hardware=hardware, all_ranks=all_ranks)
