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
    max_graph_layers: int = Field(5000, ge=1)
    max_graph_edges: int = Field(50_000, ge=0)
    max_devices: int = Field(64, ge=1)
    max_capture_bytes: int = Field(2**30, ge=2**20,
                                   description="largest activation a zoo capture may allocate, estimated from "
                                               "the input sizes before anything is built (422 above)")
    idempotency_ttl: float = Field(86_400.0, gt=0.0,
                                   description="seconds an Idempotency-Key is remembered")
    costmodel_dir: Path | None = Field(
        None, description="folder of learned cost model files a request may name (by file name only)")

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str) -> str:
        # Refuse anything else early: a typo would otherwise surface as an obscure driver error.
        if not url.startswith(("sqlite://", "postgresql")):
            raise ValueError(f"PIPEPLAN_DATABASE_URL must be sqlite:///PATH or postgresql+psycopg://…, got {url!r}")
        return url

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.default_time_limit > self.max_time_limit:
            raise ValueError(f"default_time_limit ({self.default_time_limit}) exceeds max_time_limit "
                             f"({self.max_time_limit})")
        if self.solver_threads > self.max_solver_threads:
            raise ValueError(f"solver_threads ({self.solver_threads}) exceeds max_solver_threads "
                             f"({self.max_solver_threads})")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read once from the environment."""
    return Settings()
