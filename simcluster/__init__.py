"""simcluster: a discrete-event simulator of distributed LLM training on GPU clusters."""

__version__ = "0.1.0"
