"""Hypothesis strategies for small random clusters and workloads, padded to fixed shapes.

Every example is padded to the same N, G and J so jitted functions compile once per test
module. Speeds are chosen so that work / speed is rarely exact in float32.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from jaxsched import cluster as cl
from jaxsched.types import ALL_MODELS, FragClasses, jobs_from_numpy

PAD_NODES = 6
PAD_JOBS = 24
MODELS = ("T4", "P100", "A10", "G2")  # speeds 0.45, 0.6, 1.1, 0.8
# Deadline slacks (x work): 1.0 is met only at speed >= 1 (or by a CPU-only job started at
# once), 1.5 not on T4 or P100, 2.5 on any model if the job starts soon enough.
SLACKS = (1.0, 1.5, 2.5, np.inf)

FRAG_CLASSES = FragClasses(
    cpu_milli=np.array([4000, 8000, 2000, 16000], np.int32),
    gpu_milli=np.array([500, 1000, 250, 1000], np.int32),
    num_gpu=np.array([1, 1, 1, 2], np.int32),
    model_mask=np.array([ALL_MODELS, ALL_MODELS, cl.model_mask(["T4"]), ALL_MODELS], np.int32),
    weight=np.array([4, 3, 2, 1], np.int32),  # frequencies 0.4, 0.3, 0.2, 0.1
)


@st.composite
def clusters(draw, max_nodes=PAD_NODES):
    """A padded ``Cluster`` (numpy) of 1..max_nodes heterogeneous nodes."""
    n = draw(st.integers(1, max_nodes))
    rows = [(f"n{i}", draw(st.sampled_from(MODELS)), draw(st.sampled_from([0, 1, 2, 4, 8])),
             draw(st.sampled_from([4000, 8000, 16000, 32000])),
             draw(st.sampled_from([8192, 16384, 65536]))) for i in range(n)]
    table = cl.NodeTable(
        names=tuple(r[0] for r in rows),
        model=np.array([cl.model_id(r[1]) for r in rows], np.int32),
        num_gpus=np.array([r[2] for r in rows], np.int32),
        cpu_milli=np.array([r[3] for r in rows], np.int32),
        mem_mib=np.array([r[4] for r in rows], np.int32),
    )
    return cl.to_cluster(table, pad_nodes=max_nodes)


@st.composite
def workloads(draw, max_jobs=PAD_JOBS, slack_deadlines=False, sizes=(0, 1, 1, 1, 2, 4, 8)):
    """A padded ``Jobs`` (numpy) of 1..max_jobs jobs with frequent same-time arrivals.

    Deadlines: arrival + 1..5000 s, or with ``slack_deadlines`` ElasticFlow's arrival +
    slack * work, slack drawn from ``SLACKS`` (+inf: no deadline). GPUs per job: drawn from
    ``sizes`` (above 8: gangs, with ``EnvConfig.max_span`` > 1).
    """
    n = draw(st.integers(1, max_jobs))
    ints = lambda lo, hi: np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)))  # noqa: E731
    arrival = np.sort(ints(0, 60) * 5).astype(np.float32)
    work = ints(1, 400).astype(np.float32) * np.float32(1.7)
    num_gpu = np.array(draw(st.lists(st.sampled_from(sizes), min_size=n, max_size=n)))
    frac = np.array(draw(st.lists(st.sampled_from([100, 250, 500, 700, 1000]), min_size=n, max_size=n)))
    gpu_milli = np.where(num_gpu == 1, frac, np.where(num_gpu > 1, 1000, 0))
    model_mask = np.array(draw(st.lists(st.sampled_from(
        [ALL_MODELS, cl.model_mask(["T4"]), cl.model_mask(["A10", "G2"])]), min_size=n, max_size=n)))
    if slack_deadlines:
        deadline = arrival + np.array(draw(st.lists(st.sampled_from(SLACKS), min_size=n, max_size=n)),
                                      np.float32) * work
    else:
        deadline = arrival + ints(1, 5000).astype(np.float32)
    return jobs_from_numpy(arrival, work, num_gpu, gpu_milli, ints(0, 16) * 1000, ints(0, 8) * 1024,
                           model_mask=model_mask, deadline_s=deadline, pad_to=max_jobs)
