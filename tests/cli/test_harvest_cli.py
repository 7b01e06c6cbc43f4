"""`pipeplan plan --harvest` as a user runs it: a table's model that fits on no split of its cluster
gets a plan that borrows the host's memory, with the memory map and the loans printed and saved."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_run import run
from tests.cost_tables import two_types

GIB = 2**30
# Ten layers of 0.25 GiB of weights on two devices of 1 GiB: 2.5 GiB fits on no split.  Borrowing,
# a device keeps two staging buffers of its largest loan (0.5 GiB) and two layers of its own.
CSV = "layer,A100,T4,output_bytes,param_bytes\n" + "".join(
    f"l{i},0.002,0.003,1000000,{GIB // 4}\n" for i in range(10))


def test_a_model_that_fits_nowhere_plans_by_borrowing_the_hosts_memory(tmp_path: Path) -> None:
    (tmp_path / "costs.csv").write_text(CSV)
    two_types().save(tmp_path / "pair.yaml")
    common = ("plan", f"table:{tmp_path / 'costs.csv'}", "--cluster", str(tmp_path / "pair.yaml"),
              "--memory-margin", "0", "--workers", "1")
    refused = run(*common)
    assert refused.returncode == 2 and "GiB short" in refused.stderr, refused.stderr

    out = tmp_path / "plan.json"
    result = run(*common, "--harvest", "--host-memory", "8GiB", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "memory map" in result.stdout and "loans, fetched each microbatch" in result.stdout
    plan = json.loads(out.read_text())
    loans = plan["harvest"]["loans"]
    assert loans and all(loan["lender"].startswith("host") for loan in loans), loans
    placed = {layer for s in plan["stages"] for layer in s["layers"]}
    assert placed == {f"l{i}" for i in range(10)} and plan["certificate"]["status"] == "OPTIMAL"
    assert len(loans) == 6  # ten layers, two of its own on each device

    batched = run(*common, "--harvest", "--host-memory", "8GiB", "--fetch", "batch", "--out", str(out))
    assert batched.returncode == 0, batched.stderr
    assert "loans, fetched each batch" in batched.stdout
    assert json.loads(out.read_text())["harvest"]["options"]["fetch"] == "batch"

    misused = run(*common, "--host-memory", "8GiB")
    assert misused.returncode == 2 and "need --harvest" in misused.stderr
    misused = run(*common, "--fetch", "batch")
    assert misused.returncode == 2 and "need --harvest" in misused.stderr



def test_stash_reaches_the_planner_and_is_refused_without_batch(tmp_path: Path) -> None:
    # The planner's own tests (tests/planner/test_harvest_stash.py) have a batch that fits only with a
    # stash, where a stage keeps one microbatch in flight (--in-flight 1; with all M in flight,
    # layer-major adds nothing a stash could take away). Here the flags reach the plan; these
    # activations are small, so the trim keeps no stash.
    (tmp_path / "costs.csv").write_text(CSV)
    two_types().save(tmp_path / "pair.yaml")
    common = ("plan", f"table:{tmp_path / 'costs.csv'}", "--cluster", str(tmp_path / "pair.yaml"),
              "--memory-margin", "0", "--workers", "1", "--harvest", "--host-memory", "8GiB")
    out = tmp_path / "plan.json"
    result = run(*common, "--fetch", "batch", "--stash", "--in-flight", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    saved = json.loads(out.read_text())
    assert saved["options"]["in_flight"] == 1
    harvest = saved["harvest"]
    assert harvest["options"]["stash"] is True and harvest["stashes"] == []  # the trim drops stashes not needed
    misused = run(*common, "--stash")
    assert misused.returncode == 2 and "--stash needs --fetch batch" in misused.stderr
    misused = run(*common[:-3], "--stash")
    assert misused.returncode == 2 and "need --harvest" in misused.stderr
