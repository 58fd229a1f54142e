"""The window does not stall: a job that fits nowhere never hides a queued job that fits.

On the 64-node openb-mix preset with the default workload's job shapes: every 8-GPU node
is taken, then more 8-GPU jobs of the openb class than the window holds arrive (none fits),
then a 1-GPU job. The backfilling window (the default) places the 1-GPU job at once; the
strict head-of-queue window leaves it waiting behind the 8-GPU jobs. The reference agrees
job by job in both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched import reference
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import classes
from jaxsched.workload.synthetic import OPENB_JOB_CLASSES

EIGHT_GPU = next(r for r in OPENB_JOB_CLASSES if r[0] == 8)  # (8, 1000, 88000, 327680, weight)
ONE_GPU = next(r for r in OPENB_JOB_CLASSES if r[0] == 1 and r[1] == 1000)
WINDOW = 8


def blocked_queue_episode():
    """(cluster, jobs, index of the 1-GPU job): the 8-GPU nodes all busy from t=0 (10 h of work),
    WINDOW + 2 openb 8-GPU jobs at t=10..19 s, then a 1-GPU job at t=30 s."""
    nodes = cl.preset(64)
    eight = int((nodes.num_gpus == 8).sum())
    fill = [(0.0, 36000.0, 8, 1000, 1000, 1024)] * eight  # small CPU: fits every 8-GPU node
    blocked = [(10.0 + i, 600.0, *EIGHT_GPU[:4]) for i in range(WINDOW + 2)]
    small = [(30.0, 600.0, *ONE_GPU[:4])]
    rows = np.array(fill + blocked + small, np.float64)
    jobs = jobs_from_numpy(*(rows[:, i] for i in range(6)))
    return cl.to_cluster(nodes), jobs, len(rows) - 1


@pytest.mark.parametrize("backfill", [True, False])
def test_job_that_fits_is_placed_past_a_window_of_jobs_that_fit_nowhere(backfill):
    cluster, jobs, small = blocked_queue_episode()
    frag = classes.target_workload([4000], [500], [1], [""])
    env = ClusterEnv(EnvConfig(window=WINDOW, backfill=backfill, tie_break="identity"))
    params = to_device(EnvParams(cluster, frag))
    batch = jax.tree.map(lambda x: jnp.asarray(x)[None], jobs)
    run = jax.jit(lambda p, j, k: rollout(env, get("first-fit").policy, None, p, j, k, 500))
    state, metrics = run(params, batch, jax.random.key(0)[None])
    start_s, end_s = np.asarray(state.start_s)[0], np.asarray(state.end_s)[0]
    blocked = slice(small - WINDOW - 2, small)
    first_free_s = end_s[: small - WINDOW - 2].min()  # an 8-GPU node frees up (>= 30,000 s)

    assert (start_s[blocked] >= first_free_s).all()  # no 8-GPU job could start before
    if backfill:
        assert start_s[small] == 30.0  # placed at its arrival, behind 10 blocked jobs
    else:
        assert start_s[small] >= first_free_s  # waits behind the 8-GPU jobs

    ref = reference.run(cluster, jobs, frag, reference.RefConfig.like(env.config), "first-fit",
                        max_steps=500, node_rank=np.asarray(state.node_rank)[0])
    for field in ("outcome", "node", "gpu_bits", "start_s", "end_s"):
        np.testing.assert_array_equal(np.asarray(getattr(state, field))[0], ref[field], err_msg=field)
    assert int(metrics["finished"][0]) == ref["metrics"]["finished"] == len(start_s)
