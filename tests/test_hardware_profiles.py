"""Shipped hardware profiles: all load, every number has a source, datasheet identities hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from simcluster.errors import UserError
from simcluster.hardware import (
    _data_dir,
    load_profile,
    profile_from_dict,
    resolve_profile_path,
    shipped_profiles,
)
from simcluster.profile_sources import unsourced, unsourced_note

REQUIRED = {
    "dgx-a100", "dgx-a100-40gb", "dgx-h100", "dgx-h200", "hgx-h800", "dgx-b200", "gb200-nvl72", "aws-p5",
    "amd-mi300x", "amd-mi325x", "amd-mi355x", "dgx-2-v100", "gb300-nvl72", "dgx-b300", "alps-gh200",
}


def _numeric_paths(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numeric_paths(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, (int, float, list)) and not isinstance(node, bool):
        yield prefix


def test_required_profiles_shipped_and_load():
    assert REQUIRED <= set(shipped_profiles())
    for name in shipped_profiles():
        assert load_profile(name).name == name


@pytest.mark.parametrize("name", sorted(REQUIRED | set(shipped_profiles())))
def test_every_number_has_a_source(name):
    raw = yaml.safe_load((_data_dir() / f"{name}.yaml").read_text())
    sources = raw["sources"]
    for section in ("gpu", "node", "fabric", "efficiency", "measured"):
        for path in _numeric_paths(raw.get(section, {}), section):
            covered = any(path == s or path.startswith(s + ".") for s in sources)
            assert covered, f"{name}: {path} has no sources entry"
    assert all(isinstance(v, str) and len(v) > 10 for v in sources.values())


def test_datasheet_identities():
    h100 = load_profile("dgx-h100")
    assert h100.nic_bytes_per_s == 50e9  # 400 Gb/s
    assert h100.nvlink_bytes_per_s == 450e9  # 900 GB/s bidirectional
    assert load_profile("hgx-h800").nvlink_bytes_per_s == 200e9  # 400 GB/s bidirectional
    assert load_profile("dgx-b200").nvlink_bytes_per_s == 900e9  # 1.8 TB/s bidirectional
    assert load_profile("dgx-a100").node.nvls is False
    a100_40 = load_profile("dgx-a100-40gb")  # A100 datasheet: 40 GB HBM2 at 1,555 GB/s
    assert a100_40.gpu.hbm_tbps == 1.555  # its capacity, CUDA's 39.59 GiB: see below
    for name in ("dgx-h100", "dgx-h200", "hgx-h800", "dgx-b200"):
        p = load_profile(name)
        assert p.node.nvls and p.efficiency.nvls is not None


@pytest.mark.parametrize("name", ["dgx-h100", "aws-p5", "hgx-h800"])
def test_h100_capacity_is_the_cuda_total_not_the_datasheet_gb(name):
    """An H100 SXM5 80GB exposes 81559 MiB (nvidia-smi's total; torch's total_memory
    85,520,809,984 B: modal-labs/modal-client pull request 2797, NVIDIA/nccl issue 1264), not
    80 GiB = 81920 MiB. The fit check compares against it; the CUDA context and library buffers
    inside it stay training.memory_overhead_gib's (1 GiB), added to the peak, not taken off."""
    p = load_profile(name)
    assert p.memory_bytes == 81559 * 2**20 == 85_520_809_984
    assert p.gpu.memory_gib == pytest.approx(79.647, abs=5e-4)


def test_mi300x_capacity_is_the_device_total_rocm_reports():
    """rocminfo's GPU global pool on a bare-metal MI300X, 201310208 KB (ROCm/legacy-rocm-build
    issue 4414), and rocm-smi's VRAM total, 206141652992 B (issue 4750): 191.984 GiB, not 192."""
    assert load_profile("amd-mi300x").memory_bytes == 201_310_208 * 1024 == 206_141_652_992


def test_mi325x_capacity_is_the_device_total_rocminfo_reports():
    """rocminfo's GPU global pool on 8x MI325X, 268419072 KB (ROCm/ROCm issue 6023): 16 MiB
    short of the 256 GiB of HBM3E the ROCm gpu-specs table lists."""
    p = load_profile("amd-mi325x")
    assert p.memory_bytes == 268_419_072 * 1024 == 274_861_129_728 == 256 * 2**30 - 16 * 2**20


