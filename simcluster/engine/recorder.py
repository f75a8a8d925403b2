"""Event recording: one row per compute block or communication, later a pandas DataFrame."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simcluster.output.events import EVENT_COLUMNS, FLOW_COLUMN
from simcluster.parallelism.segments import Work

if TYPE_CHECKING:  # imported where the frames are built: the CLI's parser stays free of pandas
    import pandas as pd

COLUMNS = [*EVENT_COLUMNS, FLOW_COLUMN]

# group of a communication -> the stream it runs on
STREAM_OF_GROUP = {
    "tp": "comm_tp",
    "cp": "comm_cp",
    "cpa": "comm_cp",
    "cpr": "comm_cp",
    "ep": "comm_ep",
    "etp": "comm_ep",
    "dp": "comm_dp",
    "edp": "comm_dp",
    "dps": "comm_dp",
    "dpr": "comm_dp",
    "edps": "comm_dp",
    "edpr": "comm_dp",
    "dph": "comm_dp",
    "dpl": "comm_dp",
    "dpx": "comm_dp",
    "pp": "comm_pp",
    # a scatter/gather pipeline transfer's all-gather runs in the receive's blocking call
    "ppg": "comm_pp_recv",
    "embd": "comm_dp",  # tied-embedding gradient sync: a gradient reduction like DP's
    # FP8 amax reduction: a process group (and NCCL stream) of its own, spanning the replicas
    "amax": "comm_amax",
    "amax_tp": "comm_amax",
}


@dataclass
class Recorder:
    """Collects events and memory samples during a simulation."""

    rows: list[tuple] = field(default_factory=list)
    memory_rows: list[tuple] = field(default_factory=list)
    # rank -> category -> seconds of compute-stream time (engine/breakdown.py)
    compute_time: dict[int, dict[str, float]] = field(default_factory=dict)
    _flow: int = 0

    def spent(self, rank: int, kind: str, work: Work, duration: float) -> None:
        """Attribute ``duration`` seconds of a compute block to its categories, in proportion
        to its modelled work (a block slowed by a collective holding SMs keeps its mix).
        A recomputation counts as ``recompute`` whatever it reruns."""
        into = self.compute_time.setdefault(rank, {})
        total = work.total
        if kind == "recompute" or total <= 0:
            key = "recompute" if kind == "recompute" else "other"
            into[key] = into.get(key, 0.0) + duration
            return
        for category, seconds in work.parts:
            into[category] = into.get(category, 0.0) + duration * seconds / total

    def add(
        self,
        rank: int,
        stage: int,
        stream: str,
        kind: str,
        group: str,
        name: str,
        microbatch: int,
        chunk: int,
        layer: int,
        start: float,
        end: float,
        nbytes: float = 0.0,
        flow_id: int = -1,
    ) -> None:
        self.rows.append(
            (
                rank,
                stage,
                stream,
                kind,
                group,
                name,
                microbatch,
                chunk,
                layer,
                start,
                end,
                float(nbytes),
                flow_id,
            )
        )

    def next_flow(self) -> int:
        self._flow += 1
        return self._flow

    def memory(
        self, stage: int, time: float, static: dict[str, float], activations: float, loss: float = 0.0
    ) -> None:
        """One point of a stage's memory timeline; ``loss`` is the part of ``activations`` that
        is the loss's transient logit copies (memory.loss_transient_bytes)."""
        total = sum(static.values()) + activations
        self.memory_rows.append(
            (
                stage,
                time,
                static["params"],
                static["grads"],
                static["optimizer"],
                activations,
                static["other"],
                total,
                loss,
            )
        )

    def events(self) -> pd.DataFrame:
        import pandas as pd

        df = pd.DataFrame(self.rows, columns=COLUMNS)
        return df.sort_values(["rank", "stream", "start_s", "end_s"], kind="stable").reset_index(
            drop=True
        )

    def memory_frame(self) -> pd.DataFrame:
        import pandas as pd

        cols = ["stage", "time_s", "params", "grads", "optimizer", "activations", "other", "total", "loss"]
        return (
            pd.DataFrame(self.memory_rows, columns=cols)
            .sort_values(["stage", "time_s"], kind="stable")
            .reset_index(drop=True)
        )
