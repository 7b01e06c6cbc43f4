"""How a deployment takes requests and when it changes layout (:class:`ServeOptions`), and which
plans it cannot switch to (:func:`refuse_loans`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeplan.executor.errors import PlanMismatchError
from pipeplan.planner.migration import DEFAULT_RELOAD, Reload

if TYPE_CHECKING:
    from pipeplan.planner.plan import Plan

__all__ = ["ServeOptions", "refuse_loans"]


def refuse_loans(plan: Plan, what: str = "the plan") -> None:
    """Refuse ``plan`` as a layout to switch to if it borrows memory (its ``harvest`` section lends
    weights or stashes activations).

    Only the layout a deployment starts with borrows (:mod:`pipeplan.executor.deploy_loans`): a live
    switch moves the stages' own state, not lent weights, and starts no lenders, so a harvesting plan
    entered by a switch would run with each stage's weights at home, over the memory the plan
    budgeted for it.  A harvest section that lends nothing (the planner found no loan worth making)
    is switched to as any plan.  Raises :class:`~pipeplan.executor.errors.PlanMismatchError`.
    """
    harvest = plan.harvest
    if harvest is None or not (harvest.loans or harvest.stashes):
        return
    parts = []
    if harvest.loans:
        lenders = sorted({loan.lender for loan in harvest.loans})
        layers = [loan.layer for loan in harvest.loans]
        shown = ", ".join(layers[:4]) + (f" and {len(layers) - 4} more" if len(layers) > 4 else "")
        parts.append(f"keeps the weights of {len(layers)} layer{'s' if len(layers) != 1 else ''} ({shown}) on "
                     f"{', '.join(lenders)}")
    if harvest.stashes:
        parts.append(f"stashes activations on {', '.join(sorted({s.lender for s in harvest.stashes}))}")
    raise PlanMismatchError(
        f"{what} borrows memory (its harvest section {' and '.join(parts)}), which a deployment cannot switch "
        f"to: a live switch moves no lent weights and starts no lenders, so every stage would hold all of its "
        f"weights, over the memory the plan budgeted. Deploy it afresh (`pipeplan deploy --plan PLAN.json`: the "
        f"plan a deployment starts with may borrow), run it with `pipeplan run`, or switch to a plan made "
        f"without --harvest")


@dataclass(frozen=True)
class ServeOptions:
    """How a deployment takes requests, and what makes it switch layout.

    Requests: ``queue_size`` bounds the requests waiting in front of stage 0; ``max_wait_ms`` is
    the latency bound of microbatching (a partial microbatch leaves once its oldest request has
    waited this long); ``in_flight`` caps the microbatches inside the pipeline (default: stages + 1,
    enough to keep every stage busy); ``stats_window`` is how many recent microbatches and
    requests :meth:`~pipeplan.executor.deploy.Deployment.stats` summarises; ``start_timeout`` bounds the
    stages' start and each switch's.

    Switching: ``recover`` re-plans onto the devices left when a device process dies (off: every
    request not yet answered fails with :class:`~pipeplan.executor.errors.StageFailure`); ``drift``, when
    set, re-plans when a stage's measured compute strays from the plan's prediction by more than
    that fraction (0.5: 50 % slower, or 1/1.5 as fast) over ``drift_after`` microbatches, checked
    every ``drift_interval`` seconds and at most once every ``drift_cooldown`` seconds (measured
    times that move with the layout, such as a core shared with this process, would otherwise
    switch back and forth); ``horizon`` is the re-planning horizon
    (:class:`pipeplan.planner.migration.Horizon` text) and ``reload`` where a dead device's layers come
    from, in the planner's terms (the switch itself reloads them from the deployment's copy).
    """

    queue_size: int = 256
    max_wait_ms: float = 5.0
    in_flight: int | None = None
    stats_window: int = 1000
    start_timeout: float = 300.0
    recover: bool = True
    drift: float | None = None
    drift_after: int = 20
    drift_interval: float = 1.0
    drift_cooldown: float = 5.0
    horizon: str = "10m"
    reload: Reload = DEFAULT_RELOAD

    def __post_init__(self) -> None:
        for name in ("queue_size", "stats_window", "drift_after"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.in_flight is not None and self.in_flight < 1:
            raise ValueError(f"in_flight must be at least 1, got {self.in_flight}")
        if self.max_wait_ms < 0 or self.start_timeout <= 0:
            raise ValueError(f"max_wait_ms must be ≥ 0 and start_timeout > 0, got {self.max_wait_ms} and "
                             f"{self.start_timeout}")
        if self.drift is not None and not (math.isfinite(self.drift) and self.drift > 0):
            raise ValueError(f"drift must be a positive fraction (0.5: 50 % off the prediction), got {self.drift}")
        if not self.drift_interval > 0 or not self.drift_cooldown >= 0:
            raise ValueError(f"drift_interval must be positive and drift_cooldown ≥ 0, got {self.drift_interval} "
                             f"and {self.drift_cooldown}")
