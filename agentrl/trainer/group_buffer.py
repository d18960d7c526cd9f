"""Groups generating ahead in a bounded buffer: each step takes the first done, within the staleness bound.

With ``trainer.take_groups=first_done`` the prompts are drawn a step's worth at a time (a *draw*:
``data.train_batch_size`` prompts, numbered from 0 as the steps are) and each prompt's group of
``actor.rollout.n`` samples generates as a call of its own on the least busy rollout worker, seeded
as the step-granular rollout seeds it (draw d's stream, rows i·n .. i·n + n − 1), so a group samples
the same tokens whichever step trains it, given the weights. After each step's take, draws are
submitted (on the weights of that step, v = t) until F = ``trainer.groups_ahead`` steps' worth
generate (at most, and by default, k = ``trainer.max_staleness``). A group whose oldest token was
sampled by weights v may be trained up to step v + k; at step t, with B = ``data.train_batch_size``,
the take is:

1. **what the bound forces** (``stale_group=wait``): for every w in t − k .. t − 1 the groups of
   weights ≤ w must all be trained by step w + k, that is within the w + k − t steps after this one,
   B each; so this step takes, oldest first, at least ``count(v ≤ w) − (w + k − t)·B`` of them,
   waiting for those not done (``rollout_buffer/bound_waits``). Refilling to k·B keeps this ≤ B.
2. **then the groups done**, oldest weights first, waiting for the next to finish while too few are.

With F = k a steady run's oldest draw is at its bound when a step takes it, so the bound forces it
whole (the order of ``by_step``, each group still a call of its own). With F < k nothing is at its
bound yet: a step takes the first B done (of F·B; F ≥ 2 for a choice), the groups are F steps old
when trained (as ``by_step`` with a bound of F), and a slow group has up to k steps.

With ``stale_group=drop`` nothing is forced: a group done past the bound (t − v > k) leaves the run
(``rollout_buffer/dropped_groups``), and a further draw is submitted when the groups left cannot
fill the batch. Either way the batch is ordered by draw and prompt, as the step-granular one is, and
a group's version is the one its turns record (never older than the driver's view at submission).

With a ``Screen`` (``algorithm.dynamic_sampling``) a take scores each group once, when it first
finds it done, and one without a signal (all its samples alike) leaves the run at once, counted,
and never holds a slot or a bound; when the groups left cannot fill the batch the take draws again,
up to ``Screen.extra_draws`` times, then fills what is missing with the groups it left out, oldest
first (``dynamic_sampling/padded_groups``), so a batch always has ``data.train_batch_size`` groups.

A checkpoint resumes the buffer by redrawing (``record``/``restore``): the loader restarts before
the oldest draw with a group not yet trained, those draws' prompts are drawn again, and the groups
neither trained, dropped nor left out are generated again, on the restored weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.agent.generation import RolloutResult
from agentrl.config.schema import StaleGroup
from agentrl.trainer.dataset import StatefulLoader
from agentrl.trainer.group_filter import Scored
from agentrl.trainer.rollout_ahead import Taken

# submit(prompt, draw, index, weights_version, rank): the group's call on rollout worker ``rank``
GENERATE = "generate_sequences"  # the rollout workers' method each group's call runs
SubmitGroup = Callable[[Any, int, int, int, int], Any]

__all__ = ["GroupBuffer", "Screen"]


@dataclass(frozen=True)
class Screen:
    """Which done groups a take trains (module docstring): ``score`` once per group, ``informative``
    on its scores; up to ``extra_draws`` draws a take for the groups it leaves out."""

    score: Callable[[RolloutResult], Scored]
    informative: Callable[[Scored], bool]
    extra_draws: int


@dataclass
class Unit:
    """One prompt's group: generating, or done (its result collected once)."""

    draw: int
    index: int
    version: int  # the driver's weights version when submitted: no token of the group is older
    rank: int
    pending: Any
    result: RolloutResult | None = None
    scored: Scored | None = None  # a screen's scores of the group, once judged

    def done(self) -> bool:
        if self.result is None and self.pending.done():
            self.result = self.pending.result()
            turns = [v for t in self.result.trajectories for v in t.turn_versions]
            self.version = min(turns, default=self.version)  # what the group's turns record
        return self.result is not None

    @property
    def order(self) -> tuple[int, int, int]:
        return (self.version, self.draw, self.index)


@dataclass
class Draw:
    """A step's worth of prompts, and which of their groups are trained or dropped (resolved)."""

    number: int
    loader_state: dict  # the loader before these prompts: a checkpoint resumes there
    size: int
    resolved: set[int] = field(default_factory=set)


