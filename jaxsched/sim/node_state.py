"""A node's state: its free resources, the fit test against them, and what is kept up to
date from them whenever a node changes (``_set_node``): the per-node time integrals, FGD
fragmentation (``EnvConfig.track_frag``), the FGD drop table (``EnvConfig.fgd_table``) and the
job-class counts (``EnvConfig.track_job_classes``).

Fit: docs/semantics.md, "Resources and fit"; fragmentation: "FGD fragmentation of one node";
the drop table's cost: docs/performance.md, "FGD's table scored for the episode's shapes only".
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched.sim import frag, gangs, metrics, resources
from jaxsched.types import GPU_MILLI, Core, EnvParams, Jobs

FGD_TABLE_BLOCK = 8  # drop-table columns scored together (``ClusterEnv._node_drops``)
UNUSED_SHAPE = np.iinfo(np.int32).max  # an fgd table row no job has (unique sorts them last)


class NodeStateMixin:
    """``ClusterEnv``'s per-node methods (reads ``self.config``; no fields of its own)."""

    def _fits(self, core: Core, jobs: Jobs, cluster, j, n=None):
        """Job(s) ``j`` ([...] indices) fit each node now -> [..., N] bool; or fit the one
        node ``n`` when given -> [...] bool. With gangs (``EnvConfig.max_span`` > 1) a job of
        k >= 2 GPUs fits a node that can be its anchor: that depends on every node's
        capacity and on the reservation (docs/semantics.md, "Gang jobs")."""
        if self.config.gangs:
            j = jnp.asarray(j)

            def as_gang():
                closed = self._closed(core, j[..., None], jnp.arange(cluster.num_nodes))
                fit = gangs.fits(cluster, core.free_cpu, core.free_mem, core.max_free, core.whole_free,
                                 *self._request(jobs, j), self.config.max_span, closed,
                                 one_model=self.config.gang_one_model, rule=self.config.gang_rule)
                return fit if n is None else fit[..., n]

            if j.ndim == 0:  # one job: its gang tests only if it could be a gang
                return jax.lax.cond(jobs.num_gpu[j] >= 2, as_gang, lambda: self._fits_alone(core, jobs, cluster, j, n))
            return as_gang()
        return self._fits_alone(core, jobs, cluster, j, n)

    def _request(self, jobs: Jobs, j):
        """(num_gpu, gpu_milli, cpu_milli, mem_mib, model_mask) of job(s) ``j``."""
        return jobs.num_gpu[j], jobs.gpu_milli[j], jobs.cpu_milli[j], jobs.mem_mib[j], jobs.model_mask[j]

    def _fits_alone(self, core: Core, jobs: Jobs, cluster, j, n=None):
        """``_fits`` for the whole job on one node (what a move to a node needs)."""
        free = (core.free_cpu, core.free_mem, core.max_free, core.whole_free)
        if n is not None:
            cluster = jax.tree.map(lambda x: x[n, None], cluster)
            free = tuple(x[n, None] for x in free)
        fit = resources.fits(cluster, *free, *self._request(jobs, j))
        return fit if n is None else fit[..., 0]

    def _node_frag(self, free_row, free_cpu, model, params: EnvParams):
        """FGD fragmentation of one node (or of every node, given [N] rows), or 0 when
        ``track_frag`` is off."""
        if not self.config.track_frag:
            return jnp.zeros(free_row.shape[:-1], jnp.float32)
        return frag.node_frag(free_row, free_cpu, model, params.frag_classes)

    def _set_node(self, core: Core, jobs: Jobs, params: EnvParams, n, milli_delta, free_cpu, free_mem,
                  active):
        """Node n's resources change now (when ``active``): ``milli_delta`` [G] int32 added to
        its free milli per GPU (negative: taken; zero when not ``active``), ``free_cpu`` and
        ``free_mem`` the new [N] arrays. Settles the node's time integrals at its old values,
        refreshes its fragmentation, cached summaries, ``window_fit`` bits (K fit tests) and
        its row of the FGD drop table.

        The free row is read back from the updated array, not handed in: every reader of the
        old ``free_milli`` then feeds its one in-place update, and XLA need not copy [N, G]."""
        cluster = params.cluster
        free_milli = core.free_milli.at[n].add(milli_delta)
        free_row = free_milli[n]
        # Recomputed even when not ``active`` (the same exact value then: ``frag.frag_milli``),
        # so that nothing reads the old ``frag_node``.
        node_frag = self._node_frag(free_row, free_cpu[n], cluster.gpu_model[n], params)
        used_before = metrics.used_milli(cluster.gpu_exists[n], free_row) + milli_delta.sum()
        acc = metrics.settle_node(core.acc, n, core.time_s, core.measure_from_s, core.measure_to_s,
                                  used_before, node_frag, milli_delta.sum(), active)
        max_free, whole_free = resources.node_summary(free_row)
        core = core.replace(
            free_milli=free_milli,
            free_cpu=free_cpu,
            free_mem=free_mem,
            frag_node=core.frag_node.at[n].set(node_frag),
            max_free=core.max_free.at[n].set(max_free),
            whole_free=core.whole_free.at[n].set(whole_free),
            acc=acc,
        )
        if self.config.fgd_table:  # [2S, G, M] work: only for a node that changed (a cond)
            row = jax.lax.cond(active, lambda: self._node_drops(
                core.fgd_shape, free_row, cluster.gpu_exists[n], free_cpu[n], cluster.gpu_model[n], params),
                lambda: core.fgd_drop[n])
            core = core.replace(fgd_drop=core.fgd_drop.at[n].set(row))
        return self._refit(core, jobs, cluster, n)

    def _fgd_table(self, jobs: Jobs, params: EnvParams, free_milli, free_cpu) -> dict:
        """``Core.fgd_shape`` and ``fgd_drop`` at reset (``EnvConfig.fgd_table``): the shapes
        are the first S distinct ones of each kind in sorted order (a sort, at reset only)."""
        s, cluster = self.config.fgd_table, params.cluster
        if not s:
            return {"fgd_shape": jnp.full((1, 3), -1, jnp.int32), "fgd_drop": jnp.zeros((1, 1), jnp.int32)}
        rows = jnp.stack([jobs.num_gpu, jobs.gpu_milli, jobs.cpu_milli], 1)  # [J, 3]
        fractional = (jobs.num_gpu == 1) & (jobs.gpu_milli < GPU_MILLI)
        kinds = [jnp.unique(jnp.where((jobs.valid & is_kind)[:, None], rows, UNUSED_SHAPE), axis=0,
                            size=s, fill_value=UNUSED_SHAPE) for is_kind in (fractional, ~fractional)]
        shape = jnp.concatenate(kinds)  # [2S, 3]; a row of int32 max matches no job
        # Every GPU of a node is free at reset, so one GPU tells a fractional shape's drop.
        drop = jax.vmap(lambda row, exists, cpu, model: self._node_drops(
            shape, row, exists, cpu, model, params, tried=1))(free_milli, cluster.gpu_exists, free_cpu,
                                                              cluster.gpu_model)
        return {"fgd_shape": shape, "fgd_drop": drop}

    def _node_drops(self, shape, free_row, exists, free_cpu, model, params: EnvParams, tried=None):
        """[2S] int32: one node's row of the FGD drop table (``frag.node_drops``).

        Only the shapes the episode has are scored (they come first in each kind), in blocks
        of ``FGD_TABLE_BLOCK``: a loop as long as the episode's distinct shapes need, not the
        table's S; the columns of unused rows stay 0.
        """
        s = self.config.fgd_table
        block = math.gcd(s, FGD_TABLE_BLOCK)

        def kind_row(kind, fractional):  # kind [S, 3] -> [S]
            def score_block(i, row):
                part = jax.lax.dynamic_slice_in_dim(kind, i * block, block)  # [block, 3]
                drops = frag.node_drops(free_row, exists, free_cpu, model, params.frag_classes,
                                        *part.T, fractional, tried if fractional else None)
                return jax.lax.dynamic_update_slice_in_dim(row, drops, i * block, 0)

            used = kind[:, 0] != UNUSED_SHAPE
            row = jax.lax.fori_loop(0, (used.sum() + block - 1) // block, score_block, jnp.zeros(s, jnp.int32))
            return jnp.where(used, row, 0)

        return jnp.concatenate([kind_row(shape[:s], True), kind_row(shape[s:], False)])

    def _class_count_shape(self, cluster) -> tuple:
        """[N, C] with C = "share" plus 1..S*G whole GPUs (a gang of k GPUs counts as class k
        on each of its nodes); a [1, 1] placeholder when not tracking (checkpointers refuse
        zero-size arrays)."""
        if not self.config.track_job_classes:
            return (1, 1)
        return (cluster.num_nodes, self.config.max_span * cluster.max_gpus + 1)

    def _count_class(self, core: Core, n, num_gpu, gpu_milli, delta):
        """Add ``delta`` (int32) jobs of the (num_gpu, gpu_milli) class to node n's counts."""
        if not self.config.track_job_classes:
            return core
        share = (num_gpu == 1) & (gpu_milli < GPU_MILLI)
        c = jnp.where(share, 0, num_gpu)
        delta = jnp.where(num_gpu > 0, delta, 0)  # CPU-only jobs have no class
        return core.replace(class_count=core.class_count.at[n, c].add(delta))

    def _node_class_jobs(self, core: Core, cluster):
        """[N, C] int32 jobs of each class on each node ([N, 1] zeros when not tracking)."""
        if not self.config.track_job_classes:
            return jnp.zeros((cluster.num_nodes, 1), jnp.int32)
        return core.class_count
