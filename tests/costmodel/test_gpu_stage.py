"""A shared GPU's time-slice wait is paid once per pipeline stage, not once per layer, and loads
written as text read back as the same load (profile rows included)."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.analytic import RooflineModel
from pipeplan.costmodel.cluster import Cluster
from pipeplan.costmodel.dataset import contention_features, contention_from_row
from pipeplan.costmodel.gpu import GpuCostModel, GpuParams
from pipeplan.costmodel.graph import Layer, ModelGraph
from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.timeslice import SharingParams
from pipeplan.planner.problem import PlanOptions, Problem
from pipeplan.planner.simulate import evaluate, stage_times

H100 = "NVIDIA H100 80GB HBM3"
SHARING = SharingParams(share_compute=0.25, slice_compute=2e-4, alpha=1.0)
# Host launches cost nothing and kernels have no fixed time: a layer's time is its bytes over bandwidth.
PARAMS = GpuParams(kernel_time=0.0, host_module=0.0, host_container=0.0, host_kernel=0.0, host_view=0.0,
                   host_pass=5e-5, eff_memory=1.0, sharing=SHARING)


def _graph(n: int) -> ModelGraph:
    """A chain of ``n`` layer norms of 33.5 MB each: 10 µs apiece on an H100 (3.35 TB/s)."""
    graph = ModelGraph("chain", batch_size=1)
    for i in range(n):
        graph.add_layer(Layer(f"ln{i}", "layernorm", "LayerNorm", i, flops=0, bytes_read=33_500_000,
                              bytes_written=0, param_bytes=0, activation_bytes=1000, kernels=1,
                              ops=["aten.layer_norm"]))
        if i:
            graph.add_edge(f"ln{i - 1}", f"ln{i}", 1000)
    return graph


def _cluster(load: str) -> Cluster:
    return Cluster.from_dict({
        "name": "two-h100",
        "devices": [{"id": f"g{i}", "type": H100, "memory": "80GiB", "peak_flops": "67TFLOPS",
                     "mem_bandwidth": "3.35TB/s", "load": Contention.parse(load).model_dump()} for i in range(2)],
        "topology": {"intra_host": {"bandwidth": 1e18, "latency": 0.0}},
    })


def test_each_stage_pays_the_slice_wait_once() -> None:
    model = GpuCostModel(PARAMS)
    problem = Problem(_graph(6), _cluster("1xcompute"), model, PlanOptions(memory_margin=0.0))
    # every layer: 10 µs stretched by 1.25; every stage: 50 µs entry and sync plus a 0.2 ms slice
    assert problem.time[0] == pytest.approx([1.25e-5, 1.25e-5])
    assert problem.stage_overhead == pytest.approx([2.5e-4, 2.5e-4])
    compute, _, _ = stage_times(problem, [0, 0, 0, 0, 1, 1])
    assert compute == pytest.approx([4 * 1.25e-5 + 2.5e-4, 2 * 1.25e-5 + 2.5e-4])
    one_stage = evaluate(problem, [0] * 6)
    assert one_stage.bottleneck == pytest.approx(6 * 1.25e-5 + 2.5e-4)
    # the stage the simulator scores is the pass the GPU model predicts for those layers
    assert one_stage.bottleneck == pytest.approx(model.pass_time(_graph(6).layers, problem.cluster.devices[0]))


def test_an_idle_gpu_stage_pays_only_entry_and_sync_and_other_models_nothing() -> None:
    problem = Problem(_graph(2), _cluster("idle"), GpuCostModel(PARAMS), PlanOptions(memory_margin=0.0))
    assert problem.stage_overhead == pytest.approx([5e-5, 5e-5])
    roofline = Problem(_graph(2), _cluster("1xcompute"), RooflineModel(), PlanOptions(memory_margin=0.0))
    assert roofline.stage_overhead == [0.0, 0.0]
    assert RooflineModel().stage_time([], roofline.cluster.devices[0]) == 0.0


@pytest.mark.parametrize("text", ["idle", "2xmemory", "1xmixed", "3xtenant", "50%compute", "2x25%memory",
                                  "30%", "0.3", "30% used", "7%"])
def test_what_describe_writes_parse_reads_back(text: str) -> None:
    load = Contention.parse(text)
    assert Contention.parse(load.describe()) == load


def test_a_utilisation_reads_back_to_the_percent_it_shows() -> None:
    assert Contention(utilization=0.6666).describe() == "67% used"
    assert Contention.parse("67% used") == Contention(utilization=0.67)
    assert Contention(utilization=0.996).describe() == "99% used"  # never "100%", which parse refuses


@pytest.mark.parametrize("text", ["50%compute", "2x25%memory", "1xtenant", "3xmixed", "40%", "idle"])
def test_a_profile_row_keeps_its_duty_cycle(text: str) -> None:
    load = Contention.parse(text)
    assert contention_from_row(contention_features(load)) == load


def test_a_profile_row_whose_text_contradicts_its_columns_is_refused() -> None:
    row = contention_features(Contention.parse("50%compute"))
    with pytest.raises(ValueError, match="disagrees with its columns corunners=1 and contention_kind='memory'"):
        contention_from_row({**row, "contention_kind": "memory"})
    with pytest.raises(ValueError, match="contention column is unreadable"):
        contention_from_row({**row, "contention": "busy"})


def test_the_ilp_plans_with_the_stage_overhead() -> None:
    """A loaded GPU's slice wait (paid once per stage) makes a stage there cost more than its layers
    save: the ILP sees it, so its plan is the simulator's optimum over every assignment, proven."""
    import itertools

    from pipeplan.planner.ilp import SolverOptions, solve

    cluster = Cluster.from_dict({
        "name": "idle-and-loaded",
        "devices": [{"id": f"g{i}", "type": H100, "memory": "80GiB", "peak_flops": "67TFLOPS",
                     "mem_bandwidth": "3.35TB/s", "load": Contention.parse(load).model_dump()}
                    for i, load in enumerate(("idle", "1xcompute"))],
        "topology": {"intra_host": {"bandwidth": 1e18, "latency": 0.0}},
    })
    problem = Problem(_graph(6), cluster, GpuCostModel(PARAMS), PlanOptions(memory_margin=0.0))
    assert problem.stage_overhead == pytest.approx([5e-5, 2.5e-4])
    best = min(e.bottleneck for dev_of in itertools.product(range(2), repeat=6)
               if (e := evaluate(problem, list(dev_of))).valid)
    assert best == pytest.approx(6e-5 + 5e-5)  # everything on the idle GPU: one stage, one entry
    plan = solve(problem, SolverOptions(time_limit=10, workers=1, seed=0))
    assert plan.certificate.status == "OPTIMAL"
    assert plan.objective_value == pytest.approx(best) and {s.device for s in plan.stages} == {"g0"}
