"""The queue and the window: the queued jobs in queue order, and the K the policy sees.

The window is defined in docs/semantics.md ("Clock and events", the paragraph "The
window"); how it is kept without testing every queued job at every event (parked jobs,
``scan_pos``) is this module's matter, explained at ``WindowMixin``. The reservation closes
nodes to window jobs (``_closed``; sim/reservation.py makes and ends it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched.sim import resources
from jaxsched.sim.config import INF
from jaxsched.sim.shift import put, shift_down, shift_up
from jaxsched.sim.when_due import when_due
from jaxsched.types import Core, Jobs

WINDOW_FIELDS = ("win_job", "win_pos", "win_len", "scan_pos", "window_fit")  # what the window loops change


class WindowMixin:
    """``ClusterEnv``'s queue and window methods (reads ``self.config``; no fields of its own)."""

    # The queue holds every queued job in queue order; the window is the first K of them
    # that fit some node now (``backfill``), or the first K (strict). It is kept
    # incrementally: queue positions < ``scan_pos`` have been examined, and each examined
    # job is in the window or *parked* (it fits no node now). Resources that shrink can only
    # push window jobs out (``_prune``); resources that grow on node n can only bring parked
    # jobs back, and only through n (``_rescan``); the window then takes unexamined jobs
    # until it is full (``_refill``). So a job that fits nowhere costs one fit test per
    # completion on a node, not one per node and event, and none once it is behind K
    # fitting jobs.
    def _window(self, core: Core):
        """[K] job indices of the window slots, -1 for empty slots."""
        k = self.config.window
        if self.config.static:  # one job at a time, at queue position 0
            return jnp.where(jnp.arange(k) < core.queue_len, core.queue[:k], -1)
        return core.win_job  # (not queue[win_pos]: reading the queue in every event makes
        # XLA copy it before the arrival's in-place write, O(Q) per event)

    def _closed(self, core: Core, j, n):
        """Node(s) ``n`` are closed to job(s) ``j`` by the reservation (broadcasts)."""
        if not self.config.reserving:
            return jnp.zeros(jnp.broadcast_shapes(jnp.shape(j), jnp.shape(n)), bool)
        return (core.resv_node >= 0) & (n == core.resv_node) & (j != core.resv_job)

    def _fit_row(self, core: Core, jobs: Jobs, cluster, j):
        """[N] bool: job j fits node n now and the reservation allows it there."""
        return self._fits(core, jobs, cluster, j) & ~self._closed(core, j, jnp.arange(cluster.num_nodes))

    def _admits(self, row):
        """A job with fit ``row`` [N] belongs in the window: it fits somewhere (always, strict)."""
        return row.any() if self.config.backfill else jnp.bool_(True)

    def _column(self, core: Core, jobs: Jobs, cluster, n, alone=False):
        """int32 ``window_fit`` bits of node n: which window jobs fit it (and may use it).
        ``alone``: as jobs that run on one node (exact for every job of fewer than 2 GPUs)."""
        window = self._window(core)
        j = jnp.maximum(window, 0)
        fits = self._fits_alone if alone else self._fits
        column = fits(core, jobs, cluster, j, n) & (window >= 0) & ~self._closed(core, window, n)
        return resources.mask_to_bits(column)

    def _refit(self, core: Core, jobs: Jobs, cluster, n, active=True):
        """``window_fit`` after node n's resources or closure changed (when ``active``): node
        n's bits; with gangs every node's while a window job has 2 GPUs or more, since whether
        a gang fits with one node as its anchor depends on the others' capacity ([K, N] fit
        tests, skipped while no window job could be a gang: ``when_due``)."""
        column = self._column(core, jobs, cluster, n, alone=True)
        core = core.replace(window_fit=core.window_fit.at[n].set(jnp.where(active, column, core.window_fit[n])))
        if not self.config.gangs:
            return core

        window = self._window(core)
        gang_in_window = active & ((window >= 0) & (jobs.num_gpu[jnp.maximum(window, 0)] >= 2)).any()

        def every_node(carry, cluster):  # (the batched inputs go through the carry: when_due)
            core, jobs, due = carry
            window = self._window(core)
            fit = self._fits(core, jobs, cluster, jnp.maximum(window, 0)) & (window >= 0)[:, None]
            fit = fit & ~self._closed(core, window[:, None], jnp.arange(cluster.num_nodes))
            return core.replace(window_fit=jnp.where(due, resources.mask_to_bits(fit.T), core.window_fit)), jobs, due

        return when_due(lambda carry: carry[2], every_node, (core, jobs, gang_in_window), cluster)[0]

    def _win_insert(self, core: Core, s, pos, j, row, active):
        """Put job j at queue position ``pos`` (fit ``row`` [N]) into window slot s < K when
        ``active``; later slots move one on. A full window's last job leaves it, and from its
        position on the queue counts as unexamined again."""
        k = self.config.window
        slots = jnp.arange(k)
        insert = lambda arr, x: jnp.where(slots < s, arr, jnp.where(slots == s, x, jnp.roll(arr, 1)))  # noqa: E731
        moved = insert(core.win_pos, pos)
        bits, below = core.window_fit, (1 << s) - 1
        bits = ((bits & below) | (row.astype(jnp.int32) << s) | ((bits & ~below) << 1)) & ((1 << k) - 1)
        full = core.win_len >= k
        return core.replace(
            win_job=jnp.where(active, insert(core.win_job, j), core.win_job),
            win_pos=jnp.where(active, moved, core.win_pos),
            window_fit=jnp.where(active, bits, core.window_fit),
            win_len=core.win_len + (active & ~full),
            scan_pos=jnp.where(active & full, core.win_pos[k - 1], core.scan_pos))

    def _win_remove(self, core: Core, s, active):
        """Take window slot s out of the window when ``active``; later slots move one back."""
        k, q = self.config.window, core.queue.shape[0]
        slots = jnp.arange(k)
        remove = lambda arr, last: jnp.where(slots < s, arr, jnp.where(slots == k - 1, last, jnp.roll(arr, -1)))  # noqa: E731
        bits, below = core.window_fit, (1 << s) - 1
        return core.replace(
            win_job=jnp.where(active, remove(core.win_job, -1), core.win_job),
            win_pos=jnp.where(active, remove(core.win_pos, q), core.win_pos),
            window_fit=jnp.where(active, (bits & below) | ((bits >> 1) & ~below), bits),
            win_len=core.win_len - active)

    def _leave_window(self, core: Core, slot, active):
        """Window slot ``slot``'s job leaves the queue (placed or rejected) when ``active``."""
        pos = slot if self.config.static else core.win_pos[slot]
        live = jnp.arange(self.config.window) < core.win_len
        end = jnp.where(active, core.queue_len, pos)  # the jobs behind pos move one ahead
        queue, key = shift_down(core.queue, pos, end, -1), shift_down(core.queue_key, pos, end, INF)
        core = core.replace(
            queue=queue, queue_key=key,
            queue_len=core.queue_len - active,
            win_pos=jnp.where(active & live & (core.win_pos > pos), core.win_pos - 1, core.win_pos),
            scan_pos=core.scan_pos - (active & (pos < core.scan_pos)))
        return self._win_remove(core, slot, active)

    def _queue_insert(self, core: Core, jobs: Jobs, cluster, j, key, active):
        """Insert job ``j`` after every queued job with sort key <= ``key`` when ``active``.

        FIFO keys grow with every arrival, so FIFO appends in O(1); other orders shift O(Q).
        The job is examined (N fit tests) when it lands among the examined positions or the
        window has room: it joins the window if it fits somewhere, else it is parked.
        """
        k = self.config.window
        pos = self._queue_position(core, key)
        if self.config.queue_order == "fifo":
            core = core.replace(queue=put(core.queue, pos, j, active),
                                queue_key=put(core.queue_key, pos, key, active),
                                queue_len=core.queue_len + active)
        else:
            end = jnp.where(active, core.queue_len, pos)  # the jobs from pos on move one back
            insert = lambda arr, x: put(shift_up(arr, pos, end), pos, x, active)  # noqa: E731
            core = core.replace(queue=insert(core.queue, j), queue_key=insert(core.queue_key, key),
                                queue_len=core.queue_len + active)
            live = jnp.arange(k) < core.win_len
            core = core.replace(win_pos=jnp.where(active & live & (core.win_pos >= pos),
                                                  core.win_pos + 1, core.win_pos))
        examine = active & ((pos < core.scan_pos) | (core.win_len < k))
        core = core.replace(scan_pos=core.scan_pos + examine)
        row = self._fit_row(core, jobs, cluster, j)
        s = ((jnp.arange(k) < core.win_len) & (core.win_pos < pos)).sum(dtype=jnp.int32)
        join = examine & self._admits(row)
        # Fitting, but behind K window jobs: from here on the queue is unexamined.
        core = core.replace(scan_pos=jnp.where(join & (s >= k), pos, core.scan_pos))
        return self._win_insert(core, jnp.minimum(s, k - 1), pos, j, row, join & (s < k))

    def _window_loop(self, core: Core, cond, body, extra=()):
        """``lax.while_loop`` that carries only the window's fields (and ``extra``), every other
        field of ``core`` read-only: a loop copies what it carries, and the queue is [Q].
        cond(core, extra) -> bool; body(core, extra) -> (core, extra)."""
        def unpack(carry):
            fields, extra = carry
            return core.replace(**dict(zip(WINDOW_FIELDS, fields))), extra

        def pack(core, extra):
            return tuple(getattr(core, f) for f in WINDOW_FIELDS), extra

        fields, extra = jax.lax.while_loop(lambda c: cond(*unpack(c)), lambda c: pack(*body(*unpack(c))),
                                           pack(core, extra))
        return core.replace(**dict(zip(WINDOW_FIELDS, fields))), extra

    def _prune(self, core: Core):
        """Park every window job that fits no node any more (after resources shrank)."""
        k = self.config.window

        def unfit(core):  # bit s: window slot s holds a job that fits nowhere
            fit_any = jax.lax.reduce(core.window_fit, np.int32(0), jax.lax.bitwise_or, (0,))
            return ~fit_any & ((1 << core.win_len) - 1)

        def park_first(core, extra):
            bits = unfit(core)
            first = jax.lax.population_count((bits & -bits) - 1)  # lowest set bit
            return self._win_remove(core, jnp.minimum(first, k - 1), jnp.bool_(True)), extra

        return self._window_loop(core, lambda c, _: unfit(c) != 0, park_first)[0]

    def _rescan(self, core: Core, jobs: Jobs, cluster, n, active=True):
        """Bring back, in queue order, the parked jobs that fit node n now (after node n
        gained resources, when ``active``): one fit test on n per parked job, N for each one
        that joins (under the "helios" gang rule, N per parked job: a gang's plan may start on
        another node than n). Stops at the last parked job or once K window jobs are passed."""
        k = self.config.window

        def cond(core, at):
            i, s = at
            parked_left = (core.scan_pos - i) - (core.win_len - s)
            return active & (i < core.scan_pos) & (s < k) & (parked_left > 0)

        def body(core, at):
            i, s = at
            member = (s < core.win_len) & (core.win_pos[jnp.minimum(s, k - 1)] == i)
            j = core.queue[i]
            if self.config.gang_rule == "helios":  # Helios's plan starts where it will, not at n
                back = ~member & self._fit_row(core, jobs, cluster, j).any()
            else:  # a job that fits nowhere before n gained and somewhere after fits n
                back = ~member & self._fits(core, jobs, cluster, j, n) & ~self._closed(core, j, n)
            row = jax.lax.cond(back, lambda: self._fit_row(core, jobs, cluster, j),
                               lambda: jnp.zeros(cluster.num_nodes, bool))
            return self._win_insert(core, s, i, j, row, back), (i + 1, s + (member | back))

        core, (i, s) = self._window_loop(core, cond, body, (jnp.int32(0), jnp.int32(0)))
        # K window jobs passed: the parked jobs behind them were not tested on n, so from
        # there on the queue counts as unexamined.
        return core.replace(scan_pos=jnp.where(s >= k, jnp.minimum(core.scan_pos, i), core.scan_pos))

    def _refill(self, core: Core, jobs: Jobs, cluster):
        """Examine unexamined jobs in queue order until the window is full or none is left."""
        def examine(core, extra):
            pos = core.scan_pos
            j = core.queue[pos]
            row = self._fit_row(core, jobs, cluster, j)
            core = core.replace(scan_pos=pos + 1)
            return self._win_insert(core, core.win_len, pos, j, row, self._admits(row)), extra

        return self._window_loop(
            core, lambda c, _: (c.win_len < self.config.window) & (c.scan_pos < c.queue_len), examine)[0]

    def _resync(self, core: Core, jobs: Jobs, cluster, gained=-1):
        """Restore the window after resources changed: park what fits nowhere, bring back
        what fits node ``gained`` (the one node whose resources grew; -1: none), fill up."""
        if self.config.static:
            return core
        if self.config.backfill:
            core = self._prune(core)
            if not (isinstance(gained, int) and gained < 0):  # no node gained: nothing to bring back
                core = self._rescan(core, jobs, cluster, jnp.maximum(gained, 0), gained >= 0)
        return self._refill(core, jobs, cluster)

    def _window_fit_mask(self, core: Core):
        """[K, N] bool: window slot k's job fits node n (``window_fit`` unpacked)."""
        slots = jnp.arange(self.config.window, dtype=jnp.int32)[:, None]
        return (core.window_fit[None, :] >> slots) & 1 == 1

    def _queue_position(self, core: Core, key):
        """Queue position a job with sort key ``key`` is inserted at (after equal keys)."""
        if self.config.queue_order == "fifo":
            return core.queue_len
        i = jnp.arange(core.queue.shape[0])
        return ((i < core.queue_len) & (core.queue_key <= key)).sum()

    def _queue_key(self, jobs: Jobs, j):
        order = self.config.queue_order
        if order == "fifo":
            return j.astype(jnp.float32)
        return jobs.work_s[j] if order == "sjf" else jobs.deadline_s[j]
