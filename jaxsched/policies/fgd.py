"""fgd: Fragmentation Gradient Descent (Weng et al., ATC '23), as published.

Each feasible node is scored by how little placing the job raises its fragmentation F_n
against the target workload ``obs.frag_classes`` (``sim.frag``): ``int(100 * sigmoid(
(F_n before - F_n after) / 1000))`` (``frag.fgd_score``); the top score wins, ties by rank.
A fractional job tries every GPU of the node with room and the node keeps its best GPU's
score (the env's GPU rule "fgd" then picks that GPU); whole-GPU jobs take the first wholly
free GPUs; CPU-only jobs are scored too (their CPU use can raise F_n).

All nodes, and all GPUs of each node, are scored at once, in exact integers: the change in
F_n is summed from integer per-class terms, so "no change" is exactly 0 (score 50) whatever
the float rounding of F_n itself.

A fractional job (``gpu_milli`` d on one GPU with free f) changes a class m's term in one
of three ways, set by where the class's ``gpu_milli`` stands against f - d and f:
  need <= f - d       the GPU still has room for m: the per-class sums do not change;
  f - d < need <= f   it loses room for m: one GPU fewer with room, f - d more milli on
                      GPUs too small;
  f < need            it was too small already: d less milli on GPUs too small.
The node's idle milli drops by d in every case. With the classes sorted by ``gpu_milli``,
each case covers a run of consecutive classes, so F_n after placing on GPU g is three
differences of per-node prefix sums over the classes (the middle one linear in f), looked up
at the number of classes below f - d and below f. The [M, N, G] work left is four cheap
compare-and-sum passes (the node's per-class sums, and those two counts); scoring every
(class, node, GPU) in full took a dozen (the speed-up measured: docs/performance.md).
Whole-GPU and CPU-only jobs leave no GPU partly used, so their [M, N] pass stays direct.

That pass over every node is what the policy falls back on. With the env's drop table
(``EnvConfig.fgd_table``, set by the registry entry) the same integers are kept per node and
job shape and redone only for the node an event changed (``frag.node_drops``), so a decision
is a column lookup (``table_drops``); a job whose shape is not in the table is scored the
full way. The FGD paper's grid (scripts/reproduce_fgd.py): same table, measured speed in
docs/performance.md, "The FGD paper's grid".
"""

import jax
import jax.numpy as jnp

from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.sim import frag
from jaxsched.sim.when_due import when_due
from jaxsched.types import GPU_MILLI


def _by_gpu_milli(classes):
    """The classes in ``gpu_milli`` order (ties by index), each field [M, 1].

    Ranked by comparisons, not sorted: a sort in a loop keeps XLA:CPU from compiling the
    loop into one kernel (``devices.py``). A tiny [M, M] pass (XLA may hoist it out of the loop).
    """
    need, index = classes.gpu_milli, jnp.arange(classes.gpu_milli.shape[0])
    ahead = (need[None, :] < need[:, None]) | ((need[None, :] == need[:, None]) & (index[None, :] < index[:, None]))
    rank = ahead.sum(1)  # [M] position of class m
    order = jnp.where(rank[None, :] == index[:, None], index[None, :], 0).sum(1)  # [M] class at position r
    return jax.tree.map(lambda x: x[order][:, None], classes)


def _prefix_sums(x):
    """[M, N] -> [N, M + 1]: column i sums the first i rows (classes)."""
    return jnp.concatenate([jnp.zeros_like(x[:1]), jnp.cumsum(x, 0)]).T


NO_ROOM = frag.NO_ROOM  # a fractional job's drop (and score) on a node with no GPU room


