"""``simcluster collective``: output definitions (nccl-tests) and one-line errors."""

from __future__ import annotations

import json

import pytest

from simcluster.cli import main


def run_json(capsys, *argv):
    assert main(["collective", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_fields_follow_nccl_tests(capsys):
    row = run_json(capsys, "all_reduce", "1GiB", "--gpus", "8")
    assert {"op", "bytes", "gpus", "time_s", "algbw_GBps", "busbw_GBps", "algo"} <= set(row)
    assert row["bytes"] == 2**30
    assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 7 / 8)
    ag = run_json(capsys, "all_gather", "1GiB", "--gpus", "8")
    assert ag["busbw_GBps"] == pytest.approx(ag["algbw_GBps"] * 7 / 8)
    bc = run_json(capsys, "broadcast", "1GiB", "--gpus", "8")
    assert bc["busbw_GBps"] == pytest.approx(bc["algbw_GBps"])


def test_set_override_and_gpus_per_node(capsys):
    fast = run_json(capsys, "all_reduce", "1GiB", "--gpus", "16", "--algo", "ring")
    slow = run_json(
        capsys,
        "all_reduce",
        "1GiB",
        "--gpus",
        "16",
        "--algo",
        "ring",
        "--set",
        "cluster.nic_gbps=200",
    )
    assert slow["busbw_GBps"] == pytest.approx(fast["busbw_GBps"] / 2, rel=0.05)
    four = run_json(
        capsys, "all_reduce", "1GiB", "--gpus", "8", "--gpus-per-node", "4", "--algo", "ring"
    )
    assert four["busbw_GBps"] < 0.8 * fast["busbw_GBps"] * 2


def test_sweep_table(capsys):
    rows = run_json(capsys, "all_reduce", "1MiB", "--gpus", "8", "--sweep")
    assert [r["bytes"] for r in rows] == [2**k for k in range(3, 21)]
    assert main(["collective", "all_reduce", "64KiB", "--gpus", "8", "--sweep"]) == 0
    out = capsys.readouterr().out
    assert "busbw" in out and "65536" in out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["all_reduse", "1GiB", "--gpus", "8"], "did you mean 'all_reduce'"),
        (["all_reduce", "1XB", "--gpus", "8"], "size"),
        (["all_reduce", "1GiB", "--gpus", "12"], "multiple of 8"),
        (["all_reduce", "1GiB", "--gpus", "8", "--hardware", "dgx-h10"], "did you mean 'dgx-h100'"),
        (["all_reduce", "1GiB", "--gpus", "8", "--set", "cluster.nic=1"], "--set"),
        (["all_reduce", "1GiB", "--gpus", "16", "--algo", "nvls"], "one NVLink domain"),
        (["all_reduce", "1GiB", "--gpus", "16", "--set", "cluster.nic_gbps=["], "node.nic_gbps"),
        (["all_reduce", "1GiB", "--gpus", "16", "--set", "cluster.nic_gbps=yes"], "expected a number, got true"),
        (["all_reduce", "1GiB", "--gpus", "16", "--set", "cluster.profile.gpu={sm_count: 1, sm_count: 2}"],
         "sm_count is given twice"),
    ],
)
def test_bad_input_one_line_exit_2(capsys, argv, needle):
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err


def test_profile_patch_from_the_command_line(cli):
    """Halving the NIC efficiency halves a NIC-bound multi-node all-reduce's busbw."""
    import json

    base = json.loads(cli("collective", "all_reduce", "8GiB", "--gpus", "64", "--json").out)
    half = json.loads(
        cli("collective", "all_reduce", "8GiB", "--gpus", "64", "--json",
            "--set", "cluster.profile.efficiency.nic=0.46").out
    )
    assert half["busbw_GBps"] == pytest.approx(base["busbw_GBps"] / 2, rel=0.05)


def test_per_node_places_the_group_and_shows_the_measured_ratio(capsys):
    # aws-p5 carries nccl-tests tables on whole nodes (crazyguitar/aws-gpu-communication-benchmark):
    # 16 nodes at 64 MiB measure 92.39 GB/s busbw; a one-GPU-per-node group keeps that ratio.
    whole = run_json(capsys, "all_reduce", "64MiB", "--gpus", "128", "--hardware", "aws-p5")
    assert whole["nodes"] == 16 and whole["busbw_GBps"] == pytest.approx(92.39, rel=1e-3)
    one = run_json(
        capsys, "all_reduce", "64MiB", "--gpus", "16", "--per-node", "1", "--hardware", "aws-p5"
    )
    assert one["nodes"] == 16 and one["measured_ratio"] == pytest.approx(whole["measured_ratio"])
    assert one["measured_ratio"] > 1.5
    plain = run_json(capsys, "all_reduce", "64MiB", "--gpus", "16", "--per-node", "1")
    assert plain["nodes"] == 16 and plain["measured_ratio"] is None  # dgx-h100: no tables


@pytest.mark.parametrize("per_node", ["3", "0", "16"])
def test_per_node_must_tile_the_group(capsys, per_node):
    assert main(["collective", "all_reduce", "1MiB", "--gpus", "16", "--per-node", per_node]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--per-node" in err and "Traceback" not in err


def test_the_help_names_its_values_as_the_texts_refer_to_them(capsys):
    """--gpus' help says 'GPUs 0..N-1' and --per-node's 'N/K nodes', --sweep's 'up to SIZE':
    the usage line names them so (argparse's defaults were GPUS, GPUS_PER_NODE, size)."""
    import pytest

    from simcluster.cli import main

    with pytest.raises(SystemExit):
        main(["collective", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--gpus N [--gpus-per-node G] [--per-node K] [--hardware H]" in text and "OP SIZE" in text
    assert "GPUS_PER_NODE" not in text and "N/K nodes" in text and "up to SIZE" in text


@pytest.mark.parametrize(("spelled", "algo", "gpus"), [("Ring", "ring", "8"), ("NVLS", "nvls", "8"), ("TREE", "tree", "16"),
                                                       ("NVLSTree", "nvls_tree", "16"), ("nvls-tree", "nvls_tree", "16")])  # fmt: skip
def test_algo_takes_nccl_algos_spellings(capsys, spelled, algo, gpus):
    """NCCL_ALGO's names (NCCL docs, env.html: Tree, Ring, NVLS, NVLSTree) pick the algorithm
    they name, as OP takes any case; they were refused as unknown before."""
    same = run_json(capsys, "all_reduce", "1GiB", "--gpus", gpus, "--algo", algo)
    row = run_json(capsys, "all_reduce", "1GiB", "--gpus", gpus, "--algo", spelled)
    assert row["time_s"] == same["time_s"] and row["algo"] == same["algo"]


def test_an_unknown_algo_names_the_option(capsys):
    assert main(["collective", "all_reduce", "1GiB", "--gpus", "8", "--algo", "foo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --algo: unknown algorithm 'foo'"), err
    # an algorithm the group cannot run is about --algo too (NVLS_TREE needs two NVLink domains)
    assert main(["collective", "all_reduce", "1GiB", "--gpus", "8", "--algo", "nvls_tree"]) == 2
    assert capsys.readouterr().err.startswith("error: --algo: 'nvls_tree' needs >= 2 NVLink domains")