@pytest.mark.parametrize(
    ("name", "mib", "sms"),
    [
        # nvidia-smi's memory.total on each part (public host inventories and captures, e.g.
        # NVIDIA/k8s-test-infra's qx-gb300.xml); device query's multiProcessorCount
        ("dgx-b200", 183_359, 148),
        ("gb200-nvl72", 189_471, 152),
        ("gb300-nvl72", 284_208, 152),
        ("dgx-b300", 275_040, 148),
    ],
)
def test_blackwell_capacity_and_sms_are_what_the_device_reports(name, mib, sms):
    """A Blackwell Ultra part reports less than its 288 'GB' (GB300 284208 MiB, B300 SXM6 AC
    275040 MiB) and enables fewer SMs than the full die's 160 that NVIDIA's Blackwell Ultra blog
    counts: GB300 152 as GB200, B300 148 as B200."""
    p = load_profile(name)
    assert p.gpu.memory_gib == pytest.approx(mib / 1024, abs=0.1)
    assert p.gpu.sm_count == sms


def test_a_peak_between_the_cuda_total_and_80_gib_no_longer_fits():
    """dgx-h100's fit check: a run whose peak lands between 79.65 and 80 GiB is out of memory on a
    real H100 (the allocator sees 81559 MiB); with the datasheet's 80 GiB it was said to fit."""
    from simcluster.context import build_context
    from simcluster.memory_report import memory_by_stage
    from simcluster.scenario import scenario_from_dict

    data = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"hardware": "dgx-h100", "gpus": 8},
        "parallel": {"tp": 1, "pp": 1, "zero": 1},
        "training": {"seq_len": 2048, "micro_batch": 1, "global_batch": 8, "precision": "bf16",
                     "recompute": "selective"},
    }  # fmt: skip
    ctx = build_context(scenario_from_dict(data))
    peak = max(m.total_bytes for m in memory_by_stage(ctx))
    # the fixed overhead chosen to put the peak 0.2 GiB under 80 GiB, over the CUDA total
    over = (80 * 2**30 - 0.2 * 2**30 - peak) / 2**30 + ctx.scenario.training.memory_overhead_gib
    data["training"]["memory_overhead_gib"] = over
    ctx = build_context(scenario_from_dict(data))
    peak = max(m.total_bytes for m in memory_by_stage(ctx))
    assert peak == pytest.approx(79.8 * 2**30, rel=1e-9)
    assert ctx.capacity_bytes < peak < 80 * 2**30


def test_missing_field_is_a_user_error():
    raw = load_profile("dgx-h100").model_dump()
    del raw["node"]["nic_gbps"]
    with pytest.raises(UserError, match="missing field 'node.nic_gbps'"):
        profile_from_dict(raw)


def test_an_fp8_share_without_an_fp8_curve_is_a_user_error():
    """efficiency.sustained_fp8 scales gemm_fp8 only (a Hopper FP8 table timed at the settled
    clock beside a burst BF16 curve); on a profile without gemm_fp8 it would change nothing."""
    raw = load_profile("dgx-a100").model_dump()
    assert raw["efficiency"]["gemm_fp8"] is None
    raw["efficiency"]["sustained_fp8"] = 1.0
    with pytest.raises(UserError, match=r"sustained_fp8 scales the gemm_fp8 curve, which this profile does not have") as err:
        profile_from_dict(raw)
    # the section's own message, not the whole efficiency mapping it was given (one short line)
    assert "(got {" not in err.value.message and len(err.value.message) < 300


def test_a_dispatch_rate_table_out_of_order_is_a_user_error():
    """efficiency.hybridep_nvlink is read by EP size between its points, so they must rise."""
    raw = load_profile("gb200-nvl72").model_dump()
    raw["efficiency"]["hybridep_nvlink"] = [[16, 0.53], [8, 0.60]]
    with pytest.raises(UserError, match=r"efficiency\.hybridep_nvlink.*the EP ranks must increase") as err:
        profile_from_dict(raw)
    assert len(err.value.message) < 300


def test_a_misspelt_choice_gets_the_nearest_as_a_hint():
    raw = load_profile("dgx-h100").model_dump()
    raw["node"]["scale_up"] = "swich"
    with pytest.raises(UserError, match=r"field 'node.scale_up': .*'mesh' \(did you mean 'switch'\?\)"):
        profile_from_dict(raw)


