"""OpenTelemetry tracing, optional: a span per request (and its database and solver time within it).

Off unless ``PIPEPLAN_TRACING`` says where spans go: ``otlp`` (an OTLP/HTTP collector, configured by
OpenTelemetry's own variables: ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS`` …) or
``console`` (one JSON object per span on stderr, to try it).  Each request's span carries its
``pipeplan.request_id``, the ID the logs carry, so a trace and its log lines can be joined.  The
packages come with the ``otel`` extra (``pip install 'pipeplan[otel]'``); asking for tracing
without them is an error at start-up that names the extra, not a silent no-op.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from pipeplan.api.logs import request_id

__all__ = ["RequestIdSpan", "instrument"]


def instrument(app: FastAPI, exporter: str, service_name: str = "pipeplan") -> Any:
    """Trace ``app``'s requests to ``exporter`` (``otlp`` or ``console``); the tracer provider."""
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise RuntimeError(f"PIPEPLAN_TRACING={exporter} needs OpenTelemetry: pip install 'pipeplan[otel]' "
                           f"({exc})") from None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:  # console: written as each span ends, so a short run shows all of them
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))

    # The instrumentation wraps the whole middleware stack, so its span is open before the request
    # has an ID: RequestIdSpan (inside RequestIdMiddleware) tags it.
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls="livez,readyz,metrics",
                                       exclude_spans=["receive", "send"])
    app.add_middleware(RequestIdSpan)
    return provider


class RequestIdSpan:
    """Puts the request's ID (:data:`pipeplan.api.logs.request_id`) on the request's span."""

    def __init__(self, app: ASGIApp) -> None:
        from opentelemetry import trace  # here, not per request: instrument() has checked it is installed

        self.app = app
        self._current_span = trace.get_current_span

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        span = self._current_span()
        rid = request_id.get()
        if rid and span.is_recording():
            span.set_attribute("pipeplan.request_id", rid)
        await self.app(scope, receive, send)
