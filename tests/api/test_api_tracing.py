"""OpenTelemetry tracing (PIPEPLAN_TRACING): a real server exports a span per request, carrying the
request's ID, and nothing for health checks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.api.api_server import start_server


def _spans(text: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter wrote (several lines each) among the server's log lines."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := text.find("{\n", at)) >= 0:
        try:
            obj, at = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            at = start + 1
            continue
        if isinstance(obj, dict) and "context" in obj and "name" in obj:
            found.append(obj)
    return found


def test_each_request_is_a_span_with_its_request_id(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = start_server(f"sqlite:///{tmp_path / 'trace.db'}", log, workers=1, tracing="console")
    try:
        with server.client() as c:
            assert c.get("/v1/clusters/local-cpu", headers={"X-Request-ID": "trace-me"}).status_code == 200
            assert c.get("/livez").status_code == 200
        deadline, mine = time.monotonic() + 10, []
        while not mine and time.monotonic() < deadline:
            spans = _spans(log.read_text())
            mine = [s for s in spans if s["attributes"].get("pipeplan.request_id") == "trace-me"
                    and s["kind"] == "SpanKind.SERVER"]
            time.sleep(0.05)
    finally:
        server.stop()
    assert mine, log.read_text()[-2000:]
    assert mine[0]["name"] == "GET /v1/clusters/{name}"
    assert mine[0]["attributes"]["http.route"] == "/v1/clusters/{name}"
    assert mine[0]["resource"]["attributes"]["service.name"] == "pipeplan"
    assert not [s for s in _spans(log.read_text()) if "/livez" in s["name"]]