@pytest.mark.parametrize(
    "section, key, hint",
    [("efficiency", "sustaned", "did you mean 'sustained'?"), ("gpu", "memory_gb", "did you mean 'memory_gib'?")],
)
def test_a_misspelt_profile_key_gets_the_nearest_field(section, key, hint):
    """An edited copy of a shipped profile with a typo: the field's dotted name and the nearest
    field of its section, not pydantic's bare 'Extra inputs are not permitted'."""
    raw = load_profile("dgx-h100").model_dump()
    raw[section][key] = 1.0
    with pytest.raises(UserError, match=rf"field '{section}.{key}' is unknown \({re.escape(hint)}\); fix the spelling or delete it"):
        profile_from_dict(raw)


def test_a_required_key_misspelt_is_named_as_the_typo_not_as_missing():
    # before: a copy of dgx-h100.yaml with 'memory_gib' typed 'memry_gib' said only "is missing
    # field 'gpu.memory_gib'", leaving the user to find the line; the typo is both errors
    raw = load_profile("dgx-h100").model_dump()
    raw["gpu"]["memry_gib"] = raw["gpu"].pop("memory_gib")
    with pytest.raises(UserError, match=r"field 'gpu.memry_gib' is unknown \(did you mean 'memory_gib'\?\)"):
        profile_from_dict(raw)


def test_a_profile_written_by_an_older_release_says_what_replaced_its_key(cli, tmp_path):
    """Profiles before commit 4dc80a1 carried efficiency.tp_overlap_sms (now the scenario's
    overlap.tp_comm_cfg): one line naming the replacement, exit 2, no traceback."""
    from tests.test_scenario_errors import assert_one_line_error

    raw = yaml.safe_load((_data_dir() / "dgx-h100.yaml").read_text())
    raw["efficiency"]["tp_overlap_sms"] = 24
    old = tmp_path / "old-h100.yaml"
    old.write_text(yaml.safe_dump(raw))
    res = cli("memory", "llama3-8b-8xh100", "--hardware", str(old))
    assert_one_line_error(res, "--hardware", "'efficiency.tp_overlap_sms' is no longer read", "overlap.tp_comm_cfg")


def test_a_shipped_profile_by_its_file_name_resolves_from_any_folder(tmp_path, monkeypatch):
    """'--hardware dgx-h100.yaml' means the shipped profile where no such file is here (as a
    shipped scenario resolves by its file name); a file of that name here is the user's own."""
    monkeypatch.chdir(tmp_path)
    assert resolve_profile_path("dgx-h100.yaml") == _data_dir() / "dgx-h100.yaml"
    with pytest.raises(UserError, match=r"'dgx-h1000.yaml' not found \(did you mean 'dgx-h100'\?\)"):
        resolve_profile_path("dgx-h1000.yaml")
    (tmp_path / "dgx-h100.yaml").write_text("name: mine\n")
    assert resolve_profile_path("dgx-h100.yaml").resolve() == (tmp_path / "dgx-h100.yaml").resolve()


def test_nvls_without_its_measured_rate_is_refused_at_load():
    """The NVLS algorithms time the switch by efficiency.nvls (nccl-tests' NVLS algbw over
    NVLink): a profile that turns NVLS on without it is refused when it loads, naming the
    field, not when a collective first picks NVLS mid-simulation."""
    raw = load_profile("dgx-h100").model_dump()
    raw["efficiency"]["nvls"] = None
    with pytest.raises(UserError, match=r"efficiency\.nvls .* is not set; add it or set node\.nvls false") as err:
        profile_from_dict(raw, origin="mine.yaml")
    assert err.value.field == "cluster.hardware" and "mine.yaml" in err.value.message
    with pytest.raises(UserError) as err:
        load_profile("dgx-a100", patch={"node": {"nvls": True}})  # an A100 node has no NVLS rate
    assert err.value.field == "cluster.profile.node.nvls" and "patch efficiency.nvls" in err.value.message
    with pytest.raises(UserError) as err:
        load_profile("dgx-h100", patch={"efficiency": {"nvls": None}})
    assert err.value.field == "cluster.profile.efficiency.nvls" and "node.nvls: false" in err.value.message
    with pytest.raises(UserError) as err:
        load_profile("dgx-a100", overrides={"nvls": True})  # the scenario's cluster.nvls
    assert err.value.field == "cluster.nvls" and "cluster.profile.efficiency.nvls" in err.value.message
    assert load_profile("dgx-a100", patch={"node": {"nvls": True}, "efficiency": {"nvls": 0.5}}).node.nvls


