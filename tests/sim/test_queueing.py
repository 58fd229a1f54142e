"""Queueing theory holds in the simulator's measurement window.

- M/M/c: identical speed-1.0 GPUs, whole 1-GPU jobs, Poisson arrivals, exponential work and
  FIFO make the cluster an M/M/c queue (c = GPUs); the mean queueing delay of the measured
  jobs must match Erlang C's ``C(c, a) / (c mu - lambda)`` within the 95% confidence interval
  of the episodes' mean, at loads 0.7, 0.9 and 0.95, and the allocation must equal the load.
- Little's law, for every registered scheduler on loaded synthetic episodes: over the
  measurement interval, the time-average number of jobs in the system equals what the jobs'
  own records give (exactly, as a sample path), and the arrival rate times the mean time in
  the system (statistically).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched import report
from jaxsched.policies import REGISTRY, get
from jaxsched.rollout import rollout
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import ALL_MODELS, EnvParams, Jobs, to_device
from jaxsched.workload import classes, synthetic
from tests.settings import extended

MEAN_WORK_S = 1000.0


def erlang_c_delay_s(c: int, lam: float, mu: float) -> float:
    """Mean queueing delay of M/M/c: C(c, a) / (c mu - lam), a = lam / mu."""
    a = lam / mu
    term, below = 1.0, 0.0
    for k in range(c):
        below += term
        term *= a / (k + 1)  # ends as a^c / c!
    wait_all = term * c / (c - a)
    return wait_all / (below + wait_all) / (c * mu - lam)


def mmc_jobs(key, num_jobs: int, lam: float) -> Jobs:
    """Poisson arrivals at rate lam, exponential work of mean MEAN_WORK_S, 1 whole GPU each."""
    k_gap, k_work = jax.random.split(key)
    arrival = jnp.cumsum(jax.random.exponential(k_gap, (num_jobs,)) / lam)
    work = jax.random.exponential(k_work, (num_jobs,)) * MEAN_WORK_S
    full = lambda v: jnp.full((num_jobs,), v, jnp.int32)  # noqa: E731
    return Jobs(arrival.astype(jnp.float32), work.astype(jnp.float32), full(1), full(1000), full(0),
                full(0), full(ALL_MODELS), jnp.full((num_jobs,), jnp.inf, jnp.float32),
                jnp.ones((num_jobs,), bool), full(0), full(0))


def test_erlang_c_formula_by_hand():
    # M/M/1: C = rho, delay = rho / (mu - lam); M/M/2 at a = 1: C = 1/3, delay = (1/3) / (2 - 1).
    assert erlang_c_delay_s(1, 0.5, 1.0) == pytest.approx(0.5 / 0.5)
    assert erlang_c_delay_s(2, 1.0, 1.0) == pytest.approx(1 / 3)


NODES, EPISODES, WARMUP, MEASURED = 8, 32, 6000, 16000  # c = 64 GPUs


@pytest.mark.slow
def test_mmc_queueing_delay_matches_erlang_c():
    table = cl.NodeTable(names=tuple(f"v{i}" for i in range(NODES)),
                         model=np.full(NODES, cl.model_id("V100"), np.int32),
                         num_gpus=np.full(NODES, 8, np.int32), cpu_milli=np.full(NODES, 64000, np.int32),
                         mem_mib=np.full(NODES, 262144, np.int32))
    c, mu = 8 * NODES, 1.0 / MEAN_WORK_S
    params = to_device(EnvParams(cl.to_cluster(table), classes.target_workload([0], [1000], [1], [""])))
    # A queue of 512 never fills here (a queue above c grows like 0.95^q; asserted below), and
    # each episode runs alone (chunk 1): the loop schedule does not change the episodes
    # (test_properties), but a vmapped chunk runs as long as its slowest episode: 3x slower.
    env = ClusterEnv(EnvConfig(reserve_after_s=math.inf, warmup_jobs=WARMUP, measured_jobs=MEASURED,
                               queue_capacity=512, running_capacity=2 * c, track_frag=False))
    run = jax.jit(lambda j, k: rollout(env, get("first-fit").policy, None, params, j, k,
                                       3 * (WARMUP + MEASURED), chunk=1)[1])
    keys = jax.random.split(jax.random.key(7), EPISODES)
    for rho in (0.7, 0.9, 0.95):
        lam = rho * c * mu
        m = jax.device_get(run(jax.vmap(lambda k: mmc_jobs(k, WARMUP + MEASURED, lam))(keys), keys))
        assert (m["done"] == 1).all() and (m["dropped_overflow"] == 0).all()
        delay = np.asarray(m["queue_delay_mean"], np.float64)
        half = 1.96 * delay.std(ddof=1) / math.sqrt(EPISODES)
        expected = erlang_c_delay_s(c, lam, mu)
        assert abs(delay.mean() - expected) <= half, (rho, delay.mean(), half, expected)
        assert np.mean(m["gpu_alloc"]) == pytest.approx(rho, abs=0.01)  # one speed: both allocations
        assert np.mean(m["work_alloc"]) == pytest.approx(rho, abs=0.01)


def in_system_from_records(jobs, records, metrics) -> np.ndarray:
    """[E] integral over [measure_from_s, measure_to_s] of the jobs in the system, summed job
    by job from the records: each job that entered the queue is in the system from its
    arrival until it finished or was rejected (``end_s``), or until the episode stopped."""
    valid = np.asarray(jobs.valid, bool)
    code = report.job_outcomes(records, valid, static=False)
    entered = valid & ~np.isin(code, [report.OUTCOMES.index("failed"), report.OUTCOMES.index("dropped")])
    t_end = np.asarray(records["time_s"], np.float64)[:, None]
    end = np.asarray(records["end_s"], np.float64)
    leave = np.where(np.isfinite(end), np.minimum(end, t_end), t_end)
    lo = np.asarray(records["measure_from_s"], np.float64)[:, None]
    hi = np.asarray(records["measure_to_s"], np.float64)[:, None]
    arrival = np.asarray(jobs.arrival_s, np.float64)
    overlap = np.clip(np.minimum(leave, hi) - np.maximum(arrival, lo), 0.0, None)
    return np.where(entered, overlap, 0.0).sum(-1)


# Little's law over a window needs a stable queue. Strict FIFO (no backfilling) saturates below
# 0.85 on this mix: a job that fits nowhere yet holds back every job behind it, so its queue
# grows through the window; each is checked at a load it sustains (the strict ones and
# gavel-fifo and fifo-perf, whose allocations stop at the first job that fits no type, at 0.45;
# helios-srtf, which takes jobs by the GPU count alone, so a job taken but placed nowhere, for
# its GPU shares, cores or memory, keeps later jobs off free GPUs, at 0.6).
LOAD = {"fifo": 0.6, "fifo-strict": 0.45, "sjf-strict": 0.45, "gavel-fifo": 0.45, "fifo-perf": 0.45,
        "helios-srtf": 0.6}


@pytest.mark.parametrize("name", [name if name in ("first-fit", "fgd", "random") else extended(name)
                                  for name in sorted(REGISTRY)])
def test_littles_law_holds_for_every_scheduler(name):
    nodes = cl.preset(16)
    syn = synthetic.SyntheticConfig(num_jobs=2400, target_load=LOAD.get(name, 0.85), mean_interarrival_s=32.0,
                                    max_work_s=4 * 3600.0, cluster_capacity=cl.work_capacity(nodes))
    rows = np.repeat(np.asarray(syn.job_classes), np.asarray(syn.job_classes)[:, 4], axis=0)
    frag = classes.target_workload(rows[:, 2], rows[:, 1], rows[:, 0], [""] * len(rows))
    params = to_device(EnvParams(cl.to_cluster(nodes), frag))
    sched = get(name)
    base = EnvConfig(warmup_jobs=600, measured_jobs=1500)
    env = ClusterEnv(sched.env_config(base))
    keys = jax.random.split(jax.random.key(3), 8)
    jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)

    def run(jobs, keys):  # each episode alone, as the M/M/c test runs them
        state, m = rollout(env, sched.bound_policy(base), None, params, jobs, keys, 3 * syn.num_jobs, chunk=1)
        fields = ("outcome", "start_s", "end_s", "unschedulable", "queue", "queue_len", "next_arrival")
        recs = {f: getattr(state, f, None) if hasattr(state, f) else getattr(state.core, f) for f in fields}
        recs.update(time_s=state.core.time_s, measure_from_s=state.core.measure_from_s,
                    measure_to_s=state.core.measure_to_s)
        return m, recs

    m, recs = jax.device_get(jax.jit(run)(jobs, keys))
    host = jax.device_get(jobs)
    assert (m["done"] == 1).all()
    span = np.asarray(m["measure_span_s"], np.float64)
    # The sample path: the env's time average is the jobs' own time in the system, exactly.
    np.testing.assert_allclose(np.asarray(m["jobs_in_system"]) * span,
                               in_system_from_records(host, recs, m), rtol=2e-3)
    # Little's law over the window: L = lambda W, up to the jobs crossing its two ends.
    assert (np.asarray(m["dropped_overflow"]) == 0).all() and (np.asarray(m["failed"]) == 0).all()
    lam_w = np.asarray(m["measured_jobs"]) / span * np.asarray(m["time_in_system_mean"])
    assert np.mean(m["jobs_in_system"]) == pytest.approx(np.mean(lam_w), rel=0.05)
