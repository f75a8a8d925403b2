"""Sizes beyond which a simulation would run for hours or exhaust memory.

The event engine, the memory model and the topology scale with the layer count, the microbatches
per step and the GPU count; inputs past these bounds (typos such as an extra zero run together,
or a value meant for another field) are refused with a one-line error instead of hanging.
Each bound is far above any published training run; :mod:`simcluster.size_bounds` applies the
ones that need the model and the layout together.
"""

MAX_GPUS = 131_072  # 2**17; the largest published clusters are ~100k GPUs
MAX_LAYERS = 10_000  # transformer layers (the largest published models have < 200)
MAX_MICROBATCHES = 1_000_000  # microbatches per pipeline per optimizer step
MAX_COLLECTIVE_BYTES = 2**50  # 1 PiB for one collective; a GPU holds its buffers in < 1 TiB

#: microbatches per pipeline x layers: each such layer pass is about 16 engine events, and the
#: engine runs about 5,000 events a second on one core (llama3-8b-8xh100 at 1,024 layers:
#: 127,035 events in 31 s; fewer a second on larger stages), so 2M passes take hours; the
#: largest published run in validation/ has 71,680 (BLOOM 176B at pp 24: 1,024 microbatches x
#: 70 layers)
MAX_LAYER_PASSES = 2_000_000
#: the largest m, n or k of a GEMM: PyTorch hands cuBLAS 32-bit dimensions and refuses larger
#: ones (aten/src/ATen/cuda/CUDABlas.cpp, CUDABLAS_POSINT_CHECK: "must be positive and less
#: than INT_MAX"); a linear layer's GEMM has the microbatch's tokens as m and its widths as n, k
MAX_GEMM_DIM = 2**31 - 1
#: routed experts of one MoE layer: 2**24, sixteen times the most any published model has (PEER,
#: He, 'Mixture of A Million Experts', arXiv 2407.04202: 1,048,576 single-neuron experts; the
#: largest trained LLMs route over 256 to 512)
MAX_EXPERTS = 2**24
#: GiB of memory one GPU can address: 2**49 bytes (512 TiB), the 49-bit virtual addresses of
#: NVIDIA's GPUs since Pascal (Tesla P100 whitepaper, Unified Memory: 49-bit virtual addressing,
#: enough for a CPU's 48 bits and the GPU's own memory); a GPU's memory or a reserve within it
#: beyond that is a typo, and as bytes it overflowed the memory figures to infinity
MAX_GPU_MEMORY_GIB = 2**19


def addressable_gib(gib: float) -> float:
    """``gib`` if one GPU could address that much memory, else ValueError saying why (for a
    pydantic ``AfterValidator``: the field is named by the scenario's or profile's loader)."""
    if gib > MAX_GPU_MEMORY_GIB:
        raise ValueError(
            f"is more than the {MAX_GPU_MEMORY_GIB:,} GiB (2^49 bytes) a GPU can address (49-bit "
            "virtual addresses, NVIDIA's since Pascal); lower it"
        )
    return gib