def test_list_hardware_compares_the_profiles(cli, monkeypatch):
    # One row per shipped profile with its datasheet figures (AMD ROCm docs: MI300X 1307.4
    # TFLOP/s BF16, seven 64 GB/s xGMI links; NVIDIA H100 datasheet: 989.4, NVLink 450 GB/s).
    monkeypatch.setenv("COLUMNS", "250")
    res = cli("list", "hardware")
    assert res.code == 0
    rows = {line.split("│")[1].strip(): line for line in res.out.splitlines() if "│" in line}
    assert set(shipped_profiles()) <= set(rows)
    assert "1307.4" in rows["amd-mi300x"] and "mesh 7x64 GB/s" in rows["amd-mi300x"]
    assert "1307.4" in rows["amd-mi325x"] and "mesh 7x64 GB/s" in rows["amd-mi325x"]
    assert "989.4" in rows["dgx-h100"] and "switch 450 GB/s NVLS, 8 GPUs" in rows["dgx-h100"]
    assert "72 GPUs" in rows["gb200-nvl72"]


def test_list_hardware_names_each_profiles_attention_kernels(cli, monkeypatch):
    # the kernels a scenario may name in training.attention_kernel: GB200 keeps cuDNN 9.17's curves
    # as its default and 9.10.2's and 9.13.1's (cudnn-frontend cb560b9, 0b1577c) beside them, each
    # with FP8 rows; H100
    # the FlashAttention-3 paper's cuDNN, FA2 and FA3 curves
    for columns, line in (("250", "  gb200-nvl72    cudnn*+fp8, cudnn-9.10+fp8, cudnn-9.13+fp8"), ("80", "  attention kernels: cudnn*+fp8, cudnn-9.10+fp8, cudnn-9.13+fp8")):
        monkeypatch.setenv("COLUMNS", columns)
        res = cli("list", "hardware")
        assert res.code == 0 and line in res.out.splitlines(), columns
    h100 = res.out[res.out.index("\ndgx-h100 "):].splitlines()  # its block at 80 columns
    assert "  attention kernels: cudnn*+fp8, fa2, fa3" in h100[:7]


def test_list_hardware_shows_a_calibrated_cpus_figures_to_four_digits(cli, monkeypatch, tmp_path):
    """A CPU calibration writes measured floats (11.770288467407227 GiB, MemTotal over two
    ranks; 0.030075597594632193 TB/s): listed to four significant figures, and its large-GEMM
    rate, a fraction of a TFLOP/s, to three instead of a rounded '(0)'. The datasheet figures of
    the shipped rows stay as written (989.4, 1978.9)."""
    monkeypatch.setenv("COLUMNS", "300")
    data = yaml.safe_load((Path(__file__).parent.parent / "hardware" / "dgx-h100.yaml").read_text())
    data["name"] = "calibrated-cpu"
    data["gpu"].update(memory_gib=11.770288467407227, hbm_tbps=0.030075597594632193)
    data["gpu"]["peak_tflops"] = {"bf16": 0.20821548927312894, "fp32": 0.10118070877490914}
    data["node"]["nvlink_GBps"] = 0.7262854216912763
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(data))
    res = cli("list", "hardware", str(path))
    assert res.code == 0, res.err
    row = next(line for line in res.out.splitlines() if "calibrated-cpu" in line).split("│")
    assert row[3].strip() == "11.77" and row[4].strip() == "0.03008"
    bf16 = re.fullmatch(r"0\.2082 \(([\d.]+)\)", row[5].strip())
    assert bf16 and 0.1 < float(bf16.group(1)) < 0.21 and len(bf16.group(1).replace("0.", "")) <= 3, row[5]
    assert "switch 0.7263 GB/s" in row[8]
    h100 = next(line for line in res.out.splitlines() if line.startswith("│ dgx-h100 "))
    # 16384^3: FP8 Azure's cuBLASLt H100 table measures 1377.3 TFLOP/s (ND_H100_v5_results.md)
    assert "989.4 (746)" in h100 and "1978.9 (1371)" in h100


