"""``pipeplan token create`` and ``pipeplan serve`` as an operator runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.api.api_factories import chain_graph, plan_body
from tests.api.api_server import Server, cli


def test_token_create_gives_a_token_the_server_accepts(server: Server) -> None:
    if not server.database_url.startswith("sqlite"):
        pytest.skip("the command is the same on both databases; once is enough")
    done = cli(server.database_url, "token", "create", "--name", "ops")
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("pp_") and "shown only this once" in done.stderr
    with server.client(token) as c:
        assert c.post("/v1/plans", json=plan_body(chain_graph(4, "cli"))).status_code == 201


def test_serve_refuses_a_bad_setting() -> None:
    # ``python -m pipeplan.api`` runs the same command functions as ``pipeplan`` (without loading torch).
    done = subprocess.run([sys.executable, "-m", "pipeplan.api", "serve", "--port", "1"], capture_output=True,
                          text=True, env={**os.environ, "PIPEPLAN_DATABASE_URL": "mysql://nope"}, timeout=60,
                          check=False)
    assert done.returncode == 2 and "PIPEPLAN_DATABASE_URL" in done.stderr
