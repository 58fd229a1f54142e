"""The reservation: the starvation guard of backfilling (docs/semantics.md, "Reservation").

When the oldest parked job has waited ``reserve_after_s``, the event loop stops at the
boundary (``_reservation_due``, checked in ``_check_stop``, sim/events.py); ``_reserve`` then
gives that job the node where it can start soonest (``_soonest_node``), closing the node to
every other job (``WindowMixin._closed``) until the job leaves the queue (``_end_reservation``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched.sim import gangs, resources
from jaxsched.types import GPU_MILLI, Core, EnvParams, Jobs, SimState


class ReservationMixin:
    """``ClusterEnv``'s reservation methods (reads ``self.config``; no fields of its own)."""

    def _reservation_due(self, state: SimState, core: Core, boundary):
        """At a boundary, without a reservation: has the oldest parked job waited
        ``reserve_after_s``? -> (due, that job). A few comparisons (FIFO): it runs at every
        stop check, and the reservation itself is made outside the event loop (``_reserve``)."""
        cfg, jobs = self.config, state.jobs
        k, q = cfg.window, core.queue.shape[0]
        slots = jnp.arange(k)
        live = slots < core.win_len
        # Parked jobs lie ahead of the window's last job (anywhere, when it is not full).
        ahead = jnp.where(core.win_len >= k, core.win_pos[k - 1], core.queue_len)
        if cfg.queue_order == "fifo":  # queue order is age: the first position not in the window
            pos = (live & (core.win_pos == slots)).sum(dtype=jnp.int32)
        else:
            i = jnp.arange(q)
            member = ((core.win_pos[None, :] == i[:, None]) & live[None, :]).any(-1)
            parked = (i < ahead) & ~member
            oldest = jnp.argmin(jnp.where(parked, core.queue, jnp.iinfo(jnp.int32).max)).astype(jnp.int32)
            pos = jnp.where(parked.any(), oldest, q)
        j = jnp.maximum(core.queue[jnp.minimum(pos, q - 1)], 0)
        due = (boundary & (core.resv_job < 0) & (pos < ahead)
               & (core.time_s - jobs.arrival_s[j] >= jnp.float32(cfg.reserve_after_s)))
        return due, j

    def _reserve(self, state: SimState, params: EnvParams, active=True) -> SimState:
        """Make the reservation that stopped the event loop (``core.resv_due``, when
        ``active``): the oldest parked job gets the node where it can start soonest, and that
        node closes to every other job."""
        jobs, cluster, core = state.jobs, params.cluster, state.core
        due, j = self._reservation_due(state, core, active & core.resv_due)
        node = self._soonest_node(state, core, params, j, due)
        made = node >= 0
        core = core.replace(resv_job=jnp.where(made, j, core.resv_job),
                            resv_node=jnp.where(made, node, core.resv_node),
                            resv_due=core.resv_due & ~active,
                            acc=core.acc.replace(reservations=core.acc.reservations + made))
        core = self._refit(core, jobs, cluster, jnp.maximum(node, 0), made)
        return state.replace(core=self._resync(core, jobs, cluster))

    def _soonest_node(self, state: SimState, core: Core, params: EnvParams, j, active=True):
        """The node where job j fits at the earliest time if the running jobs end as scheduled
        and nothing else is placed: running jobs release their resources in end order, all
        those with one end time at once, until j fits some node; among those, the lowest
        rank. -1 if it never does (it always does for a schedulable job), or not ``active``."""
        jobs, cluster = state.jobs, params.cluster
        r, g = core.run_job.shape[0], cluster.max_gpus
        big = jnp.iinfo(jnp.int32).max

        def cond(carry):
            i, _, _, _, node = carry
            return active & (i < core.num_running) & (node < 0)

        def body(carry):
            i, free_milli, free_cpu, free_mem, _ = carry
            at = (core.run_head + i) % r
            jr = jnp.maximum(core.run_job[at], 0)
            n = state.node[jr]
            back = jnp.where(resources.bits_to_mask(state.gpu_bits[jr], g), jobs.gpu_milli[jr], 0)
            free_milli = free_milli.at[n].add(back)
            if self.config.gangs:  # a gang's anchor holds its share; the other parts come back too
                gang = state.span_node[jr, 0] >= 0
                share = gangs.part_request(jnp.stack([jobs.cpu_milli[jr], jobs.mem_mib[jr]]), jobs.num_gpu[jr],
                                           jax.lax.population_count(state.gpu_bits[jr]))
                free_cpu = free_cpu.at[n].add(jnp.where(gang, share[0], jobs.cpu_milli[jr]))
                free_mem = free_mem.at[n].add(jnp.where(gang, share[1], jobs.mem_mib[jr]))
            else:
                free_cpu = free_cpu.at[n].add(jobs.cpu_milli[jr])
                free_mem = free_mem.at[n].add(jobs.mem_mib[jr])
            if self.config.gangs:
                for node, bits in zip(state.span_node[jr], state.span_bits[jr]):
                    part = gangs.part_request(jnp.stack([jobs.cpu_milli[jr], jobs.mem_mib[jr]]),
                                              jobs.num_gpu[jr], jax.lax.population_count(bits))
                    i_node, used = jnp.maximum(node, 0), node >= 0
                    free_milli = free_milli.at[i_node].add(
                        jnp.where(resources.bits_to_mask(bits, g) & used, GPU_MILLI, 0))
                    free_cpu = free_cpu.at[i_node].add(jnp.where(used, part[0], 0))
                    free_mem = free_mem.at[i_node].add(jnp.where(used, part[1], 0))
            group_ends = (i + 1 >= core.num_running) | (core.run_end_s[(at + 1) % r] > core.run_end_s[at])
            max_free, whole_free = resources.node_summary(free_milli)
            fit = gangs.fits(cluster, free_cpu, free_mem, max_free, whole_free, *self._request(jobs, j),
                             self.config.max_span, one_model=self.config.gang_one_model,
                             rule=self.config.gang_rule) & group_ends
            node = jnp.where(fit.any(), jnp.argmin(jnp.where(fit, state.node_rank, big)), -1)
            return i + 1, free_milli, free_cpu, free_mem, node.astype(jnp.int32)

        # Under a cond: the loop works on a copy of the free resources ([N, G] and more), made
        # only when a reservation is due, not at every event loop exit that checks for one.
        init = lambda: (jnp.int32(0), core.free_milli, core.free_cpu, core.free_mem, jnp.int32(-1))  # noqa: E731
        return jax.lax.cond(active, lambda: jax.lax.while_loop(cond, body, init())[-1], lambda: jnp.int32(-1))

    def _end_reservation(self, core: Core, jobs: Jobs, cluster, j, leave):
        """Job j leaves the queue (when ``leave``): if it held the reservation, the reservation
        ends and its node opens to everyone. -> (core, the reopened node or -1)."""
        if not self.config.reserving:
            return core, jnp.int32(-1)
        ended = leave & (j == core.resv_job)
        r = jnp.maximum(core.resv_node, 0)
        core = core.replace(resv_job=jnp.where(ended, -1, core.resv_job),
                            resv_node=jnp.where(ended, -1, core.resv_node))
        core = self._refit(core, jobs, cluster, r, ended)
        return core, jnp.where(ended, r, -1)