@pytest.mark.parametrize(
    ("profile", "low", "high"),
    [
        # stas00/ml-engineering Maximum Sustainable Matmul FLOPS: 8x H200 node 755 (slowest GPU
        # 745), B200 1421-1428; Horace He (thonking.ai): A100 8192^3 at 258 with random inputs
        ("dgx-h100", 735, 755),
        ("dgx-b200", 1405, 1428),
        ("dgx-a100", 250, 260),
        # Markidis et al. (IPDPSW 2018): cuBLAS mixed-precision GEMM on a V100 up to 83 (FP16)
        ("dgx-2-v100", 80, 84),
    ],
)
def test_list_hardware_shows_the_rate_a_large_gemm_sustains(cli, monkeypatch, profile, low, high):
    monkeypatch.setenv("COLUMNS", "250")
    res = cli("list", "hardware")
    row = next(line for line in res.out.splitlines() if line.startswith(f"│ {profile} "))
    bf16 = row.split("│")[5]
    match = re.search(r"\(([\d.]+)\)", bf16)
    assert match and low <= float(match.group(1)) <= high, bf16


def test_gemm_curves_run_at_the_sustained_share_of_their_burst_tables():
    # XLA's sm_100 table (burst): 4 x 4096^3 batched bf16 at 1670 TFLOP/s = 0.742 of 2250, fp8
    # 3280 = 0.729 of 4500; a B200 under back-to-back tensor-core work keeps 1237 of 1450
    # TFLOP/s (flashinfer-ai/flashinfer PR 2899, FlashAttention-4 BF16), and a mamf-finder
    # sustained run 1421-1428 (stas00/ml-engineering): every point of the burst curves is taken
    # at that share, the plateau at ~1424 TFLOP/s
    from simcluster.compute import KernelModel

    b200 = load_profile("dgx-b200")
    share = 1237 / 1450
    assert b200.efficiency.sustained == pytest.approx(share, abs=5e-4)
    assert max(f for _, f in b200.efficiency.gemm) == pytest.approx(0.742, abs=5e-4)
    assert max(f for _, f in b200.efficiency.gemm_fp8) == pytest.approx(0.729, abs=5e-4)
    km = KernelModel(b200, "bf16")
    assert km.gemm_efficiency(5.5e11) * 2250 == pytest.approx(1424, abs=3)
    # mid-size GEMMs lose the same share: XLA's 2048 x 4096 x 4096 et al. at ~0.59 burst
    assert km.gemm_efficiency(6.87e10) == pytest.approx(0.59 * share, abs=5e-4)
    # Hopper: the H200's sustained 755 TFLOP/s (its mamf-finder MSMF) over an H100's burst best
    # (MAMF 794.5): XLA's 8192^2 point at 797.5 burst sustains ~752
    h100 = KernelModel(load_profile("dgx-h100"), "bf16")
    assert h100.gemm_efficiency(1.1e12) * 989.4 == pytest.approx(755, abs=4)


# how papers, datasheets and launch scripts name the GPU -> the shipped reference node
GPU_SPELLINGS = {
    "h100": "dgx-h100", "H100": "dgx-h100", "h100-sxm5": "dgx-h100", "NVIDIA H100 SXM5 80GB": "dgx-h100",
    "NVIDIA H100 80GB HBM3": "dgx-h100", "h100_sxm": "dgx-h100", "8x H100": "dgx-h100", "DGX H100": "dgx-h100",
    "HGX H100": "dgx-h100", "a100": "dgx-a100", "A100-SXM4-80GB": "dgx-a100", "8xA100 80GB": "dgx-a100",
    "a100-40gb": "dgx-a100-40gb", "NVIDIA A100-SXM4-40GB": "dgx-a100-40gb", "A100 40 GB": "dgx-a100-40gb",
    "h200": "dgx-h200", "H200 141GB": "dgx-h200", "h800": "hgx-h800", "b200": "dgx-b200",
    "B200 192GB": "dgx-b200", "gb200": "gb200-nvl72", "GB200 NVL72": "gb200-nvl72", "gb300": "gb300-nvl72",
    "b300": "dgx-b300", "DGX B300": "dgx-b300", "NVIDIA B300 SXM6 AC": "dgx-b300", "B300 288GB": "dgx-b300",
    "MI300X": "amd-mi300x", "AMD Instinct MI300X": "amd-mi300x", "v100": "dgx-2-v100",
    "MI325X": "amd-mi325x", "AMD Instinct MI325X 256GB": "amd-mi325x", "8x mi325x": "amd-mi325x",
    "MI355X": "amd-mi355x", "AMD Instinct MI355X": "amd-mi355x", "mi355x 288GB": "amd-mi355x",
    "Tesla V100-SXM3-32GB": "dgx-2-v100", "p5.48xlarge": "aws-p5", "P5": "aws-p5",
    "GH200": "alps-gh200", "NVIDIA GH200 120GB": "alps-gh200",
    # NVIDIA's clusters by name: Selene (DGX A100, Narayanan et al. 2021), Eos (DGX H100)
    "Selene": "dgx-a100", "NVIDIA Selene": "dgx-a100", "Eos": "dgx-h100",
}  # fmt: skip


