"""The cluster environment: pure, jittable ``reset`` and ``step``, one step = one decision.

Semantics are written down in docs/semantics.md and mirrored by ``jaxsched/reference/``.
The API is gymnax-like and functional::

    env = ClusterEnv(EnvConfig())
    state, obs = env.reset(key, params, jobs)
    state, obs, reward, done, info = env.step(key, state, action, params)

A batch of episodes is ``jax.vmap`` of the same calls. After every action the env runs its
event loop (``lax.while_loop``) to the next decision point. The loop carries only the small
``Core`` (O(N*G + K*N + Q + R) numbers); per-job records are written in ``step`` alone, so no event
costs O(J). Each loop turn handles one event; events at the same instant are all handled
before a decision is asked for.

The env is split by concern; ``ClusterEnv`` (here: reset, step, act, the turn-by-turn API,
the observation) mixes in one class per concern, each in its own module of ``jaxsched/sim/``:

- ``config.py``: ``EnvConfig`` and the values its fields allow;
- ``events.py``: the event loop and the clock (completions, arrivals, the running set);
- ``window.py``: the queue and the window the policy sees;
- ``reservation.py``: the starvation guard's reservation;
- ``reschedule.py``: the periodic migration pass;
- ``node_state.py``: a node's free resources, the fit test, and what is derived from them
  (fragmentation, the FGD drop table, job classes);
- ``rounds.py``: scheduling rounds and preemption (``EnvConfig.round_s`` > 0): the round
  decision (``step_round``), segments, attained service and remaining work;
- ``gangs.py``: jobs that span nodes (``EnvConfig.max_span`` > 1): capacity, fit with an
  anchor, the gang rule, placing and releasing parts.

The mixins hold methods only: ``ClusterEnv``'s one field is ``config``, so equal configs give
equal, equally hashed envs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxsched import actions
from jaxsched.sim import frag, gangs, metrics, resources
from jaxsched.sim.config import (
    DEFAULT_RESERVE_AFTER_S, INF, MODES, QUEUE_ORDERS, RESCHED_TARGETS, REWARDS, TIE_BREAKS, EnvConfig,
)
from jaxsched.sim.events import EventsMixin
from jaxsched.sim.gangs import GangMixin
from jaxsched.sim.node_state import FGD_TABLE_BLOCK, UNUSED_SHAPE, NodeStateMixin
from jaxsched.sim.reschedule import RescheduleMixin
from jaxsched.sim.reservation import ReservationMixin
from jaxsched.sim.rounds import RoundsMixin
from jaxsched.sim.window import WINDOW_FIELDS, WindowMixin
from jaxsched.types import (
    GPU_MILLI, OUTCOME_NONE, OUTCOME_PLACED, OUTCOME_REJECTED,
    Core, Cursor, EnvParams, Jobs, Observation, SimState,
)

# The env and its settings; the constants are re-exported from the modules that now hold
# them, so ``from jaxsched.sim.env import QUEUE_ORDERS`` (and the rest) keeps working.
__all__ = ["ClusterEnv", "EnvConfig", "INF", "MODES", "QUEUE_ORDERS", "TIE_BREAKS", "REWARDS",
           "RESCHED_TARGETS", "DEFAULT_RESERVE_AFTER_S", "FGD_TABLE_BLOCK",
           "UNUSED_SHAPE", "WINDOW_FIELDS"]


@dataclasses.dataclass(frozen=True)
class ClusterEnv(EventsMixin, WindowMixin, ReservationMixin, RescheduleMixin, NodeStateMixin, GangMixin,
                 RoundsMixin):
    """Reset/step of one episode; every method is pure and can be jitted and vmapped.

    Equal configs give equal (and equally hashed) envs, so ``jit`` with the env as a static
    argument compiles once per config.
    """

    config: EnvConfig = EnvConfig()

    # ----- sizes ---------------------------------------------------------------------------
    def num_actions(self, params: EnvParams) -> int:
        """K*N place actions, K reject actions, one wait."""
        return actions.num_actions(self.config.window, params.cluster.num_nodes)

    def wait_action(self, params: EnvParams) -> int:
        return self.num_actions(params) - 1

    # ----- reset ---------------------------------------------------------------------------
    def reset(self, key, params: EnvParams, jobs: Jobs):
        """Start an episode on ``jobs`` and run to the first decision point -> (state, obs)."""
        cfg, cluster = self.config, params.cluster
        num_jobs, q, r = jobs.num_jobs, cfg.queue_capacity, cfg.running_capacity
        q_slots = q + r if cfg.rounds else q  # with rounds preempted jobs queue too (never dropped)
        free_milli = jnp.where(cluster.gpu_exists, GPU_MILLI, 0).astype(jnp.int32)
        free_cpu = jnp.where(cluster.valid, cluster.cpu_milli, 0)
        free_mem = jnp.where(cluster.valid, cluster.mem_mib, 0)
        max_free, whole_free = resources.node_summary(free_milli)
        frag_node = jnp.where(cluster.valid, self._node_frag(free_milli, free_cpu, cluster.gpu_model, params), 0.0)
        if cfg.static:
            unschedulable = jnp.zeros(num_jobs, bool)  # static mode tests fit at each arrival
        else:
            unschedulable = gangs.never_fits(cluster, jobs, cfg.max_span, one_model=cfg.gang_one_model,
                                           rule=cfg.gang_rule)
        if cfg.tie_break == "permutation":
            node_rank = jax.random.permutation(key, cluster.num_nodes).astype(jnp.int32)
        else:
            node_rank = jnp.arange(cluster.num_nodes, dtype=jnp.int32)
        t0 = jnp.where(jobs.valid[0], jobs.arrival_s[0], 0.0).astype(jnp.float32)
        measure_last, measure_from_s, measure_to_s = self._measurement(jobs, t0)
        k = cfg.window
        core = Core(
            time_s=t0,
            next_arrival=jnp.int32(0),
            free_milli=free_milli,
            free_cpu=free_cpu,
            free_mem=free_mem,
            frag_node=frag_node,
            max_free=max_free,
            whole_free=whole_free,
            queue=jnp.full(q_slots, -1, jnp.int32),
            queue_key=jnp.full(q_slots, INF),
            queue_len=jnp.int32(0),
            # Static mode: slot 0 is always queue position 0 (one job at a time).
            win_job=jnp.full(k, -1, jnp.int32),
            win_pos=jnp.full(k, q, jnp.int32),
            win_len=jnp.int32(0),
            scan_pos=jnp.int32(0),
            window_fit=jnp.zeros(cluster.num_nodes, jnp.int32),
            resv_job=jnp.int32(-1),
            resv_node=jnp.int32(-1),
            run_job=jnp.full(r, -1, jnp.int32),
            run_end_s=jnp.full(r, INF),
            run_head=jnp.int32(0),
            num_running=jnp.int32(0),
            class_count=jnp.zeros(self._class_count_shape(cluster), jnp.int32),
            **self._fgd_table(jobs, params, free_milli, free_cpu),
            next_resched_s=t0 + jnp.float32(cfg.resched_interval_s) if cfg.rescheduling else INF,
            resched_due=jnp.bool_(False),
            resv_due=jnp.bool_(False),
            measure_from_s=measure_from_s,
            measure_to_s=measure_to_s,
            measure_last=measure_last,
            measure_open=jnp.int32(0),
            acc=metrics.Accumulators.zeros(cluster.num_nodes, t0, free_milli.sum(), frag_node),
            done=jnp.bool_(False),
            rounds=self._round_clock(t0) if cfg.rounds else None,
        )
        state = SimState(
            core=core,
            outcome=jnp.full(num_jobs, OUTCOME_NONE, jnp.int32),
            node=jnp.full(num_jobs, -1, jnp.int32),
            gpu_bits=jnp.zeros(num_jobs, jnp.int32),
            start_s=jnp.full(num_jobs, INF),
            end_s=jnp.full(num_jobs, INF),
            jobs=jobs,
            unschedulable=unschedulable,
            node_rank=node_rank,
            span_node=jnp.full((num_jobs, cfg.max_span - 1) if cfg.gangs else (1, 1), -1, jnp.int32),
            span_bits=jnp.zeros((num_jobs, cfg.max_span - 1) if cfg.gangs else (1, 1), jnp.int32),
            segments=self._no_segments(jobs) if cfg.rounds else None,
        )
        state = self._advance(state, params)
        return state, self.observe(state, params)

    def _measurement(self, jobs: Jobs, t0):
        """(index of the last measured job, the measurement interval's start and end).

        The measured jobs are warmup_jobs .. the last one; the interval runs from the first's
        arrival to the last's. Without measured jobs (warm-up past the end) the interval is
        empty (both ends t0) and the last index is int32 max, so the episode runs to its
        natural end."""
        cfg = self.config
        num_valid = jobs.valid.sum(dtype=jnp.int32)
        first = jnp.int32(cfg.warmup_jobs)
        last = num_valid - 1
        if cfg.measured_jobs:
            last = jnp.minimum(last, cfg.warmup_jobs + cfg.measured_jobs - 1)
        some = first <= last
        at = lambda i: jobs.arrival_s[jnp.clip(i, 0, jobs.num_jobs - 1)]  # noqa: E731
        return (jnp.where(some, last, jnp.iinfo(jnp.int32).max), jnp.where(some, at(first), t0),
                jnp.where(some, at(last), t0))

    def _measured(self, core: Core, j):
        """Job j is one of the measured jobs."""
        return (j >= self.config.warmup_jobs) & (j <= core.measure_last)

    # ----- step ----------------------------------------------------------------------------
    def step(self, key, state: SimState, action, params: EnvParams):
        """Apply one action and run to the next decision point.

        Returns (state, obs, reward, done, info); info holds ``legal`` (the action was legal).
        Once the episode is done, ``step`` changes nothing and counts nothing. With rounds
        (``EnvConfig.round_s`` > 0) there are no flat actions: use ``step_round``.
        """
        if self.config.rounds:
            raise ValueError("EnvConfig.round_s > 0: decisions are rounds, use ClusterEnv.step_round")
        live, in_system_before = ~state.core.done, state.core.acc.in_system_integral
        state, cost_s, legal = self.act(key, state, action, params)
        state = self._advance(state, params)
        if self.config.reward == "in_system":
            cost_s = state.core.acc.in_system_integral - in_system_before
        reward = jnp.where(live, -cost_s * self.config.reward_scale, 0.0)
        return state, self.observe(state, params), reward, state.core.done, {"legal": legal}

    def act(self, key, state: SimState, action, params: EnvParams, active=True):
        """The first half of ``step``: apply the action, without running to the next decision.

        ``active`` False (or a done episode) changes nothing. Returns (state, cost_s, legal):
        cost_s is the placed job's JCT (seconds) when it was placed, else 0.
        """
        cfg, cluster, jobs, core = self.config, params.cluster, state.jobs, state.core
        k_max, n_nodes = cfg.window, cluster.num_nodes
        action = jnp.asarray(action, jnp.int32)
        live = ~core.done & active

        # Decode the flat action and test it against the current masks.
        window = self._window(core)
        is_place = actions.is_place(action, k_max, n_nodes)
        place_slot, n = actions.place_slot_node(action, n_nodes)
        slot = jnp.where(is_place, place_slot, actions.reject_slot(action, k_max, n_nodes))
        slot = jnp.clip(slot, 0, k_max - 1)
        n = jnp.clip(n, 0, n_nodes - 1)
        is_reject = actions.is_reject(action, k_max, n_nodes)
        j = jnp.maximum(window[slot], 0)
        legal_place = (is_place & ((core.window_fit[n] >> slot) & 1 == 1)
                       & self._has_room(core))  # = place_mask[slot, n]
        legal_reject = is_reject & (slot < core.win_len)
        future = self._future_event_exists(core, jobs)
        legal_wait = actions.is_wait(action, k_max, n_nodes) & future
        legal = legal_place | legal_reject | legal_wait
        place, reject = live & legal_place, live & legal_reject
        wait = live & (legal_wait | (~legal & future))

        # Place: GPUs by the rule, resources down, record the job, queue -> running set. A
        # gang (it cannot run on n alone) takes its parts instead (sim/gangs.py).
        is_gang = jnp.bool_(False)
        if cfg.gangs:
            is_gang, part_node, part_gpus = self._gang_plan(core, jobs, cluster, state.node_rank, j, n, place)
        alone = place & ~is_gang
        free_row = core.free_milli[n]
        free_cpu = core.free_cpu.at[n].add(-jnp.where(alone, jobs.cpu_milli[j], 0))
        gpu_scores = None
        if cfg.gpu_rule == "fgd":
            gpu_scores = frag.fgd_gpu_scores(free_row, core.free_cpu[n], free_cpu[n], cluster.gpu_model[n],
                                             jobs.gpu_milli[j], params.frag_classes)
        gpus = resources.choose_gpus(free_row, jobs.num_gpu[j], jobs.gpu_milli[j], cfg.gpu_rule,
                                     key, gpu_scores, cluster.num_gpus[n])
        # The node's new row and the job's record both come from these bits: with the mask
        # itself, XLA recomputed it from the old free_milli in each and copied [N, G] per step.
        bits = resources.mask_to_bits(gpus)
        used_row = jnp.where(resources.bits_to_mask(bits, cluster.max_gpus) & alone, jobs.gpu_milli[j], 0)
        free_mem = core.free_mem.at[n].add(-jnp.where(alone, jobs.mem_mib[j], 0))
        speed = cluster.type_speed[n, jobs.job_type[j]]  # the job's type's speed on node n
        if cfg.gangs:
            speed = jnp.where(is_gang, self._gang_speed(cluster, jobs, j, part_node, part_gpus), speed)
        run_s = jnp.where(jobs.num_gpu[j] > 0, jobs.work_s[j] / speed, jobs.work_s[j])
        end = INF if cfg.static else core.time_s + run_s
        core = self._set_node(core, jobs, params, n, -used_row, free_cpu, free_mem, alone)
        core = self._count_class(core, n, jobs.num_gpu[j], jobs.gpu_milli[j], alone.astype(jnp.int32))
        if cfg.gangs:
            core, part_bits = self._place_parts(core, jobs, params, j, part_node, part_gpus, is_gang)
            bits = jnp.where(is_gang, part_bits[0], bits)  # the anchor's
        if not cfg.static:
            core = self._running_insert(core, j, end, place)
            core = core.replace(acc=core.acc.replace(running_full=core.acc.running_full | (
                place & (core.num_running >= cfg.running_capacity))))
        core = self._leave_window(core, slot, place | reject)
        core = core.replace(measure_open=core.measure_open - (reject & self._measured(core, j)))
        core, reopened = self._end_reservation(core, jobs, cluster, j, place | reject)
        core = self._resync(core, jobs, cluster, reopened)
        state = state.replace(
            outcome=state.outcome.at[j].set(jnp.where(
                place, OUTCOME_PLACED, jnp.where(reject, OUTCOME_REJECTED, state.outcome[j]))),
            node=state.node.at[j].set(jnp.where(place, n, state.node[j])),
            gpu_bits=state.gpu_bits.at[j].set(
                jnp.where(place, bits, state.gpu_bits[j])),
            start_s=state.start_s.at[j].set(jnp.where(place, core.time_s, state.start_s[j])),
            end_s=state.end_s.at[j].set(jnp.where(place, end, jnp.where(reject, core.time_s, state.end_s[j]))),
        )
        if cfg.gangs:
            state = state.replace(
                span_node=state.span_node.at[j].set(jnp.where(
                    place, jnp.where(is_gang, part_node[1:], -1), state.span_node[j])),
                span_bits=state.span_bits.at[j].set(jnp.where(
                    place, jnp.where(is_gang, part_bits[1:], 0), state.span_bits[j])))

        # Wait (or an illegal action while an event is pending): jump to the next event time.
        acc = core.acc.replace(
            decisions=core.acc.decisions + live,
            invalid_actions=core.acc.invalid_actions + (live & ~legal),
        )
        core = core.replace(acc=acc)
        if not cfg.static:
            t_next = self._next_event_time(core, jobs)
            core = self._move_clock(core, jnp.where(wait, t_next, core.time_s), params)

        cost_s = end - jobs.arrival_s[j]
        if cfg.reward_gpu_price > 0:
            cost_s = cost_s + self._gpu_price_s(cluster, n, jobs.num_gpu[j], jobs.gpu_milli[j], run_s)
        return state.replace(core=core), jnp.where(place, cost_s, 0.0), legal

    def _gpu_price_s(self, cluster, n, num_gpu, gpu_milli, run_s):
        """reward_gpu_price's charge (seconds) for holding num_gpu x gpu_milli on node n for run_s.
        The premium is the GPU's (``cluster.speed``, job type 0: what later jobs lose), whatever
        the placed job's type; ``run_s`` is the job's own run time."""
        gpus = cluster.num_gpus.astype(jnp.float32)
        order = jnp.argsort(cluster.speed)
        half = jnp.cumsum(gpus[order]) >= 0.5 * gpus.sum()
        s_common = cluster.speed[order[jnp.argmax(half)]]  # GPU-weighted median speed
        held = num_gpu * gpu_milli / GPU_MILLI
        premium = jnp.maximum(cluster.speed[n] / s_common - 1.0, 0.0)
        return self.config.reward_gpu_price * held * run_s * premium

    def _has_room(self, core: Core):
        """A job may be placed: the running set is not full (static mode has none)."""
        if self.config.static:
            return jnp.bool_(True)
        return core.num_running < self.config.running_capacity

    # ----- turn by turn (rollouts that interleave decisions and events) ---------------------
    # ``step`` = ``act`` and then event turns until the next stop. Under ``vmap`` that loop
    # runs as long as the slowest episode of the batch; a rollout can instead carry a
    # ``Cursor`` per episode and do, every iteration, a decision where one is due and a few
    # masked event turns (``rollout.rollout``). Same states, same order of events.
    def cursor(self, state: SimState, params: EnvParams) -> Cursor:
        """The cursor of ``state``: whether it is at a stop (a state from ``reset`` or
        ``step`` is). Sets ``done`` when no event is left."""
        if self.config.static:
            core, stop = self._static_stop(state, state.core)
            return Cursor(state.replace(core=core), stop)
        core, stop = self._check_stop(state, state.core, params)
        return Cursor(state.replace(core=core), stop | self.interrupted(core))

    def act_at(self, key, cur: Cursor, action, params: EnvParams, active) -> Cursor:
        """``act`` when ``active`` (the cursor must be at a decision point), then the new cursor."""
        state, _, _ = self.act(key, cur.state, action, params, active)
        new = self.cursor(state, params)
        return Cursor(new.state, jnp.where(active, new.stop, cur.stop))

    def turns(self, cur: Cursor, params: EnvParams, count: int) -> Cursor:
        """``count`` event turns, each one masked off once the cursor is at a stop (so the
        cost is fixed and the result is the same as turning only while needed)."""
        def one(_, cur):
            state = cur.state
            if self.config.static:
                core, _ = self._static_turn(state, state.core, params)  # no-op at a stop
                core, stop = self._static_stop(state, core)
                return Cursor(state.replace(core=core), stop)
            go = ~cur.stop
            core, stop = self._dynamic_turn(state, state.core, params, go)
            return Cursor(state.replace(core=core), jnp.where(go, stop, cur.stop))
        return jax.lax.fori_loop(0, count, one, cur, unroll=True)

    def run_interrupt(self, cur: Cursor, params: EnvParams) -> Cursor:
        """The rescheduling pass or reservation when one is due (``interrupted``), then the
        new cursor."""
        due = self.interrupted(cur.state.core)
        new = self.cursor(self._run_interrupt(cur.state, params), params)
        return Cursor(new.state, jnp.where(due, new.stop, cur.stop))

    # ----- observation ---------------------------------------------------------------------
    def observe(self, state: SimState, params: EnvParams) -> Observation:
        """The policy's view of ``state`` (see ``types.Observation``)."""
        core, jobs = state.core, state.jobs
        window = self._window(core)
        occupied = window >= 0
        j = jnp.maximum(window, 0)
        pick = lambda x, fill=0: jnp.where(occupied, x[j], fill)  # noqa: E731
        live = ~core.done  # an episode that ended early (measured jobs all gone) still has a queue
        place_mask = self._window_fit_mask(core) & self._has_room(core) & live
        wait_ok = jnp.bool_(False) if self.config.static else self._future_event_exists(core, jobs) & live
        return Observation(
            window_job=window,
            job_num_gpu=pick(jobs.num_gpu),
            job_gpu_milli=pick(jobs.gpu_milli),
            job_cpu_milli=pick(jobs.cpu_milli),
            job_mem_mib=pick(jobs.mem_mib),
            job_model_mask=pick(jobs.model_mask),
            job_work_s=pick(jobs.work_s, 0.0),
            job_wait_s=pick(core.time_s - jobs.arrival_s, 0.0),
            job_deadline_s=pick(jobs.deadline_s, INF),
            job_type=pick(jobs.job_type),
            place_mask=place_mask,
            action_mask=jnp.concatenate([place_mask.ravel(), occupied & live, wait_ok[None]]),
            free_milli=core.free_milli,
            free_cpu=core.free_cpu,
            free_mem=core.free_mem,
            frag_node=core.frag_node,
            node_rank=state.node_rank,
            cluster=params.cluster,
            time_s=core.time_s,
            queue_len=core.queue_len,
            frag_classes=params.frag_classes,
            node_class_jobs=self._node_class_jobs(core, params.cluster),
            measure_from_s=core.measure_from_s,
            fgd_shape=core.fgd_shape,
            fgd_drop=core.fgd_drop,
        )

    def metrics(self, state: SimState, params: EnvParams) -> dict:
        """Per-episode metrics (``sim.metrics.summarize``)."""
        cfg = self.config
        out = metrics.summarize(state, params, cfg.static, cfg.track_frag, cfg.warmup_jobs)
        if cfg.rounds:
            out.update(self.preemption_metrics(state))
        return out
