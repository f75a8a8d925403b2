"""A framework named with its release (simcluster/framework_releases.py).

The dated settings are checked against the shipped cases in tests/test_frameworks.py (the NeMo
24.03 and 24.07 families, Megatron-Core r0.8); here: how releases are written, what each release
runs, and the one-line errors.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simcluster.context import build_context
from simcluster.errors import UserError
from simcluster.framework_releases import release_key, split_release
from simcluster.scenario import scenario_from_dict
from simcluster.validate import _names_megatron_bridge


@pytest.mark.parametrize(
    ("written", "name", "release"),
    [
        ("NeMo 24.03.01", "NeMo", "24.03.01"),  # NeMo's long-sequence page: "NeMo 24.03.01 container"
        ("NeMo24.07", "NeMo", "24.07"),  # its performance summary: "container NeMo24.07"
        ("NeMo25.04.rc2", "NeMo", "25.04"),
        ("nemo@24.07", "nemo", "24.07"),
        ("Megatron-Core r0.8.0", "Megatron-Core", "0.8.0"),
        ("Megatron-LM core_r0.8.0", "Megatron-LM", "0.8.0"),  # Megatron-LM's release tags
        ("nanotron v0.5", "nanotron", "0.5"),
        ("Megatron-Bridge 25.09", "Megatron-Bridge", "25.09"),
        # a name ending in a number is a name: no dotted release
        ("nemo-2", "nemo-2", None),
        ("NeMo 2", "NeMo 2", None),
        ("megatron-lm-2021", "megatron-lm-2021", None),
    ],
)
def test_a_release_is_read_as_tables_write_it(written: str, name: str, release: str | None) -> None:
    assert split_release(written) == (name, release)


def test_releases_compare_by_number() -> None:
    assert release_key("24.03.01") < release_key("24.09") < release_key("24.12") < release_key("25.04")
    assert release_key("0.8.0") < release_key("0.10")  # not as text: "0.8" > "0.10"


def _scenario(framework: str, **extra) -> dict:
    return {
        "framework": framework,
        "model": {"preset": "llama2-7b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 2},
        "training": {"seq_len": 4096, "micro_batch": 1, "global_batch": 16, "precision": "fp8"},
        **extra,
    }


def _attention(framework: str) -> str | None:
    return build_context(scenario_from_dict(_scenario(framework))).scenario.training.attention_kernel


def test_nemo_before_24_09_runs_flash_attention_2_on_hopper() -> None:
    # NeMo-Framework-Launcher disabled TransformerEngine's fused (cuDNN) attention until its pull
    # request 422 of August 2024; from then on TE picks cuDNN on Hopper, the profile's default
    assert _attention("NeMo 24.03.01") == "fa2"
    assert _attention("NeMo24.07") == "fa2"
    assert _attention("nemo 24.09") != "fa2"
    assert _attention("nemo") == _attention("nemo 24.09") == _attention("Megatron-Bridge 25.09")


def test_nemo_before_26_02_runs_its_containers_cudnn_where_a_profile_keeps_it() -> None:
    # NeMo 25.09 / 25.11 carried cuDNN 9.11.0.98 / 9.13.1.26, 26.02 9.18.0.50 (Megatron-Bridge
    # docs/releases/software-versions.md): before 26.02 a GB200 runs the pre-9.17 SDPA kernels,
    # cuDNN 9.10.2's curves (cudnn-frontend cb560b9) up to 25.09, 9.13.1's in 25.11; GB300 keeps
    # no 9.10 curves, so 9.13.1's from 24.09; H100 and B200 keep no older curves, so their own cudnn
    def kernel(release: str, hardware: str) -> str | None:
        ctx = build_context(scenario_from_dict(_scenario(release, cluster={"hardware": hardware, "gpus": 8})))
        return ctx.profile.attention_kernel_in_use(ctx.scenario.training.attention_kernel)

    assert kernel("nemo 25.09", "gb200-nvl72") == kernel("nemo 24.09", "gb200-nvl72") == "cudnn-9.10"
    assert kernel("nemo 25.11", "gb200-nvl72") == "cudnn-9.13"
    assert kernel("nemo 25.09", "gb300-nvl72") == kernel("nemo 25.11", "gb300-nvl72") == "cudnn-9.13"
    assert kernel("nemo 26.02", "gb200-nvl72") == kernel("nemo", "gb200-nvl72") == "cudnn"
    assert kernel("nemo 24.07", "gb200-nvl72") == "cudnn"  # fa2 before 24.09: no Blackwell curve for it
    assert kernel("nemo 25.11", "dgx-b200") == kernel("nemo 25.09", "dgx-h100") == "cudnn"


def test_nemo_1x_releases_bucket_as_apex_distributed_fused_adam() -> None:
    old = scenario_from_dict(_scenario("nemo 24.07"))
    assert old.dp.bucket_mb == pytest.approx(100 * 2**20 / 1e6, rel=1e-5)  # bucket_cap_mb 100 (MiB)
    assert old.dp.bucket_stages == "all"
    now = scenario_from_dict(_scenario("nemo"))  # NeMo 2's MegatronCommOverlapCallback buckets
    assert now.dp.bucket_mb == "comm-overlap" and now.dp.bucket_stages == "first"


def test_transformer_engine_1x_userbuffers_until_nemo_24_12() -> None:
    # NeMo's software component versions: TE 1.6 (24.05), 1.8 (24.07), 1.10 (24.09)
    cfg = {r: scenario_from_dict(_scenario(f"nemo {r}")).overlap.tp_comm_cfg for r in ("24.05", "24.09", "24.12")}
    assert cfg == {"24.05": "te-1", "24.09": "te-1", "24.12": None}
    assert scenario_from_dict(_scenario("megatron-core r0.8")).overlap.tp_comm_cfg == "te-1"
    assert scenario_from_dict(_scenario("megatron-core 0.10.0")).overlap.tp_comm_cfg is None


def test_an_explicit_field_beats_the_release() -> None:
    sc = scenario_from_dict(_scenario("nemo 24.07", dp={"bucket_mb": 40.0},
                                      training={"seq_len": 4096, "global_batch": 16, "attention_kernel": "cudnn"}))
    assert sc.dp.bucket_mb == 40.0
    assert build_context(sc).scenario.training.attention_kernel == "cudnn"


def test_the_release_is_kept_and_may_be_given_on_its_own() -> None:
    assert scenario_from_dict(_scenario("NeMo 24.07")).framework_release == "24.07"
    alone = scenario_from_dict(_scenario("nemo", framework_release="24.07"))
    assert alone == scenario_from_dict(_scenario("nemo 24.07"))


def test_a_release_names_megatron_bridge_for_the_flop_count() -> None:
    assert _names_megatron_bridge({"framework": "Megatron-Bridge 25.09"})
    assert not _names_megatron_bridge({"framework": "NeMo 25.09"})


@pytest.mark.parametrize(
    ("framework", "extra", "field", "says"),
    [
        ("nemo 2.0", {}, "framework", "container release"),  # a library version
        ("megatron-core 24.07", {}, "framework", "framework nemo"),
        ("nemo", {"framework_release": 24.1}, "framework_release", "quote"),  # YAML's 24.10
        ("nemo 24.07", {"framework_release": "24.09"}, "framework_release", "once"),
        ("nemo", {"framework_release": "latest"}, "framework_release", "not a release"),
    ],
)
def test_release_errors_name_the_field_and_the_fix(framework: str, extra: dict, field: str, says: str) -> None:
    with pytest.raises(UserError) as err:
        scenario_from_dict(_scenario(framework, **extra))
    assert err.value.field == field and says in str(err.value)


def test_a_release_without_a_framework_exits_2_in_one_line(tmp_path: Path) -> None:
    raw = _scenario("nemo")
    del raw["framework"]
    raw["framework_release"] = "24.07"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, "-m", "simcluster", "run", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "framework_release" in proc.stderr


def test_list_frameworks_says_which_releases_differ() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "simcluster", "list", "frameworks"], capture_output=True, text=True, check=True
    )
    nemo = next(line for line in proc.stdout.splitlines() if line.startswith("nemo "))
    assert "before 24.09: attention fa2" in nemo


def test_framework_version_is_the_release() -> None:
    assert scenario_from_dict(_scenario("nemo", framework_version="24.07")) == scenario_from_dict(_scenario("nemo 24.07"))


def test_a_release_read_as_a_number_is_taken_when_unambiguous() -> None:
    # YAML reads 0.8 and 24.07 as numbers; only a YY.MM month 10 collapses (24.10 -> 24.1)
    core = _scenario("megatron-core", framework_release=0.8)
    assert scenario_from_dict(core).framework_release == "0.8"
    assert scenario_from_dict(_scenario("nemo", framework_release=24.07)).framework_release == "24.07"


def test_the_earliest_cut_off_wins_whatever_order_the_table_lists_them(monkeypatch) -> None:
    """``dated_defaults``: of two dated entries that both apply and set one field, the one that
    ended first describes the older release (DeepSpeed 0.9.1 is inside both its 0.9.0-0.9.2
    communication dtype and its before-0.12.4 ZeRO-2 reduce); ``dated`` lists them earliest
    cut-off first, as its docstring says, even when DATED does not."""
    from simcluster import framework_releases as fr

    assert [d.until for d in fr.dated("deepspeed", "0.9.1")] == ["0.9.2", "0.12.4"]
    later, earlier = fr.Dated(until="2.0", defaults={"dp": {"bucket_mb": 2.0}}), fr.Dated(
        until="1.0", defaults={"dp": {"bucket_mb": 1.0}}
    )
    monkeypatch.setitem(fr.DATED, "deepspeed", (later, earlier))
    assert fr.dated_defaults("deepspeed", "0.5") == {"dp": {"bucket_mb": 1.0}}
    assert fr.dated_defaults("deepspeed", "1.5") == {"dp": {"bucket_mb": 2.0}}


def test_list_frameworks_names_dated_entries_in_release_order():
    """`simcluster list frameworks` reads the dated entries as dated() applies them, earliest
    cut-off first: DeepSpeed's 0.9.0-0.9.2 fp32 wire (PR 2970, reverted by 3370) before its
    pre-0.12.4 per-owner ZeRO-2 reduce, whatever DATED's order."""
    from simcluster.framework_releases import describe

    text = describe("deepspeed")
    assert text.index("0.9.0 to before 0.9.2") < text.index("before 0.12.4")
