"""Rescheduling: the periodic migration pass (docs/schedulers.md, "Rescheduling"; the
pass times in docs/semantics.md, "Clock and events").

The event loop stops when a pass is due (``_dynamic_turn``, sim/events.py) and ``_advance``
runs ``_reschedule`` on the whole state, since a move rewrites the moved job's records.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched.sim import frag, resources
from jaxsched.sim.config import INF
from jaxsched.types import GPU_MILLI, Core, EnvParams, Jobs, SimState


class RescheduleMixin:
    """``ClusterEnv``'s rescheduling methods (reads ``self.config``; no fields of its own)."""

    def _reschedule(self, state: SimState, params: EnvParams, active=True) -> SimState:
        """One pass at the current time (when ``active``): up to ``resched_max_moves`` moves,
        then the next pass time."""
        cfg = self.config
        state = jax.lax.fori_loop(0, cfg.resched_max_moves,
                                  lambda _, s: self._migrate_one(s, params, active), state)
        core = state.core
        return state.replace(core=core.replace(
            next_resched_s=core.next_resched_s + jnp.where(active, jnp.float32(cfg.resched_interval_s), 0.0),
            resched_due=jnp.where(active, False, core.resched_due)))

    def _migrate_one(self, state: SimState, params: EnvParams, active=True) -> SimState:
        """Move one running GPU job off an under-allocated node to a more allocated one, if any."""
        cfg, cluster, jobs, core = self.config, params.cluster, state.jobs, state.core
        t, n_nodes = core.time_s, cluster.num_nodes
        big = jnp.iinfo(jnp.int32).max

        # Exact node allocation: used milli * 840 / num_gpus (840 = lcm(1..8)), an int32.
        num_gpus = jnp.where(cluster.valid, cluster.num_gpus, 0)
        used = num_gpus * GPU_MILLI - core.free_milli.sum(-1)
        alloc840 = used * (840 // jnp.maximum(num_gpus, 1))
        source = (num_gpus > 0) & (alloc840.astype(jnp.float32)
                                   < jnp.float32(cfg.resched_util_threshold) * 840000)

        # Candidates: ring entries holding a GPU job on a source node that has a destination.
        rj = jnp.maximum(core.run_job, 0)  # [R]
        src = state.node[rj]
        candidate = (core.run_job >= 0) & (jobs.num_gpu[rj] > 0) & source[src]
        if cfg.gangs:  # a gang never moves
            candidate = candidate & (state.span_node[rj, 0] < 0)
        fit = self._fits_alone(core, jobs, cluster, rj)  # [R, N]: a move takes the job to one node
        dest_ok = (fit & (jnp.arange(n_nodes) != src[:, None])
                   & (alloc840[None, :] > alloc840[src][:, None]))
        if cfg.reserving:  # a reserved node takes no job but its own
            dest_ok = dest_ok & (jnp.arange(n_nodes) != core.resv_node)
        movable = candidate & dest_ok.any(-1)

        # The job: least allocated source node, then longest remaining time, then lowest index.
        src_alloc = jnp.where(movable, alloc840[src], big)
        tier = movable & (src_alloc == src_alloc.min())
        remaining = jnp.where(tier, core.run_end_s - t, -INF)
        tier = tier & (remaining == remaining.max())
        pos = jnp.argmin(jnp.where(tier, rj, big))
        move = movable.any() & active
        j, s = rj[pos], src[pos]
        # Its destination: the most allocated node it fits ("fgd": first the top FGD score);
        # ties by rank.
        tied = dest_ok[pos]
        if cfg.resched_target == "fgd":
            score = jnp.where(tied, self._fgd_node_scores(core, jobs, params, rj[pos]), -1)
            tied = tied & (score == score.max())
        dest_alloc = jnp.where(tied, alloc840, -1)
        tied = tied & (dest_alloc == dest_alloc.max())
        d = jnp.argmin(jnp.where(tied, state.node_rank, big))

        # Release on the source.
        num_gpu, gpu_milli = jobs.num_gpu[j], jobs.gpu_milli[j]
        cpu, mem = jnp.where(move, jobs.cpu_milli[j], 0), jnp.where(move, jobs.mem_mib[j], 0)
        old_gpus = resources.bits_to_mask(state.gpu_bits[j], cluster.max_gpus)
        free_cpu, free_mem = core.free_cpu.at[s].add(cpu), core.free_mem.at[s].add(mem)
        core = self._set_node(core, jobs, params, s, jnp.where(old_gpus & move, gpu_milli, 0), free_cpu,
                              free_mem, move)
        # Take GPUs on the destination by best fit ("fgd": by the GPU rule "fgd").
        free_cpu, free_mem = core.free_cpu.at[d].add(-cpu), core.free_mem.at[d].add(-mem)
        if cfg.resched_target == "fgd":
            gpu_scores = frag.fgd_gpu_scores(core.free_milli[d], core.free_cpu[d], free_cpu[d],
                                             cluster.gpu_model[d], gpu_milli, params.frag_classes)
            new_gpus = resources.choose_gpus(core.free_milli[d], num_gpu, gpu_milli, "fgd", None, gpu_scores,
                                             cluster.num_gpus[d])
        else:
            new_gpus = resources.choose_gpus(core.free_milli[d], num_gpu, gpu_milli, "best-fit")
        core = self._set_node(core, jobs, params, d, -jnp.where(new_gpus & move, gpu_milli, 0), free_cpu,
                              free_mem, move)
        core = self._count_class(core, s, num_gpu, gpu_milli, -move.astype(jnp.int32))
        core = self._count_class(core, d, num_gpu, gpu_milli, move.astype(jnp.int32))
        core = self._resync(core, jobs, cluster, jnp.where(move, s, -1))  # s gained, d lost

        # Pause, then the rest of its work at the destination's speed (its type's); re-sort the ring.
        pause = jnp.float32(cfg.migration_pause_s)
        end = core.run_end_s[pos]
        kind = jobs.job_type[j]
        new_end = (t + pause) + ((end - t) * cluster.type_speed[s, kind]) / cluster.type_speed[d, kind]
        core = self._running_insert(self._running_remove(core, pos, move), j, new_end, move)
        acc = core.acc.replace(
            migrations=core.acc.migrations + move,
            migration_gpu_s=core.acc.migration_gpu_s + jnp.where(
                move, num_gpu.astype(jnp.float32) * gpu_milli.astype(jnp.float32) / GPU_MILLI * pause, 0.0))
        return state.replace(
            core=core.replace(acc=acc),
            node=state.node.at[j].set(jnp.where(move, d, state.node[j])),
            gpu_bits=state.gpu_bits.at[j].set(
                jnp.where(move, resources.mask_to_bits(new_gpus), state.gpu_bits[j])),
            end_s=state.end_s.at[j].set(jnp.where(move, new_end, state.end_s[j])),
        )

    def _fgd_node_scores(self, core: Core, jobs: Jobs, params: EnvParams, j):
        """[N] int32: FGD's score of placing GPU job ``j`` on each node as it is now, as the fgd
        policy scores a node (a fractional job on its best GPU with room, a whole-GPU job on
        the first wholly free GPUs). Meaningless where the job does not fit."""
        cluster, classes, free = params.cluster, params.frag_classes, core.free_milli  # free [N, G]
        num_gpu, milli, g = jobs.num_gpu[j], jobs.gpu_milli[j], free.shape[-1]
        cpu_after = core.free_cpu - jobs.cpu_milli[j]
        before = frag.class_frag(free, core.free_cpu, cluster.gpu_model, classes)  # [N, M]

        def score(after):
            return frag.fgd_score(frag.frag_drop(before, after, classes), 0.0)

        # Fractional: GPU g of each node used, [N, G, G] rows, the best GPU with room.
        rows = free[:, None, :] - jnp.eye(g, dtype=free.dtype) * milli
        per_gpu = frag.fgd_score(frag.frag_drop(before[:, None], frag.class_frag(
            rows, jnp.broadcast_to(cpu_after[:, None], rows.shape[:2]),
            jnp.broadcast_to(cluster.gpu_model[:, None], rows.shape[:2]), classes), classes), 0.0)  # [N, G]
        fractional = jnp.where(cluster.gpu_exists & (free >= milli), per_gpu, -1).max(-1)
        # Whole GPUs: the first num_gpu wholly free GPUs become 0.
        whole = cluster.gpu_exists & (free == GPU_MILLI)
        taken = whole & (jnp.cumsum(whole, -1) <= num_gpu)
        whole_gpus = score(frag.class_frag(jnp.where(taken, 0, free), cpu_after, cluster.gpu_model, classes))
        return jnp.where((num_gpu == 1) & (milli < GPU_MILLI), fractional, whole_gpus).astype(jnp.int32)
