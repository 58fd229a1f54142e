"""Events and the clock (docs/semantics.md, "Clock and events", "Static mode").

After every action ``_advance`` runs the event loop (``lax.while_loop``) to the next stop: a
decision point, the end, or a due reservation or rescheduling pass, which run outside the
loop (``_run_interrupt``). Each turn moves the clock to the next event and handles it:
a completion (the running set is a ring sorted by end time, ``_running_insert``), an arrival,
or a due pass (the loop stops for it). ``ClusterEnv.turns`` runs the same turns a few at a
time, outside the loop (``rollout.rollout``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched.sim import metrics, resources, shift
from jaxsched.sim.config import INF
from jaxsched.sim.when_due import when_due
from jaxsched.types import Core, EnvParams, Jobs, SimState


def round_after(t, round_s: float):
    """float32(t + round_s), or the next float32 after t where that is t itself (past 2^24 s
    with 1-s rounds: float32 time no longer holds a round; docs/semantics.md, "The round clock")."""
    return jnp.maximum(t + jnp.float32(round_s), jnp.nextafter(t, INF))


class EventsMixin:
    """``ClusterEnv``'s event loop and clock methods (reads ``self.config``; no fields of its own)."""

    def _advance(self, state: SimState, params: EnvParams) -> SimState:
        """Process events until a decision point or the end of the episode.

        The inner loop carries only ``core``. It stops early when a rescheduling pass or a
        reservation is due; that runs here, on the whole state (a pass rewrites moved jobs'
        records), and the loop resumes. Both are rare (a pass per ``resched_interval_s``).
        One loop, the due work first (skipped when none is due, as after an action, also
        under ``vmap``: ``when_due``), so the event loop is traced and compiled once.
        """
        if not self.config.interrupts:
            return state.replace(core=self._event_loop(state, params))

        def resume(carry):
            state = when_due(lambda s: self.interrupted(s.core), self._run_interrupt, carry[0], params)
            state = state.replace(core=self._event_loop(state, params))
            return state, self.interrupted(state.core)

        return jax.lax.while_loop(lambda carry: carry[1], resume, (state, jnp.bool_(True)))[0]

    def interrupted(self, core: Core):
        """The event loop stopped for work it leaves to ``_advance``: a rescheduling pass or
        a reservation is due now (``EnvConfig.interrupts``)."""
        return core.resched_due | core.resv_due

    def _run_interrupt(self, state: SimState, params: EnvParams) -> SimState:
        """The due reservation or rescheduling pass (at most one is due at a time)."""
        core = state.core
        if self.config.reserving:
            state = self._reserve(state, params, core.resv_due)
        if self.config.rescheduling:
            state = self._reschedule(state, params, core.resched_due)
        return state

    def _event_loop(self, state: SimState, params: EnvParams) -> Core:
        """Handle one event per turn until a decision point, the end, or a due pass."""
        if self.config.static:
            core, _ = jax.lax.while_loop(
                lambda carry: ~carry[1],
                lambda carry: self._static_turn(state, carry[0], params),
                (state.core, state.core.done))
            return core
        core, stop = self._check_stop(state, state.core, params)
        core, _ = jax.lax.while_loop(
            lambda carry: ~carry[1],
            lambda carry: self._dynamic_turn(state, carry[0], params),
            (core, stop | core.done),
        )
        return core

    def _check_stop(self, state: SimState, core: Core, params: EnvParams):
        """Is ``core`` a decision point or the end? -> (core with ``done`` set at the end, stop).

        Only once every event at the current instant is handled: then a decision point when a
        window job fits and the running set has room, else the end when no event is left.
        A boundary (every event at the current instant handled) is also where a reservation
        is made (``_reserve``) and where the episode ends early once every measured job has
        left: finished, failed, rejected or dropped.
        """
        t_next = self._next_event_time(core, state.jobs)
        boundary = t_next > core.time_s
        if self.config.rounds:
            return self._check_round_stop(core, t_next, boundary, state.jobs)
        if self.config.reserving:  # first the reservation (the loop stops for it), then the rest
            due, _ = self._reservation_due(state, core, boundary & ~core.resched_due)
            core = core.replace(resv_due=due)
            boundary = boundary & ~due
        decision = boundary & (core.window_fit.max() > 0) & self._has_room(core)
        measured_left = (core.next_arrival > core.measure_last) & (core.measure_open == 0)
        finished = boundary & (((t_next == INF) & ~decision) | measured_left)
        return core.replace(done=core.done | finished), decision | finished | core.resv_due

    def _check_round_stop(self, core: Core, t_next, boundary, jobs: Jobs):
        """``_check_stop`` with rounds: at a boundary, the end once every measured job has
        left; else a due round with no job queued is dropped (nothing waits: the running jobs
        keep their nodes; with ``round_ends_early`` the next round moves to where this one
        ends), and so is a settled one (``settled_rounds``: deciding it would change nothing;
        without resets or early ends the clock then steps past every round before the next
        arrival or completion at once), and a due round is the decision point; else the end when no event is left
        (docs/semantics.md, "The round clock")."""
        cfg = self.config
        nothing_waits = (core.queue_len == 0) & ~core.rounds.reset  # (a reset is always decided)
        # settled_rounds: settled until a job comes or goes or the settlement ends (never
        # past the last event: then rounds are decided, as they would be, until max_steps).
        job_event_s = jnp.minimum(self._next_end_time(core), self._next_arrival_time(core, jobs))
        until = core.rounds.settled_until
        settled = (core.time_s < until) & (jnp.minimum(job_event_s, until) < INF) & ~core.rounds.reset
        dropped = core.rounds.due & boundary & (nothing_waits | settled)
        due = core.rounds.due & ~dropped
        decision = boundary & due
        measured_left = (core.next_arrival > core.measure_last) & (core.measure_open == 0)
        finished = boundary & (((t_next == INF) & ~decision) | measured_left)
        clock = core.rounds.replace(due=due)
        if cfg.round_ends_early:
            clock = clock.replace(next_round_s=jnp.where(dropped, self._round_end(core, jobs), clock.next_round_s))
        elif not cfg.resets:
            # The rounds before the next completion or arrival (and, when only settled, before
            # the settlement ends) would each be dropped in turn: the clock steps past them at
            # once, by the same float32 steps. (With resets a round event may start a reset:
            # one by one. The time integrals then add one piece for the many.)
            horizon = jnp.minimum(job_event_s, jnp.where(nothing_waits, INF, until))
            horizon = jnp.where(dropped & (horizon < INF), horizon, -INF)
            clock = clock.replace(next_round_s=jax.lax.while_loop(
                lambda t: t < horizon, lambda t: round_after(t, cfg.round_s), clock.next_round_s))
        core = core.replace(done=core.done | finished, rounds=clock)
        return core, decision | finished

    def _round_end(self, core: Core, jobs: Jobs):
        """``round_ends_early``: when the round that starts now ends, Gavel's way: when the
        last job running in it finishes, at most ``round_s`` on; with no job running, at the
        next arrival (or ``round_s`` on, when none is left)."""
        full = round_after(core.time_s, self.config.round_s)
        latest = jnp.where(core.run_job >= 0, core.run_end_s, -INF).max()
        arrival = self._next_arrival_time(core, jobs)
        return jnp.where(core.num_running > 0, jnp.minimum(full, latest), jnp.where(arrival < INF, arrival, full))

    def _dynamic_turn(self, state: SimState, core: Core, params: EnvParams, active=True):
        """One loop turn (never at a stop; ``active`` False: no turn, nothing changes): move
        the clock to the next event and handle it, then check for a stop (``_check_stop``).

        At one instant completions come first, then arrivals, then a rescheduling pass (which
        stops the loop so ``_advance`` can run it). Returns (core, stop).
        """
        jobs, cluster = state.jobs, params.cluster
        t_done = self._next_end_time(core)
        t_arrival = self._next_arrival_time(core, jobs)
        # The periodic event: a rescheduling pass, or a round (they do not mix).
        t_resched = self._next_round_time(core, jobs) if self.config.rounds else self._next_resched_time(core, jobs)
        t_event = jnp.minimum(jnp.minimum(t_done, t_arrival), t_resched)
        core = self._move_clock(core, jnp.where(active, t_event, core.time_s), params)
        completion = active & (t_done <= jnp.minimum(t_arrival, t_resched))
        arrival = active & ~completion & (t_arrival <= t_resched)

        core, freed = self._complete(state, core, params, completion)
        core = self._arrive_dynamic(state, core, cluster, arrival)
        if self.config.backfill and not self.config.rounds:  # (with rounds no window)
            # Only the completion's nodes gained: parked jobs can only come back through them
            # (nothing to prune; a gang that fits now fits with one of them as its anchor).
            # After the arrival's write, not before it: a read of the queue ahead of its
            # in-place update makes XLA copy it, O(Q) per event.
            for n in freed:
                core = self._rescan(core, jobs, cluster, jnp.maximum(n, 0), completion & (n >= 0))
        due = active & ~completion & ~arrival
        if self.config.rounds:  # a round event: due now, decided at the boundary
            clock = core.rounds
            core = core.replace(rounds=clock.replace(
                due=clock.due | due,
                next_round_s=jnp.where(due, round_after(clock.next_round_s, self.config.round_s),
                                       clock.next_round_s)))
            if self.config.resets:
                core = core.replace(rounds=self._reset_clock(core.rounds, core.time_s, due, completion | arrival))
            if self.config.settled_rounds != "decided":  # a job came or went: the next round is decided
                core = core.replace(rounds=core.rounds.replace(settled_until=jnp.where(
                    completion | arrival, -INF, core.rounds.settled_until)))
            return self._check_stop(state, core, params)
        core, stop = self._check_stop(state, core.replace(resched_due=core.resched_due | due), params)
        return core, stop | due

    def _reset_clock(self, clock, t, round_event, job_event):
        """The allocation-reset bookkeeping of one event (``EnvConfig.round_reset_s`` > 0):
        an arrival or completion marks the job set changed; a round event is a reset when it
        changed and ``round_reset_s`` has passed since the last reset, or that was at time 0 or
        none was made (docs/semantics.md, "Allocation resets")."""
        changed = clock.changed | job_event
        # Gavel's clock of the last reset starts at 0 and does not hold a reset back while it
        # reads 0: none yet (-inf here), or the only one at time 0.
        waited = (t - clock.last_reset_s >= jnp.float32(self.config.round_reset_s)) | (clock.last_reset_s <= 0)
        reset = round_event & changed & waited
        return clock.replace(changed=changed & ~reset, reset=clock.reset | reset,
                             last_reset_s=jnp.where(reset, t, clock.last_reset_s))

    def _static_stop(self, state: SimState, core: Core):
        """Static mode: a decision point (a job waits) or the end (every job has arrived)?
        -> (core with ``done`` set at the end, stop)."""
        jobs, p = state.jobs, core.next_arrival
        all_arrived = (p >= jobs.num_jobs) | ~jobs.valid[jnp.minimum(p, jobs.num_jobs - 1)]
        waiting = core.queue_len > 0
        return core.replace(done=core.done | (~waiting & all_arrived)), waiting | all_arrived

    def _static_turn(self, state: SimState, core: Core, params: EnvParams):
        """One loop turn in static mode, unless at a stop: the next job arrives and is queued
        or fails. -> (core, whether it was at a stop)."""
        jobs, cluster = state.jobs, params.cluster
        core, stop = self._static_stop(state, core)
        active = ~stop
        p = core.next_arrival
        j = jnp.minimum(p, jobs.num_jobs - 1)
        fit_row = self._fits(core, jobs, cluster, j)  # [N]
        fits_any = fit_row.any()
        enqueue = active & fits_any
        core = core.replace(
            time_s=jnp.where(active, jobs.arrival_s[j], core.time_s),
            next_arrival=p + active,
            queue=core.queue.at[0].set(jnp.where(enqueue, j, core.queue[0])),
            queue_key=core.queue_key.at[0].set(jnp.where(enqueue, 0.0, core.queue_key[0])),
            queue_len=core.queue_len + enqueue,
            win_len=core.win_len + enqueue,
            window_fit=jnp.where(enqueue, (core.window_fit & ~1) | fit_row.astype(jnp.int32),
                                 core.window_fit),
            acc=core.acc.replace(failed=core.acc.failed + (active & ~fits_any)),
        )
        return core, stop

    def _next_arrival_time(self, core: Core, jobs: Jobs):
        p = core.next_arrival
        return jnp.where(p < jobs.num_jobs, jobs.arrival_s[jnp.minimum(p, jobs.num_jobs - 1)], INF)

    def _next_resched_time(self, core: Core, jobs: Jobs):
        """Time of the next rescheduling pass; +inf when off or when no other event is left."""
        if not self.config.rescheduling:
            return INF
        other_event = (core.num_running > 0) | (self._next_arrival_time(core, jobs) < INF)
        return jnp.where(other_event, core.next_resched_s, INF)

    def _next_round_time(self, core: Core, jobs: Jobs):
        """Time of the next round; +inf when no job is queued, running or still to come."""
        some_job = (core.queue_len > 0) | (core.num_running > 0) | (self._next_arrival_time(core, jobs) < INF)
        return jnp.where(some_job, core.rounds.next_round_s, INF)

    def _next_event_time(self, core: Core, jobs: Jobs):
        """Earliest of the next completion, arrival and rescheduling pass or round (+inf when none)."""
        t_next = jnp.minimum(jnp.minimum(self._next_end_time(core), self._next_arrival_time(core, jobs)),
                             self._next_resched_time(core, jobs))
        if self.config.rounds:
            t_next = jnp.minimum(t_next, self._next_round_time(core, jobs))
        return t_next

    def _future_event_exists(self, core: Core, jobs: Jobs):
        """A wait is legal: some later event (never with rounds: no flat actions then)."""
        if self.config.static or self.config.rounds:
            return jnp.bool_(False)
        return (core.num_running > 0) | (self._next_arrival_time(core, jobs) < INF)

    def _move_clock(self, core: Core, t_new, params: EnvParams):
        """Advance the clock to ``t_new``, adding [t, t_new) to the cluster-wide time integrals
        (O(1): the per-node ones are settled when a node changes, ``_set_node``)."""
        acc = metrics.accumulate(core.acc, core.time_s, t_new, core.measure_from_s, core.measure_to_s,
                                 core.queue_len, core.num_running)
        return core.replace(time_s=t_new, acc=acc)

    def _next_end_time(self, core: Core):
        """End time of the running job that ends first (+inf when none): O(1), the ring is sorted."""
        return core.run_end_s[core.run_head]

    def _running_insert(self, core: Core, j, end, active):
        """Insert job j (ending at ``end``) into the sorted ring when ``active``: O(R), in step only."""
        r = core.run_job.shape[0]
        logical = (jnp.arange(r) - core.run_head) % r  # position in end-time order
        pos = ((logical < core.num_running) & (core.run_end_s <= end)).sum()
        put = lambda arr, x: jnp.where(  # noqa: E731
            active & (logical >= pos), jnp.where(logical == pos, x, shift.ring_prev(arr)), arr)
        return core.replace(run_job=put(core.run_job, j), run_end_s=put(core.run_end_s, end),
                            num_running=core.num_running + active)

    def _running_remove(self, core: Core, pos, active):
        """Remove ring position ``pos`` when ``active``; the rest stay sorted. O(R)."""
        r = core.run_job.shape[0]
        logical = (jnp.arange(r) - core.run_head) % r
        at = (pos - core.run_head) % r
        last = logical == core.num_running - 1
        take = lambda arr, empty: jnp.where(  # noqa: E731
            active & (logical >= at) & (logical < core.num_running),
            jnp.where(last, empty, shift.ring_next(arr)), arr)
        return core.replace(run_job=take(core.run_job, -1), run_end_s=take(core.run_end_s, INF),
                            num_running=core.num_running - active)

    def _complete(self, state: SimState, core: Core, params: EnvParams, active):
        """Finish the running job with the earliest end (when ``active``): resources come back,
        on every node of a gang. -> (core, its nodes: a tuple of node indices, -1 for a
        gang's unused parts). The window still has to take back the parked jobs that now fit
        those nodes (``_rescan``)."""
        jobs, cluster = state.jobs, params.cluster
        slot = core.run_head
        j = jnp.maximum(core.run_job[slot], 0)
        n = jnp.maximum(state.node[j], 0)  # inactive with an empty running set: any node
        gang = (state.span_node[j, 0] >= 0) if self.config.gangs else jnp.bool_(False)
        alone = active & ~gang
        gpus = resources.bits_to_mask(state.gpu_bits[j], cluster.max_gpus)
        back_row = jnp.where(gpus & alone, jobs.gpu_milli[j], 0)
        free_cpu = core.free_cpu.at[n].add(jnp.where(alone, jobs.cpu_milli[j], 0))
        core = self._set_node(core, jobs, params, n, back_row, free_cpu,
                              core.free_mem.at[n].add(jnp.where(alone, jobs.mem_mib[j], 0)), alone)
        core = self._count_class(core, n, jobs.num_gpu[j], jobs.gpu_milli[j], -alone.astype(jnp.int32))
        freed = (n,)
        if self.config.gangs:  # a gang's parts, the anchor's among them
            nodes = jnp.concatenate([n[None], state.span_node[j]])
            bits = jnp.concatenate([state.gpu_bits[j][None], state.span_bits[j]])
            core = self._release_parts(core, jobs, params, j, nodes, bits, active & gang)
            freed = (n, *(jnp.where(active & gang, state.span_node[j], -1)))
        core = core.replace(
            run_job=core.run_job.at[slot].set(jnp.where(active, -1, core.run_job[slot])),
            run_end_s=core.run_end_s.at[slot].set(jnp.where(active, INF, core.run_end_s[slot])),
            run_head=jnp.where(active, (slot + 1) % core.run_job.shape[0], slot),
            num_running=core.num_running - active,
            measure_open=core.measure_open - (active & self._measured(core, j)),
        )
        return core, freed

    def _arrive_dynamic(self, state: SimState, core: Core, cluster, active):
        """Job ``next_arrival`` arrives: fail it (unschedulable), queue it, or drop it (full)."""
        jobs = state.jobs
        j = jnp.minimum(core.next_arrival, jobs.num_jobs - 1)
        unschedulable = state.unschedulable[j]
        full = core.queue_len >= self.config.queue_capacity  # (with rounds the array holds Q + R)
        queued = active & ~unschedulable & ~full
        if self.config.rounds:  # no order, no window: appended
            core = core.replace(queue=core.queue.at[core.queue_len].set(jnp.where(queued, j, core.queue[core.queue_len])),
                                queue_len=core.queue_len + queued)
        else:
            core = self._queue_insert(core, jobs, cluster, j, self._queue_key(jobs, j), queued)
        acc = core.acc.replace(
            failed=core.acc.failed + (active & unschedulable),
            dropped_overflow=core.acc.dropped_overflow + (active & ~unschedulable & full),
        )
        return core.replace(acc=acc, next_arrival=core.next_arrival + active,
                            measure_open=core.measure_open + (queued & self._measured(core, j)))
