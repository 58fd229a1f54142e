"""Scheduling rounds and preemption (``EnvConfig.round_s`` > 0; docs/semantics.md,
"Preemption and rounds").

At a round the policy gives every job a priority ([J] float32, higher first, ties to the lower
index; NaN or -inf holds a job back) and ``step_round`` decides which jobs run: held running
jobs are preempted, then the queued and running jobs are walked in priority order; a running
job keeps its nodes, a queued one is placed first-fit, releasing (in thought) the running jobs
after it in the order, the last first, until it fits; those whose resources it then took are
preempted, the others keep theirs. A policy may instead give a priority per (job, GPU model
id), [J, M]: the walk's units are then (job, model) pairs, a queued job placed on its pair's
model only, at the first of its pairs with room ("Per-model priorities").

The walk works on plain free arrays (``Walk``); the nodes that changed are written back through
``_set_node`` afterwards (integrals, fragmentation, drop table), the running ring and the queue
are rebuilt from per-job masks, and the jobs' segments are closed (preempted) and begun
(started) in one vectorised pass. Completions in the event loop write no per-job record, so a
finished job's last segment stays open in ``SimState.segments`` (``seg_start_s`` finite,
``end_s <= t``): ``attained_now`` and ``preemption_metrics`` close it at ``min(end_s, t)``.
The walk's cost: one sort of the candidates by priority, in ``EnvConfig.walk_slots`` slots
(every candidate when they fit, else the running candidates and the queued ones of highest
priority, by ``top_k``; all J jobs only when the jobs left out could have changed the round);
then one turn per candidate that is queued when its turn comes (a running one keeps its nodes
and costs nothing), each a few O(N) fit tests: first whether it fits with every running job
after it given back at once (if not, nothing changes and the turn ends, and the later queued
jobs asking exactly the same are skipped until a turn places a job: they cannot fit either),
then one per running job it releases in thought, from the last still running; the walk stops
once no candidate after it is still running and no later candidate fits the free GPUs. Only
the nodes that changed are written back; the J-long masks become index lists by
``reduce.nonzero_indices``. (On Gavel's 108-GPU cluster at 4 jobs an hour: about 1 ms a round
on 2 CPU cores, 55 times less than the first version's loop over every candidate and running
job; docs/performance.md has the later steps.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxsched.cluster import MODEL_NAMES
from jaxsched.sim import frag, gangs, metrics, resources
from jaxsched.sim.config import INF
from jaxsched.sim.reduce import nonzero_indices, ordered_sum
from jaxsched.types import GPU_MILLI, OUTCOME_PLACED, EnvParams, Jobs, RoundClock, Segments, SimState


@struct.dataclass
class Walk:
    """The round decision's working state (``RoundsMixin._decide_round``).

    free_milli [N, G], free_cpu [N], free_mem [N]  the cluster's free resources as the walk
                                                    goes (released jobs given back in thought)
    running [J] bool, num_running []                 the jobs running now
    node, gpu_bits [J]; span_node, span_bits [J, S-1] the jobs' placement records
    preempted [J] bool   preempted in this round (it may have started again since)
    started [J] bool     placed in this round (begins a segment)
    speed [J] float32    the speed of a job started in this round on its new nodes
    full_seen [] bool    the running set was full after a placement
    """

    free_milli: jax.Array
    free_cpu: jax.Array
    free_mem: jax.Array
    running: jax.Array
    num_running: jax.Array
    node: jax.Array
    gpu_bits: jax.Array
    span_node: jax.Array
    span_bits: jax.Array
    preempted: jax.Array
    started: jax.Array
    speed: jax.Array
    full_seen: jax.Array


def restart_cost_s(overhead_s: tuple, above_gpus: tuple, num_gpu):
    """float32 restart cost of jobs of ``num_gpu`` GPUs ([...]): overhead_s[i], i = how many of
    the increasing thresholds ``above_gpus`` the GPU count exceeds (``EnvConfig.restart_overhead_s``,
    ``restart_above_gpus``)."""
    costs = jnp.asarray(overhead_s, jnp.float32)
    above = jnp.asarray(above_gpus, jnp.int32).reshape(-1)
    return costs[(jnp.asarray(num_gpu)[..., None] > above).sum(-1)]


def mark_jobs(ids, num_jobs: int):
    """[J] bool: the job indices listed in ``ids`` (a ring or queue of slots, -1 = empty)."""
    return jnp.zeros(num_jobs, bool).at[jnp.where(ids >= 0, ids, num_jobs)].set(True, mode="drop")


def job_gpus(jobs: Jobs):
    """[J] float32 GPUs each job holds: float32(num_gpu * gpu_milli) / 1000 (0 for CPU-only),
    a true division, as the reference's: XLA turns a division by a broadcast scalar into a
    multiplication by its rounded reciprocal, so the divisor is an opaque [J] array."""
    milli = (jobs.num_gpu * jobs.gpu_milli).astype(jnp.float32)
    return milli / jax.lax.optimization_barrier(jnp.full_like(milli, GPU_MILLI))


def attained_now(state: SimState):
    """Each job's attained service now -> (attained_s [J], attained_gpu_s [J]) float32: the
    wall seconds it has held resources (closed segments, and its current or last one up to
    min(end, t)), and that times its GPUs."""
    seg, t = state.segments, state.core.time_s
    open_ = jnp.isfinite(seg.seg_start_s)
    held_s = jnp.minimum(state.end_s, t) - seg.seg_start_s
    attained = jnp.where(open_, seg.attained_s + jnp.where(open_, held_s, 0.0), seg.attained_s)
    return attained, attained * job_gpus(state.jobs)


def attained_by_model_now(state: SimState, cluster):
    """[J, M] float32 each job's attained service now by GPU model id (wall seconds held on
    nodes of that model, as its anchor; ``attained_now`` split by model): the closed
    segments, and the current or last one up to min(end, t) on its anchor's model."""
    seg, t = state.segments, state.core.time_s
    open_ = jnp.isfinite(seg.seg_start_s)
    held_s = jnp.where(open_, jnp.minimum(state.end_s, t) - seg.seg_start_s, 0.0)
    return seg.attained_model_s.at[jnp.arange(state.jobs.num_jobs), anchor_model(state, cluster)].add(held_s)


