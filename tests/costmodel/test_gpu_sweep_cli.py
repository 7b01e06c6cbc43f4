"""`pipeplan profile --gpu` sweeps GPU-sized shapes: the CLI's layer selection, without CUDA."""

from __future__ import annotations

from pipeplan.costmodel.cli import select_layers
from pipeplan.costmodel.gpu_sweep import gpu_sweep
from pipeplan.costmodel.layerspecs import KINDS, default_sweep, parse_spec
from tests.cli_run import run


def test_a_gpu_request_selects_the_gpu_sweep() -> None:
    specs, models = select_layers("sweep,model:gpt2", 3, gpu=True)
    assert specs == gpu_sweep(3, list(KINDS)) and models == ["gpt2"]
    assert specs != default_sweep(3, list(KINDS))


def test_a_cpu_request_keeps_the_cpu_sweep() -> None:
    specs, models = select_layers("sweep", 3, gpu=False)
    assert specs == default_sweep(3, list(KINDS)) and models == []


def test_layer_types_and_explicit_shapes_with_a_gpu() -> None:
    specs, _ = select_layers("linear:m=8,k=64,n=64,conv2d", 2, gpu=True)
    assert specs[0] == parse_spec("linear:m=8,k=64,n=64")  # an explicit shape stays as given
    assert specs[1:] == gpu_sweep(2, ["conv2d"])


def test_help_says_the_gpu_sweep_is_gpu_sized() -> None:
    result = run("profile", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "GPU-sized" in text and "--dtype" in text
