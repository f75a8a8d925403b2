"""The SimPy engine: plans, simulated GPUs, and the step's result."""

from simcluster.engine.result import SimResult
from simcluster.engine.simulate import simulate

__all__ = ["SimResult", "simulate"]
