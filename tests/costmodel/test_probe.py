"""A probe of this CPU: real layers timed here, shipped models scaled per kind to them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Device, same_cpu
from pipeplan.costmodel.probe import NEAREST, Probe, ProbedCostModel, ProbeError, default_path, fit, load_probe, measure
from pipeplan.costmodel.registry import SHIPPED, load_cost_model
from pipeplan.costmodel.zoo import capture_model

DEVICE = Device(id="c", type="cpu-core", memory="8GiB", peak_flops="100GFLOPS", mem_bandwidth="15GB/s", cores=[0])


@pytest.fixture(scope="module")
def measured() -> list[tuple[str, Layer, float]]:
    return measure(cores=[0], seconds=0.2, models=("opt",))  # a small decoder of the tuning set, in real passes


@pytest.fixture(scope="module")
def probe(measured: list[tuple[str, Layer, float]]) -> Probe:
    return fit(measured, DEVICE, [load_cost_model("learned-xeon"), load_cost_model("analytic")])


def test_each_kinds_factor_is_its_measured_sum_over_its_predicted_sum(
        probe: Probe, measured: list[tuple[str, Layer, float]]) -> None:
    assert {p.kind for p in probe.points} >= {"linear", "attention", "layernorm", "embedding"}
    assert len(probe.points) == len(measured) and all(p.seconds > 0 for p in probe.points)
    roofline = load_cost_model("analytic").layer_times([la for _, la, _ in measured], DEVICE)
    assert [p.predicted["analytic"] for p in probe.points] == roofline
    for spec in ("learned-xeon", "analytic"):
        for kind, factor in probe.factors[spec].items():
            points = [p for p in probe.points if p.kind == kind]
            assert factor == pytest.approx(sum(p.seconds for p in points) / sum(p.predicted[spec] for p in points),
                                           rel=1e-12)
    assert probe.base == min(probe.spread, key=probe.spread.__getitem__)


def test_the_probed_model_is_its_base_times_each_layers_kind_factor(probe: Probe) -> None:
    base = load_cost_model("learned-xeon")
    probed = ProbedCostModel(base, probe)
    graph = capture_model("tinygpt", 2)
    device = DEVICE
    plain, scaled = base.layer_times(graph.layers, device), probed.layer_times(graph.layers, device)
    kinds = probe.factors["learned-xeon"]
    for layer, t0, t1 in zip(graph.layers, plain, scaled, strict=True):
        if layer.kind in kinds:
            assert t1 == pytest.approx(t0 * kinds[layer.kind], rel=1e-9), layer.name
        else:  # a kind never probed (elementwise glue): the nearest probed intensities' factor
            x = math.log10(max(layer.flops / (layer.bytes_read + layer.bytes_written), 1e-6))
            logs = sorted((math.log10(max(p.intensity, 1e-6)), math.log10(p.seconds / p.predicted["learned-xeon"]))
                          for p in probe.points)  # ties in distance go to the lower intensity, then factor
            nearest = sorted(logs, key=lambda q: abs(q[0] - x))[:NEAREST]
            expected = 10 ** (sum(y for _, y in nearest) / len(nearest))
            assert t1 == pytest.approx(t0 * expected, rel=1e-9), layer.name
    # by blocks, each leaf is scaled by its own kind: the block sums equal the leaf sums
    blocks = capture_model("tinygpt", 2, granularity="block")
    assert sum(probed.layer_times(blocks.layers, device)) == pytest.approx(sum(scaled), rel=1e-6)
    assert probed.spec == "probed:learned-xeon" and probed.digest == base.digest


def test_a_probe_is_saved_and_read_back_and_named_by_the_registry(probe: Probe, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPEPLAN_PROBE_DIR", str(tmp_path))
    with pytest.raises(ProbeError, match=r"has not been probed.*pipeplan costmodel probe"):
        load_cost_model("probed")
    probe.save(default_path())
    again = load_probe()
    assert again.factors == probe.factors and again.base == probe.base and len(again.points) == len(probe.points)
    model = load_cost_model("probed:learned-xeon")
    assert isinstance(model, ProbedCostModel) and model.factors == probe.factors["learned-xeon"]
    assert load_cost_model("probed").spec == f"probed:{probe.base}"
    learned = load_cost_model("learned")
    if any(same_cpu(s.cpu) for s in SHIPPED):  # this CPU has its own model: the probe is not needed
        assert not isinstance(learned, ProbedCostModel)
    else:  # a CPU with no model of its own: `learned` is the probed one
        assert isinstance(learned, ProbedCostModel) and learned.spec == f"probed:{probe.base}"
    with pytest.raises(ProbeError, match="no factors for cost model"):
        ProbedCostModel(load_cost_model("learned-epyc"), probe)
    default_path().write_text("{\"format\": \"something else\"}")
    with pytest.raises(ProbeError, match="not a CPU probe"):
        load_probe()


def test_the_probe_command_writes_the_probe_and_prints_the_factors(tmp_path: Path) -> None:
    from tests.cli_run import run

    out = tmp_path / "probe.json"
    result = run("costmodel", "probe", "--seconds", "0.05", "--models", "resnet", "--base", "learned-xeon,analytic",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "conv" in result.stdout and "spread" in result.stdout and "layers timed" in result.stdout
    probe = load_probe(out)
    assert set(probe.factors) == {"learned-xeon", "analytic"} and probe.base in probe.factors
    assert {p.config.split("/")[0] for p in probe.points} == {"resnet"}
    # What `learned` does with the probe: a CPU with a shipped model of its own keeps that model.
    own = [s.name for s in SHIPPED if same_cpu(s.cpu)]
    said = " ".join(result.stdout.split())
    assert (f"stays learned-{own[0]}" if own else f"now predicts with probed:{probe.base}") in said, said
    bad = run("costmodel", "probe", "--models", "gpt_neox", "--out", str(tmp_path / "no.json"))
    assert bad.returncode == 2 and "choose tuning-set factories" in bad.stderr
