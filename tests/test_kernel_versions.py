"""A kernel's library version in its name (simcluster/kernel_versions.py): a versioned kernel
runs its own curves but trains what its library trains."""

from __future__ import annotations

import pytest

from simcluster import attention_head_dims, attention_sinks
from simcluster.fp8_attention import fp8_kernel
from simcluster.hardware import load_profile
from simcluster.kernel_versions import family, release


@pytest.mark.parametrize(
    ("name", "expected"),
    [("cudnn", "cudnn"), ("cudnn-9.13", "cudnn"), ("cudnn-9.13.1", "cudnn"), ("cudnn-9.13-fp8", "cudnn-fp8"),
     ("cudnn-fp8", "cudnn-fp8"), ("ck-a16", "ck-a16"), ("fa2", "fa2"), ("measured", "measured")],
)
def test_family_drops_only_a_dotted_version(name, expected):
    assert family(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [("cudnn", None), ("cudnn-9.10", (9, 10)), ("cudnn-9.13.1", (9, 13, 1)), ("cudnn-9.13-fp8", (9, 13)),
     ("cudnn-fp8", None), ("ck-a16", None)],
)
def test_release_reads_the_dotted_version_the_family_drops(name, expected):
    assert release(name) == expected


def test_a_versioned_cudnn_trains_the_head_dims_cudnn_trains():
    # cuDNN on Blackwell (sm_100) trains head dims up to 128, and beyond only 192/128 or 256/256
    # (TransformerEngine's get_attention_backend): the release does not change the rule here
    for dims in ((128, 128), (192, 128), (256, 256), (160, 160)):
        assert attention_head_dims.runs("cudnn-9.13", *dims, 10.0) == attention_head_dims.runs("cudnn", *dims, 10.0)
    assert not attention_head_dims.runs("cudnn-9.13", 160, 160, 10.0)


def test_a_versioned_cudnn_trains_sinks_as_cudnn_does():
    # TransformerEngine >= 2.8 trains learnable sinks on FusedAttention with cuDNN >= 9.13.1
    # (NVIDIA/TransformerEngine#2148), the release of the cudnn-9.13 curves
    assert attention_sinks.support("cudnn-9.13").runs
    assert not attention_sinks.support("fa2").runs


@pytest.mark.parametrize("profile", ["gb200-nvl72", "gb300-nvl72", "dgx-b300"])
def test_fp8_attention_on_a_versioned_kernel_runs_that_releases_fp8_curves(profile):
    # FP8 attention runs the 16-bit kernel's name with -fp8: cuDNN 9.13.1's FP8 rows
    # (cudnn-frontend sdpa_fp8_benchmark_results_*.csv at commit 0b1577c), not 9.17's or 9.22's
    assert fp8_kernel(load_profile(profile), "cudnn-9.13") == "cudnn-9.13-fp8"
    assert fp8_kernel(load_profile(profile), "cudnn") == "cudnn-fp8"
