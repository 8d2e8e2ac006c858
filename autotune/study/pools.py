"""The trial processes one search uses: a pool for its trials, a pool per device for the finalist rounds.

Starting and stopping the processes is ``autotune.procs``'s; this module only
says which pools a search needs, when their processes start, and adopts those
the command line started early. ``Team`` is what the writer of a ``--gpus``
search needs to know of its searchers; ``SOLO`` stands for none, so the steps
never branch on whether there are any.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from autotune.procs import compile_cache, lifecycle
from autotune.procs.pool import TrialPool
from autotune.study.context import Prepared


@dataclasses.dataclass(frozen=True)
class Team:
    """The other processes of a `--gpus` search, as the search that writes sees them."""

    round_devices: tuple[str, ...] = ()  # a device per finalist round, side by side; () for this search's own
    baseline_run_pending: Callable[[], bool] = lambda: False  # a searcher may still store the baseline's parity run
    before_rounds: Callable[[], None] = lambda: None  # once no trial runs anywhere: let the searchers' processes end


SOLO = Team()


class SearchPools:
    """The trial pool and the round pools of one search."""

    def __init__(self, p: Prepared, early: TrialPool | None = None, team: Team = SOLO) -> None:
        self.prepared, self.team = p, team
        if early is not None and (early.workload_path, early.device, early.cpu_share) != (
            p.ref.workload_path,
            p.device,
            p.machine.cpu_share,
        ):
            early.stop()  # started on a guess that proved wrong (another device, or the study's own CPU share)
            early = None
        self.trials = early or self.new_pool(p.device)
        # On a GPU, a spare saves waiting for a process's start after a failed trial (docs/scale-out.md).
        self.trials.spare = p.machine.cuda
        self.rounds: list[TrialPool] = []

    def new_pool(self, device: str) -> TrialPool:
        p = self.prepared
        return TrialPool(
            p.ref.workload_path, device, p.machine.cpu_share, p.options.state_dir / "logs", p.options.trial_timeout_s,
            env=compile_cache.environment(p.options.state_dir, p.ref.workload_path),
        )

    def prestart_rounds(self) -> list[TrialPool]:
        """A pool per round device, each with fresh trial processes for the rounds it runs, started if missing.

        Pools of their own, not the trial pool: that one's standby processes replace
        failed trials, and a search with several failures would leave the rounds none.

        On one device it is called once this searcher's trials are done: the processes start
        while the parity check runs, which takes longer than a start-up. Under --gpus the
        check is short (its baseline run was made during the trials), so it is called as the
        trials begin too: the other devices' round processes start beside the first trials
        (a start-up is seconds of one core; a trial's median window shrugs off a hiccup, and
        the rounds, whose numbers are stated, run after every trial), and sit idle till the end.
        """
        p = self.prepared
        if not self.rounds:
            devices = self.team.round_devices[: p.options.rounds] or (p.device,)
            self.rounds = [self.new_pool(d) for d in devices]
        # A round runs configs of each cuDNN plan key in a process of its own (autotune.procs.pool.cudnn_plan_key):
        # on a GPU, one per cudnn.benchmark value the finalists and the baseline may have.
        keys = {p.baseline.cudnn_benchmark, *p.space.domains["cudnn_benchmark"]} if p.machine.cuda else {None}
        for k, each in enumerate(self.rounds):
            each.prestart(len(keys) * len(range(k, p.options.rounds, len(self.rounds))))
        return self.rounds

    def kill(self) -> None:
        """A parity run or a round may be under way: its process is killed, not waited for."""
        for each in (self.trials, *self.rounds):
            each.kill()

    def stop(self) -> None:
        lifecycle.stop_all([self.trials, *self.rounds])
