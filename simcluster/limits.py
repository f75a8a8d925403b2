"""Sizes beyond which a simulation would run for hours or exhaust memory.

The event engine, the memory model and the topology scale with the layer count, the microbatches
per step and the GPU count; inputs past these bounds (typos such as an extra zero run together,
or a value meant for another field) are refused with a one-line error instead of hanging.
Each bound is far above any published training run.
"""

MAX_GPUS = 131_072  # 2**17; the largest published clusters are ~100k GPUs
MAX_LAYERS = 10_000  # transformer layers (the largest published models have < 200)
MAX_MICROBATCHES = 1_000_000  # microbatches per pipeline per optimizer step
MAX_COLLECTIVE_BYTES = 2**50  # 1 PiB for one collective; a GPU holds its buffers in < 1 TiB
