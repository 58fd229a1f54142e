"""r&p (Reserving-and-Packing) on hand-made states where the right node is known.

Definition: docs/schedulers.md, "r&p". Cluster (``mixed_cluster``), default speeds:
  n0 V100 8 GPUs (1.0, high-end)   n1 G3 8 GPUs (1.2, high-end)
  n2 G2   8 GPUs (0.8, weak)       n3 T4 4 GPUs (0.45, weak)
High-demand jobs ask for >= 2 GPUs. gpu-packing scores below are SPEC.md's: an empty node
``max(33 - n_gpus, n_gpus)`` (8 GPUs 25, 4 GPUs 29), a used node ``max(50 - GPUs taken, 33)``,
a partly used tightest GPU ``max(100 - (free * 100 // 1000) // 10, 50)``.
"""

import jax
import numpy as np

from jaxsched import cluster as cl
from jaxsched import policies
from jaxsched.policies.reserving_packing import HIGH_DEMAND_GPUS, high_end_nodes
from tests.policies.states import G_MAX, N_NODES, chosen_node, observe

rp = jax.jit(policies.get("r&p").policy)
packing = jax.jit(policies.get("gpu-packing").policy)


def mixed_cluster(models=("V100", "G3", "G2", "T4"), num_gpus=(8, 8, 8, 4)):
    """Four nodes of the given models and GPU counts, 96 cores each, default speeds."""
    table = cl.NodeTable(
        names=("n0", "n1", "n2", "n3"),
        model=np.asarray([cl.model_id(m) for m in models], np.int32),
        num_gpus=np.asarray(num_gpus, np.int32),
        cpu_milli=np.full(4, 96000, np.int32), mem_mib=np.full(4, 1 << 20, np.int32))
    return cl.to_cluster(table, pad_nodes=N_NODES, max_gpus=G_MAX)


MIXED = mixed_cluster()
EMPTY = [[1000] * 8, [1000] * 8, [1000] * 8, [1000] * 4]


def obs_of(job, free=EMPTY, free_cpu=None, node_rank=None):
    return observe(job, free, free_cpu, clus=MIXED, node_rank=node_rank)


def test_the_fast_models_are_high_end_and_multi_gpu_jobs_high_demand():
    assert np.asarray(high_end_nodes(obs_of((1, 1000, 1000)))).tolist() == [True, True, False, False]
    assert HIGH_DEMAND_GPUS == 2


def test_a_node_without_gpus_is_weak_whatever_its_speed():
    # n2 is CPU-only (model "CPU", speed 1.0). A CPU-only job (low demand) scores 0 for
    # packing on every node, so the least loaded node of its pool wins: n2 (no GPUs, 0)
    # over the partly used weak n1 and n3, though n0 and n1 have the better rank.
    clus = mixed_cluster(("V100", "G2", "CPU", "T4"), (8, 8, 0, 4))
    assert float(clus.speed[2]) == 1.0
    obs = observe((0, 0, 1000), [[1000] * 8, [0] + [1000] * 7, [], [0] + [1000] * 3], clus=clus)
    assert np.asarray(high_end_nodes(obs)).tolist() == [True, False, False, False]
    assert chosen_node(rp(None, obs, None), obs) == 2


def test_high_demand_job_goes_to_a_high_end_node():
    # 2 GPUs on the empty cluster: gpu-packing takes the smallest empty node, the weak n3 (29
    # against 25); r&p keeps to the high-end pool: n0 and n1 tie (25, load 0), rank decides.
    obs = obs_of((2, 1000, 1000))
    assert chosen_node(packing(None, obs, None), obs) == 3
    assert chosen_node(rp(None, obs, None), obs) == 0
    obs = obs_of((2, 1000, 1000), node_rank=[3, 2, 1, 0])
    assert chosen_node(rp(None, obs, None), obs) == 1
    # A used weak node (tier 2: 48) packs better than the empty high-end ones: still high-end.
    obs = obs_of((2, 1000, 1000), [[1000] * 8, [1000] * 8, [0] + [1000] * 7, [1000] * 4])
    assert chosen_node(packing(None, obs, None), obs) == 2
    assert chosen_node(rp(None, obs, None), obs) == 0
    # Within the pool it packs: 7 GPUs on the used n1 (43) beat the empty n0 (25).
    obs = obs_of((7, 1000, 1000), [[1000] * 8, [0] + [1000] * 7, [1000] * 8, [1000] * 4])
    assert chosen_node(rp(None, obs, None), obs) == 1


