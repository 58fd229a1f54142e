"""The synthetic workload: determinism, shapes, padding, and its statistics on large samples."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from jaxsched import cluster, types
from jaxsched.workload import synthetic
from jaxsched.workload.synthetic import OPENB_JOB_CLASSES, SyntheticConfig, generate

gen = jax.jit(generate, static_argnums=1)
BIG = 20_000  # large-sample size for the statistical checks


def host(jobs):
    return jax.tree.map(np.asarray, jobs)


@pytest.fixture(scope="module")
def big():
    """One large default sample (20k jobs), shared by the statistical tests."""
    return host(gen(jax.random.key(123), SyntheticConfig(num_jobs=BIG)))


@pytest.fixture(scope="module")
def big_mixed():
    """The same key and size with model constraints and deadlines switched on."""
    cfg = SyntheticConfig(num_jobs=BIG, model_constraint_prob=0.3, deadline_slack=2.5)
    return host(gen(jax.random.key(123), cfg))


# One small config shared by several tests, so they reuse one compiled program.
SMALL = SyntheticConfig(num_jobs=300, pad_to=320, model_constraint_prob=0.5, deadline_slack=3.0)


def assert_jobs_equal(a, b):
    for name, x, y in zip(types.Jobs.__dataclass_fields__, jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


# ---------------------------------------------------------------- determinism and batching

def test_same_key_same_jobs():
    a = gen(jax.random.key(7), SMALL)
    b = gen(jax.random.key(7), SMALL)
    assert_jobs_equal(a, b)


def test_different_keys_differ():
    a, b = host(gen(jax.random.key(1), SMALL)), host(gen(jax.random.key(2), SMALL))
    for field in ("arrival_s", "work_s", "cpu_milli", "model_mask", "deadline_s"):
        assert not np.array_equal(getattr(a, field), getattr(b, field)), field


def test_vmap_over_keys_equals_one_by_one():
    keys = jax.random.split(jax.random.key(0), 4)
    batch = jax.jit(jax.vmap(lambda k: generate(k, SMALL)))(keys)
    assert batch.arrival_s.shape == (4, 320)
    for i in range(4):
        assert_jobs_equal(jax.tree.map(lambda x: x[i], batch), gen(keys[i], SMALL))


# ---------------------------------------------------------------- shapes, dtypes, padding

def test_shapes_dtypes_and_padding():
    n, size = SMALL.num_jobs, SMALL.pad_to
    jobs = host(gen(jax.random.key(3), SMALL))
    dtypes = dict(arrival_s=np.float32, work_s=np.float32, num_gpu=np.int32, gpu_milli=np.int32,
                  cpu_milli=np.int32, mem_mib=np.int32, model_mask=np.int32,
                  deadline_s=np.float32, valid=np.bool_)
    for field, dtype in dtypes.items():
        x = getattr(jobs, field)
        assert x.shape == (size,), field
        assert x.dtype == dtype, field
    assert jobs.valid[:n].all() and not jobs.valid[n:].any()
    assert np.isposinf(jobs.arrival_s[n:]).all() and np.isposinf(jobs.deadline_s[n:]).all()
    for field in ("work_s", "num_gpu", "gpu_milli", "cpu_milli", "mem_mib", "model_mask"):
        assert (getattr(jobs, field)[n:] == 0).all(), field
    # Real jobs: finite, positive times; arrivals sorted over the whole padded array too.
    assert np.isfinite(jobs.arrival_s[:n]).all() and (jobs.arrival_s[:n] > 0).all()
    assert np.isfinite(jobs.deadline_s[:n]).all()
    assert (jobs.work_s[:n] > 0).all()
    assert (jobs.arrival_s[1:] >= jobs.arrival_s[:-1]).all()
    assert jobs.num_jobs == size


def test_no_padding_by_default_and_real_jobs_do_not_depend_on_pad_to():
    plain = host(gen(jax.random.key(9), SMALL.replace(pad_to=None)))
    padded = host(gen(jax.random.key(9), SMALL))
    assert plain.arrival_s.shape == (300,) and plain.valid.all()
    assert_jobs_equal(plain, jax.tree.map(lambda x: x[:300], padded))


def test_every_job_shape_is_a_table_row(big):
    rows = {r[:4] for r in OPENB_JOB_CLASSES}
    drawn = set(zip(big.num_gpu.tolist(), big.gpu_milli.tolist(), big.cpu_milli.tolist(),
                    big.mem_mib.tolist()))
    assert drawn <= rows


# ---------------------------------------------------------------- arrivals

def test_arrivals_sorted_poisson_with_the_configured_mean(big):
    gaps = np.diff(np.concatenate([[0.0], big.arrival_s.astype(np.float64)]))
    assert (gaps >= 0).all()
    assert big.arrival_s[0] == pytest.approx(gaps[0]) and big.arrival_s[0] > 0
    # Mean gap: SE = 8 / sqrt(20000) ~ 0.7%; 3% is > 4 SE.
    assert gaps.mean() == pytest.approx(8.0, rel=0.03)
    # Exponential, not e.g. uniform or constant: P(gap > mean) = e^-1, CV = 1.
    assert (gaps > 8.0).mean() == pytest.approx(math.exp(-1), abs=0.015)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


# ---------------------------------------------------------------- class mix

def test_class_table_covers_openb_mix():
    assert len(OPENB_JOB_CLASSES) <= 40
    assert {r[0] for r in OPENB_JOB_CLASSES} == {0, 1, 2, 4, 8}
    assert sum(r[4] for r in OPENB_JOB_CLASSES) == 8152  # every pod of the default list
    shares = synthetic.class_shares()
    assert shares["cpu"] == pytest.approx(1088 / 8152)
    assert shares["frac"] == pytest.approx(3078 / 8152)
    assert shares["1"] == pytest.approx(3911 / 8152)
    assert (shares["2"], shares["4"], shares["8"]) == pytest.approx((16 / 8152, 15 / 8152, 44 / 8152))
    SyntheticConfig().validate()  # the default table passes its own checks


def test_class_mix_matches_table_weights(big):
    weights = np.array([r[4] for r in OPENB_JOB_CLASSES], np.float64)
    p = weights / weights.sum()
    index = {r[:4]: i for i, r in enumerate(OPENB_JOB_CLASSES)}
    cls = np.array([index[t] for t in zip(big.num_gpu.tolist(), big.gpu_milli.tolist(),
                                          big.cpu_milli.tolist(), big.mem_mib.tolist())])
    counts = np.bincount(cls, minlength=len(p))
    se = np.sqrt(BIG * p * (1 - p))
    assert (np.abs(counts - BIG * p) < 4.5 * se + 1).all(), (counts, BIG * p)
    # The kinds: CPU-only ~13.3%, fractional ~37.8%, one whole GPU ~48%, multi-GPU present.
    ng, gm = big.num_gpu, big.gpu_milli
    assert (ng == 0).mean() == pytest.approx(0.1335, abs=0.01)
    assert ((ng == 1) & (gm < 1000)).mean() == pytest.approx(0.3776, abs=0.015)
    assert ((ng == 1) & (gm == 1000)).mean() == pytest.approx(0.4798, abs=0.015)
    assert (ng == 8).sum() > 50 and (ng == 2).sum() > 10 and (ng == 4).sum() > 10
    # Semantics of types.Jobs: CPU-only has gpu_milli 0, multi-GPU has whole GPUs.
    assert (gm[ng == 0] == 0).all() and (gm[ng >= 2] == 1000).all()


def test_class_table_override():
    table = ((2, 1000, 8000, 1024, 1.0), (0, 0, 500, 256, 3.0), (1, 500, 100, 64, 0.0))
    jobs = host(gen(jax.random.key(0), SyntheticConfig(num_jobs=4000, job_classes=table)))
    assert set(jobs.num_gpu.tolist()) == {0, 2}  # the zero-weight row never appears
    assert (ng0 := (jobs.num_gpu == 0).mean()) == pytest.approx(0.75, abs=0.03), ng0
    assert (jobs.cpu_milli[jobs.num_gpu == 2] == 8000).all()
    # Lists are accepted and made hashable.
    cfg = SyntheticConfig(num_jobs=10, job_classes=[list(r) for r in table])
    hash(cfg)
    assert cfg == SyntheticConfig(num_jobs=10, job_classes=table)


# ---------------------------------------------------------------- work and load

def test_work_is_capped_lognormal_with_the_configured_median(big):
    w = big.work_s.astype(np.float64)
    assert np.median(w) == pytest.approx(900.0, rel=0.05)
    below_cap = np.log(w[w < 86400.0])
    assert np.std(np.log(w)) == pytest.approx(1.5, rel=0.05)
    assert len(below_cap) > 0.99 * len(w)
    cfg = SyntheticConfig(num_jobs=BIG, max_work_s=2000.0)
    capped = host(gen(jax.random.key(4), cfg)).work_s
    assert capped.max() == pytest.approx(2000.0)
    assert (capped == np.float32(2000.0)).mean() == pytest.approx(1 - synthetic._phi(math.log(2000 / 900) / 1.5), abs=0.015)
    assert capped.mean() == pytest.approx(synthetic.expected_work_s(cfg), rel=0.03)


def realised_load(jobs, capacity):
    """Offered load: sum(GPUs x work) / (work capacity x arrival span)."""
    gpus = jobs.num_gpu * jobs.gpu_milli / 1000.0
    return float((gpus * jobs.work_s.astype(np.float64)).sum() / (capacity * jobs.arrival_s.max()))


def test_expected_offered_load_matches_a_large_sample(big):
    g = cluster.work_capacity(cluster.preset(64))
    expect = synthetic.expected_offered_load(SyntheticConfig(), g)
    assert 0.5 < expect < 1.1  # a 64-node preset at DRR's 8 s is a loaded but sane cluster
    assert realised_load(big, g) == pytest.approx(expect, rel=0.1)


@pytest.mark.parametrize("target, cap, nodes, interarrival",
                         [(0.5, 86400.0, 64, 8.0), (0.9, 5000.0, 128, 3.8)])
def test_target_load_is_realised(target, cap, nodes, interarrival):
    g = cluster.work_capacity(cluster.preset(nodes))
    cfg = SyntheticConfig(num_jobs=BIG, target_load=target, cluster_capacity=g, max_work_s=cap,
                          mean_interarrival_s=interarrival)
    assert synthetic.expected_offered_load(cfg, g) == pytest.approx(target, rel=1e-6)
    jobs = host(gen(jax.random.key(11), cfg))
    assert np.diff(jobs.arrival_s).mean() == pytest.approx(interarrival, rel=0.03)
    assert realised_load(jobs, g) == pytest.approx(target, rel=0.1)
    assert jobs.work_s.max() <= cap
    # The same config without a target would offer a different load: the scaling did something.
    assert synthetic.expected_offered_load(cfg.replace(target_load=None), g) != pytest.approx(target, rel=0.05)


def test_target_load_doubles_work_when_load_doubles():
    g = 300
    lo = SyntheticConfig(num_jobs=10, target_load=0.4, cluster_capacity=g, max_work_s=math.inf)
    hi = lo.replace(target_load=0.8)
    assert synthetic.effective_median_work_s(hi) == pytest.approx(2 * synthetic.effective_median_work_s(lo))
    a, b = host(gen(jax.random.key(0), lo)), host(gen(jax.random.key(0), hi))
    np.testing.assert_allclose(b.work_s, 2 * a.work_s, rtol=1e-5)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)


def test_target_load_needs_cluster_capacity_and_a_reachable_target():
    with pytest.raises(ValueError, match="cluster_capacity"):
        SyntheticConfig(target_load=0.9).validate()
    with pytest.raises(ValueError, match="cluster_capacity"):
        generate(jax.random.key(0), SyntheticConfig(num_jobs=5, target_load=0.9))
    with pytest.raises(ValueError, match="target_load"):
        SyntheticConfig(target_load=0.9, cluster_capacity=1000, max_work_s=100.0).validate()
    with pytest.raises(ValueError, match="job_classes"):
        SyntheticConfig(target_load=0.5, cluster_capacity=10, job_classes=((0, 0, 100, 100, 1),)).validate()


# ---------------------------------------------------------------- model constraints, deadlines

def test_no_constraints_by_default(big):
    assert (big.model_mask == types.ALL_MODELS).all()


def test_constraint_probability_and_allowed_models(big_mixed):
    jobs = big_mixed
    gpu = jobs.num_gpu > 0
    constrained = jobs.model_mask != types.ALL_MODELS
    assert not constrained[~gpu].any()  # CPU-only jobs are never constrained
    assert constrained[gpu].mean() == pytest.approx(0.3, abs=0.015)
    masks = jobs.model_mask[constrained]
    allowed = {1 << cluster.model_id(m) for m in synthetic.OPENB_GPU_MODELS}
    assert set(masks.tolist()) == allowed  # single bits, every openb model drawn, nothing else
    counts = np.array([(masks == m).sum() for m in sorted(allowed)])
    assert counts.min() > 0.8 * counts.mean()  # uniform over the models

    cfg = SyntheticConfig(num_jobs=2000, model_constraint_prob=1.0, constraint_models=("T4", "A10"))
    two = host(gen(jax.random.key(8), cfg))
    assert set(two.model_mask[two.num_gpu > 0].tolist()) == {cluster.model_mask(["T4"]), cluster.model_mask(["A10"])}


def test_deadlines(big, big_mixed):
    np.testing.assert_allclose(big_mixed.deadline_s, big_mixed.arrival_s + 2.5 * big_mixed.work_s,
                               rtol=1e-6)
    assert np.isposinf(big.deadline_s).all()  # default slack +inf: no deadlines


def test_each_setting_leaves_the_other_draws_alone(big, big_mixed):
    """Switching constraints and deadlines on changes nothing else drawn from the same key."""
    for field in ("arrival_s", "work_s", "num_gpu", "gpu_milli", "cpu_milli", "mem_mib", "valid"):
        np.testing.assert_array_equal(getattr(big, field), getattr(big_mixed, field), err_msg=field)


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("changes, field", [
    (dict(num_jobs=0), "num_jobs"),
    (dict(num_jobs=2.5), "num_jobs"),
    (dict(num_jobs=10, pad_to=5), "pad_to"),
    (dict(mean_interarrival_s=-1.0), "mean_interarrival_s"),
    (dict(mean_interarrival_s=0.0), "mean_interarrival_s"),
    (dict(mean_interarrival_s=math.nan), "mean_interarrival_s"),
    (dict(median_work_s=0.0), "median_work_s"),
    (dict(sigma=-0.1), "sigma"),
    (dict(max_work_s=0.0), "max_work_s"),
    (dict(model_constraint_prob=1.5), "model_constraint_prob"),
    (dict(model_constraint_prob=-0.1), "model_constraint_prob"),
    (dict(constraint_models=("T4", "H100")), "constraint_models"),
    (dict(constraint_models=("CPU",)), "constraint_models"),
    (dict(constraint_models=()), "constraint_models"),
    (dict(deadline_slack=0.0), "deadline_slack"),
    (dict(target_load=-0.5, cluster_capacity=10), "target_load"),
    (dict(cluster_capacity=0), "cluster_capacity"),
    (dict(job_classes=()), "job_classes"),
    (dict(job_classes=((1, 1500, 0, 0, 1),)), r"job_classes\[0\].gpu_milli"),
    (dict(job_classes=((1, 500, 0, 0, 1), (2, 500, 0, 0, 1))), r"job_classes\[1\].gpu_milli"),
    (dict(job_classes=((0, 100, 0, 0, 1),)), r"job_classes\[0\].gpu_milli"),
    (dict(job_classes=((9, 1000, 0, 0, 1),)), r"job_classes\[0\].num_gpu"),
    (dict(job_classes=((1, 500, -1, 0, 1),)), r"job_classes\[0\].cpu_milli"),
    (dict(job_classes=((1, 500, 0, 0, -1),)), r"job_classes\[0\].weight"),
    (dict(job_classes=((1, 500, 0, 0),)), r"job_classes\[0\]"),
    (dict(job_classes=((1, 500, 0, 0, 0),)), "job_classes"),
])
def test_validate_names_the_bad_field(changes, field):
    cfg = SyntheticConfig(**changes)
    with pytest.raises(ValueError, match=field):
        cfg.validate()
    with pytest.raises(ValueError, match=field):
        generate(jax.random.key(0), cfg)


def test_valid_configs_pass():
    for cfg in (SyntheticConfig(), SyntheticConfig(num_jobs=1, pad_to=1, sigma=0.0),
                SyntheticConfig(model_constraint_prob=1.0, constraint_models=("G2",), deadline_slack=1.0),
                SyntheticConfig(target_load=0.9, cluster_capacity=327, max_work_s=math.inf)):
        assert cfg.validate() is cfg


def test_single_job_and_zero_sigma():
    jobs = host(gen(jax.random.key(0), SyntheticConfig(num_jobs=1, sigma=0.0, pad_to=3)))
    assert jobs.valid.tolist() == [True, False, False]
    assert jobs.work_s[0] == pytest.approx(900.0)
    assert np.isfinite(jobs.arrival_s[0])
