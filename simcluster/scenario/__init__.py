"""Scenario schema (YAML), loading, ``--set a.b=c`` overrides, and field-naming errors.

The keys here are public: tests, docs and ``--set`` use them. Unknown keys are errors with a
did-you-mean hint; every error names the dotted field and the fix. One module per section
(``model_cluster``, ``parallel``, ``training``, ``overlap``, ``data_parallel``, ``moe``,
``lora``), the
whole document in ``document``, files and overrides in ``loading``.
"""

from simcluster.scenario.data_parallel import DpSection, Zero3Section
from simcluster.scenario.document import Scenario, SimulationSection, Straggler
from simcluster.scenario.loading import (
    apply_overrides,
    load_scenario,
    parse_set,
    resolve_scenario_path,
    scenario_from_dict,
    shipped_scenarios,
)
from simcluster.scenario.lora import LoraSection, LoraTarget
from simcluster.scenario.model_cluster import ClusterSection, ModelSection
from simcluster.scenario.moe import MoeSection
from simcluster.scenario.overlap import OverlapSection
from simcluster.scenario.parallel import ParallelSection
from simcluster.scenario.training import RecomputeModule, TrainingSection

__all__ = [
    "ClusterSection", "DpSection", "LoraSection", "LoraTarget", "ModelSection", "MoeSection", "OverlapSection", "ParallelSection",
    "RecomputeModule", "Scenario", "SimulationSection", "Straggler", "TrainingSection",
    "Zero3Section", "apply_overrides", "load_scenario", "parse_set", "resolve_scenario_path",
    "scenario_from_dict", "shipped_scenarios",
]  # fmt: skip
