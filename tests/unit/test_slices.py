"""TPU slices: every shape a pod allows multiplies to its chips and fits the pod, the shapes Google
Cloud's docs list come out as listed, and runs on small slices, on a 1,536-chip v5p slice and over
16 v6e pods are priced.

Expected shapes are Google Cloud's (TPU v5e/v6e supported topologies; the v5p configurations table;
"TPU types and topologies": whole 4x4x4 cubes, the default shape the one nearest a cube) and PaLM's
12x16x16, never our own output.
"""

from __future__ import annotations

import math

import pytest
from test_new_devices import run

from bandwise.errors import BandwiseError
from bandwise.plan.runs import convert
from bandwise.plan.validate import predict
from bandwise.specs.hardware import SLICE_SHAPES, cube_slice_shape, slice_shape
from bandwise.specs.registry import cluster_presets

TPU_PODS = {name: c.levels[0] for name, c in cluster_presets().items() if c.levels[0].is_torus}


@pytest.mark.parametrize("name", sorted(TPU_PODS))
def test_every_slice_a_pod_allows_multiplies_to_its_chips_and_fits(name):
    pod = TPU_PODS[name]
    sizes = list(SLICE_SHAPES[len(pod.torus_dims)])
    if len(pod.torus_dims) == 3:
        sizes += range(64, pod.size + 1, 64)
    found = 0
    for chips in sizes:
        shape = slice_shape(pod.torus_dims, chips)
        if shape is None:
            continue
        found += 1
        assert math.prod(shape) == chips and len(shape) == len(pod.torus_dims)
        assert all(a <= b for a, b in zip(sorted(shape), sorted(pod.torus_dims)))
    assert found >= 8


@pytest.mark.parametrize("name, chips, shape", [
    # Google Cloud TPU v6e docs: v6e-1 ... v6e-256
    ("tpu-v6e", 1, (1, 1)), ("tpu-v6e", 4, (2, 2)), ("tpu-v6e", 8, (2, 4)), ("tpu-v6e", 16, (4, 4)),
    ("tpu-v6e", 32, (4, 8)), ("tpu-v6e", 64, (8, 8)), ("tpu-v6e", 128, (8, 16)), ("tpu-v6e", 256, (16, 16)),
    # the same list for v5e (v5litepod-1 ... -256)
    ("tpu-v5e", 8, (2, 4)), ("tpu-v5e", 32, (4, 8)),
    # Google Cloud TPU v5p configurations table; 8x12x16 = 24 cubes, the shape the run had
    ("tpu-v5p", 4, (2, 2, 1)), ("tpu-v5p", 8, (2, 2, 2)), ("tpu-v5p", 32, (2, 4, 4)), ("tpu-v5p", 64, (4, 4, 4)),
    ("tpu-v5p", 128, (4, 4, 8)), ("tpu-v5p", 256, (4, 8, 8)), ("tpu-v5p", 512, (8, 8, 8)), ("tpu-v5p", 1024, (8, 8, 16)),
    ("tpu-v5p", 1536, (8, 12, 16)), ("tpu-v5p", 6144, (16, 16, 24)),
    # PaLM's 3,072-chip TPU v4 pods: 12x16x16; the Ironwood recipes' tpu7x-4x4x8 and 4x8x8
    ("tpu-v4", 3072, (12, 16, 16)), ("tpu7x", 128, (4, 4, 8)), ("tpu7x", 256, (4, 8, 8)),
])
def test_published_slice_shapes(name, chips, shape):
    assert tuple(sorted(slice_shape(TPU_PODS[name].torus_dims, chips))) == tuple(sorted(shape))


def test_no_slice_where_the_pod_has_none():
    assert slice_shape((16, 16), 512) is None and slice_shape((16, 16), 12) is None
    assert cube_slice_shape(6144, (16, 16, 16)) is None  # 16x16x24 does not fit a v4 pod
    assert cube_slice_shape(100, (16, 20, 28)) is None


@pytest.mark.parametrize("hardware, dims, dcn", [
    ({"accelerator": "TPU v6e", "count": 8}, (2, 4), False),
    ({"accelerator": "TPU v6e", "count": 16}, (4, 4), False),
    ({"accelerator": "TPU v6e", "count": 32}, (4, 8), False),
    ({"accelerator": "TPU v5p", "count": 1536}, (8, 12, 16), False),
    ({"accelerator": "TPU v6e", "count": 4096}, (16, 16), True),  # 16 pods over DCN
    ({"accelerator": "TPU v6e", "count": 4096, "slices": 16}, (16, 16), True),
])
def test_runs_on_these_slices_are_priced(hardware, dims, dcn):
    case = convert(run(hardware=hardware, parallelism={"global_batch_seqs": 4096}))
    ici = case.cluster.levels[0]
    assert ici.torus_dims == dims and ici.size == math.prod(dims)
    assert (hardware["count"] > ici.size) == dcn
    res = predict(case)
    assert res.reason is None and res.predicted > 0


def test_a_slice_the_pod_does_not_have_is_one_line():
    with pytest.raises(BandwiseError, match="no tpu-v6e slice of 12 chips") as e:
        convert(run(hardware={"accelerator": "TPU v6e", "count": 12}))
    assert "\n" not in str(e.value) and "16" in str(e.value)