@pytest.mark.parametrize(("spelling", "profile"), GPU_SPELLINGS.items())
def test_gpu_names_mean_the_reference_node(spelling, profile):
    assert resolve_profile_path(spelling).stem == profile


# a Grace-Hopper module's name carries its LPDDR5X, not its HBM: nvidia-smi calls the 96 GB HBM3
# part of an Alps node "NVIDIA GH200 120GB" (eth-cscs/cscs-docs, nccl-tests device list)
MODULE_MEMORY_NAMES = {("gh200", 120)}


def test_reference_nodes_carry_the_gpu_they_are_named_for():
    # each entry of the table names a shipped profile whose GPU is that GPU, at that memory size
    from simcluster.gpu_names import REFERENCE_NODES

    for gpu, sizes in REFERENCE_NODES.items():
        for size, profile in sizes.items():
            spec = load_profile(profile).gpu
            assert gpu in spec.name.lower().replace(" ", ""), (gpu, spec.name)
            if size is not None and (gpu, size) not in MODULE_MEMORY_NAMES:
                # datasheet GB vs the GiB the profile holds (B200: 180 GB listed, 192 early)
                assert spec.memory_gib == pytest.approx(size, rel=0.08), (gpu, size, spec.memory_gib)


@pytest.mark.parametrize(
    ("spelling", "message"),
    [
        ("H100 PCIe", "PCIe/NVL card"),
        ("h100-nvl", "PCIe/NVL card"),
        ("A100 16GB", "no shipped profile for a 16 GB A100 .shipped: 80 GB, 40 GB"),
        ("p4d.24xlarge", "dgx-a100-40gb with cluster.nics_per_node: 4"),
        ("p5en.48xlarge", "8x H200 with 3,200 Gb/s EFA: use hardware dgx-h200"),
        ("GH200 144GB", "no shipped profile for a 144 GB GH200"),
        ("V100-SXM2-16GB", "no shipped profile for a 16 GB V100"),
        ("h1000", "did you mean 'dgx-h100'"),
        ("p3.16xlarge", "unknown hardware"),
        # a GPU no profile ships (a workstation card): the way to one, not only the list
        ("rtx4090", "unknown hardware 'rtx4090'.*`calibrate` writes one for your GPUs"),
        # export variants: the A800 is an A100 with NVLink at 400 GB/s bidirectional (its
        # datasheet), so the nearest shipped node with its NVLink overridden
        ("NVIDIA A800-SXM4-80GB", "use hardware dgx-a100 .or dgx-a100-40gb. with cluster.nvlink_GBps: 200"),
        ("H20", "no shipped profile for the H20"),
        # the MI355X's die at a lower clock and power (AMD's v5.1 MLPerf 8B step 1.23x longer)
        ("AMD Instinct MI350X", "no shipped profile for the MI350X.*amd-mi355x is an upper bound"),
        # two machines in one name ran as the first of them before
        ("dgx-h100,dgx-b200", "names more than one machine .b200, h100.; give one profile"),
        ("H100 or H200", "names more than one machine .h100, h200."),
    ],
)
def test_gpu_names_no_profile_describes_are_refused(spelling, message):
    with pytest.raises(UserError, match=message):
        resolve_profile_path(spelling)


@pytest.mark.parametrize("spelling", ["h200x", "A100XL", "h100l", "mi300xx", "B200A", "a100foo"])
def test_letters_glued_to_a_gpu_name_are_not_that_gpu(spelling):
    """A GPU name with letters run on is another part or a typo, not the shipped SXM board:
    'h200x' ran as dgx-h200 without a word. Refused as unknown (with the nearest profile as a
    hint), like 'h1000'."""
    with pytest.raises(UserError, match="unknown hardware"):
        resolve_profile_path(spelling)


