"""``/v1/models``: the model zoo a request can name."""

from __future__ import annotations

from fastapi import APIRouter

from pipeplan.api.deps import Reader, ServicesDep, errors
from pipeplan.api.schemas.misc import ZooModelPublic

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("", dependencies=[Reader], response_model=list[ZooModelPublic], responses=errors(401, 503))
async def list_models(services: ServicesDep) -> list[dict[str, str]]:
    """Every zoo model (random weights, nothing downloaded), small ones first."""
    return await services.zoo.models()
