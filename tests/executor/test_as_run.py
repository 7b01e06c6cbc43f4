"""A run's prediction replays the executor's schedule: which microbatches wait, and how they run after."""

from __future__ import annotations

import pytest

from pipeplan.costmodel.hardware import Contention
from pipeplan.costmodel.wake import WakeModel
from pipeplan.executor.as_run import StageLoad, simulate_as_run, stage_times_as_run

MS = 1e-3
TWO = Contention.parse("2xcompute")
# no idle penalty, and beside two compute co-runners the first 1.5 ms after any wait of 1 ms or more at full speed
WAKE = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[1 * MS, 16 * MS], penalty_fixed=[0.0, 0.0],
                 penalty_rate=[0.0, 0.0], credit={"2×compute": [1.5 * MS, 1.5 * MS]})


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_loaded_stage_after_a_slower_one_is_woken_for_every_microbatch(schedule: str) -> None:
    """The contention experiment's case: back to back the loaded stage would be the bottleneck (9.69 ms
    beside 9.59), but it waits for each input and then runs its first 1.5 ms at full speed."""
    times = stage_times_as_run(WAKE, [StageLoad(9.59 * MS, 9.59 * MS), StageLoad(2.7 * MS, 9.69 * MS, load=TWO)],
                               microbatches=4, schedule=schedule)
    assert times[0] == pytest.approx(9.59 * MS)  # the first stage never waits for its input
    assert times[1] == pytest.approx(1.5 * MS + 1.2 * MS * 9.69 / 2.7)


def test_a_loaded_first_stage_wakes_once_a_batch_in_gpipe_and_every_other_microbatch_in_1f1b() -> None:
    stages = [StageLoad(2 * MS, 6 * MS, load=TWO), StageLoad(10 * MS, 10 * MS)]
    woken, back_to_back = 1.5 * MS + 0.5 * MS * 3, 6 * MS
    # gpipe: microbatches 1–3 follow each other; the batch's end waits for the slower stage to take the last
    gpipe = stage_times_as_run(WAKE, stages, microbatches=4, schedule="gpipe")
    assert gpipe == pytest.approx([(woken + 3 * back_to_back) / 4, 10 * MS])
    # 1f1b keeps one send untaken: after every second microbatch it waits for the slower stage
    assert stage_times_as_run(WAKE, stages, microbatches=4, schedule="1f1b") == pytest.approx(
        [(woken + back_to_back) / 2, 10 * MS])
    # with room for four untaken sends, 1f1b runs a batch back to back, as gpipe does
    assert stage_times_as_run(WAKE, stages, microbatches=4, schedule="1f1b", in_flight=4) == pytest.approx(gpipe)


def test_a_bottleneck_under_load_keeps_its_back_to_back_time_until_it_waits_for_a_transfer() -> None:
    stages = [StageLoad(6.5 * MS, 22.41 * MS, load=TWO), StageLoad(6.17 * MS, 6.17 * MS)]
    assert stage_times_as_run(WAKE, stages, microbatches=4) == pytest.approx([22.41 * MS, 6.17 * MS])
    # a 2 ms transfer: at the end of each batch the first stage waits for it, and wakes with its credit
    stages[1] = StageLoad(6.17 * MS, 6.17 * MS, recv=2 * MS)
    woken = 1.5 * MS + (6.5 - 1.5) * MS * 22.41 / 6.5
    assert stage_times_as_run(WAKE, stages, microbatches=4) == pytest.approx([(woken + 3 * 22.41 * MS) / 4,
                                                                              6.17 * MS])
    with pytest.raises(ValueError, match="unknown schedule 'interleaved'"):
        stage_times_as_run(WAKE, stages, microbatches=4, schedule="interleaved")


def test_every_microbatch_pays_what_a_pipeline_stage_costs_beyond_its_module() -> None:
    wake = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=WAKE.sleeps, penalty_fixed=[0.0, 0.0],
                     penalty_rate=[0.0, 0.0], credit=WAKE.credit, stage_fixed=0.1 * MS, stage_rate=0.1)
    times = stage_times_as_run(wake, [StageLoad(9.59 * MS, 9.59 * MS), StageLoad(2.7 * MS, 9.69 * MS, load=TWO)],
                               microbatches=4)
    # the idle bottleneck pays both parts; the loaded stage only the fixed one: its loaded profile
    # already ran beside other work, which is what the rate measures
    assert times == pytest.approx([9.59 * MS * 1.1 + 0.1 * MS, 1.5 * MS + 1.2 * MS * 9.69 / 2.7 + 0.1 * MS])
    # a stage that waits long enough to pay an idle penalty of 0.3 ms is cold already: no fixed part
    cold = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=WAKE.sleeps, penalty_fixed=[0.3 * MS] * 2,
                     penalty_rate=[0.0, 0.0], stage_fixed=0.1 * MS, stage_rate=0.1)
    times = stage_times_as_run(cold, [StageLoad(20 * MS, 20 * MS), StageLoad(5 * MS, 5 * MS)], microbatches=4)
    assert times[1] == pytest.approx((5 * MS + 0.3 * MS) * 1.1)
    # a lone stage is what the profile timed: it pays nothing beyond its back-to-back time
    assert stage_times_as_run(wake, [StageLoad(9.59 * MS, 9.59 * MS)], microbatches=4) == pytest.approx([9.59 * MS])