@pytest.mark.parametrize(
    ("spelling", "profile"), [("H100SXM5", "dgx-h100"), ("a100sxm4-40gb", "dgx-a100-40gb"), ("GB200NVL72", "gb200-nvl72")]
)
def test_a_board_suffix_glued_to_the_gpu_name_still_reads(spelling, profile):
    assert resolve_profile_path(spelling).stem == profile


def test_a_glued_nvl_or_pcie_suffix_is_still_the_card_refused():
    with pytest.raises(UserError, match="PCIe/NVL card"):
        resolve_profile_path("h100nvl")
    with pytest.raises(UserError, match="PCIe/NVL card"):
        resolve_profile_path("A100PCIE-40GB")


@pytest.mark.parametrize("spelling", ["H100 CNX", "h100-cnx", "H100CNX", "NVIDIA H100 CNX 80GB"])
def test_the_h100_cnx_converged_accelerator_is_refused_not_read_as_dgx_h100(spelling):
    """NVIDIA's H100 CNX is a PCIe card carrying the H100 and a ConnectX-7 (NVIDIA H100 CNX
    product brief: PCIe Gen5 form factor); 'H100 CNX' and 'h100-cnx' ran as the SXM dgx-h100,
    'H100CNX' was an unknown name. Refused as the PCIe/NVL boards are, with what to give."""
    with pytest.raises(UserError, match="no shipped profile for the H100 CNX, a PCIe converged accelerator"):
        resolve_profile_path(spelling)


@pytest.mark.parametrize("spelling", ["A100X", "nvidia-a100x", "A100X 80GB"])
def test_the_a100x_converged_accelerator_is_refused_by_name(spelling):
    """NVIDIA's A100X is a PCIe card carrying an A100 and a BlueField-2 DPU (NVIDIA A100X
    product brief), as the H100 CNX carries an H100 and a ConnectX-7: refused the same way,
    naming the card, rather than as unknown hardware."""
    with pytest.raises(UserError, match="no shipped profile for the A100X, a PCIe converged accelerator .the GPU "
                       "and a BlueField-2 DPU on one card; the shipped A100 is the SXM part of dgx-a100"):  # fmt: skip
        resolve_profile_path(spelling)


def test_a_named_profile_is_not_reparsed():
    assert resolve_profile_path("DGX-A100").stem == "dgx-a100"
    assert resolve_profile_path("dgx-a100-40gb").stem == "dgx-a100-40gb"
    assert "40GB" in load_profile("a100-40gb").gpu.name


def test_a_calibrated_gemm_table_is_used_as_timed():
    """``efficiency.sustained`` scales the datasheet curves, which were timed in bursts; a GEMM
    table measured by ``calibrate`` (which heat-soaks the GPU first, docs/hardware.md) is the
    machine's sustained rate already and is not scaled again."""
    from simcluster.compute import KernelModel

    h100 = load_profile("dgx-h100")
    m = n = k = 4096
    row = {"dtype": "bf16", "m": m, "n": n, "k": k, "time_s": 2 * m * n * k / 700e12}
    measured = h100.model_copy(update={"measured": {**h100.measured, "gemm": [row]}})
    assert KernelModel(measured, "bf16").gemm_efficiency(2.0 * m * n * k) * 989.4 == pytest.approx(700, rel=1e-3)
    # the datasheet curve at the same size: XLA's 4096^3 burst point (0.79) at the sustained share
    burst = KernelModel(h100, "bf16").gemm_efficiency(2.0 * m * n * k)
    assert burst == pytest.approx(0.79 * h100.efficiency.sustained, rel=1e-3)


@pytest.mark.parametrize(("line", "written", "shown"), [("  nvls: true", "  nvls: null", "null"), ("  nic_gbps: 400", "  nic_gbps:", "null"),
                                                       ("  nic_gbps: 400", "  nic_gbps: fast", "'fast'")])  # fmt: skip
