"""Property-based tests of the OpenAPI schema (schemathesis): no request gets a 5xx.

Every operation is called with requests generated from the schema, valid and invalid, with a valid
token (so that writes get past auth and reach validation), against the real server on each
database.  The example count is kept small: the point is breadth over every endpoint, in seconds.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from pipeplan.api.main import create_app
from pipeplan.api.settings import Settings
from tests.api.api_server import Server

# The schema the server serves, built without starting anything (no database, no workers).
# The coverage phase enumerates boundary cases of every field: hundreds of requests for the plan
# bodies (a graph and a cluster spec). The examples and fuzzing phases keep it to seconds.
_CONFIG = schemathesis.Config.from_dict({"phases": {"coverage": {"enabled": False}}})
schema = schemathesis.openapi.from_dict(create_app(Settings(database_url="sqlite://", workers=1)).openapi(),
                                        config=_CONFIG)


@schema.parametrize()
@settings(max_examples=5, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: Any, server: Server) -> None:
    response = case.call(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[0]}"}, timeout=60)
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance, content_type_conformance,
                                             response_schema_conformance])
