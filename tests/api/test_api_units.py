"""The service's parts on their own: load arithmetic, keys, settings, token-protected reads in process."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import text

from pipeplan.api.auth import Principal, TokenChecker, create_token, list_tokens, revoke_token
from pipeplan.api.database import Database
from pipeplan.api.jobspec import JobSpec
from pipeplan.api.keys import canonical, digest_of, finite, request_key
from pipeplan.api.main import create_app
from pipeplan.api.payloads import SolverLimits, ZooCapture
from pipeplan.api.reservations import MAX_CORUNNERS, combine, stage_kind
from pipeplan.api.settings import Settings
from pipeplan.costmodel.graph import Layer
from pipeplan.costmodel.hardware import Contention, Device
from pipeplan.planner.problem import PlanOptions


@pytest.mark.parametrize("module", [f"pipeplan.api.{name}" for name in (
    "auth", "database", "errors", "etags", "jobspec", "keys", "links", "logs", "main", "payloads", "ratelimit",
    "reservations", "settings", "worker")])
def test_doctests(module: str) -> None:
    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0 and failures == 0


def test_reserved_stages_add_corunners() -> None:
    assert combine(Contention(), []) == Contention()
    assert combine(Contention(), ["memory", "memory"]) == Contention(corunners=2, kind="memory")
    assert combine(Contention(corunners=1, kind="compute"), ["compute"]) == Contention(corunners=2, kind="compute")
    assert combine(Contention(corunners=1, kind="compute"), ["memory"]).kind == "mixed"
    assert combine(Contention(corunners=MAX_CORUNNERS), ["compute"]).corunners == MAX_CORUNNERS
    assert combine(Contention(utilization=0.5), ["compute"]).utilization == pytest.approx(2 / 3)
    assert combine(Contention(utilization=0.99), ["compute"] * 64).utilization < 1.0


def test_a_stage_is_compute_or_memory_bound_by_the_roofline() -> None:
    device = Device(id="d", memory="1GiB", peak_flops=100e12, mem_bandwidth=1e12)  # ridge: 100 FLOP/B
    dense = Layer("mm", "linear", "Linear", 0, flops=10**9, bytes_read=10**6, bytes_written=0, param_bytes=0,
                  activation_bytes=0, kernels=1)
    stream = Layer("add", "elementwise", "functional", 1, flops=10**6, bytes_read=10**6, bytes_written=10**6,
                   param_bytes=0, activation_bytes=0, kernels=1)
    assert stage_kind([dense], device) == "compute"
    assert stage_kind([stream], device) == "memory"
    assert stage_kind([dense, stream], device) == "compute"  # 1e9 FLOP over 3e6 B
    assert stage_kind([], device) == "compute"


def test_keys_ignore_key_order_and_cover_every_part() -> None:
    assert canonical({"b": [1, {"d": 2, "c": 3}], "a": "é"}) == '{"a":"\\u00e9","b":[1,{"c":3,"d":2}]}'
    assert finite([float("inf"), 1.5]) == [None, 1.5]
    base = request_key("plan", "g", "c", "analytic", {"microbatches": 4}, {"time_limit": 1})
    assert base == request_key("plan", "g", "c", "analytic", {"microbatches": 4}, {"time_limit": 1})
    assert len({base, request_key("compare", "g", "c", "analytic", {"microbatches": 4}, {"time_limit": 1}),
                request_key("plan", "g2", "c", "analytic", {"microbatches": 4}, {"time_limit": 1}),
                request_key("plan", "g", "c2", "analytic", {"microbatches": 4}, {"time_limit": 1}),
                request_key("plan", "g", "c", "model.json", {"microbatches": 4}, {"time_limit": 1}),
                request_key("plan", "g", "c", "analytic", {"microbatches": 8}, {"time_limit": 1}),
                request_key("plan", "g", "c", "analytic", {"microbatches": 4}, {"time_limit": 2})}) == 7
    assert digest_of({"x": "\ud800"})  # a lone surrogate from a client still hashes


# A job's spec as the durable queue stored it before payloads were typed: options and solver limits as
# plain dicts (the options as the request schema dumps them).
_OLD_SPEC = (
    '{"kind":"plan","payload":{"cluster":{"name":"one","devices":[{"id":"gpu0","type":"A100","memory":85899345920,'
    '"peak_flops":312000000000000.0,"mem_bandwidth":2039000000000.0}],"links":[]},"costmodel":"analytic",'
    '"costmodel_name":"analytic","options":{"objective":"latency","comm":"overlap","microbatches":2,"in_flight":null,'
    '"memory_margin":0.1,"min_throughput":10.0,"max_devices":null,"pins":[{"layers":"a","device":"gpu0"}]},'
    '"solver":{"time_limit":5.0,"workers":1,"seed":3,"gap_limit":0.0},"zoo":{"name":"tinygpt","batch":2,'
    '"granularity":"block","seq_len":null,"image_size":null,"kv_context":null}},"timeout":40.0,"timeout_note":"",'
    '"key_parts":["c","analytic",{"microbatches":2},{"time_limit":5.0}],"graph":null,"digest":null,'
    '"zoo_key":"z","cluster":"one","registered":false,"revision":null,"costmodel_name":"analytic","request":{},'
    '"reserve":false,"owner":null,"request_id":null}')


def test_a_job_spec_stored_before_payloads_were_typed_still_runs() -> None:
    spec = JobSpec.from_json(_OLD_SPEC)
    payload = spec.payload
    assert payload.options == PlanOptions(objective="latency", microbatches=2, min_throughput=10.0,
                                          pins=[("a", "gpu0")])
    assert payload.solver == SolverLimits(time_limit=5.0, workers=1, seed=3, gap_limit=0.0)
    assert payload.zoo == ZooCapture("tinygpt", 2, "block") and payload.graph_text is None
    assert [d.id for d in payload.cluster.devices] == ["gpu0"] and payload.cluster.device("gpu0").memory == 80 * 2**30
    assert spec.key_parts.options == {"microbatches": 2} and spec.key_parts.solver == {"time_limit": 5.0}
    assert JobSpec.from_json(spec.to_json()) == spec


def test_settings_refuse_what_would_fail_later() -> None:
    with pytest.raises(ValidationError, match="PIPEPLAN_DATABASE_URL"):
        Settings(database_url="mysql://db")
    with pytest.raises(ValidationError, match="max_time_limit"):
        Settings(database_url="sqlite://", default_time_limit=100, max_time_limit=10)
    with pytest.raises(ValidationError):
        Settings(database_url="sqlite://", read_auth="maybe")
    with pytest.raises(ValidationError, match="PIPEPLAN_PUBLIC_URL"):
        Settings(database_url="sqlite://", public_url="plans.example.com")
    with pytest.raises(ValidationError, match="PIPEPLAN_CORS_ORIGINS"):
        Settings(database_url="sqlite://", cors_origins=["ui.example.com"])
    assert Settings(database_url="sqlite://", public_url="https://p.example.com/").public_url == "https://p.example.com"


def test_tokens_are_stored_hashed(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 't.db'}")
    db.migrate()
    token = create_token(db, "ops")
    with db.read() as session:
        stored = session.execute(text("select name, digest from tokens")).all()
    assert stored[0][0] == "ops" and token not in stored[0][1]
    checker, cached = TokenChecker(db), TokenChecker(db, ttl=60)
    assert checker.check(token) == cached.check(token) == Principal(1, "ops", frozenset({"read", "plan"}))
    assert not checker.valid(token + "x") and not checker.valid(None) and not checker.valid("Bearer")
    with pytest.raises(ValueError, match="token name"):
        create_token(db, " ")
    with pytest.raises(ValueError, match="scopes must be some of read, plan, admin, got 'write'"):
        create_token(db, "w", scopes="write")
    admin = create_token(db, "root", owner="ops", scopes="admin,read")
    assert [(t.name, t.owner, t.scopes) for t in list_tokens(db)] == [("ops", "ops", "read plan"),
                                                                       ("root", "ops", "read admin")]
    assert [t.name for t in revoke_token(db, "1")] == ["ops"]
    assert checker.check(token) is None  # at once without a cache
    assert cached.check(token) is not None  # a cache trusts it for its ttl: why the default is 0
    with pytest.raises(ValueError, match="no unrevoked token"):
        revoke_token(db, "ops")
    root = checker.check(admin)
    assert root is not None and root.allows("plan") and root.may_change("someone") and root.may_change(None)
    ana = Principal(3, "ana", frozenset({"plan"}))
    assert ana.may_change("ana") and not ana.may_change("bo") and not ana.may_change(None)
    assert not Principal(4, "ana", frozenset({"read"})).may_change("ana")
    db.dispose()


def test_reads_can_require_a_token(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'r.db'}", read_auth="token", workers=1)
    db = Database(settings.database_url)
    db.migrate()
    token = create_token(db, "reader")
    db.dispose()
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/plans").status_code == 401
        assert client.get("/v1/clusters/local-cpu").status_code == 401
        assert client.get("/v1/plans", headers={"Authorization": f"Bearer {token}"}).json()["total"] == 0
        assert client.get("/healthz").status_code == 200  # health and metrics stay open
        assert client.get("/metrics").status_code == 200
        schema = client.get("/openapi.json").json()
        assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_migrations_build_the_schema_of_the_models(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from pipeplan.api.tables import Base

    db = Database(database_url)
    db.migrate()
    db.migrate()  # a second start finds nothing to do
    with db.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    db.dispose()
