"""The launched ranks of ``calibrate measure-step`` as the simulator lays them out, and the
data-parallel wrapper of a module: the (pp, dp, tp) device mesh taken from the scenario's rank
grid, DistributedDataParallel (zero 0) or FSDP2 (zero 3) over the mesh's data-parallel
dimension."""

from __future__ import annotations

from typing import Any


def rank_mesh(layout: Any, device_type: str) -> Any:
    """A (pp, dp, tp) DeviceMesh of the simulator's rank grid (``Layout.grid`` is indexed
    tp, cp, dp, pp; measure-step runs no context parallelism). Every rank builds it alike."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    grid = torch.as_tensor(layout.grid[:, 0, :, :]).permute(2, 1, 0).contiguous()
    return DeviceMesh(device_type, grid, mesh_dim_names=("pp", "dp", "tp"))


def wrap_data_parallel(module: Any, layout: Any, mesh: Any, device: Any, pipelined: bool) -> Any:
    """``module`` under its data-parallel wrapper over the mesh's dp dimension: FSDP2 for
    zero 3 (``fully_shard`` on every layer, then the module; parameters kept gathered from
    forward to backward under a pipeline, as torchtitan sets reshard_after_forward = not
    pp_enabled; without one, torchtitan's apply_fsdp: every layer, then the root), DDP with
    25 MiB buckets for zero 0; unchanged at dp 1."""
    if layout.dp <= 1:
        return module
    dp_mesh = mesh["dp"]
    if layout.zero == 3:
        from torch.distributed.fsdp import fully_shard

        for block in module.blocks:
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=not pipelined)
        return fully_shard(module, mesh=dp_mesh, reshard_after_forward=not pipelined)
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids, bucket_cap_mb=25, process_group=dp_mesh.get_group())
