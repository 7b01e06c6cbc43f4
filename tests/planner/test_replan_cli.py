"""`pipeplan replan` as a user runs it: a real process re-plans a hand-built model (tests/planner/test_replan.py's
loaded cluster) from a saved plan, prints the moves and the decision, and saves the migration."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cli_run import run
from tests.replan_problems import LOADED, current_plan, two_layers


def test_replan_prints_the_moves_and_the_decision(tmp_path: Path) -> None:
    graph, plan, cluster, out = (tmp_path / name for name in ("two.json", "current.json", "new.yaml", "new.json"))
    two_layers().build().save(graph)
    current_plan().save(plan)
    LOADED.save(cluster)
    common = (str(graph), "--plan", str(plan), "--cluster", str(cluster), "--costmodel", "analytic",
              "--microbatches", "1", "--workers", "1")
    # The move of l1 to d2 (1 s) pays from 1000 microbatches on (analytic overhead aside).
    moved = run("replan", *common, "--horizon", "5000mb", "--out", str(out))
    assert moved.returncode == 0, moved.stderr
    assert "decision: MOVE" in moved.stdout and "pays from" in moved.stdout
    assert re.search(r"│ l1 +│ d1 +│ d2 +│ 954 MiB │ +1 s │", moved.stdout)  # 10⁹ bytes at 1 GB/s
    doc = json.loads(out.read_text())["migration"]
    assert doc["decision"] == "move" and [m["layer"] for m in doc["moves"]] == ["l1"]

    borrowing = run("replan", *common, "--horizon", "5000mb", "--harvest")
    assert borrowing.returncode == 2 and "replan does not take --harvest" in borrowing.stderr, borrowing.stderr
    companion = run("replan", *common, "--horizon", "5000mb", "--fetch", "batch")
    assert companion.returncode == 2 and "need --harvest" in companion.stderr, companion.stderr
    refused = run("replan", *common, "--horizon=-10m")
    assert refused.returncode == 2 and "horizon must be a positive number of seconds" in refused.stderr
    assert "Traceback" not in refused.stderr
