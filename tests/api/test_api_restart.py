"""A restart keeps every plan, cluster and finished job; an unfinished job is marked failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.api_factories import chain_graph, cluster_spec, plan_body, wide_graph
from tests.api.api_server import create_token, start_server, wait_job


# Two more server starts per database: PostgreSQL's run is marked slow (it still runs in CI).
@pytest.mark.parametrize("database_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)],
                         indirect=True)
def test_restart_keeps_what_was_stored(database_url: str, tmp_path: Path) -> None:
    token = create_token(database_url, "restart")
    first = start_server(database_url, tmp_path / "first.log", workers=1)
    try:
        with first.client(token) as c:
            assert c.put("/v1/clusters/kept", json=cluster_spec(2)).status_code in (200, 201)
            job = c.post("/v1/plans", json=plan_body(chain_graph(5, "kept"), "kept", reserve=True, wait=0)).json()
            done = wait_job(c, job["url"])
            plan = c.get(done["plan_url"]).json()
            assert plan["reserved"]
            cut = c.post("/v1/plans", json=plan_body(wide_graph(name="cut"), "8gpu-2hosts", wait=0,
                                                     solver={"time_limit": 30})).json()
            assert wait_job(c, cut["url"], until=("running",))["status"] == "running"
    finally:
        first.stop()  # stops the worker in the middle of the solve
    second = start_server(database_url, tmp_path / "second.log", workers=1)
    try:
        with second.client(token) as c:
            assert c.get(plan["url"]).json() == plan
            assert c.get(done["url"]).json() == done
            cluster = c.get("/v1/clusters/kept").json()
            assert [d["reservations"] for d in cluster["devices"]] != [[], []]
            stopped = c.get(cut["url"]).json()
            assert stopped["status"] == "failed" and stopped["error_type"] == "Restarted"
            assert c.delete(plan["url"]).status_code == 204
            assert c.delete("/v1/clusters/kept").status_code == 204
    finally:
        second.stop()
