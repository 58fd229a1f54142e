"""Gang jobs: a job of k >= 2 whole GPUs that may run on up to S nodes at once
(``EnvConfig.max_span``; docs/semantics.md, "Gang jobs").

Pure functions over node arrays [N] and job fields [...] (any leading shape, e.g. [K]):
how many GPUs each node can give a job (``caps``), whether it fits with a node as its
anchor (``anchor_fits``), and which nodes and how many GPUs on each a placement takes
(``parts``). The env calls them only when S > 1, so one-node clusters of jobs run the
code they always ran.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxsched.cluster import MODEL_NAMES
from jaxsched.sim import resources
from jaxsched.sim.when_due import when_due
from jaxsched.types import GPU_MILLI, MAX_GPUS_PER_NODE, Cluster, Core, Jobs

GANG_RULES = ("consolidate", "spread", "helios")


def part_request(request, num_gpu, gpus):
    """int32: a part's share of a job's CPU or memory ``request`` for ``gpus`` of its
    ``num_gpu`` GPUs, rounded up (the whole request for gpus == num_gpu)."""
    return (request * gpus + num_gpu - 1) // jnp.maximum(num_gpu, 1)


def caps(cluster: Cluster, free_cpu, free_mem, whole_free, num_gpu, cpu_milli, mem_mib, model_mask,
         closed=False):
    """[..., N] int32: cap(j, i), the most whole GPUs node i can give job j now: the largest
    g <= whole_free[i] whose part (``part_request``) fits the node's free CPU and memory;
    0 on padding nodes, nodes of a model the job does not allow, and ``closed`` ([..., N]
    bool) ones. Node arrays [N], job fields [...]."""
    job = lambda x: jnp.asarray(x)[..., None, None]  # noqa: E731 - over nodes and part sizes
    g = jnp.arange(1, cluster.max_gpus + 1)  # [G] part sizes
    k = job(num_gpu)
    part_fits = ((part_request(job(cpu_milli), k, g) <= free_cpu[:, None])
                 & (part_request(job(mem_mib), k, g) <= free_mem[:, None])
                 & (g <= whole_free[:, None]))  # [..., N, G], monotone in g
    cap = part_fits.sum(-1, dtype=jnp.int32)
    model_ok = (jnp.asarray(model_mask)[..., None] >> cluster.gpu_model) & 1 == 1
    return jnp.where(cluster.valid & model_ok & ~jnp.asarray(closed), cap, 0)


def fits(cluster: Cluster, free_cpu, free_mem, max_free, whole_free, num_gpu, gpu_milli, cpu_milli,
         mem_mib, model_mask, span: int, closed=False, one_model: bool = False, rule: str = "consolidate"):
    """[..., N] bool: ``resources.fits`` with gangs of up to ``span`` nodes: a job of k >= 2
    whole GPUs fits node n when n can be its anchor (``anchor_fits``, capacity net of the
    ``closed`` [..., N] nodes; with ``one_model``, of the nodes of n's GPU model only:
    ``anchor_fits_one_model``); other jobs as ``resources.fits`` says. Under the "helios"
    ``rule`` a job of more GPUs than a node has fits its plan's first node only
    (``helios_plan``), and a smaller one on one node only."""
    alone = resources.fits(cluster, free_cpu, free_mem, max_free, whole_free, num_gpu, gpu_milli,
                           cpu_milli, mem_mib, model_mask)
    if span == 1:
        return alone
    cap = caps(cluster, free_cpu, free_mem, whole_free, num_gpu, cpu_milli, mem_mib, model_mask, closed)
    if rule == "helios":
        per_node = node_gpus(cluster)
        ok, first, _, _, _, _ = helios_plan(cap, num_gpu, per_node, span)
        as_gang = ok[..., None] & (jnp.arange(cap.shape[-1]) == first[..., None])
        return jnp.where((jnp.asarray(num_gpu) > per_node)[..., None], as_gang, alone)
    as_gang = anchor_fits_one_model(cluster, cap, num_gpu, span) if one_model else anchor_fits(cap, num_gpu, span)
    return jnp.where((jnp.asarray(num_gpu) >= 2)[..., None], as_gang, alone)


def fits_when_empty(cluster: Cluster, num_gpu, gpu_milli, cpu_milli, mem_mib, model_mask, span: int,
                    one_model: bool = False, rule: str = "consolidate"):
    """[..., N] bool: ``fits`` on the *empty* cluster (every GPU, CPU and MiB free). Job fields [...]."""
    free_milli = jnp.where(cluster.gpu_exists, GPU_MILLI, 0).astype(jnp.int32)
    max_free, whole_free = resources.node_summary(free_milli)
    free_cpu = jnp.where(cluster.valid, cluster.cpu_milli, 0)
    free_mem = jnp.where(cluster.valid, cluster.mem_mib, 0)
    return fits(cluster, free_cpu, free_mem, max_free, whole_free, num_gpu, gpu_milli, cpu_milli, mem_mib,
                model_mask, span, one_model=one_model, rule=rule)


def never_fits(cluster: Cluster, jobs: Jobs, span: int, one_model: bool = False, rule: str = "consolidate"):
    """[J] bool: the job fits no node (or, a gang, no set of up to ``span`` nodes) of the
    *empty* cluster: it fails at its arrival (``EnvConfig.max_span``, ``gang_one_model``,
    ``gang_rule``)."""
    return ~fits_when_empty(cluster, jobs.num_gpu, jobs.gpu_milli, jobs.cpu_milli, jobs.mem_mib, jobs.model_mask,
                            span, one_model, rule).any(-1)


def node_gpus(cluster: Cluster):
    """[] int32 G: the most GPUs one node of the cluster has (Helios's nodes all have 8)."""
    return jnp.where(cluster.valid, cluster.num_gpus, 0).max().astype(jnp.int32)


def helios_plan(cap, num_gpu, per_node, span: int):
    """Helios's consolidating placer (HeliosArtifact, ``placer/consolidate.py``) for a job of
    k > G GPUs, G = ``per_node`` (docs/semantics.md, "Gang jobs"): q = k // G nodes the job
    can take whole (cap = G), the first q by index, and, when r = k % G > 0, r GPUs on the
    next node by (cap descending, index): another whole node if one is left, else the
    fullest other. cap [..., N] (``caps``), num_gpu [...] ->
    (ok [...], first [...] the first whole node, in_q [..., N] the q whole nodes, rem [...]
    the remainder's node, q [...], r [...]); ok: q whole nodes exist, the remainder's node
    has r, and q + (r > 0) <= span."""
    n_nodes = cap.shape[-1]
    idx = jnp.arange(n_nodes)
    k = jnp.asarray(num_gpu)[..., None]
    some = jnp.maximum(per_node, 1)  # (a cluster without GPUs: no plan)
    q, r = k // some, k % some  # [..., 1]
    whole = cap >= per_node
    in_q = whole & (jnp.cumsum(whole, -1) <= q)
    key = jnp.where(~in_q & (cap >= 1), cap * n_nodes + (n_nodes - 1 - idx), -1)
    rem = jnp.argmax(key, -1)
    rem_cap = jnp.where(key.max(-1) >= 0, jnp.take_along_axis(cap, rem[..., None], -1)[..., 0], 0)
    ok = (per_node > 0) & (whole.sum(-1) >= q[..., 0]) & ((r[..., 0] == 0) | (rem_cap >= r[..., 0])) & (
        q[..., 0] + (r[..., 0] > 0) <= span)
    return ok, jnp.argmax(whole, -1), in_q, rem, q[..., 0], r[..., 0]


def _top_sums(cap, span: int):
    """(sum of the ``span`` largest caps, sum of the span - 1 largest), each [..., 1]."""
    top = jax.lax.top_k(cap, min(span, cap.shape[-1]))[0]
    top_s = top.sum(-1, keepdims=True)
    return top_s, top_s - (top[..., -1:] if span <= cap.shape[-1] else 0)


def anchor_fits(cap, num_gpu, span: int):
    """[..., N] bool: the job fits with node n as its anchor: cap_n >= 1 and the anchor
    with the span - 1 other nodes of the most capacity hold k GPUs, i.e.
    min(cap_n + top_(S-1), top_S) >= k (top_m: the m largest caps summed; if n is among
    the S - 1 largest, its others' top S - 1 sum to top_S - cap_n). cap [..., N] (``caps``),
    num_gpu [...]."""
    top_s, top_s1 = _top_sums(cap, span)
    return (cap >= 1) & (jnp.minimum(cap + top_s1, top_s) >= jnp.asarray(num_gpu)[..., None])


def anchor_fits_one_model(cluster: Cluster, cap, num_gpu, span: int):
    """[..., N] bool: ``anchor_fits`` with the gang held to nodes of its anchor's GPU model
    (``EnvConfig.gang_one_model``, as Gavel gives a job one worker type): the test on the caps
    of each model's nodes alone ([..., M, N], M = every model id), read at each node's model."""
    on = cluster.gpu_model[None, :] == jnp.arange(len(MODEL_NAMES))[:, None]  # [M, N]
    ok = anchor_fits(jnp.where(on, jnp.asarray(cap)[..., None, :], 0), jnp.asarray(num_gpu)[..., None], span)
    return (ok & on).any(-2)


def fits_each_model_when_empty(cluster: Cluster, jobs: Jobs, span: int, j=None):
    """[J, M] bool (M = every model id): the job fits the empty cluster on nodes of model m
    alone (``fits_when_empty`` with the gang held to its anchor's model, at m's nodes); or
    [M] for job ``j`` alone (a round policy that reads one job's row at a time: J rows cost
    J x M x N every call)."""
    pick = (lambda x: x) if j is None else (lambda x: x[j])  # noqa: E731
    ok = fits_when_empty(cluster, pick(jobs.num_gpu), pick(jobs.gpu_milli), pick(jobs.cpu_milli),
                         pick(jobs.mem_mib), pick(jobs.model_mask), span, one_model=True)  # [..., N]
    on = cluster.gpu_model[None, :] == jnp.arange(len(MODEL_NAMES))[:, None]  # [M, N]
    return (ok[..., None, :] & on).any(-1)


def same_model_caps(cluster: Cluster, cap, anchor):
    """[N] int32: ``cap`` (one job's) with the nodes of another GPU model than ``anchor``'s
    at 0: the candidates of a gang held to one model (``EnvConfig.gang_one_model``)."""
    return jnp.where(cluster.gpu_model == cluster.gpu_model[anchor], cap, 0)


def parts(cap, anchor, num_gpu, node_rank, span: int, rule: str, per_node=None):
    """The nodes of one gang and the GPUs each takes -> (node [S] int32, gpus [S] int32).

    cap [N] (one job's ``caps``), anchor the policy's node, node_rank [N] the tie-break rank
    (a permutation of 0..N-1). Slot 0 is the anchor, then the other nodes with cap >= 1 by
    cap (largest first), then rank. "consolidate" fills them in that order; "spread" hands
    out one GPU per node and pass. Unused slots: node -1, 0 GPUs. Assumes the job fits with
    this anchor (``anchor_fits``). "helios" (``per_node`` G given): ``helios_plan``'s q whole
    nodes by index, G GPUs each, then its remainder's node (the anchor is the first)."""
    n_nodes = cap.shape[-1]
    if rule == "helios":
        _, _, in_q, rem, q, r = helios_plan(cap, num_gpu, per_node, span)
        order = jnp.argsort(jnp.where(in_q, jnp.arange(n_nodes), n_nodes + jnp.arange(n_nodes)))
        order = jnp.pad(order, (0, max(0, span - n_nodes)), constant_values=-1)[:span]
        slot = jnp.arange(span)
        last = (slot == q) & (r > 0)
        node = jnp.where(slot < q, order, jnp.where(last, rem, -1))
        gpus = jnp.where(slot < q, per_node, jnp.where(last, r, 0))
        return node.astype(jnp.int32), gpus.astype(jnp.int32)
    others = (cap >= 1) & (jnp.arange(n_nodes) != anchor)
    key = jnp.where(others, cap * n_nodes + (n_nodes - 1 - node_rank), -1)  # cap, then low rank
    key, order = jax.lax.top_k(key, min(span - 1, n_nodes))
    node = jnp.concatenate([jnp.asarray(anchor, jnp.int32)[None], jnp.where(key >= 0, order, -1)])
    c = jnp.concatenate([cap[anchor][None], jnp.where(key >= 0, cap[order], 0)])  # [S'] caps in order
    if rule == "consolidate":
        gpus = jnp.clip(num_gpu - (jnp.cumsum(c) - c), 0, c)
    elif rule == "spread":
        gpus = _round_robin(c, num_gpu)
    else:
        raise ValueError(f"unknown gang_rule {rule!r}; known: {GANG_RULES}")
    pad = span - node.shape[0]  # span > N: pad to S slots
    node = jnp.pad(jnp.where(gpus > 0, node, -1), (0, pad), constant_values=-1)
    return node.astype(jnp.int32), jnp.pad(gpus, (0, pad)).astype(jnp.int32)


def _round_robin(cap, num_gpu):
    """[S] int32: GPUs per node when passes over the nodes (in order) give one GPU to each
    node with room until ``num_gpu`` are given: after pass L node i has min(cap_i, L); in
    the last pass only the first nodes with cap_i >= L get theirs."""
    levels = jnp.arange(1, MAX_GPUS_PER_NODE + 1)  # passes 1..G
    given = jnp.minimum(cap[None, :], levels[:, None]).sum(-1)  # [G] after each pass
    last = 1 + (given < num_gpu).sum()  # the pass that gives the last GPU
    base = jnp.minimum(cap, last - 1)
    in_last = cap >= last
    return base + (in_last & (jnp.cumsum(in_last) <= num_gpu - base.sum()))


class GangMixin:
    """``ClusterEnv``'s gang placement and release (reads ``self.config``; no fields of its
    own). Every part changes its node through ``_set_node``, as a one-node job does."""

    def _gang_plan(self, core: Core, jobs: Jobs, cluster: Cluster, node_rank, j, n, place):
        """What placing job j with anchor n takes -> (is_gang, node [S], gpus [S]): is_gang
        when ``place`` and the job cannot run on n alone; the parts as ``parts`` chooses them."""
        k, span = jobs.num_gpu[j], self.config.max_span

        def plan():
            closed = self._closed(core, j, jnp.arange(cluster.num_nodes))
            cap = caps(cluster, core.free_cpu, core.free_mem, core.whole_free, k, jobs.cpu_milli[j],
                       jobs.mem_mib[j], jobs.model_mask[j], closed)
            if self.config.gang_one_model:
                cap = same_model_caps(cluster, cap, n)
            node, gpus = parts(cap, n, k, node_rank, span, self.config.gang_rule, node_gpus(cluster))
            return cap[n] < k, node, gpus

        def no_gang():  # fewer than 2 GPUs, or no placement: no parts are taken
            return jnp.bool_(False), jnp.full(span, -1, jnp.int32), jnp.zeros(span, jnp.int32)

        return jax.lax.cond(place & (k >= 2), plan, no_gang)

    def _place_parts(self, core: Core, jobs: Jobs, params, j, node, gpus, active):
        """Job j takes, for each part s (when ``active``), the ``gpus[s]`` lowest-indexed wholly
        free GPUs of ``node[s]`` and its CPU and memory share -> (core, GPU bits [S]; 0 when
        not ``active``). Skipped unless a gang is placed (``when_due``: S node updates)."""
        def take(carry, params):
            core, jobs, j, node, gpus, active, _ = carry
            bits = []
            for i, g in zip(node, gpus):
                on = active & (g > 0)
                i = jnp.maximum(i, 0)
                whole = core.free_milli[i] == GPU_MILLI
                pick = whole & (jnp.cumsum(whole) <= g) & on
                bits.append(resources.mask_to_bits(pick))
                core = self._change_part(core, jobs, params, j, i, pick, -1, on)
            return core, jobs, j, node, gpus, active, jnp.stack(bits)

        no_bits = jnp.zeros(node.shape, jnp.int32)
        out = when_due(lambda carry: carry[5], take, (core, jobs, j, node, gpus, active, no_bits), params)
        return out[0], out[6]

    def _release_parts(self, core: Core, jobs: Jobs, params, j, node, bits, active):
        """Job j's parts on ``node`` [S'] (-1: none) holding GPUs ``bits`` [S'] give back what
        they took (when ``active``; skipped otherwise, ``when_due``)."""
        def give_back(carry, params):
            core, jobs, j, node, bits, active = carry
            for i, b in zip(node, bits):
                on = active & (i >= 0)
                gpus = resources.bits_to_mask(b, params.cluster.max_gpus) & on
                core = self._change_part(core, jobs, params, j, jnp.maximum(i, 0), gpus, 1, on)
            return core, jobs, j, node, bits, active

        return when_due(lambda carry: carry[5], give_back, (core, jobs, j, node, bits, active), params)[0]

    def _change_part(self, core: Core, jobs: Jobs, params, j, i, gpus, sign: int, active):
        """Node i gains (sign 1) or loses (-1) the whole GPUs ``gpus`` [G] of job j's part
        and the part's CPU and memory share."""
        k, held = jobs.num_gpu[j], gpus.sum(dtype=jnp.int32)
        cpu = jnp.where(active, part_request(jobs.cpu_milli[j], k, held), 0)
        mem = jnp.where(active, part_request(jobs.mem_mib[j], k, held), 0)
        core = self._set_node(core, jobs, params, i, sign * jnp.where(gpus, GPU_MILLI, 0),
                              core.free_cpu.at[i].add(sign * cpu), core.free_mem.at[i].add(sign * mem), active)
        # The part's job joins the node's job classes as its GPUs leave (and the reverse).
        return self._count_class(core, i, k, jnp.int32(GPU_MILLI), -sign * active.astype(jnp.int32))

    def _gang_speed(self, cluster: Cluster, jobs: Jobs, j, node, gpus):
        """A gang's speed: its type's slowest speed over its nodes times ``spread_penalty``."""
        speeds = jnp.where(gpus > 0, cluster.type_speed[jnp.maximum(node, 0), jobs.job_type[j]], jnp.inf)
        return speeds.min() * jnp.float32(self.config.spread_penalty)
