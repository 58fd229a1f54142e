"""Gavel's heterogeneity-aware max-min fairness (``MaxMinFairnessPolicyWithPerf``), the linear
program of the ``las-perf`` round policy (docs/semantics.md, "Round policies"), solved exactly
on the host by HiGHS (``scipy.optimize.linprog``); ``allocation_in_jit`` calls it from a
jitted step through ``jax.pure_callback`` (one solve per episode and round, in a batch one
episode after another).

For the jobs in the LP (scale s_j > 0: its GPUs) and the GPU models with workers W_m > 0, with
tput[j, m] the job's speed on model m (0 where it may not run) and x[j, m] >= 0 the share of
time it gets there:

    iso_j   = share_j * sum_m tput[j, m] * W_m / sum_m W_m     (its throughput under the
              heterogeneity-agnostic allocation: its max-min share of time, spread over the
              models in proportion to their GPUs)
    r_j     = sum_m tput[j, m] * s_j * x[j, m] / iso_j          (normalised throughput)
    maximise  z + EFFICIENCY_WEIGHT * mean_j r_j
    subject to  r_j >= z,   sum_m x[j, m] <= 1,   sum_j s_j * x[j, m] <= W_m

The max-min optimum is not unique (only the smallest r_j is maximised); the small second term
picks, among the optima, one of largest total normalised throughput, so GPUs left over by the
smallest job are handed out rather than left to the solver's vertex.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, sparse

EFFICIENCY_WEIGHT = 1e-3


def allocation(throughput, scale, share, workers) -> np.ndarray:
    """x [J, M] float32: each job's share of time on each GPU model, the LP above.

    throughput [J, M] float32 (speed of job j on model m; 0: it may not run there), scale [J]
    int (GPUs; 0: not in the LP), share [J] float32 (the agnostic max-min share of time),
    workers [M] int (GPUs of each model). Jobs out of the LP, or with no model to run on, get 0."""
    throughput = np.asarray(throughput, np.float64)
    scale, workers = np.asarray(scale, np.int64), np.asarray(workers, np.int64)
    x = np.zeros(throughput.shape, np.float32)
    models = np.flatnonzero(workers > 0)
    tput = throughput[:, models]
    jobs = np.flatnonzero((scale > 0) & (tput > 0).any(1))
    if not len(jobs):
        return x
    tput, s, w = tput[jobs], scale[jobs].astype(np.float64), workers[models].astype(np.float64)
    n, m = tput.shape
    iso = np.asarray(share, np.float64)[jobs] * (tput @ w) / w.sum()
    gain = tput * s[:, None] / iso[:, None]  # [n, m]: r_j per unit of x[j, m]
    # Variables: x (row-major, n * m) then z.
    rows = np.repeat(np.arange(n), m)
    cols = np.arange(n * m)
    fair = sparse.csr_matrix((-gain.reshape(-1), (rows, cols)), shape=(n, n * m + 1))
    fair = sparse.hstack([fair[:, :-1], sparse.csr_matrix(np.ones((n, 1)))])  # z - r_j <= 0
    one_each = sparse.csr_matrix((np.ones(n * m), (rows, cols)), shape=(n, n * m + 1))  # sum_m x <= 1
    capacity = sparse.csr_matrix((np.repeat(s, m), (np.tile(np.arange(m), n), cols)), shape=(m, n * m + 1))
    a_ub = sparse.vstack([fair, one_each, capacity]).tocsr()
    b_ub = np.concatenate([np.zeros(n), np.ones(n), w])
    cost = np.append(-EFFICIENCY_WEIGHT / n * gain.reshape(-1), -1.0)  # minimise the negative
    bounds = [(0.0, None)] * (n * m) + [(None, None)]
    result = optimize.linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"las-perf: the max-min LP of {n} jobs failed: {result.message}")
    x[np.ix_(jobs, models)] = np.clip(result.x[:-1].reshape(n, m), 0.0, 1.0)
    return x


def allocation_in_jit(throughput, scale, share, workers, solve=True, previous=None):
    """``allocation`` from inside a jitted (and vmapped) step: [J, M] float32. With ``solve``
    ([] bool) false the LP is not solved and ``previous`` ([J, M]) is the result: a
    ``lax.cond`` under ``vmap`` would run the callback on every episode anyway, so the host
    skips the solve, episode by episode, and the result is selected here."""
    out = jax.ShapeDtypeStruct(throughput.shape, jnp.float32)
    x = jax.pure_callback(_allocation_if, out, jnp.asarray(solve), throughput, scale, share, workers,
                          vmap_method="sequential")
    return x if previous is None else jnp.where(solve, x, previous)


def _allocation_if(solve, throughput, *lp) -> np.ndarray:
    return allocation(throughput, *lp) if bool(solve) else np.zeros(np.shape(throughput), np.float32)
