"""Write the shipped quick cases with only the settings a paper's table usually states.

    python tools/stated_settings_cases.py [--framework] /tmp/stated.yaml
    simcluster validate /tmp/stated.yaml --json --jobs 2 > /tmp/stated.json

Each case keeps its model, its cluster section (hardware, GPU count, network overrides), its parallel degrees, ZeRO stage and
schedule, its sequence, batch, precision (with FP8 recipe), recomputation and optimizer, and its
MoE section; it loses its ``framework:``, ``overlap``, ``dp`` and ``zero3`` sections and every
other training field (attention kernel, elementwise style, gradient accumulation ...), so it
runs on simcluster's defaults. Comparing the two runs shows how much the framework's own
settings move each family (docs/accuracy.md, "How much the settings a paper leaves out matter").
With ``--framework`` each case also names the framework its source ran (``FAMILY_FRAMEWORK``:
what a reader who knows only the table and the software writes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from simcluster.validate import load_cases

PARALLEL = {"dp", "tp", "pp", "cp", "ep", "etp", "vpp", "zero", "sequence_parallel", "schedule"}
TRAINING = {
    "seq_len", "micro_batch", "global_batch", "precision", "fp8_recipe", "recompute", "recompute_num_layers",
    "optimizer",
}

#: the software each family's source names, with its release where the source gives it
FAMILY_FRAMEWORK = {
    "zero-bubble-a100": "zero-bubble", "zero-bubble-v-a100": "zero-bubble",
    "narayanan2021-a100": "megatron-lm-2021", "korthikanti2022-a100": "megatron-lm-2021",
    "bigscience-a100": "deepspeed", "megatron-core-h100": "megatron-core r0.8", "nanotron-h100": "nanotron",
    "torchtitan-a100": "torchtitan", "nemo-fp8-h100": "NeMo 24.07", "nemo-long-context-h100": "NeMo 24.03.01",
    "nemo-long-context-b200": "NeMo 25.04", "megatron-bridge-fp8-h100": "megatron-bridge",
    "megatron-bridge-fp8-blackwell": "megatron-bridge", "megatron-bridge-nvfp4-blackwell": "megatron-bridge",
    "nvidia-dgxc-h100": "nemo", "nvidia-dgxc-grok1": "nemo", "swissai-gh200": "megatron-core",
}  # fmt: skip


def stated(scenario: dict[str, Any]) -> dict[str, Any]:
    """``scenario`` reduced to the settings a published table states."""
    out: dict[str, Any] = {
        "model": scenario["model"],
        "cluster": scenario["cluster"],
        "parallel": {k: v for k, v in (scenario.get("parallel") or {}).items() if k in PARALLEL},
        "training": {k: v for k, v in scenario["training"].items() if k in TRAINING},
    }
    if "moe" in scenario:
        out["moe"] = scenario["moe"]
    return out


def main(argv: list[str]) -> int:
    named = "--framework" in argv
    argv = [a for a in argv if a != "--framework"]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    cases = []
    for case in load_cases(quick=True):
        scenario = stated(case.scenario)
        if named and case.family in FAMILY_FRAMEWORK:
            scenario = {"framework": FAMILY_FRAMEWORK[case.family], **scenario}
        entry: dict[str, Any] = {
            "name": case.name,
            "family": case.family,
            "source": "stated settings only (tools/stated_settings_cases.py)",
            "scenario": scenario,
            "measured": {case.metric: case.measured},
        }
        if case.flops != "megatron":
            entry["flops"] = case.flops
        cases.append(entry)
    Path(argv[0]).write_text(yaml.safe_dump({"cases": cases}, sort_keys=False))
    print(f"wrote {len(cases)} cases to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