def test_a_wrong_value_in_a_profile_file_is_shown_with_the_fix(tmp_path, line, written, shown):
    """A null or a wrong type in a profile (every field of which is required) is one line with
    the value as written and where every field's form is shown, not pydantic's message alone."""
    text = (Path(__file__).parents[1] / "hardware" / "dgx-h100.yaml").read_text()
    assert line + "\n" in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(line + "\n", written + "\n", 1))
    with pytest.raises(UserError) as got:
        load_profile(path, field="--hardware")
    assert f"(got {shown}); fix it (hardware/dgx-h100.yaml shows every field)" in got.value.message


@pytest.mark.parametrize(
    ("name", "total", "datasheet_gb"),
    [
        # hkust-adsl/kubernetes-scheduler-simulator pkg/type/open-gpu-share/utils/const.go:
        # A100-SXM4-80GB 85198045184 B (nvidia-smi under drivers up to R535: 81251MiB)
        ("dgx-a100", 85_198_045_184, 80),
        # PaddlePaddle/Paddle get_device_properties docstring: A100-SXM4-40GB total_memory=40536MB;
        # CUDA samples' deviceQuery on an A100 40GB: 42505273344 bytes
        ("dgx-a100-40gb", 42_505_273_344, 40),
        # rapidsai/dask-cuda parse_device_memory_limit docstring (a 32GB device) and deviceQuery
        # on a V100-PCIE-32GB: 34089730048 bytes (the DGX-2's SXM3 board assumed the same)
        ("dgx-2-v100", 34_089_730_048, 32),
    ],
)
def test_a100_and_v100_capacity_is_the_cuda_total_not_the_datasheet_gb(name, total, datasheet_gb):
    """As for the H100: the fit check compares against what CUDA lets a process allocate, a
    little under the datasheet's 80, 40 and 32 GB read as GiB."""
    p = load_profile(name)
    assert p.memory_bytes == total
    assert p.memory_bytes < datasheet_gb * 2**30


def test_no_shipped_profile_has_an_unsourced_number():
    """What the loader finds unsourced (and a run notes) is nothing for a shipped profile."""
    for name in shipped_profiles():
        assert load_profile(name).unsourced == (), name


def test_a_source_covers_its_field_and_what_lies_under_it():
    raw = {
        "gpu": {"memory_gib": 80, "peak_tflops": {"bf16": 989, "fp8": 1979}, "name": "H100"},
        "efficiency": {"gemm": [[1e9, 0.5]], "nvls": True},  # a flag is not a number
        "sources": {"gpu.peak_tflops": "datasheet", "efficiency.gemm": "a sweep"},
    }
    assert unsourced(raw) == ["gpu.memory_gib"]
    assert unsourced({**raw, "sources": {"gpu": "datasheet"}}) == ["efficiency.gemm"]
    assert unsourced_note("x", ["a", "b", "c", "d", "e"]) == (
        "hardware profile x has no source for a, b, c and 2 more; add a sources: entry for each "
        "(docs/hardware.md)"
    )
    assert unsourced_note("x", []) is None


def test_a_profile_copy_missing_a_source_simulates_with_a_one_line_note(cli, tmp_path):
    """A number without a source is said, not refused: one note line on stderr naming it."""
    raw = yaml.safe_load((_data_dir() / "dgx-h100.yaml").read_text())
    del raw["sources"]["gpu.hbm_tbps"]
    copy = tmp_path / "mine.yaml"
    copy.write_text(yaml.safe_dump(raw, sort_keys=False))
    res = cli("memory", "llama3-8b-8xh100", "--hardware", str(copy))
    assert res.code == 0, res.err
    notes = [ln for ln in res.err.splitlines() if "no source" in ln]
    assert notes == [
        "note: hardware profile dgx-h100 has no source for gpu.hbm_tbps; add a sources: entry for "
        "each (docs/hardware.md)"
    ]
    assert "no source" not in cli("memory", "llama3-8b-8xh100").err  # the shipped one: none


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX")
def test_a_profile_given_through_a_pipe_is_read(tmp_path):
    """`--hardware <(sed ... mine.yaml)`: the shell passes a named pipe, which exists but is
    no regular file; it loads as the file would, where it was once 'not found'."""
    import os
    import threading

    fifo = tmp_path / "fd63"
    os.mkfifo(fifo)
    text = (_data_dir() / "dgx-b200.yaml").read_text()
    threading.Thread(target=lambda: fifo.write_text(text), daemon=True).start()
    assert load_profile(fifo).name == load_profile("dgx-b200").name