def anchor_model(state: SimState, cluster):
    """[J] int32 the GPU model id of each job's (last) anchor node (read for jobs that ran)."""
    return cluster.gpu_model[jnp.maximum(state.node, 0)]


def remaining_now(state: SimState):
    """[J] float32 each job's work left now (reference-speed seconds): float32(end - t) * speed
    for a running job past its restart cost, else the work left when its segment began."""
    seg, t = state.segments, state.core.time_s
    running = jnp.isfinite(seg.seg_start_s) & (state.end_s > t)
    past_cost = running & (t >= seg.run_from_s)
    return jnp.where(past_cost, (state.end_s - t) * seg.seg_speed, seg.remaining_s)


POLICY_MEMORY = {"policy_model": jnp.int32, "policy_share": jnp.float32}


def policy_memory(memory: dict, seg: Segments) -> dict:
    """A round policy's ``memory`` (a dict of ``POLICY_MEMORY`` fields) as ``Segments``
    fields of their shapes and dtypes; any other key is refused."""
    if not isinstance(memory, dict) or not set(memory) <= set(POLICY_MEMORY):
        raise ValueError(f"a round policy's memory must be a dict of {sorted(POLICY_MEMORY)}, got {memory!r}")
    return {name: jnp.asarray(value, POLICY_MEMORY[name]).reshape(getattr(seg, name).shape)
            for name, value in memory.items()}


def model_tiers(model_order: tuple, num_models: int) -> list[int]:
    """Each model id's place in a round's walk model by model (``EnvConfig.round_model_order``:
    the named models in that order, then the others by id)."""
    named = [MODEL_NAMES.index(name) for name in model_order]
    rest = [m for m in range(num_models) if m not in named]
    place = {m: i for i, m in enumerate(named + rest)}
    return [place[m] for m in range(num_models)]