def test_small_jobs_go_to_a_weak_node_even_when_a_high_end_node_is_emptier():
    # The high-end n0 has 1 of 8 GPUs used, the weak n2 6 of 8 (n3 is full): both tier 2 (49)
    # for a 1-GPU or a 0.3 job, so gpu-packing takes n0 by rank, and so would load balancing;
    # r&p keeps the small job off the high-end node.
    busy_weak = [[0] + [1000] * 7, [1000] * 8, [0] * 6 + [1000] * 2, [0] * 4]
    for job in ((1, 1000, 1000), (1, 300, 1000)):
        obs = obs_of(job, busy_weak)
        assert chosen_node(packing(None, obs, None), obs) == 0, job
        assert chosen_node(rp(None, obs, None), obs) == 2, job
    # ... and even when the high-end node packs better: n0's GPU with 600 free is tier 1 (94)
    # for a 0.5 job, the weak nodes are empty (n2 25, n3 29): gpu-packing takes n0, r&p n3.
    obs = obs_of((1, 500, 1000), [[600] + [1000] * 7, [1000] * 8, [1000] * 8, [1000] * 4])
    assert chosen_node(packing(None, obs, None), obs) == 0
    assert chosen_node(rp(None, obs, None), obs) == 3
    # A CPU-only job is a low-demand job too.
    obs = obs_of((0, 0, 1000), node_rank=[0, 1, 3, 2])
    assert chosen_node(rp(None, obs, None), obs) == 3


def test_falls_back_to_the_other_pool_only_when_its_own_has_no_room():
    # The weak nodes are full: a 0.5 job goes high-end, and packs there (n1's 600 free GPU, 94).
    full_weak = [[1000] * 8, [600] + [1000] * 7, [0] * 8, [0] * 4]
    obs = obs_of((1, 500, 1000), full_weak)
    assert chosen_node(rp(None, obs, None), obs) == 1
    # Not enough whole GPUs left high-end (3 each) for a 4-GPU job: it goes weak, where it
    # packs as gpu-packing does (the empty 4-GPU n3, 29, over the empty 8-GPU n2, 25).
    obs = obs_of((4, 1000, 1000), [[0] * 5 + [1000] * 3, [0] * 5 + [1000] * 3, [1000] * 8, [1000] * 4])
    assert chosen_node(rp(None, obs, None), obs) == 3
    # With weak room for a 0.5 job, however little, it stays weak (n3's last GPU).
    obs = obs_of((1, 500, 1000), [[1000] * 8, [1000] * 8, [0] * 8, [0, 0, 0, 500]])
    assert chosen_node(rp(None, obs, None), obs) == 3


def test_masked_nodes_are_never_chosen():
    # n0 is the high-demand job's choice on the empty cluster; without the CPU it needs, n1.
    obs = obs_of((2, 1000, 8000), free_cpu=[4000, 96000, 96000, 96000])
    assert not bool(obs.place_mask[0, 0])
    assert chosen_node(rp(None, obs, None), obs) == 1
    # Only the weak nodes feasible: the best of them, never a masked high-end node.
    obs = obs_of((2, 1000, 8000), free_cpu=[4000, 4000, 96000, 96000])
    assert chosen_node(rp(None, obs, None), obs) == 3
    # Only n2 feasible (n3, which would score higher, lacks the CPU; n0 and n1 masked).
    obs = obs_of((1, 1000, 8000), free_cpu=[96000, 96000, 96000, 4000])
    obs = obs.replace(place_mask=obs.place_mask.at[0, :2].set(False))
    assert chosen_node(rp(None, obs, None), obs) == 2
    # Nothing feasible: wait (the last flat action).
    obs = obs.replace(place_mask=obs.place_mask.at[0].set(False))
    assert int(rp(None, obs, None)) == obs.action_mask.shape[0] - 1


def test_ties_in_packing_go_to_the_less_loaded_node_then_to_rank():
    # A 1-GPU job on two used weak nodes: both tier 2 (49). n2 has 3 of 8 GPUs used (0.375),
    # n3 2 of 4 (0.5): n2 is less loaded by share (though more by milli) and wins over n3's
    # better rank.
    free = [[1000] * 8, [1000] * 8, [0] * 3 + [1000] * 5, [0] * 2 + [1000] * 2]
    obs = obs_of((1, 1000, 1000), free, node_rank=[0, 1, 3, 2])
    assert chosen_node(rp(None, obs, None), obs) == 2
    assert chosen_node(packing(None, obs, None), obs) == 3  # gpu-packing alone: rank
    # Equally loaded (4 of 8 against 2 of 4): rank decides, either way.
    free = [[1000] * 8, [1000] * 8, [0] * 4 + [1000] * 4, [0] * 2 + [1000] * 2]
    obs = obs_of((1, 1000, 1000), free, node_rank=[0, 1, 3, 2])
    assert chosen_node(rp(None, obs, None), obs) == 3
    obs = obs_of((1, 1000, 1000), free, node_rank=[0, 1, 2, 3])
    assert chosen_node(rp(None, obs, None), obs) == 2
    # Load never overrides packing: n3 is more loaded but packs a 0.5 job better (its partly
    # used GPU with 500 free: tier 1, 95, against n2's wholly free GPUs: tier 2, 49).
    free = [[1000] * 8, [1000] * 8, [0] + [1000] * 7, [0, 0, 0, 500]]
    obs = obs_of((1, 500, 1000), free, node_rank=[0, 1, 2, 3])
    assert chosen_node(rp(None, obs, None), obs) == 3