def fgd_drops(obs, job):
    """[N] int32: how much placing ``job`` on each node lowers sum_m weight_m F_n(m), exact
    (``frag.frag_milli`` turns it into milli of F_n; negative = fragmentation rises).
    Feasibility not applied. For a fractional job, the drop on the node's best GPU with room
    (``NO_ROOM`` if none has room). Arrays are class-first ([M, N]; [M, N, G] only for the
    per-class sums of the node as it is).
    """
    c = _by_gpu_milli(obs.frag_classes)  # fields [M, 1]
    need, num_classes = c.gpu_milli, c.gpu_milli.shape[0]
    exists, free = obs.cluster.gpu_exists, obs.free_milli  # [N, G]
    f = free[None]  # [1, N, G]
    enough = (exists & (f >= need[..., None]) & (need[..., None] > 0)).sum(-1)  # [M, N] GPUs with room
    too_small = jnp.where(exists & (f < need[..., None]), f, 0).sum(-1)  # [M, N] milli on GPUs without
    idle = free.sum(-1)  # [N]
    model_ok = (c.model_mask >> obs.cluster.gpu_model) & 1 == 1  # [M, N]
    static_fit = (c.num_gpu > 0) & model_ok
    before = jnp.where(static_fit & (obs.free_cpu >= c.cpu_milli) & (enough >= c.num_gpu), too_small, idle)
    weighted_before = (before * c.weight).sum(0)  # [N], exact int32 (types.MAX_FRAG_WEIGHT)
    fits_cpu_after = static_fit & (obs.free_cpu - job["cpu_milli"] >= c.cpu_milli)  # [M, N]
    d = job["gpu_milli"]

    def whole_or_cpu_only():
        # k wholly free GPUs (1000 >= any class's gpu_milli) become 0; a gang's anchor gives
        # what it has (semantics.md, "Gang jobs": FGD scores its part there as all of them).
        whole = (exists & (free == GPU_MILLI)).sum(-1)  # [N]
        k = jnp.minimum(jnp.where(d < GPU_MILLI, 0, job["num_gpu"]), whole)
        after = jnp.where(fits_cpu_after & (enough - k * (need > 0) >= c.num_gpu), too_small,
                          idle - k * GPU_MILLI)
        return weighted_before - (after * c.weight).sum(0)

    def fractional():
        idle_after = idle - d
        keeps_room = fits_cpu_after & (enough >= c.num_gpu)  # the GPU still has room, or never had
        loses_room = fits_cpu_after & (enough - 1 >= c.num_gpu)
        w = c.weight  # int32 sums below wrap exactly, and the combination fits (MAX_FRAG_WEIGHT)
        still = _prefix_sums(w * jnp.where(keeps_room, too_small, idle_after))  # need <= f - d
        lost = _prefix_sums(w * jnp.where(loses_room, too_small - d, idle_after))  # f - d < need <= f,
        lost_f = _prefix_sums(w * loses_room)  # ... plus f times this
        small = _prefix_sums(w * jnp.where(keeps_room, too_small - d, idle_after))  # f < need
        below_moved = (need[..., None] <= free - d).sum(0, dtype=jnp.int32)  # [N, G] classes with
        below_free = (need[..., None] <= free).sum(0, dtype=jnp.int32)  # gpu_milli <= f - d, <= f
        base = (jnp.arange(free.shape[0], dtype=jnp.int32) * (num_classes + 1))[:, None]
        at = lambda sums, i: sums.reshape(-1)[base + i]  # noqa: E731 - [N, G] lookups
        after = (at(still, below_moved) + at(lost, below_free) - at(lost, below_moved)
                 + free * (at(lost_f, below_free) - at(lost_f, below_moved))
                 + small[:, num_classes:] - at(small, below_free))  # [N, G]
        room = exists & (free >= d)
        return jnp.where(room, weighted_before[:, None] - after, NO_ROOM).max(-1)

    # A real branch when not vmapped (the [N, G] pass only for fractional jobs); under vmap
    # both run and one is selected.
    is_fractional = (job["num_gpu"] == 1) & (d < GPU_MILLI)
    return jax.lax.cond(is_fractional, fractional, whole_or_cpu_only).astype(jnp.int32)


def table_drops(obs, job, needed=True):
    """``fgd_drops`` from the env's drop table (``EnvConfig.fgd_table``) when the job's shape
    is in it: a column lookup; else (or without a table) the pass over every node. Exact
    either way: the table holds the same integers (tests/policies/test_fgd.py). Under
    ``vmap`` the pass runs only when some episode's shape is missing (``when_due``; a
    ``lax.cond`` would run it for every episode at every call). ``needed`` ([] bool): False
    where the drops will not be used (a window slot whose job fits nowhere, an empty one):
    no pass for a missing shape there, and the result is meaningless."""
    if obs.fgd_drop.shape != (obs.free_milli.shape[0], obs.fgd_shape.shape[0]):  # no table
        return fgd_drops(obs, job)
    shape = jnp.stack([job["num_gpu"], job["gpu_milli"], job["cpu_milli"]])
    match = (obs.fgd_shape == shape).all(-1)  # [2S]
    looked_up = (obs.fgd_drop[:, jnp.argmax(match)], needed & ~match.any())

    def full_pass(state, operands):  # leaves a state whose shape was found unchanged
        drops, missing = state
        return jnp.where(missing, fgd_drops(*operands), drops), missing

    return when_due(lambda state: state[1], full_pass, looked_up, (obs, job))[0]


def fgd_scores(obs, job, drops=table_drops):
    """[N] int32 FGD score of every node for ``job`` (feasibility not applied): ``int(100 *
    sigmoid(drop / 1000))`` of ``fgd_drops`` in milli. A fractional job's node scores as its
    best GPU with room (the score rises with the drop, so the best drop gives the best
    score), and as the lowest possible without one. ``drops``: where the drops come from
    (the table when there is one; ``fgd_drops`` scores every node)."""
    drop = drops(obs, job)
    return jnp.where(drop == NO_ROOM, NO_ROOM,
                     frag.fgd_score(frag.frag_milli(drop, obs.frag_classes), 0.0)).astype(jnp.int32)


def fgd(params, obs, key, drops=table_drops):
    """policy(params, obs, key) -> flat action. ``drops``: as in ``fgd_scores`` (``fgd_drops``:
    today's pass over every node, the table's oracle)."""
    del params, key
    slot = first_fitting_slot(obs)
    scores = fgd_scores(obs, window_job(obs, slot), drops)
    return place_or_wait(obs, slot, best_node(scores, obs.place_mask[slot], obs.node_rank))
