"""Check physical monotonicity on random scenarios: faster hardware never makes a step slower.

    python tools/metamorphic.py --seed 1 --count 100 --out /tmp/meta

Each scenario is drawn as tools/fuzz_scenarios.py draws one; those that simulate are simulated
again with one part of the hardware made faster through the scenario's ``cluster.profile``
patch: every tensor-core peak, the HBM bandwidth, the NVLink bandwidth, the NIC bandwidth (each
x1.5) or the NIC latency (x0.5). None of these can lengthen a real step, so a variant whose
step is more than ``--tolerance`` slower than the baseline is a finding (an algorithm chosen
against its own cost, a schedule anomaly, a table read at the wrong point) and is written to
``--out`` with the two step times. It takes minutes, so it is a tool to run by hand.
"""

from __future__ import annotations

import argparse
import copy
import random
import signal
import sys
from pathlib import Path
from typing import Any

import yaml
from fuzz_scenarios import draw

from simcluster.commands.common import progress_bar
from simcluster.context import build_context
from simcluster.engine import simulate
from simcluster.errors import UserError
from simcluster.scenario import scenario_from_dict


def _faster(profile: Any) -> dict[str, dict[str, Any]]:
    """Each variant's ``cluster.profile`` patch, built from the drawn profile's own values."""
    gpu, node = profile.gpu, profile.node
    return {
        "compute x1.5": {"gpu": {"peak_tflops": {k: v * 1.5 for k, v in gpu.peak_tflops.items()}}},
        "hbm x1.5": {"gpu": {"hbm_tbps": gpu.hbm_tbps * 1.5}},
        "nvlink x1.5": {"node": {"nvlink_GBps": node.nvlink_GBps * 1.5}},
        "nic x1.5": {"node": {"nic_gbps": node.nic_gbps * 1.5}},
        "nic latency x0.5": {"node": {"nic_latency_us": node.nic_latency_us * 0.5}},
    }


class _Timeout(Exception):
    pass


def _step(doc: dict[str, Any], timeout_s: int) -> tuple[float, Any] | None:
    """The step time in seconds and the profile as the scenario changed it, or None when the
    scenario is refused or runs too long."""

    def expire(*_: object) -> None:
        raise _Timeout

    signal.signal(signal.SIGALRM, expire)
    signal.alarm(timeout_s)
    try:
        ctx = build_context(scenario_from_dict(doc))
        return float(simulate(ctx).summary["step_time_s"]), ctx.profile
    except (UserError, _Timeout):
        return None
    finally:
        signal.alarm(0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=50, help="random scenarios drawn (default 50)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per simulation (default 60)")
    parser.add_argument("--tolerance", type=float, default=0.005, help="allowed slow-down (default 0.005)")
    parser.add_argument("--out", type=Path, default=Path("metamorphic-findings"))
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    checked = findings = 0
    with progress_bar("metamorphic", args.count) as advance:
        for i in range(args.count):
            doc = draw(rng)
            baseline = _step(doc, args.timeout)
            if baseline is not None:
                checked += 1
                base, profile = baseline  # with the scenario's own overrides (cluster.nic_gbps)
                for name, patch in _faster(profile).items():
                    variant = copy.deepcopy(doc)
                    variant["cluster"]["profile"] = patch
                    result = _step(variant, args.timeout)
                    step = result[0] if result else None
                    if step is not None and step > base * (1 + args.tolerance):
                        findings += 1
                        args.out.mkdir(parents=True, exist_ok=True)
                        path = args.out / f"seed{args.seed}-{i}-{name.split()[0]}.yaml"
                        line = f"{name}: step {base:.6g} s -> {step:.6g} s ({step / base - 1:+.1%})"
                        path.write_text(f"# {line}\n" + yaml.safe_dump(variant))
                        print(f"{path}: {line}", flush=True)
            advance(f"{findings} findings")
    print(f"{args.count} drawn, {checked} simulated and varied 5 ways, {findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
