"""What ``simcluster import`` is told beside the launch config: the cluster (launch configs do
not name it), a model for configs that do not shape one, and script variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simcluster.errors import UserError


@dataclass(frozen=True)
class ImportOptions:
    """The command line's part of an import."""

    cluster: str | None = None
    nodes: int | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    model: str | None = None
    hf_config: str | None = None
    seq_len: int | None = None
    framework: str | None = None
    #: shell variables set before a launch script runs (``--var MODEL_SIZE=39B``)
    variables: dict[str, str] = field(default_factory=dict)
    #: the JSON object of ``hf_config``, read once by the command (commands/importing.py)
    hf_parsed: dict[str, Any] | None = None

    def cluster_section(self) -> dict[str, Any]:
        """``cluster:`` from ``--cluster`` and ``--nodes``/``--gpus`` (``--gpus-per-node``)."""
        if not self.cluster:
            raise UserError(
                "--cluster",
                "a launch config does not name the hardware; pass --cluster PROFILE "
                "(simcluster list hardware) with --nodes N or --gpus N",
            )
        if (self.nodes is None) == (self.gpus is None):
            raise UserError(
                "--nodes",
                "give the job's size as --nodes N (nodes of the profile's GPUs, or of "
                "--gpus-per-node) or --gpus N, one of the two",
            )
        section: dict[str, Any] = {"hardware": self.cluster}
        if self.nodes is not None:
            section["nodes"] = self.nodes
        else:
            section["gpus"] = self.gpus
        if self.gpus_per_node is not None:
            section["gpus_per_node"] = self.gpus_per_node
        return section

    def refuse(self, kind: str, *names: str) -> None:
        """A one-line error for an option a ``kind`` config has no use for (``--model`` beside a
        Megatron launch line, which shapes the model itself), rather than ignoring it."""
        for name in names:
            if getattr(self, name.replace("-", "_")) not in (None, {}):
                flag = {"variables": "var"}.get(name, name)
                raise UserError(
                    f"--{flag}",
                    f"not used with a {kind} config; leave it out (change the imported scenario with --set)",
                )

    def world(self) -> int:
        """GPUs in the job: ``--gpus``, or ``--nodes`` x the GPUs per node (``--gpus-per-node``
        or the profile's)."""
        self.cluster_section()  # the same one-line errors when the size is missing
        if self.gpus is not None:
            return self.gpus
        from simcluster.hardware import load_profile  # hardware imports the scenario schema

        assert self.cluster is not None and self.nodes is not None  # checked by cluster_section
        return self.nodes * (
            self.gpus_per_node or load_profile(self.cluster, field="--cluster").gpus_per_node
        )

    def model_section(self, field_name: str) -> dict[str, Any]:
        """``model:`` from ``--model PRESET`` or ``--hf-config PATH``, for configs without one."""
        if self.model and self.hf_config:
            raise UserError("--model", "give --model PRESET or --hf-config PATH, not both")
        if self.model:
            return {"preset": self.model}
        if self.hf_config:
            return {"hf_config": self.hf_config}
        raise UserError(
            field_name,
            "the config does not describe the model; pass --model PRESET (simcluster list "
            "models) or --hf-config path/to/config.json",
        )
