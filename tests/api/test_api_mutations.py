"""Plan bodies mutated at random get a 4xx naming the fault, never a 5xx; the OpenAPI example that
the schema tests send plans for real (so they reach the solver)."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeplan.api.main import create_app
from pipeplan.api.settings import Settings
from tests.api.api_factories import chain_graph, cluster_spec, plan_body

BASE = plan_body(chain_graph(4), cluster_spec(2), costmodel="analytic",
                 options={"microbatches": 2, "pins": [{"layers": "l0", "device": "gpu0"}]},
                 solver={"time_limit": 2}, wait=10)

# What a field may be replaced with: every JSON type, edge numbers, text a store cannot hold.
ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "\ud800", "\x00", "NaN", "inf", "1e400", "-1", "a" * 5000, "gpu9", "l99", "1TB/s"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.recursive(st.just([]), lambda inner: st.lists(inner, max_size=1), max_leaves=40),
)


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in ``doc``."""
    found = [at] if at else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*at, i))
    return found


PATHS = _paths(BASE)


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS))
        parent: Any = body
        try:
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(ODD)
        except (KeyError, IndexError, TypeError):  # an earlier mutation changed the shape: fine
            continue
    return body


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(body=mutated())
def test_mutated_plan_bodies_never_get_a_server_error(body: dict[str, Any], client: httpx.Client) -> None:
    response = client.post("/v1/plans", json=body)
    assert response.status_code < 500, (body, response.text)
    if response.status_code >= 400:
        assert response.json()["detail"], response.text  # a message naming what is wrong


def test_the_openapi_example_plans_for_real(client: httpx.Client) -> None:
    openapi = create_app(Settings(database_url="sqlite://", workers=1)).openapi()
    example = openapi["components"]["schemas"]["PlanCreate"]["examples"][0]
    response = client.post("/v1/plans", json=example)
    assert response.status_code in (200, 201), response.text
    plan = response.json()["plan"]
    assert plan["certificate"]["status"] == "OPTIMAL" and plan["model"] == "tinygpt"
