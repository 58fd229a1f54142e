"""A 2-node cluster and five jobs whose schedule is worked out by hand below.

Cluster (first-fit, FIFO, GPUs best-fit):
  node 0: 1 x V100M16 (speed 1.0), 8 cores      node 1: 2 x P100 (speed overridden to 0.5), 16 cores
Jobs (arrival, request, work):
  j0  t=0   1 whole GPU, 1 core, work 100  -> node 0 at 0, runs 100 s       end 100  JCT 100, delay 0
  j1  t=10  2 whole GPUs, 1 core, work 50  -> node 1 at 10, 50/0.5 = 100 s  end 110  JCT 100, delay 0
  j2  t=20  0.5 GPU, 1 core, work 50       -> no GPU free until j0 ends at 100; node 0 at 100, end 150
                                              JCT 130, delay 80
  j3  t=30  0.5 GPU, 1 core, work 30       -> queued behind j2; also fits node 0 at 100, end 130
                                              JCT 100, delay 70
  j4  t=40  CPU only, 4 cores, work 20     -> backfills past j2, j3: node 0 has 7 cores free at 40;
                                              end 60, JCT 20, delay 0
Mean JCT = (100 + 100 + 130 + 100 + 20) / 5 = 90; mean delay = (80 + 70) / 5 = 30;
makespan = 150 - 0; throughput = 5 jobs / (150/3600 h) = 120 per hour.
Bounded slowdown: j2 130/50 = 2.6, j3 100/30 = 3.333..., the others 1 -> mean 1.786666...
GPU allocation (cluster 3,000 milli) over the measurement interval, first to last arrival,
[0, 40]: [0,10) 1000, [10,40) 3000 -> (10*1000 + 30*3000) / (3000 * 40) = 100000 / 120000.
"""

import jax
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched import reference
from jaxsched.policies import get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, jobs_from_numpy, to_device
from tests.strategies import FRAG_CLASSES

CLUSTER = cl.to_cluster(cl.NodeTable(
    names=("n0", "n1"), model=np.array([cl.model_id("V100M16"), cl.model_id("P100")], np.int32),
    num_gpus=np.array([1, 2], np.int32), cpu_milli=np.array([8000, 16000], np.int32),
    mem_mib=np.array([32768, 65536], np.int32)), speeds={"P100": 0.5})
JOBS = jobs_from_numpy(
    arrival_s=[0, 10, 20, 30, 40], work_s=[100, 50, 50, 30, 20], num_gpu=[1, 2, 1, 1, 0],
    gpu_milli=[1000, 1000, 500, 500, 0], cpu_milli=[1000, 1000, 1000, 1000, 4000],
    mem_mib=[1024] * 5)
EXPECTED = {
    "node": [0, 1, 0, 0, 0],
    "start_s": [0, 10, 100, 100, 40],
    "end_s": [100, 110, 150, 130, 60],
    "jct_mean": 90.0, "queue_delay_mean": 30.0, "makespan_s": 150.0, "throughput_per_h": 120.0,
    "slowdown_mean": (1 + 1 + 2.6 + 100 / 30 + 1) / 5, "gpu_alloc": 100000 / 120000,
    "finished": 5, "decisions": 5,
}


def jax_run():
    env = ClusterEnv(EnvConfig(tie_break="identity"))
    params = to_device(EnvParams(CLUSTER, FRAG_CLASSES))
    jobs = jax.tree.map(lambda x: np.asarray(x)[None], JOBS)
    state, m = rollout(env, get("first-fit").policy, None, params, to_device(jobs),
                       jax.random.key(0)[None], 50)
    records = {f: np.asarray(getattr(state, f))[0] for f in ("node", "start_s", "end_s", "gpu_bits")}
    return records, {k: float(np.asarray(v)[0]) for k, v in m.items()}


def reference_run():
    out = reference.run(CLUSTER, JOBS, FRAG_CLASSES, reference.RefConfig(), policy="first-fit")
    return out, out["metrics"]


@pytest.mark.parametrize("run", [jax_run, reference_run], ids=["jax", "reference"])
def test_hand_worked_schedule_and_metrics(run):
    records, metrics = run()
    for field in ("node", "start_s", "end_s"):
        np.testing.assert_array_equal(records[field], EXPECTED[field], err_msg=field)
    # j2 and j3 share node 0's single GPU (bit 0); j1 holds both P100s (bits 0 and 1).
    np.testing.assert_array_equal(records["gpu_bits"], [1, 3, 1, 1, 0])
    for name in ("jct_mean", "queue_delay_mean", "makespan_s", "throughput_per_h",
                 "slowdown_mean", "gpu_alloc", "finished", "decisions"):
        assert metrics[name] == pytest.approx(EXPECTED[name], rel=1e-6), name