def test_the_replay_gives_a_batch_its_wall_time() -> None:
    """Two idle stages of 2 and 3 ms, four microbatches, gpipe: the second stage sets the pace (4 × 3 ms a
    batch), and the first stage starts a batch once its last send is taken — when the second stage
    starts the microbatch before it and posts that receive."""
    nothing = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[MS], penalty_fixed=[0.0],
                        penalty_rate=[0.0])
    replay = simulate_as_run(nothing, [StageLoad(2 * MS, 2 * MS), StageLoad(3 * MS, 3 * MS)], microbatches=4,
                             batches=8, warmup=2)
    assert replay.computes == pytest.approx([2 * MS, 3 * MS])
    # batch b starts on the first stage at 12·b − 4 ms (b ≥ 2; batch 1 at 8) and ends on the second at
    # 12·b + 14 ms: measured from batch 2's start (20) to batch 9's end (122), over 8 batches
    assert replay.batch_seconds == pytest.approx((122 - 20) * MS / 8)


def test_a_stage_on_a_loaded_core_receives_its_input_later() -> None:
    """One microbatch a batch, stages of 2 and 3 ms, the second on a core under 2×compute whose inputs
    arrive 2 ms after it posts its receive: it starts batch b at max(s_b + 2, its last end) + 2, and
    the first stage starts batch b + 1 once that input is taken, so a batch takes 3 + 2 = 5 ms."""
    delayed = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=WAKE.sleeps, penalty_fixed=[0.0, 0.0],
                        penalty_rate=[0.0, 0.0], credit={"2×compute": [0.0, 0.0]}, recv_delay={"2×compute": 2 * MS})
    stages = [StageLoad(2 * MS, 2 * MS), StageLoad(3 * MS, 3 * MS, load=TWO)]
    replay = simulate_as_run(delayed, stages, microbatches=1, batches=8)
    # measured from batch 2's start on the first stage to batch 9's end on the second (8 ms after its start)
    assert replay.batch_seconds == pytest.approx((7 * 5 + 8) * MS / 8)
    assert delayed.receive_delay(TWO) == 2 * MS and delayed.receive_delay(None) == 0.0
    without = simulate_as_run(WAKE, stages, microbatches=1, batches=8)
    assert without.batch_seconds == pytest.approx((7 * 3 + 6) * MS / 8)  # the second stage sets the pace


def test_a_message_from_a_loaded_core_waits_for_its_sender_too() -> None:
    """The same two stages with the first on a core under 2×compute (its time unchanged, to isolate the
    delay): each microbatch reaches the second stage 1 ms late, the sender's threads waking for the
    hand-over.  Batch b starts at 13·b − 3 ms and ends at 13·b + 15 ms: (132 − 23) / 8 ms a batch."""
    late = WakeModel(cpu="test cpu", measured_at="2026-11-24", sleeps=[MS], penalty_fixed=[0.0], penalty_rate=[0.0],
                     credit={"2xcompute": [0.0]}, recv_delay={"2xcompute": 1 * MS})
    loaded = Contention.parse("2xcompute")
    replay = simulate_as_run(late, [StageLoad(2 * MS, 2 * MS, load=loaded), StageLoad(3 * MS, 3 * MS)],
                             microbatches=4, batches=8, warmup=2)
    assert replay.computes == pytest.approx([2 * MS, 3 * MS])
    assert replay.batch_seconds == pytest.approx((132 - 23) * MS / 8)
    # the delay belongs to the loaded core, whichever end it is: on the receiver it delays the same hand-over
    swapped = simulate_as_run(late, [StageLoad(2 * MS, 2 * MS), StageLoad(3 * MS, 3 * MS, load=loaded)],
                              microbatches=4, batches=8, warmup=2)
    assert swapped.batch_seconds == pytest.approx(replay.batch_seconds)
