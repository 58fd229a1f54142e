"""elasticflow: ElasticFlow-style (ASPLOS '23) deadline scheduling without elastic resizing.

docs/schedulers.md, "elasticflow". The registry entry sets queue order "edf" (the window
holds the queued jobs by earliest deadline) and GPU rule "buddy". With ``end[k, n]`` the time
window job k would end if started now on node n (the env's float32 arithmetic):
  1. admission control: a slot is *hopeless* iff it misses its deadline on every node it
     can run on (of the empty cluster); the first hopeless slot is rejected;
  2. otherwise the first slot that fits some node where it meets its deadline is placed on
     the such node with the highest BestFit score (ties by rank);
  3. otherwise wait, for a node that can meet the deadline or until the job is hopeless.
"""

import jax.numpy as jnp

from jaxsched import actions
from jaxsched.policies.best_fit import best_fit_scores
from jaxsched.policies.common import best_node, can_run_empty, window_job


def end_times(obs):
    """[K, N] float32: ``t + work / speed[n]`` for GPU jobs, ``t + work`` for CPU-only ones."""
    work = obs.job_work_s[:, None]
    run_s = jnp.where(obs.job_num_gpu[:, None] > 0, work / obs.cluster.speed, work)
    return obs.time_s + run_s


def elasticflow(params, obs, key):
    """policy(params, obs, key) -> flat action."""
    del params, key
    num_slots, num_nodes = obs.place_mask.shape
    meets = end_times(obs) <= obs.job_deadline_s[:, None]  # [K, N]
    hopeless = (obs.window_job >= 0) & ~(can_run_empty(obs) & meets).any(-1)  # [K]
    ok = obs.place_mask & meets  # [K, N]
    slot = jnp.argmax(ok.any(-1))
    node = best_node(best_fit_scores(obs, window_job(obs, slot)), ok[slot], obs.node_rank)
    reject = actions.reject(jnp.argmax(hopeless), num_slots, num_nodes)
    wait = actions.wait(num_slots, num_nodes)
    place = actions.place(slot, node, num_nodes)
    return jnp.where(hopeless.any(), reject, jnp.where(ok.any(), place, wait)).astype(jnp.int32)