class RoundsMixin:
    """``ClusterEnv``'s rounds (reads ``self.config``; no fields of its own)."""

    def _round_clock(self, t0) -> RoundClock:
        """The round clock at reset: the first round at t0."""
        return RoundClock(next_round_s=jnp.asarray(t0, jnp.float32), due=jnp.bool_(False),
                          last_reset_s=-INF, changed=jnp.bool_(False), reset=jnp.bool_(False),
                          settled_until=-INF)

    def _no_segments(self, jobs: Jobs) -> Segments:
        """Segments at reset: nothing run, all work left."""
        num_jobs = jobs.num_jobs
        return Segments(
            remaining_s=jobs.work_s.astype(jnp.float32),
            seg_start_s=jnp.full(num_jobs, INF),
            run_from_s=jnp.full(num_jobs, INF),
            seg_speed=jnp.ones(num_jobs, jnp.float32),
            attained_s=jnp.zeros(num_jobs, jnp.float32),
            attained_model_s=jnp.zeros((num_jobs, len(MODEL_NAMES)), jnp.float32),
            preemptions=jnp.zeros(num_jobs, jnp.int32),
            restart_gpu_s=jnp.float32(0.0),
            waiting_since_s=jnp.full(num_jobs, INF),
            rewait_growth=jnp.float32(0.0),
            policy_model=jnp.full(num_jobs, -1, jnp.int32),
            policy_share=jnp.zeros((num_jobs, len(MODEL_NAMES)), jnp.float32),
            attained_at_reset_s=jnp.zeros(num_jobs, jnp.float32),
            attained_model_at_reset_s=jnp.zeros((num_jobs, len(MODEL_NAMES)), jnp.float32),
        )

    def restart_cost_s(self, num_gpu):
        """float32 restart cost of jobs of ``num_gpu`` GPUs ([...]): restart_overhead_s[i],
        i = how many of restart_above_gpus the GPU count exceeds."""
        return restart_cost_s(self.config.restart_overhead_s, self.config.restart_above_gpus, num_gpu)

    def _segment_cost_s(self, state: SimState):
        """[J] float32 restart cost of each job's current segment: 0 for its first start."""
        seg = state.segments
        return jnp.where(seg.preemptions > 0, self.restart_cost_s(state.jobs.num_gpu), 0.0)

    def _guarded(self, state: SimState, running):
        """[J] bool: the running jobs (``running`` [J]) the restart guard keeps on their nodes
        at a round now: restarted with a cost c > 0 and not yet c seconds past it
        (docs/semantics.md, "The restart guard"); None when no job can be."""
        if not self.config.restart_guard or not any(c > 0 for c in self.config.restart_overhead_s):
            return None
        cost = self._segment_cost_s(state)
        return running & (cost > 0) & (state.core.time_s < state.segments.run_from_s + cost)

    def preemption_metrics(self, state: SimState) -> dict:
        """preemptions, preemptions_per_job (the measured jobs') and restart_gpu_s (the
        restart costs of the closed segments, and of the open ones up to min(end, t))."""
        seg, jobs, core = state.segments, state.jobs, state.core
        open_ = jnp.isfinite(seg.seg_start_s)
        held_s = jnp.where(open_, jnp.minimum(state.end_s, core.time_s) - seg.seg_start_s, 0.0)
        restart_open = jnp.where(open_, job_gpus(jobs) * jnp.minimum(self._segment_cost_s(state), held_s), 0.0)
        index = jnp.arange(jobs.num_jobs)
        measured = jobs.valid & (index >= self.config.warmup_jobs) & (index <= core.measure_last)
        n_measured = measured.sum(dtype=jnp.int32)
        per_job = jnp.where(measured, seg.preemptions, 0).sum() / jnp.maximum(n_measured, 1)
        return {
            "preemptions": seg.preemptions.sum(dtype=jnp.int32),
            "preemptions_per_job": jnp.where(n_measured > 0, per_job, 0.0).astype(jnp.float32),
            "restart_gpu_s": seg.restart_gpu_s + ordered_sum(restart_open),
        }

    # ----- the round decision -------------------------------------------------------------
    def step_round(self, key, state: SimState, priority, params: EnvParams):
        """Decide the round due now with ``priority`` (float32 [J], or [J, M] per (job, GPU
        model id); read for queued and running jobs only) and run to the next round ->
        (state, obs, reward, done, info), as ``step``. ``priority`` may be a pair
        ``(priority, memory)``: the round is decided by the first, and ``memory``, a dict of
        ``POLICY_MEMORY`` fields (``policy_model`` [J] int32, ``policy_share`` [J, M] float32),
        replaces them in ``segments`` for the policy's next rounds (docs/semantics.md,
        "Policy memory"); its key ``steady_until`` (float32 [], not kept) is read with
        ``settled_rounds = "skipped-by-policy"``. Once the episode is done it changes nothing and
        counts nothing. The reward is the "in_system" one, -(job-seconds in the system until
        the next round)."""
        if not self.config.rounds:
            raise ValueError("step_round needs EnvConfig.round_s > 0")
        memory, steady_until = None, None
        if isinstance(priority, tuple):
            priority, memory = priority
            if isinstance(memory, dict) and "steady_until" in memory:  # (settled_rounds "skipped-by-policy")
                memory = dict(memory)
                steady_until = jnp.asarray(memory.pop("steady_until"), jnp.float32)
        if self.config.settled_rounds == "skipped-by-policy" and steady_until is None:
            raise ValueError('settled_rounds "skipped-by-policy" needs a policy that returns (priority, '
                             '{"steady_until": ...})')
        live, in_system_before = ~state.core.done, state.core.acc.in_system_integral
        decided = self._decide_round(key, state, jnp.asarray(priority, jnp.float32), params, steady_until)
        if memory:
            decided = decided.replace(segments=decided.segments.replace(**policy_memory(memory, decided.segments)))
        state = jax.tree.map(lambda new, old: jnp.where(live, new, old), decided, state)
        state = self._advance(state, params)
        cost_s = state.core.acc.in_system_integral - in_system_before
        reward = jnp.where(live, -cost_s * self.config.reward_scale, 0.0)
        return state, self.observe(state, params), reward, state.core.done, {"legal": jnp.bool_(True)}

    def _decide_round(self, key, state: SimState, priority, params: EnvParams, steady_until=None) -> SimState:
        """The round decision (docs/semantics.md, "The round decision") -> the new state, at
        the same instant. At a reset round each job's attained service is noted first
        (``segments.attained_at_reset_s``: "Allocation resets"). ``steady_until`` (float32 [] or
        None): the policy's word on how long its priorities hold ("skipped-by-policy")."""
        if self.config.resets:
            seg = state.segments
            noted, noted_model = jax.lax.cond(  # (reset rounds only)
                state.core.rounds.reset, lambda: (attained_now(state)[0], attained_by_model_now(state, params.cluster)),
                lambda: (seg.attained_at_reset_s, seg.attained_model_at_reset_s))
            state = state.replace(segments=seg.replace(attained_at_reset_s=noted, attained_model_at_reset_s=noted_model))
        walk, running0, queued0 = self._round_walk(key, state, priority, params)
        decided = self._apply_round(state, params, walk, running0, queued0)
        if self.config.settled_rounds != "decided":
            until = self._settled_until(state, walk)
            if steady_until is not None:
                until = jnp.minimum(until, steady_until)
            clock = decided.core.rounds.replace(settled_until=until)
            decided = decided.replace(core=decided.core.replace(rounds=clock))
        return decided

    def _round_walk(self, key, state: SimState, priority, params: EnvParams):
        """The round decision on the free arrays -> (walk, running0 [J], queued0 [J]): the
        ``Walk`` after it, and the jobs running and queued before it.

        The walk's units are the jobs (``priority`` [J]) or the (job, GPU model) pairs
        (``priority`` [J, M]: unit j * M + m is job j on model m's nodes only; a running job
        is listed once, on the model of its anchor node)."""
        cfg, core, jobs = self.config, state.core, state.jobs
        num_jobs = jobs.num_jobs
        per_model = priority.ndim == 2
        num_models = priority.shape[1] if per_model else 1
        num_units = num_jobs * num_models
        running0, queued0 = mark_jobs(core.run_job, num_jobs), mark_jobs(core.queue, num_jobs)
        flat = priority.reshape(-1)  # [U]
        listed = flat > -jnp.inf     # not NaN or -inf
        if per_model:
            run_model = anchor_model(state, params.cluster)  # [J] (read for running jobs)
            unit_job = jnp.repeat(jnp.arange(num_jobs, dtype=jnp.int32), num_models)
            own = jnp.tile(jnp.arange(num_models, dtype=jnp.int32), num_jobs) == run_model[unit_job]
            cand = (queued0[unit_job] | (running0[unit_job] & own)) & listed
            held = ~(priority[jnp.arange(num_jobs), jnp.clip(run_model, 0, num_models - 1)] > -jnp.inf) | (
                run_model >= num_models)  # [J], read for running jobs: its own pair is held
        else:
            unit_job = jnp.arange(num_jobs, dtype=jnp.int32)
            cand = (queued0 | running0) & listed
            held = ~listed
        n_cand = cand.sum(dtype=jnp.int32)
        by_model = per_model and bool(cfg.round_model_order)
        model_tier = jnp.asarray(model_tiers(cfg.round_model_order, num_models), jnp.int32)

        walk = Walk(core.free_milli, core.free_cpu, core.free_mem, running0, core.num_running,
                    state.node, state.gpu_bits, state.span_node, state.span_bits,
                    jnp.zeros(num_jobs, bool), jnp.zeros(num_jobs, bool), jnp.ones(num_jobs, jnp.float32),
                    jnp.bool_(False))

        # 1. held running jobs leave, all at once (order does not matter), but the guarded
        guarded = self._guarded(state, running0)
        ring = jnp.maximum(core.run_job, 0)
        go = (core.run_job >= 0) & held[ring]
        if guarded is not None:
            go = go & ~guarded[ring]
        walk = jax.lax.cond(go.any(), lambda w: self._take_all(w, jobs, params, ring, go, 1), lambda w: w, walk)
        gone = mark_jobs(jnp.where(go, ring, -1), num_jobs)
        walk = walk.replace(running=walk.running & ~gone, num_running=walk.num_running - go.sum(dtype=jnp.int32),
                            preempted=gone)

        # 2. the walk, over the candidates in order (``_walk_order``).
        def walk_over(ids, n_listed, left_out, rest_ask):  # ids [L]: the listed units by index, then U
            def run(walk):
                # By (priority descending, index ascending: a stable sort of ids in index order);
                # 0.0 - p makes -0.0 and 0.0 one key, as Python's sort sees them; a candidate's
                # key is < +inf, so the padding comes last.
                sort_key = jnp.where(ids < num_units, 0.0 - flat.at[ids].get(mode="fill", fill_value=0.0), INF)
                order = ids[jnp.argsort(sort_key, stable=True)]
                if by_model:  # then model by model (``round_model_order``), the padding last
                    tier = jnp.where(order < num_units, model_tier[order % num_models], num_models)
                    order = order[jnp.argsort(tier, stable=True)]
                return self._walk_order(key, walk, state, params, order, num_models, running0, n_listed,
                                        left_out, rest_ask, guarded)
            return run

        def walk_all(walk):  # every candidate (a sort of U units)
            ids = nonzero_indices(cand, num_units, num_units)  # by index
            return walk_over(ids, n_cand, jnp.bool_(False), GPU_MILLI + 1)(walk)[0]

        slots = min(cfg.walk_slots, num_units)
        if slots == num_units:
            return walk_all(walk), running0, queued0
        # In ``walk_slots`` slots (a sort of all U units is most of a round's time when U is
        # large): every candidate when they fit, else the running candidates and the queued
        # ones of highest priority (top_k: ties to the lower index, as the order), as many as
        # fit. The walk over them is the walk over all candidates up to the last queued one
        # listed; past it, only if it has settled (``_walk_order``): else the round is walked
        # again over every candidate.
        running_cand = cand & (running0[unit_job] if per_model else running0)
        queued_cand = cand & ~running_cand
        n_running = running_cand.sum(dtype=jnp.int32)
        n_queued = n_cand - n_running

        def every_candidate(_):  # by index, as walk_over needs them; none left out
            return nonzero_indices(cand, slots, num_units), n_cand, jnp.bool_(False), jnp.int32(GPU_MILLI + 1)

        def running_and_best(_):
            runs = nonzero_indices(running_cand, slots, num_units)
            take = jnp.clip(slots - n_running, 0, n_queued)
            i = jnp.arange(slots)
            if by_model:  # the first ``take`` in (model's place, priority) order: whole places, then
                # the boundary place's best (its queued candidates of highest priority)
                place = model_tier[jnp.arange(num_units) % num_models]
                count = jnp.zeros(num_models, jnp.int32).at[place].add(queued_cand.astype(jnp.int32))
                boundary = jnp.argmax(jnp.cumsum(count) >= take)
                n_whole = (jnp.cumsum(count) - count)[boundary]
                whole = nonzero_indices(queued_cand & (place < boundary), slots, num_units)
                best = jax.lax.top_k(jnp.where(queued_cand & (place == boundary), flat + 0.0, -INF), slots)[1]
                queued_ids = jnp.where(i < n_whole, whole, best[jnp.clip(i - n_whole, 0, slots - 1)])
            else:
                queued_ids = jax.lax.top_k(jnp.where(queued_cand, flat + 0.0, -INF), slots)[1]
            queued_ids = queued_ids.astype(jnp.int32)
            ids = jnp.sort(jnp.where(i < n_running, runs, jnp.where(  # by index
                i - n_running < take, queued_ids[jnp.clip(i - n_running, 0, slots - 1)], num_units)))
            rest = queued_cand.at[ids].set(False, mode="drop")  # the queued candidates left out
            unit_milli = jobs.gpu_milli[unit_job] if per_model else jobs.gpu_milli
            rest_ask = jnp.where(rest, unit_milli, GPU_MILLI + 1).min().astype(jnp.int32)
            return ids, n_running + take, rest.any(), rest_ask

        ids, n_listed, left_out, rest_ask = jax.lax.cond(n_cand <= slots, every_candidate, running_and_best, None)
        listed, settled = walk_over(ids, n_listed, left_out, rest_ask)(walk)
        walk = jax.lax.cond(settled & (n_running <= slots), lambda w: listed, walk_all, walk)
        return walk, running0, queued0

    def _walk_order(self, key, walk: Walk, state: SimState, params: EnvParams, order, num_models: int, running0,
                    n_listed, left_out, rest_ask, guarded=None):
        """The walk of the round decision over ``order`` ([L] unit ids: n_listed candidates in
        priority order, then padding U = J * num_models; unit u is job u // num_models, on
        model u % num_models's nodes only when num_models > 1) -> (walk, settled).

        left_out: some queued candidates are not listed; they all come after the last queued
        one listed (position q). The walk then takes the turns up to q only, and is
        ``settled`` when after them nothing can change: no listed candidate after q is still
        running and no later candidate, listed or left out (``rest_ask``: the smallest
        milli-GPU they ask), fits the free GPUs. Without left_out it is the whole walk.
        ``guarded`` [J] (or None): running jobs never released in thought (the restart guard)."""
        cfg, jobs = self.config, state.jobs
        num_jobs, num_slots = jobs.num_jobs, order.shape[0]
        positions = jnp.arange(num_slots, dtype=jnp.int32)
        is_cand = positions < n_listed
        job_at = order // num_models if num_models > 1 else order  # [L] job ids (padding: J)
        # The positions of the candidates running now, ascending ([k], num_slots pads): only
        # they can be released in thought (a job placed in this walk comes before the rest),
        # the guarded ones never.
        k = min(cfg.running_capacity, num_slots)
        running_at = is_cand & running0.at[job_at].get(mode="fill", fill_value=False)
        releasable_at = running_at
        if guarded is not None:
            releasable_at = running_at & ~guarded.at[job_at].get(mode="fill", fill_value=False)
        run_pos = nonzero_indices(releasable_at, k, num_slots)
        run_ids = job_at.at[run_pos].get(mode="fill", fill_value=num_jobs)  # [k] job ids
        queued_at = is_cand & ~running_at
        last_queued = jnp.where(queued_at.any(), num_slots - 1 - jnp.argmax(queued_at[::-1]), -1)
        last_turn = jnp.where(left_out, last_queued, num_slots)
        # The smallest milli-GPU asked from each position on ([L + 1]; a CPU-only job asks 0).
        asked = jnp.where(is_cand, jobs.gpu_milli.at[job_at].get(mode="fill", fill_value=0), GPU_MILLI + 1)
        asked_from = jnp.minimum(jax.lax.cummin(jnp.append(asked, GPU_MILLI + 1), reverse=True), rest_ask)

        def stops(p, walk):
            """From position p on nothing can change: no candidate there is still running (a job
            placed in this walk comes before the rest, and one preempted in it runs again only
            from its own turn on), and none fits the free GPUs or the running set is full."""
            none_left = ~((run_pos >= p) & walk.running.at[run_ids].get(mode="fill", fill_value=False)).any()
            nothing_fits = (walk.free_milli.max() < asked_from[jnp.minimum(p, num_slots)]) | (
                walk.num_running >= cfg.running_capacity)
            return none_left & nothing_fits

        # Each position's request ([L] each; its model mask narrowed to the unit's model), to
        # skip the turns that cannot change anything: a turn that changes nothing leaves the
        # walk as it was, and a later turn has no more to give back (fewer running jobs after
        # it), so a later unit asking exactly the same cannot fit either, until a turn places
        # a job.
        request = self._request(jobs, jnp.minimum(job_at, num_jobs - 1))  # (padding: never a turn)
        if num_models > 1:
            request = (*request[:4], request[4] & jnp.left_shift(jnp.int32(1), order % num_models))

        def next_turn(p, walk, futile):
            """The first position >= p whose job is queued now and not ``futile`` (num_slots: none)."""
            want = (positions >= p) & is_cand & ~futile & ~walk.running.at[job_at].get(mode="fill", fill_value=True)
            return jnp.where(want.any(), jnp.argmax(want), num_slots).astype(jnp.int32)

        def going(carry):
            p, walk, _ = carry
            return (p < n_listed) & (p <= last_turn) & ~stops(p, walk)

        def turn(carry):  # one queued candidate per turn (running ones keep theirs)
            p, walk, futile = carry
            place = walk.num_running < cfg.running_capacity
            walk, placed = self._place_preempting(key, walk, state, params, run_pos, run_ids, p, job_at[p],
                                                  request[4][p], place)
            same = (positions > p) & jnp.stack([x == x[p] for x in request]).all(0)
            futile = jnp.where(placed, False, futile | same)
            return next_turn(p + 1, walk, futile), walk, futile

        none_futile = jnp.zeros(num_slots, bool)
        walk = jax.lax.while_loop(going, turn, (next_turn(0, walk, none_futile), walk, none_futile))[1]
        return walk, ~left_out | stops(last_queued + 1, walk)

    def _place_preempting(self, key, walk: Walk, state: SimState, params: EnvParams, run_pos, run_ids, p, j,
                          model_mask, place):
        """Queued job j (position p of the order; on the models of ``model_mask`` only) when
        ``place`` -> (walk, placed): first-fit, after giving back
        in thought the running jobs after it in the order (``run_pos`` [k]: the positions of
        the candidates running at the round's start, ascending, then padding; ``run_ids``
        their jobs), the last first, until it fits; those whose resources it then took are
        preempted, the others take theirs back. Nothing changes if it fits nowhere even with
        all of them given back (tested first, all at once)."""
        jobs, cluster = state.jobs, params.cluster
        at = lambda i: jnp.minimum(run_ids[i], jobs.num_jobs - 1)  # noqa: E731
        # The entries still running after p: the release starts at the last of them.
        alive = (run_pos > p) & walk.running.at[run_ids].get(mode="fill", fill_value=False)  # [k]
        top = jnp.where(alive.any(), alive.shape[0] - 1 - jnp.argmax(alive[::-1]), -1).astype(jnp.int32)
        all_back = self._take_all(walk, jobs, params, at(jnp.arange(run_ids.shape[0])), alive, 1)
        fits_all = self._fit_row_free(all_back, jobs, cluster, j, model_mask).any()

        def placing(walk):  # (it fits once every entry in ``alive`` is given back)
            fits0 = self._fit_row_free(walk, jobs, cluster, j, model_mask).any()

            def releasing(c):
                i, _, _, fits = c
                return (i >= 0) & (run_pos[jnp.maximum(i, 0)] > p) & ~fits

            def release(c):
                i, w, released, _ = c
                v = at(i)
                go = w.running[v]  # not preempted earlier in this round
                w = self._give_back(w, jobs, params, v, go)
                return i - 1, w, released.at[i].set(go), self._fit_row_free(w, jobs, cluster, j, model_mask).any()

            last, freed, released, _ = jax.lax.while_loop(
                releasing, release, (top, walk, jnp.zeros(run_pos.shape[0], bool), fits0))
            fit_row = self._fit_row_free(freed, jobs, cluster, j, model_mask)
            placed = self._place_first_fit(key, freed, state, params, j, jnp.argmax(fit_row), jnp.bool_(True),
                                           model_mask)

            def settle(i, w):  # in priority order: take back what is still free, else preempt
                v = at(i)
                go = released[i]
                back = go & self._parts_free(w, jobs, params, v)
                w = self._take(w, jobs, params, v, back, -1)
                lost = go & ~back
                return w.replace(running=w.running.at[v].set(w.running[v] & ~lost),
                                 num_running=w.num_running - lost,
                                 preempted=w.preempted.at[v].set(w.preempted[v] | lost))

            return jax.lax.fori_loop(last + 1, top + 1, settle, placed)  # the released: last+1 .. top

        # A job that fits nowhere even with them all given back changes nothing: no release, no
        # placement (most turns of a queue of gangs that cannot fit).
        placed = place & fits_all
        return jax.lax.cond(placed, placing, lambda w: w, walk), placed

    def _fit_row_free(self, walk: Walk, jobs: Jobs, cluster, j, model_mask):
        """[N] bool: job j, allowed the models of ``model_mask``, fits each node (as the
        anchor, for a gang) with the walk's free resources (no reservation with rounds)."""
        max_free, whole_free = resources.node_summary(walk.free_milli)
        return gangs.fits(cluster, walk.free_cpu, walk.free_mem, max_free, whole_free, *self._request(jobs, j)[:4],
                          model_mask, self.config.max_span, one_model=self.config.gang_one_model,
                          rule=self.config.gang_rule)

    def _place_first_fit(self, key, walk: Walk, state: SimState, params: EnvParams, j, n, active,
                         model_mask) -> Walk:
        """Job j takes node n (the lowest-index node it fits) when ``active``: its GPUs by the
        GPU rule, or, a gang that cannot run on n alone, its parts by the gang rule, on nodes
        of the models of ``model_mask``."""
        cfg, jobs, cluster = self.config, state.jobs, params.cluster
        free_milli, free_cpu, free_mem = walk.free_milli, walk.free_cpu, walk.free_mem
        k = jobs.num_gpu[j]
        is_gang = jnp.bool_(False)
        if cfg.gangs:
            cap = gangs.caps(cluster, free_cpu, free_mem, resources.node_summary(free_milli)[1], k,
                             jobs.cpu_milli[j], jobs.mem_mib[j], model_mask)
            if cfg.gang_one_model:
                cap = gangs.same_model_caps(cluster, cap, n)
            part_node, part_gpus = gangs.parts(cap, n, k, state.node_rank, cfg.max_span, cfg.gang_rule,
                                               gangs.node_gpus(cluster))
            is_gang = (k >= 2) & (cap[n] < k)
        alone = active & ~is_gang
        free_row = free_milli[n]
        gpu_scores = None
        if cfg.gpu_rule == "fgd":
            gpu_scores = frag.fgd_gpu_scores(free_row, free_cpu[n], free_cpu[n] - jobs.cpu_milli[j],
                                             cluster.gpu_model[n], jobs.gpu_milli[j], params.frag_classes)
        gpus = resources.choose_gpus(free_row, k, jobs.gpu_milli[j], cfg.gpu_rule, key, gpu_scores,
                                     cluster.num_gpus[n])
        bits = resources.mask_to_bits(gpus)
        free_milli = free_milli.at[n].add(-jnp.where(gpus & alone, jobs.gpu_milli[j], 0))
        free_cpu = free_cpu.at[n].add(-jnp.where(alone, jobs.cpu_milli[j], 0))
        free_mem = free_mem.at[n].add(-jnp.where(alone, jobs.mem_mib[j], 0))
        speed = cluster.type_speed[n, jobs.job_type[j]]
        span_node, span_bits = walk.span_node, walk.span_bits
        if cfg.gangs:
            part_bits = []
            for i, g in zip(part_node, part_gpus):
                on = active & is_gang & (g > 0)
                i = jnp.maximum(i, 0)
                whole = free_milli[i] == GPU_MILLI
                pick = whole & (jnp.cumsum(whole) <= g) & on
                part_bits.append(resources.mask_to_bits(pick))
                free_milli = free_milli.at[i].add(-jnp.where(pick, GPU_MILLI, 0))
                free_cpu = free_cpu.at[i].add(-jnp.where(on, gangs.part_request(jobs.cpu_milli[j], k, g), 0))
                free_mem = free_mem.at[i].add(-jnp.where(on, gangs.part_request(jobs.mem_mib[j], k, g), 0))
            part_bits = jnp.stack(part_bits)
            bits = jnp.where(is_gang, part_bits[0], bits)
            speed = jnp.where(is_gang, self._gang_speed(cluster, jobs, j, part_node, part_gpus), speed)
            span_node = span_node.at[j].set(jnp.where(active, jnp.where(is_gang, part_node[1:], -1), span_node[j]))
            span_bits = span_bits.at[j].set(jnp.where(active, jnp.where(is_gang, part_bits[1:], 0), span_bits[j]))
        num_running = walk.num_running + active
        return walk.replace(
            free_milli=free_milli, free_cpu=free_cpu, free_mem=free_mem,
            running=walk.running.at[j].set(walk.running[j] | active),
            num_running=num_running,
            node=walk.node.at[j].set(jnp.where(active, n, walk.node[j])),
            gpu_bits=walk.gpu_bits.at[j].set(jnp.where(active, bits, walk.gpu_bits[j])),
            span_node=span_node, span_bits=span_bits,
            started=walk.started.at[j].set(walk.started[j] | active),
            speed=walk.speed.at[j].set(jnp.where(active, jnp.where(k > 0, speed, 1.0), walk.speed[j])),
            full_seen=walk.full_seen | (active & (num_running >= self.config.running_capacity)),
        )

    def _parts(self, walk: Walk, jobs: Jobs, params: EnvParams, v):
        """Running job v's parts -> [(node, GPU mask [G], milli-cores, MiB, in use)], the anchor
        first (one part unless it is a gang)."""
        g_max = params.cluster.max_gpus
        if not self.config.gangs:
            return [(walk.node[v], resources.bits_to_mask(walk.gpu_bits[v], g_max), jobs.cpu_milli[v],
                     jobs.mem_mib[v], jnp.bool_(True))]
        gang = walk.span_node[v, 0] >= 0
        out = []
        for i, b in zip(jnp.concatenate([walk.node[v][None], walk.span_node[v]]),
                        jnp.concatenate([walk.gpu_bits[v][None], walk.span_bits[v]])):
            mask = resources.bits_to_mask(b, g_max)
            held = mask.sum(dtype=jnp.int32)
            share = lambda x: jnp.where(gang, gangs.part_request(x, jobs.num_gpu[v], held), x)  # noqa: E731
            out.append((jnp.maximum(i, 0), mask, share(jobs.cpu_milli[v]), share(jobs.mem_mib[v]), i >= 0))
        return out

    def _take(self, walk: Walk, jobs: Jobs, params: EnvParams, v, active, sign: int) -> Walk:
        """Running job v's parts taken (sign -1) or given back (+1) in the free arrays only."""
        free_milli, free_cpu, free_mem = walk.free_milli, walk.free_cpu, walk.free_mem
        for i, mask, cpu, mem, used in self._parts(walk, jobs, params, v):
            on = active & used
            free_milli = free_milli.at[i].add(sign * jnp.where(mask & on, jobs.gpu_milli[v], 0))
            free_cpu = free_cpu.at[i].add(sign * jnp.where(on, cpu, 0))
            free_mem = free_mem.at[i].add(sign * jnp.where(on, mem, 0))
        return walk.replace(free_milli=free_milli, free_cpu=free_cpu, free_mem=free_mem)

    def _take_all(self, walk: Walk, jobs: Jobs, params: EnvParams, vs, active, sign: int) -> Walk:
        """Running jobs ``vs`` ([V] job ids, ``active`` [V]) all taken (sign -1) or given back
        (+1) at once in the free arrays (integer adds: the order of the jobs does not matter)."""
        def parts(v):
            return [jnp.stack(x) for x in zip(*self._parts(walk, jobs, params, v))]

        node, mask, cpu, mem, used = jax.vmap(parts)(vs)  # [V, P], [V, P, G], [V, P] x 3
        on = active[:, None] & used
        milli = jnp.where(mask & on[..., None], jobs.gpu_milli[vs][:, None, None], 0)
        node = node.reshape(-1)
        return walk.replace(
            free_milli=walk.free_milli.at[node].add(sign * milli.reshape(node.shape[0], -1)),
            free_cpu=walk.free_cpu.at[node].add(sign * jnp.where(on, cpu, 0).reshape(-1)),
            free_mem=walk.free_mem.at[node].add(sign * jnp.where(on, mem, 0).reshape(-1)))

    def _give_back(self, walk: Walk, jobs: Jobs, params: EnvParams, v, active) -> Walk:
        return self._take(walk, jobs, params, v, active, 1)

    def _parts_free(self, walk: Walk, jobs: Jobs, params: EnvParams, v):
        """Every part of running job v (its GPUs, milli-cores, MiB) is free in the walk now."""
        ok = jnp.bool_(True)
        for i, mask, cpu, mem, used in self._parts(walk, jobs, params, v):
            gpus_ok = (~mask | (walk.free_milli[i] >= jobs.gpu_milli[v])).all()
            ok = ok & (~used | (gpus_ok & (walk.free_cpu[i] >= cpu) & (walk.free_mem[i] >= mem)))
        return ok

    def _settled_until(self, state: SimState, walk: Walk):
        """``settled_rounds``: until when the rounds after this one would change nothing
        -> float32 []: -inf when this one placed or preempted a job; else the first time after
        now that a running job's restart cost ends (its priority may step there: its work
        left is read from its clock from then on) or, with the restart guard, its guard
        does (it may then be released in thought); +inf when neither comes. Arrivals and
        completions end it too (``_dynamic_turn``). Why nothing can change before: every
        queued job failed its turn, with every running job after it given back; until then
        no queued job's priority moves and no running job's falls, so each turn of a later
        round has at most the running jobs after it of this round to give back, on the
        same free nodes, and fails again (docs/performance.md, "Settled rounds"). With
        "skipped-by-policy" ``_decide_round`` also caps it at the policy's ``steady_until``: its
        priorities stay what they are until then, so the walk does too."""
        seg, t = state.segments, state.core.time_s
        ends = [seg.run_from_s]
        if self._guarded(state, walk.running) is not None:  # (the guard's end, as ``_guarded``)
            ends.append(seg.run_from_s + self._segment_cost_s(state))
        later = jnp.stack([jnp.where(walk.running & (e > t), e, INF) for e in ends]).min()
        changed = walk.started.any() | walk.preempted.any()
        return jnp.where(changed, -INF, later)

    def _apply_round(self, state: SimState, params: EnvParams, walk: Walk, running0, queued0) -> SimState:
        """Write the walk back: changed nodes through ``_set_node``, the running ring and the
        queue rebuilt, segments closed (preempted) and begun (started), the records."""
        cfg, core, jobs, seg = self.config, state.core, state.jobs, state.segments
        t, num_jobs = core.time_s, jobs.num_jobs

        # Only the nodes whose resources changed are written (in index order).
        num_nodes = params.cluster.num_nodes
        changed = ((walk.free_milli != core.free_milli).any(-1) | (walk.free_cpu != core.free_cpu)
                   | (walk.free_mem != core.free_mem))
        changed_nodes = jnp.nonzero(changed, size=num_nodes, fill_value=0)[0]

        def write_node(i, core):
            n = changed_nodes[i]
            return self._set_node(core, jobs, params, n, walk.free_milli[n] - core.free_milli[n],
                                  core.free_cpu.at[n].set(walk.free_cpu[n]),
                                  core.free_mem.at[n].set(walk.free_mem[n]), jnp.bool_(True))

        core = jax.lax.fori_loop(0, changed.sum(dtype=jnp.int32), write_node, core)

        # Segments: the preempted close now, the started begin now (after their restart cost).
        closing, started = walk.preempted, walk.started
        gpus = job_gpus(jobs)
        restart_closed = jnp.where(
            closing, gpus * jnp.minimum(self._segment_cost_s(state), t - seg.seg_start_s), 0.0)
        remaining = jnp.where(closing & (t >= seg.run_from_s), (state.end_s - t) * seg.seg_speed, seg.remaining_s)
        preemptions = seg.preemptions + closing
        cost = jnp.where(preemptions > 0, self.restart_cost_s(jobs.num_gpu), 0.0)
        run_from = t + cost
        new_end = jnp.where(jobs.num_gpu > 0, run_from + remaining / walk.speed, run_from + remaining)
        stopped = lambda x, new: jnp.where(started, new, jnp.where(closing, INF, x))  # noqa: E731
        end_s = stopped(state.end_s, new_end)
        # The waits after a preemption that end now (the job starts again), for the backlog.
        rewaited = started & jnp.isfinite(seg.waiting_since_s)
        rewait = metrics.backlog_terms(gpus * seg.remaining_s, seg.waiting_since_s, t, core)
        segments = Segments(
            remaining_s=remaining,
            seg_start_s=stopped(seg.seg_start_s, t),
            run_from_s=stopped(seg.run_from_s, run_from),
            seg_speed=jnp.where(started, walk.speed, seg.seg_speed),
            attained_s=jnp.where(closing, seg.attained_s + (t - seg.seg_start_s), seg.attained_s),
            attained_model_s=seg.attained_model_s.at[jnp.arange(num_jobs), anchor_model(state, params.cluster)].add(
                jnp.where(closing, t - seg.seg_start_s, 0.0)),  # (the closing segments' model)
            preemptions=preemptions,
            restart_gpu_s=seg.restart_gpu_s + ordered_sum(restart_closed),
            waiting_since_s=jnp.where(started, INF, jnp.where(closing, t, seg.waiting_since_s)),
            rewait_growth=seg.rewait_growth + ordered_sum(jnp.where(rewaited, rewait, 0.0)),
            policy_model=seg.policy_model,
            policy_share=seg.policy_share,
            attained_at_reset_s=seg.attained_at_reset_s,
            attained_model_at_reset_s=seg.attained_model_at_reset_s,
        )

        # The running ring, sorted by (end, index), and the queue, by index.
        r = cfg.running_capacity
        running = nonzero_indices(walk.running, r, num_jobs)  # by index, [R]
        by_end = running[jnp.argsort(end_s.at[running].get(mode="fill", fill_value=INF), stable=True)]
        in_ring = jnp.arange(r) < walk.num_running
        run_job = jnp.where(in_ring, by_end, -1).astype(jnp.int32)
        queued = (queued0 | running0) & ~walk.running
        q_slots = core.queue.shape[0]
        queue = nonzero_indices(queued, q_slots, -1)  # by index
        core = core.replace(
            run_job=run_job,
            run_end_s=jnp.where(in_ring, end_s[jnp.maximum(run_job, 0)], INF),
            run_head=jnp.int32(0),
            num_running=walk.num_running,
            queue=queue,
            queue_len=queued.sum(dtype=jnp.int32),
            acc=core.acc.replace(decisions=core.acc.decisions + 1,
                                 running_full=core.acc.running_full | walk.full_seen),
            rounds=core.rounds.replace(due=jnp.bool_(False), reset=jnp.bool_(False)),
        )
        if cfg.round_ends_early:  # the round ends when its last running job does (at most round_s)
            core = core.replace(rounds=core.rounds.replace(next_round_s=self._round_end(core, jobs)))
        return state.replace(
            core=core,
            outcome=jnp.where(started, OUTCOME_PLACED, state.outcome),
            node=walk.node, gpu_bits=walk.gpu_bits, span_node=walk.span_node, span_bits=walk.span_bits,
            start_s=jnp.where(started & ~jnp.isfinite(state.start_s), t, state.start_s),
            end_s=end_s,
            segments=segments,
        )