class GroupBuffer:
    """The groups in flight and done, taken a step's batch at a time (module docstring)."""

    def __init__(
        self,
        loader: StatefulLoader,
        group: Any,
        submit: SubmitGroup,
        batch_size: int,
        max_staleness: int,
        stale_group: StaleGroup,
    ) -> None:
        self.loader, self.group, self.submit = loader, group, submit
        self.batch_size, self.max_staleness, self.stale_group = batch_size, max_staleness, stale_group
        self.units: list[Unit] = []  # neither trained nor dropped
        self.draws: list[Draw] = []  # from the oldest with a group unresolved to the newest
        self.next_draw = 0
        self.redraw: list[set[int]] = []  # restored draws' resolved groups, to draw again first

    @property
    def in_flight(self) -> int:
        """How many steps the groups in the buffer can fill."""
        return len(self.units) // self.batch_size

    def drain(self) -> None:
        """Nothing to wait for: the groups generate on rollout workers, which serve a validation
        beside them."""

    def loader_state(self) -> dict:
        """Before the prompts of the oldest draw with a group unresolved, else where the loader stands."""
        return self.draws[0].loader_state if self.draws else self.loader.state_dict()

    def record(self) -> dict:
        """What a checkpoint keeps to resume the buffer: the first draw it redraws and, for it and
        each later one, the groups already trained or dropped (not generated again)."""
        first = self.draws[0].number if self.draws else self.next_draw
        return {"first_draw": first, "resolved": [sorted(d.resolved) for d in self.draws]}

    def restore(self, record: dict) -> None:
        """Resume from ``record`` (``record``), the loader already where ``loader_state`` said."""
        if record:
            self.next_draw = int(record["first_draw"])
            self.redraw = [set(indices) for indices in record["resolved"]]

    # --- submitting ---------------------------------------------------------------------

    def draw_next(self, weights_version: int) -> None:
        """The next step's worth of prompts, each group submitted on the least busy worker (a
        restored draw's groups that were resolved before the checkpoint are not)."""
        state = self.loader.state_dict()
        prompts = self.loader.next_batch()
        draw = Draw(self.next_draw, state, len(prompts), self.redraw.pop(0) if self.redraw else set())
        self.next_draw += 1
        self.draws.append(draw)
        for index, prompt in enumerate(prompts):
            if index not in draw.resolved:
                rank = self.least_busy()
                pending = self.submit(prompt, draw.number, index, weights_version, rank)
                self.units.append(Unit(draw.number, index, weights_version, rank, pending))
        self.settle()

    def least_busy(self) -> int:
        busy = [0] * self.group.world_size
        for unit in self.units:
            if unit.result is None:
                busy[unit.rank] += 1
        return busy.index(min(busy))

    def fill(
        self, step: int, bound: int, will_run: Callable[[int], bool], before_draw: Callable[[], Any] | None
    ) -> None:
        """Draw on the weights of (0-based) step ``step`` until ``bound`` steps' worth of groups
        generate, fewer where the steps they would fill will not run (``will_run(j)``: whether step
        ``step + j`` does); ``before_draw``, when given, runs before each draw."""
        while len(self.units) + self.batch_size <= bound * self.batch_size and will_run(self.in_flight + 1):
            if before_draw is not None:
                before_draw()
            self.draw_next(step)

    # --- taking ------------------------------------------------------------------------

    def take(self, step: int, screen: Screen | None = None) -> Taken:
        """(0-based) step ``step``'s batch, trained on the weights of ``step`` updates: the groups the
        bound forces, then the first done (module docstring), judged by ``screen`` when given; with
        the buffer's figures."""
        while len(self.units) < self.batch_size:  # the run's first step, the first after a resume
            self.draw_next(step)  # (new groups, of weights t, change no bound of an older w)
        generating = [unit for unit in self.units if not unit.done()]
        metrics = {
            "rollout_buffer/groups_done_at_take": float(len(self.units) - len(generating)),
            "rollout_buffer/groups_generating_at_take": float(len(generating)),
        }
        taken: list[Unit] = []
        left_out: list[Unit] = []  # judged without a signal: out of the run, unless they pad the batch
        dropped = draws = padded = 0
        if self.stale_group == "wait":
            self.take_forced(step, taken, screen, left_out)
        # the forced groups that were still generating: the ones the bound made the step wait for
        waits = len({id(unit) for unit in taken} & {id(unit) for unit in generating})
        while len(taken) < self.batch_size:
            if self.stale_group == "drop":
                dropped += self.drop_stale(step)
            self.judge(screen, left_out)
            short = self.batch_size - len(taken) - len(self.units)  # even if every group left counts
            if short > 0:
                if left_out and screen is not None and draws >= screen.extra_draws:
                    padded += self.pad(left_out, taken, short)
                else:
                    self.draw_next(step)
                    draws += 1
                continue
            ready = sorted((u for u in self.units if self.ready(u, screen)), key=lambda u: u.order)
            if not ready:
                calls = [u.pending for u in self.units if not u.done()]
                if calls:  # else a group finished since the judging: the next pass judges it
                    self.group.wait_any(calls, GENERATE)
            for unit in ready[: self.batch_size - len(taken)]:
                self.move(unit, taken)
        metrics["rollout_buffer/bound_waits"] = float(waits)
        metrics["rollout_buffer/dropped_groups"] = float(dropped)
        taken.sort(key=lambda u: (u.draw, u.index))
        metrics["rollout_buffer/draws_in_batch"] = float(len({u.draw for u in taken}))
        self.settle()
        rollout = RolloutResult.merge([u.result for u in taken])
        if screen is None:
            return Taken(rollout, metrics)
        metrics |= {
            "dynamic_sampling/informative_groups": float(len(taken) - padded),
            "dynamic_sampling/padded_groups": float(padded),
            "dynamic_sampling/left_out_groups": float(len(left_out)),
            "dynamic_sampling/extra_draws": float(draws),
        }
        return Taken(rollout, metrics, [u.scored for u in taken], [u.scored for u in left_out])

    @staticmethod
    def pad(left_out: list[Unit], taken: list[Unit], short: int) -> int:
        """Move up to ``short`` of the groups left out to ``taken``, oldest first; how many."""
        pads = sorted(left_out, key=lambda u: u.order)[:short]
        for unit in pads:
            left_out.remove(unit)
            taken.append(unit)
        return len(pads)

    @staticmethod
    def ready(unit: Unit, screen: Screen | None) -> bool:
        """Done, and judged where a screen judges: a group may finish between a judging and this look."""
        return unit.done() if screen is None else unit.scored is not None

    def judge(self, screen: Screen | None, left_out: list[Unit]) -> None:
        """Score each group found done for the first time; one without a signal leaves the buffer
        for ``left_out``, resolved (a resumed run does not generate it again)."""
        if screen is None:
            return
        for unit in [u for u in self.units if u.scored is None and u.done()]:
            unit.scored = screen.score(unit.result)
            if not screen.informative(unit.scored):
                self.units.remove(unit)
                self.resolve(unit)
                left_out.append(unit)

    def take_forced(self, step: int, taken: list[Unit], screen: Screen | None, left_out: list[Unit]) -> None:
        """Move to ``taken`` the groups the bound forces at ``step`` (module docstring, 1.), oldest
        first, waiting for them as they finish; a forced group ``screen`` leaves out is resolved so."""
        k, size = self.max_staleness, self.batch_size
        while True:
            for unit in self.units:  # a group done may turn out newer than the driver's view
                unit.done()
            self.judge(screen, left_out)
            short, excess = None, 0  # the oldest w whose groups too few steps are left to train
            for w in range(step - k, step):
                older = [u for u in self.units if u.version <= w]
                excess = len(older) - (w + k - step) * size
                if excess > 0:
                    short = older
                    break
            if short is None:
                return
            ready = sorted((u for u in short if u.result is not None), key=lambda u: u.order)
            if not ready:
                self.group.wait_any([u.pending for u in short], GENERATE)
            for unit in ready[:excess]:
                self.move(unit, taken)

    def drop_stale(self, step: int) -> int:
        """Drop the groups done that ``step`` would train past the bound; how many."""
        stale = [u for u in self.units if u.done() and step - u.version > self.max_staleness]
        for unit in stale:
            self.units.remove(unit)
            self.resolve(unit)
        return len(stale)

    def move(self, unit: Unit, taken: list[Unit]) -> None:
        self.units.remove(unit)
        taken.append(unit)
        self.resolve(unit)

    def resolve(self, unit: Unit) -> None:
        next(d for d in self.draws if d.number == unit.draw).resolved.add(unit.index)

    def settle(self) -> None:
        """Forget the oldest draws once every group of theirs is resolved (a checkpoint then
        resumes after them)."""
        while self.draws and len(self.draws[0].resolved) == self.draws[0].size:
            self.draws.pop(0)
