"""The service's settings: one object, read from ``PIPEPLAN_*`` environment variables.

>>> Settings(database_url="sqlite:///x.db", read_auth="token").read_auth
'token'
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "default_database_url", "get_settings"]


def default_database_url() -> str:
    """An SQLite file in the user's data directory: nothing to install or configure."""
    from platformdirs import user_data_dir

    return f"sqlite:///{Path(user_data_dir('pipeplan', appauthor=False)) / 'pipeplan.db'}"


def _cpus() -> int:
    return os.cpu_count() or 1


class Settings(BaseSettings):
    """Every knob of the service; ``PIPEPLAN_<NAME>`` sets ``<name>``."""

    model_config = SettingsConfigDict(env_prefix="PIPEPLAN_", extra="ignore", frozen=True)

    database_url: str = Field(default_factory=default_database_url,
                              description="SQLAlchemy URL: sqlite:///PATH or postgresql+psycopg://…")
    read_auth: Literal["open", "token"] = Field(
        "open", description="'open': anyone may read; 'token': reads need a bearer token too")
    workers: int = Field(default_factory=lambda: max(1, min(4, _cpus())), ge=1, le=64,
                         description="solver worker processes")
    queue_size: int = Field(32, ge=1, le=10_000, description="jobs waiting for a worker before 503")
    retry_after: int = Field(5, ge=1, le=3600, description="seconds a 503 asks the client to wait")
    sync_wait: float = Field(5.0, ge=0.0, le=120.0,
                             description="seconds POST waits for a solve before answering 202")
    solver_threads: int = Field(1, ge=1, le=256, description="CP-SAT threads per job by default")
    max_solver_threads: int = Field(default_factory=_cpus, ge=1, le=256)
    default_time_limit: float = Field(10.0, gt=0.0)
    max_time_limit: float = Field(300.0, gt=0.0, description="largest solver time limit a request may ask")
    capture_timeout: float = Field(300.0, gt=0.0,
                                   description="seconds a job may spend capturing a zoo model")
    max_body_bytes: int = Field(8 * 2**20, ge=1024, description="largest request body (413 above)")
    body_timeout: float = Field(30.0, gt=0.0, le=3600.0,
                                description="seconds a request's body may take to arrive (408 after)")
    max_graph_layers: int = Field(5000, ge=1)
    max_graph_edges: int = Field(50_000, ge=0)
    max_devices: int = Field(64, ge=1)
    max_capture_bytes: int = Field(2**30, ge=2**20,
                                   description="largest activation a zoo capture may allocate, estimated from "
                                               "the input sizes before anything is built (422 above)")
    token_cache_ttl: float = Field(0.0, ge=0.0, le=3600.0,
                                   description="seconds a checked token is trusted without asking the database; a "
                                               "revoked token works that long. 0: every request asks (at once)")
    idempotency_ttl: float = Field(86_400.0, gt=0.0,
                                   description="seconds an Idempotency-Key is remembered")
    costmodel_dir: Path | None = Field(
        None, description="folder of learned cost model files a request may name (by file name only)")

    # -- what one job may use (pipeplan.api.pool, pipeplan.api.worker) --------------------------------------------
    job_memory: int = Field(4 * 2**30, ge=0,
                            description="bytes of private memory a worker may hold while it runs a job "
                                        "(RLIMIT_DATA); over it the job fails with MemoryLimit. 0: no limit")
    job_grace: float = Field(30.0, gt=0.0,
                             description="seconds a job may run past its solver time limit (reading the graph, "
                                         "building the model, checking the answer); then its worker is "
                                         "stopped and the job fails with Timeout")
    worker_max_jobs: int = Field(200, ge=0, description="jobs a worker runs before it is replaced. 0: never")
    worker_max_rss: int = Field(2**30, ge=0,
                                description="resident bytes after which a worker is replaced between jobs. 0: never")
    predict_workers: int = Field(1, ge=1, le=16,
                                 description="worker processes for cost predictions, apart from the solvers")
    predict_timeout: float = Field(60.0, gt=0.0, description="seconds a cost prediction may take")

    # -- several replicas and workers (pipeplan.api.queue, pipeplan.api.queue_worker) -----------------------------
    job_queue: Literal["local", "postgresql"] = Field(
        "local", description="'local': each server solves in its own worker processes (jobs die with it); "
                             "'postgresql': servers enqueue jobs in a durable queue on the PostgreSQL database "
                             "(procrastinate) and `pipeplan worker` processes, on any machine, claim them")
    queue_heartbeat: float = Field(5.0, gt=0.0, le=300.0,
                                   description="seconds between a queue worker's heartbeats")
    queue_lease: float = Field(30.0, gt=0.0, le=3600.0,
                               description="seconds without a heartbeat after which a worker's jobs are claimed "
                                           "again by another")
    queue_max_attempts: int = Field(3, ge=1, le=100,
                                    description="claims of one job before it fails (WorkerDied): a job whose "
                                                "workers keep dying is not retried forever")
    drain_timeout: float = Field(30.0, ge=0.0, le=3600.0,
                                 description="seconds a queue worker told to stop (SIGTERM) lets its running jobs "
                                             "finish; it then hands the rest back to the queue")

    # -- what operators expect (api.ops) ---------------------------------------------------------
    public_url: str | None = Field(
        None, description="the service's address as clients see it (https://plans.example.com): the base of "
                          "pagination links; unset, links are relative paths (the Host header is never used)")
    cors_origins: list[str] = Field(
        default_factory=list, description="origins browsers may call from (JSON list); empty: no CORS headers")
    rate_limit: float = Field(0.0, ge=0.0,
                              description="requests per second per token (per address without one); 0: off")
    rate_burst: int = Field(60, ge=1, description="requests a token may send at once before rate_limit applies")
    log_format: Literal["json", "text"] = Field("json", description="'json': one JSON object per log line")
    tracing: Literal["off", "otlp", "console"] = Field(
        "off", description="OpenTelemetry spans per request: 'otlp' to the collector OTEL_EXPORTER_OTLP_ENDPOINT "
                           "names, 'console' on stderr; needs the 'otel' extra (api.tracing)")

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        # Refuse anything else early: a typo would otherwise surface as an obscure driver error.
        if not url.startswith(("sqlite://", "postgresql")):
            raise ValueError(f"PIPEPLAN_DATABASE_URL must be sqlite:///PATH or postgresql+psycopg://…, got {url!r}")
        return url

    @field_validator("public_url")
    @classmethod
    def _absolute_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if not url.startswith(("http://", "https://")) or "?" in url or "#" in url:
            raise ValueError(f"PIPEPLAN_PUBLIC_URL must be an absolute http(s) URL without query, got {url!r}")
        return url.rstrip("/")

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        for origin in origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"PIPEPLAN_CORS_ORIGINS: {origin!r} is not an origin (https://host[:port]) or '*'")
        return origins

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.default_time_limit > self.max_time_limit:
            raise ValueError(f"default_time_limit ({self.default_time_limit}) exceeds max_time_limit "
                             f"({self.max_time_limit})")
        if self.job_queue == "postgresql" and not self.database_url.startswith("postgresql"):
            raise ValueError("PIPEPLAN_JOB_QUEUE=postgresql needs a PostgreSQL PIPEPLAN_DATABASE_URL")
        if self.job_queue == "postgresql" and self.queue_lease <= 2 * self.queue_heartbeat:
            raise ValueError(f"queue_lease ({self.queue_lease}) must exceed twice queue_heartbeat "
                             f"({self.queue_heartbeat}): one late heartbeat must not lose a worker its jobs")
        if self.solver_threads > self.max_solver_threads:
            raise ValueError(f"solver_threads ({self.solver_threads}) exceeds max_solver_threads "
                             f"({self.max_solver_threads})")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read once from the environment."""
    return Settings()
