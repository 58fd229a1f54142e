"""Gavel's throughput table (loading, speeds, validation) and its synthetic workload (statistics)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from jaxsched import cluster as C
from jaxsched import config as cfg_lib
from jaxsched import evaluate as ev
from jaxsched import experiment, paths
from jaxsched.errors import DataError
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import gavel as G
from tests.assertions import assert_names

gen = jax.jit(G.generate, static_argnums=1)
BIG = 20_000  # jobs per large sample
Z = 5.0  # a binomial share or a mean is off by more than Z standard errors with probability < 1e-6


def host(jobs):
    return jax.tree.map(np.asarray, jobs)


def within(count, n, p):
    """The count of n draws of probability p lies within Z standard errors of n p."""
    return abs(count - n * p) <= Z * math.sqrt(n * p * (1 - p))


# ================================================================ throughputs

def key(job, scale):
    return f"('{job}', {scale})"


def alone(x):
    return {"null": x, key("B", 1): [x / 2, 1.0]}  # a partner entry: not read


def small_table():
    """Two types: A runs distributed (1, 2, 4 and 8 GPUs), B does not."""
    more = {key("A", 4): alone(20.0), key("A", 8): alone(30.0)}
    return {
        "v100": {key("A", 1): alone(10.0), key("B", 1): alone(4.0), key("A", 2): alone(16.0), **more},
        "p100": {key("A", 1): alone(5.0), key("B", 1): alone(6.0), key("A", 2): alone(8.0), **more},
        "k80": {key("A", 1): alone(2.0), key("B", 1): alone(1.0), key("A", 2): alone(0.0), **more},
        "v100_unconsolidated": {key("A", 1): alone(10.0), key("B", 1): alone(4.0), key("A", 2): alone(12.0)},
    }


def write_json(tmp_path, obj, name="throughputs.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_speed_is_relative_to_the_v100_at_the_same_scale_factor(tmp_path):
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    assert tp.job_types == ("A", "B") and tp.gpu_types == ("k80", "p100", "v100")
    assert tp.distributed == (True, False)
    assert np.array_equal(tp.speed(1), [[0.2, 0.5, 1.0], [0.25, 1.5, 1.0]])
    s2 = tp.speed(2)
    assert np.array_equal(s2[0], [0.0, 0.5, 1.0]) and np.isnan(s2[1]).all()  # 0: cannot run; NaN: not measured
    spread = tp.speed(2, consolidated=False)
    assert spread[0, 2] == 12.0 / 16.0 and np.isnan(spread[0, :2]).all()  # no k80/p100 spread tables
    assert tp.steps_per_s[0, 1, 1] == 8.0  # [type A, scale factor 2, p100]
    assert np.array_equal(tp.speed(8)[0], [1.0, 1.0, 1.0])
    assert tp.report["zero_throughput"] == 1 and tp.report["unconsolidated_missing"] == 15 - 3  # measured, not spread
    with pytest.raises(DataError, match="one of") as e:
        tp.speed(3)
    assert_names(e.value, tp.path, None, "scale_factor")


def broken(change):
    obj = small_table()
    change(obj)
    return obj


@pytest.mark.parametrize("content, line, field, problem", [
    ("{\"v100\": {\n  \"x\": 1,\n}", 3, None, "not JSON"),
    ('{"v100": {}, "v100": {}}', None, None, "appears twice"),
    ("[1, 2]", None, None, "expected a JSON object"),
    (broken(lambda o: o.pop("k80")), None, "k80", "missing GPU type"),
    (broken(lambda o: o.__setitem__("p100", [])), None, "p100", "expected an object"),
    (broken(lambda o: o["v100"].__setitem__("A, 1", alone(1.0))), None, "v100 / A, 1", "not a job key"),
    (broken(lambda o: o["v100"].__setitem__(key("A", 3), alone(1.0))), None, f"v100 / {key('A', 3)}",
     "scale factor 3"),
    (broken(lambda o: o["k80"][key("B", 1)].pop("null")), None, f"k80 / {key('B', 1)}", "expected an object"),
    (broken(lambda o: o["k80"][key("B", 1)].__setitem__("null", "fast")), None, f"k80 / {key('B', 1)} / null",
     "not a number"),
    (broken(lambda o: o["k80"][key("B", 1)].__setitem__("null", -1.0)), None, f"k80 / {key('B', 1)} / null",
     ">= 0"),
    (broken(lambda o: o["v100"][key("B", 1)].__setitem__("null", 0)), None, "v100 / ('B', 1) / null",
     "0 steps/s on the reference GPU"),
    (broken(lambda o: o["v100"].__setitem__(key("C", 2), alone(1.0))), None, "v100 / ('C', 2)",
     "no scale factor 1"),
    (broken(lambda o: o["p100"].__setitem__(key("B", 2), alone(1.0))), None, "p100 / ('B', 2)",
     "not measured on the reference GPU"),
    (broken(lambda o: o["v100_unconsolidated"].__setitem__(key("B", 2), alone(1.0))), None,
     "v100_unconsolidated / ('B', 2)", "not measured on the reference GPU"),
    (broken(lambda o: o["p100"].pop(key("A", 2))), None, "p100 / ('A', 2)", "missing: measured on v100"),
])
def test_a_malformed_table_is_named_by_file_and_field(tmp_path, content, line, field, problem):
    path = write_json(tmp_path, content)
    with pytest.raises(DataError, match=problem) as e:
        G.load_throughputs(path)
    assert_names(e.value, path, line, field)


def test_missing_and_binary_files_are_named(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        G.load_throughputs(tmp_path / "nowhere.json")
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00")
    with pytest.raises(DataError, match="gzip"):
        G.load_throughputs(gz)


@pytest.fixture(scope="module")
def gavel_json():
    found = paths.data_dir()
    if found is None or not (found / "gavel" / "simulation_throughputs.json").is_file():
        pytest.skip("Gavel throughputs not found: set JAXSCHED_DATA or provide "
                    "../shared/data/gavel/simulation_throughputs.json (see shared/data/README.md)")
    return found / "gavel" / "simulation_throughputs.json"


def test_real_throughputs(gavel_json):
    tp = G.load_throughputs(gavel_json)
    raw = json.loads(gavel_json.read_text())
    assert tp.job_types == G.JOB_TYPES and tp.distributed == G.DISTRIBUTED and sum(tp.distributed) == 19
    assert tp.report["zero_throughput"] == 3 and tp.report["unconsolidated_missing"] == 6
    for s in G.SCALE_FACTORS:
        ref = tp.speed(s)[:, 2]
        assert np.array_equal(ref[np.isfinite(ref)], np.ones(26 if s == 1 else 19))
    # each entry, read independently, over the same job's V100 throughput
    for t, job in enumerate(G.JOB_TYPES):
        for s in G.SCALE_FACTORS:
            k = key(job, s)
            for g, gpu in enumerate(G.GPU_TYPES):
                want = raw[gpu][k]["null"] / raw["v100"][k]["null"] if k in raw["v100"] else math.nan
                np.testing.assert_equal(tp.speed(s)[t, g], want)
    # the V100's speed-up over the K80 differs several-fold between job types (the issue's point)
    k80 = tp.speed(1)[:, 0]
    assert (1 / k80).max() / (1 / k80).min() > 5
    cyclegan = G.JOB_TYPES.index("CycleGAN")
    assert tp.speed(1)[cyclegan, 0] == raw["k80"][key("CycleGAN", 1)]["null"] / raw["v100"][key("CycleGAN", 1)]["null"]


# ================================================================ the generator

MULTI = G.GavelConfig(jobs_per_hour=6.0, num_jobs=BIG, multi_gpu=True)


@pytest.fixture(scope="module")
def multi():
    return host(gen(jax.random.key(11), MULTI))


SMALL = G.GavelConfig(jobs_per_hour=3.0, num_jobs=500, multi_gpu=True)  # shared: one compile


def test_deterministic_per_key_and_keys_differ():
    a, b, c = (host(gen(jax.random.key(k), SMALL)) for k in (5, 5, 6))
    for x, y, z, name in zip(a, b, c, G.GavelJobs._fields):
        np.testing.assert_array_equal(x, y, err_msg=name)
        assert not np.array_equal(x, z), name
    keys = jax.random.split(jax.random.key(0), 3)
    batch = host(jax.jit(jax.vmap(lambda k: G.generate(k, SMALL)))(keys))
    for i in range(3):
        for x, y in zip(batch, host(gen(keys[i], SMALL))):
            np.testing.assert_array_equal(x[i], y)
    assert a.arrival_s.dtype == np.float32 and a.num_gpus.dtype == np.int32 and a.job_type.dtype == np.int32


def test_single_gpu_keeps_arrivals_and_durations_of_the_key():
    one = host(gen(jax.random.key(5), dataclasses.replace(SMALL, multi_gpu=False)))
    many = host(gen(jax.random.key(5), SMALL))
    assert (one.num_gpus == 1).all() and (many.num_gpus > 1).any()
    np.testing.assert_array_equal(one.arrival_s, many.arrival_s)
    np.testing.assert_array_equal(one.work_s, many.work_s)
    # at one GPU every type is drawn, distributed or not
    assert set(np.unique(one.job_type)) == set(range(len(G.JOB_TYPES)))


def test_arrivals_are_poisson_at_the_rate(multi):
    assert (np.diff(multi.arrival_s) >= 0).all() and multi.arrival_s[0] > 0
    gaps = np.diff(np.concatenate([[0.0], multi.arrival_s.astype(np.float64)]))
    mean = 3600.0 / MULTI.jobs_per_hour
    assert abs(gaps.mean() - mean) <= Z * mean / math.sqrt(BIG)  # exponential: sd = mean
    assert within((gaps > mean).sum(), BIG, math.exp(-1.0))  # P(gap > mean) = 1/e


def test_durations_follow_gavels_mixture(multi):
    exponent = np.log10(multi.work_s.astype(np.float64) / 60.0)
    assert exponent.min() >= 1.5 - 1e-5 and exponent.max() <= 4.0 + 1e-5
    assert within((exponent > 3.0 + 1e-5).sum(), BIG, G.LONG_PROB)
    # the whole distribution (DKW: sup |F_n - F| > eps with probability <= 2 exp(-2 n eps^2) = 1e-9)
    xs = np.sort(exponent)
    cdf = 0.8 * np.clip((xs - 1.5) / 1.5, 0, 1) + 0.2 * np.clip(xs - 3.0, 0, 1)
    ecdf_hi, ecdf_lo = np.arange(1, BIG + 1) / BIG, np.arange(BIG) / BIG
    gap = max(np.abs(ecdf_hi - cdf).max(), np.abs(ecdf_lo - cdf).max())
    assert gap <= math.sqrt(math.log(2 / 1e-9) / (2 * BIG))
    # the mean work (heavy-tailed but bounded: the CLT holds with the sample's own sd)
    w = multi.work_s.astype(np.float64)
    assert abs(w.mean() - G.expected_work_s()) <= Z * w.std() / math.sqrt(BIG)
    assert G.expected_work_s() == pytest.approx(0.2 * 60 * 9000 / math.log(10) + 0.8 * 60 * (1000 - 10 ** 1.5)
                                                / (1.5 * math.log(10)))


def test_scale_factors_and_job_types(multi):
    for s, p in zip(G.SCALE_FACTORS, G.SCALE_FACTOR_PROBS):
        assert within((multi.num_gpus == s).sum(), BIG, p), s
    assert set(np.unique(multi.num_gpus)) == set(G.SCALE_FACTORS)
    assert np.dot(G.SCALE_FACTORS, G.SCALE_FACTOR_PROBS) == G.expected_gpus(MULTI) == 1.9
    distributed = np.asarray(G.DISTRIBUTED)
    big = multi.num_gpus > 1
    assert distributed[multi.job_type[big]].all()  # only distributed types run on several GPUs
    for group, types in ((~big, np.arange(26)), (big, np.flatnonzero(distributed))):
        counts = np.bincount(multi.job_type[group], minlength=26)
        n = int(group.sum())
        assert all(within(counts[t], n, 1 / len(types)) for t in types)  # uniform among the allowed


@pytest.mark.parametrize("changes, field", [
    ({"jobs_per_hour": 0.0}, "jobs_per_hour"),
    ({"jobs_per_hour": math.inf}, "jobs_per_hour"),
    ({"jobs_per_hour": True}, "jobs_per_hour"),
    ({"num_jobs": 0}, "num_jobs"),
    ({"num_jobs": 2.5}, "num_jobs"),
    ({"multi_gpu": "yes"}, "multi_gpu"),
    ({"distributed": ()}, "distributed"),
    ({"distributed": (1, 0)}, "distributed"),
    ({"distributed": (False, False), "multi_gpu": True}, "distributed"),
    ({"gang_speed": "unconsolidated"}, "gang_speed"),
    ({"agnostic_speed": "yes"}, "agnostic_speed"),
    ({"generator": "numpy"}, "generator"),
])
def test_bad_config_is_named(changes, field):
    cfg = G.GavelConfig(**{"jobs_per_hour": 1.0, **changes})
    with pytest.raises(DataError) as e:
        G.generate(jax.random.key(0), cfg)
    assert_names(e.value, "GavelConfig", None, field)


def test_the_types_of_a_loaded_table_drive_the_generator(tmp_path):
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    jobs = host(gen(jax.random.key(2), G.GavelConfig(1.0, 400, True, tp.distributed)))
    assert set(np.unique(jobs.job_type)) == {0, 1}
    assert (jobs.job_type[jobs.num_gpus > 1] == 0).all()  # B is not distributed



# The first jobs of two streams Gavel's own simulator drew (commit 2d8e076,
# simulate_scheduler_with_generated_jobs.py on 36:36:36 one-GPU servers, recorded as its scheduler
# added them): (job type, total steps, scale factor, arrival s).
GAVEL_STREAMS = {
    (0, 1.0, True): [("ResNet-18 (batch size 64)", 17484476, 8, 0.0),
                     ("Transformer (batch size 16)", 343170, 1, 978.344292),
                     ("Recommendation (batch size 1024)", 28512, 1, 3807.099310),
                     ("Recommendation (batch size 4096)", 28852, 1, 5470.170783),
                     ("LM (batch size 10)", 833178, 4, 8804.271778),
                     ("A3C", 14968, 1, 12342.178658)],
    (3, 4.0, False): [("Recommendation (batch size 4096)", 115525, 1, 0.0),
                      ("Recommendation (batch size 8192)", 98225, 1, 1419.012678),
                      ("ResNet-18 (batch size 128)", 766746, 1, 2972.154894),
                      ("ResNet-18 (batch size 128)", 2594530, 1, 3569.444951),
                      ("ResNet-50 (batch size 128)", 10014, 1, 3842.413772),
                      ("Recommendation (batch size 8192)", 417962, 1, 3842.820407)],
}


@pytest.mark.parametrize("seed, rate, multi_gpu", list(GAVEL_STREAMS))
def test_generate_as_gavel_draws_the_streams_gavels_simulator_draws(seed, rate, multi_gpu, gavel_json):
    """Gavel's seed, rate and workload give its stream job for job: type, scale factor,
    arrival, and total steps = work x the V100's throughput at the scale factor, to the step
    Gavel truncates it to (a single-GPU stream still draws, and drops, a scale factor)."""
    want = GAVEL_STREAMS[(seed, rate, multi_gpu)]
    jobs = G.generate_as_gavel(seed, G.GavelConfig(rate, 40, multi_gpu))
    tp = G.load_throughputs(gavel_json)
    n = len(want)
    assert [G.JOB_TYPES[t] for t in jobs.job_type[:n]] == [w[0] for w in want]
    assert jobs.num_gpus[:n].tolist() == [w[2] for w in want]
    np.testing.assert_allclose(jobs.arrival_s[:n], [w[3] for w in want], rtol=1e-6, atol=1e-3)
    steps = [float(jobs.work_s[j]) * tp.steps_per_s[jobs.job_type[j], G.SCALE_FACTORS.index(w[2]), 2]
             for j, w in enumerate(want)]
    np.testing.assert_allclose(steps, [w[1] for w in want], rtol=1e-6, atol=1.0)


def test_generate_as_gavel_has_the_generators_distributions():
    """Other draws, the same law as ``generate``: the scale factors' shares, the long jobs'
    share, the mean gap, a non-distributed type never above one GPU; seeds differ."""
    cfg = G.GavelConfig(2.0, BIG, True)
    jobs = G.generate_as_gavel(5, cfg)
    for s, p in zip(G.SCALE_FACTORS, G.SCALE_FACTOR_PROBS):
        assert within(int((jobs.num_gpus == s).sum()), BIG, p)
    assert within(int((jobs.work_s > 60 * 10 ** 3).sum()), BIG, G.LONG_PROB)
    gaps = np.diff(jobs.arrival_s.astype(np.float64))
    assert abs(gaps.mean() - 1800.0) <= Z * 1800.0 / math.sqrt(len(gaps))
    assert np.asarray(G.DISTRIBUTED)[jobs.job_type[jobs.num_gpus > 1]].all()
    assert not np.array_equal(G.generate_as_gavel(6, cfg).job_type, jobs.job_type)
    single = G.generate_as_gavel(5, dataclasses.replace(cfg, multi_gpu=False))
    assert (single.num_gpus == 1).all()
    np.testing.assert_array_equal(single.arrival_s, jobs.arrival_s)  # its own generator


def trace_line(kind="A", steps="160", scale="2", arrival="60.0", fields=None):
    values = [kind, "cd %s && python3 main.py", "--num_steps", "0", steps, scale, "1", "-1.000000", arrival]
    return "\t".join(values if fields is None else fields)


def test_load_trace_reads_gavels_trace_format(tmp_path):
    """Gavel's trace lines (its ``parse_trace``'s nine fields) as ``GavelJobs``: the type's
    index, the scale factor, the arrival, and work = total steps over the V100's throughput at
    that scale factor (A at 2 GPUs: 16 steps/s; B at 1: 4)."""
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    trace = tmp_path / "trace.txt"
    trace.write_text("\n".join([trace_line(), trace_line("B", "400", "1", "60.0"), "",
                                 trace_line("A", "5", "1", "7200.5")]) + "\n")
    jobs = G.load_trace(trace, tp)
    assert jobs.job_type.tolist() == [0, 1, 0] and jobs.num_gpus.tolist() == [2, 1, 1]
    assert jobs.work_s.tolist() == [10.0, 100.0, 0.5] and jobs.arrival_s.tolist() == [60.0, 60.0, 7200.5]


@pytest.mark.parametrize("line, row, field, problem", [
    (trace_line(fields=["A", "x", "1"]), 2, None, "3 tab-separated fields, Gavel's trace format has 9"),
    (trace_line("C"), 2, "job_type", "'C' is not a job type"),
    (trace_line(scale="3"), 2, "scale_factor", r"must be one of \(1, 2, 4, 8\)"),
    (trace_line(scale="two"), 2, "scale_factor", "not a number"),
    (trace_line("B", scale="2"), 2, "scale_factor", "B was not measured on 2 v100 GPUs"),
    (trace_line(steps="many"), 2, "total_steps", "not a number: 'many'"),
    (trace_line(steps="0"), 2, "total_steps", "must be a finite number > 0"),
    (trace_line(arrival="-5"), 2, "arrival_time", "must be a finite number >= 0"),
    (trace_line(arrival="nan"), 2, "arrival_time", "must be a finite number >= 0"),
    (trace_line(arrival="10"), 2, "arrival_time", "10.0 is before the line above's 60.0"),
    (trace_line(fields=["A", "c", "-n", "0", "1", "1", "1", "soon", "70"]), 2, "SLO", "not a number"),
])
def test_a_malformed_trace_line_is_named_by_file_line_and_field(tmp_path, line, row, field, problem):
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    trace = tmp_path / "trace.txt"
    trace.write_text(trace_line() + "\n" + line + "\n")
    with pytest.raises(DataError, match=problem) as e:
        G.load_trace(trace, tp)
    assert_names(e.value, trace, row, field)
    trace.write_text("\n\n")
    with pytest.raises(DataError, match="no jobs"):
        G.load_trace(trace, tp)


# ================================================================ into the simulator

def drawn(job_type, num_gpus):
    """``GavelJobs`` of the given types and scale factors, one an hour, an hour of work each."""
    n = len(job_type)
    return G.GavelJobs(arrival_s=np.arange(n, dtype=np.float32) * 3600, work_s=np.full(n, 3600.0, np.float32),
                       num_gpus=np.asarray(num_gpus, np.int32), job_type=np.asarray(job_type, np.int32))


def test_type_rows_pair_each_scale_factor_on_one_server_with_spread():
    assert G.type_row(0, 1) == 0 and G.type_row(0, 1, spread=True) == 1
    assert G.type_row(0, 8, True) == 7 and G.type_row(1, 1) == 8 and G.type_row(1, 2, True) == 11
    assert G.type_row(3, [1, 2, 3], [False, True, True]).tolist() == [24, 27, -1]
    rows = G.type_row(np.arange(26)[:, None, None], np.asarray(G.SCALE_FACTORS)[None, :, None],
                      np.array([False, True])[None, None, :])
    assert sorted(rows.ravel().tolist()) == list(range(26 * 8))  # one row each, none skipped


def test_jobs_larger_than_a_server_span_servers_at_gavels_spread_speed(tmp_path):
    """On one-GPU servers a 2-GPU job of type A takes A's spread row: 12/16 on the V100 (its
    unconsolidated over its consolidated throughput), on the P100 (not measured spread) its
    one-server speed 8/16 times the V100's spread factor 12/16, and the K80 (0 steps/s) is
    off its model mask. On 2-GPU servers the same job fits one server: its consolidated row."""
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    speeds = G.type_speeds(tp, G.MODELS)
    assert len(speeds["V100"]) == 2 * 8  # 2 types x 4 scale factors x {one server, spread}
    spread_a2 = G.type_row(0, 2, spread=True)
    assert speeds["V100"][spread_a2] == 12 / 16 and speeds["P100"][spread_a2] == (8 / 16) * (12 / 16)
    assert speeds["K80"][spread_a2] == G.PLACEHOLDER_SPEED  # 0: never used, the mask keeps it off
    assert speeds["P100"][G.type_row(0, 2)] == 8 / 16 and speeds["V100"][G.type_row(0, 2)] == 1.0
    np.testing.assert_array_equal(G.spread_speed(tp, 2)[0], [0.0, 0.375, 0.75])

    jobs = G.to_jobs(drawn([0, 0, 1], [1, 2, 1]), tp, G.MODELS, gpus_per_node=1, max_span=2)
    assert jobs.job_type.tolist() == [G.type_row(0, 1), spread_a2, G.type_row(1, 1)]
    assert jobs.num_gpu.tolist() == [1, 2, 1] and (jobs.gpu_milli == 1000).all()
    assert jobs.model_mask[1] == C.model_mask(["P100", "V100"])
    assert jobs.model_mask[0] == C.model_mask(["K80", "P100", "V100"])
    on_two = G.to_jobs(drawn([0, 0, 1], [1, 2, 1]), tp, G.MODELS, gpus_per_node=2)
    assert on_two.job_type.tolist() == [G.type_row(0, 1), G.type_row(0, 2), G.type_row(1, 1)]
    assert on_two.model_mask[1] == C.model_mask(["P100", "V100"])  # 0 on the K80 at 2 GPUs either way


def test_consolidated_gang_speed_runs_a_gang_at_its_one_server_throughput(tmp_path):
    """Gavel's simulator reads only the consolidated throughputs: with ``gang_speed``
    "consolidated" the 2-GPU job of type A on one-GPU servers takes A's one-server row (1.0 on
    the V100, 8/16 on the P100; the K80's 0 keeps it off), not its spread one; a bad mode is
    named."""
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    jobs = G.to_jobs(drawn([0, 0, 1], [1, 2, 1]), tp, G.MODELS, gpus_per_node=1, max_span=2,
                     gang_speed="consolidated")
    assert jobs.job_type.tolist() == [G.type_row(0, 1), G.type_row(0, 2), G.type_row(1, 1)]
    assert jobs.model_mask[1] == C.model_mask(["P100", "V100"])
    speeds = G.type_speeds(tp, G.MODELS)
    assert speeds["V100"][jobs.job_type[1]] == 1.0 and speeds["P100"][jobs.job_type[1]] == 8 / 16
    with pytest.raises(DataError, match="must be one of") as e:
        G.to_jobs(drawn([0], [1]), tp, G.MODELS, gpus_per_node=1, gang_speed="fast")
    assert_names(e.value, "gavel jobs", None, "gang_speed")


def test_agnostic_speeds_are_each_types_mean_over_the_gpus_where_it_runs(tmp_path):
    """Gavel's agnostic policies spread a job's time over the GPU types in proportion to their
    GPUs: with 2 V100s, 1 P100 and 1 K80 type A on one GPU runs at (2 x 1.0 + 0.5 + 0.2) / 4
    on every type, B at (2 x 1.0 + 1.5 + 0.25) / 4; A on 2 GPUs (0 on the K80, which its mask
    keeps it off) at (2 x 1.0 + 0.5) / 3 on the V100 and P100."""
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    mean = G.type_speeds(tp, G.MODELS, gpus={"V100": 2, "P100": 1, "K80": 1})
    for model in ("V100", "P100", "K80"):
        assert mean[model][G.type_row(0, 1)] == pytest.approx(2.7 / 4)
        assert mean[model][G.type_row(1, 1)] == pytest.approx(3.75 / 4)
    assert mean["V100"][G.type_row(0, 2)] == mean["P100"][G.type_row(0, 2)] == pytest.approx(2.5 / 3)
    assert mean["K80"][G.type_row(0, 2)] == G.PLACEHOLDER_SPEED
    alone = G.type_speeds(tp, G.MODELS)
    assert alone["K80"][G.type_row(0, 1)] == pytest.approx(0.2)  # without gpus: each type its own


@pytest.mark.parametrize("kwargs, job, field, problem", [
    (dict(gpus_per_node=1), drawn([0, 0], [1, 2]), "num_gpus",
     r"1 of 2 jobs need more than the 1 GPUs of 1 server\(s\) of 1.*job 1, type 0, 2 GPUs"),
    (dict(gpus_per_node=1, max_span=4), drawn([0, 0], [1, 8]), "num_gpus", "more than the 4 GPUs of 4 server"),
    (dict(gpus_per_node=1, max_span=0), drawn([0], [1]), "max_span", "integer >= 1"),
    (dict(gpus_per_node=1, max_span=2.0), drawn([0], [1]), "max_span", "integer >= 1"),
    # A at 4 GPUs is measured on one server only, on no GPU spread: nothing to estimate from
    (dict(gpus_per_node=1, max_span=4), drawn([0, 0], [4, 4]), "job_type", "2 of 2 jobs .* did not measure"),
    (dict(gpus_per_node=1, max_span=2), drawn([1], [2]), "job_type", "did not measure"),  # B is not distributed
])
def test_jobs_the_cluster_cannot_run_are_refused_naming_the_field(tmp_path, kwargs, job, field, problem):
    tp = G.load_throughputs(write_json(tmp_path, small_table()))
    with pytest.raises(DataError, match=problem) as e:
        G.to_jobs(job, tp, G.MODELS, **kwargs)
    assert_names(e.value, "gavel jobs", None, field)
    G.to_jobs(drawn([0, 0], [4, 4]), tp, G.MODELS, gpus_per_node=4)  # on one server A at 4 GPUs is measured


def test_real_spread_speeds_are_measured_or_estimated_from_the_v100(gavel_json):
    """Every distributed type has a spread speed on every GPU type at 2, 4 and 8 GPUs: Gavel's
    measured one, except the K80's ResNet-50 at batch sizes 64 and 128, estimated from the
    V100's spread factor (and 0 at 128, where the K80 cannot run it on one server either)."""
    tp = G.load_throughputs(gavel_json)
    dist = np.asarray(tp.distributed)
    for s in (2, 4, 8):
        spread, measured = G.spread_speed(tp, s), tp.speed(s, consolidated=False)
        assert np.isfinite(spread[dist]).all() and np.isnan(spread[~dist]).all()
        estimated = np.isnan(measured) & np.isfinite(spread)
        names = {tp.job_types[t] for t in np.flatnonzero(estimated.any(axis=1))}
        assert names == {"ResNet-50 (batch size 64)", "ResNet-50 (batch size 128)"}
        assert (np.flatnonzero(estimated.any(axis=0)) == [0]).all()  # K80 only
        r64, r128 = tp.job_types.index("ResNet-50 (batch size 64)"), tp.job_types.index("ResNet-50 (batch size 128)")
        assert spread[r64, 0] == pytest.approx(tp.speed(s)[r64, 0] * measured[r64, 2])
        assert spread[r128, 0] == 0.0


# ================================================================ the preset (configs/gavel.toml)

PRESET = Path(__file__).parents[2] / "configs" / "gavel.toml"


def preset(*overrides, throughputs=None):
    """configs/gavel.toml with ``overrides`` (and the throughputs found here, when given)."""
    where = [f'workload.throughputs="{throughputs}"'] if throughputs else []
    return cfg_lib.load(PRESET, [*where, *overrides])


def test_a_job_runs_as_much_longer_on_a_k80_as_gavels_table_says(gavel_json):
    """Hand-picked job types through the preset's path (its config, cluster and first-fit
    rollout) on 2 K80 and 2 V100 one-GPU servers: each type's run time on a K80 over its run
    time on a V100 is the V100's throughput over the K80's, read from the JSON itself. At t=0
    ResNet-18 (batch size 256: the K80's worst) and Recommendation (batch size 1024: faster on
    the K80) take one GPU each of both types; at 1e6 s Transformer and A3C do; at 2e6 s two
    2-GPU LM jobs span the two K80s and the two V100s, at Gavel's spread-over-servers speed."""
    config = preset('cluster.node_groups=[["K80", 2, 1], ["V100", 2, 1]]', "env.tie_break=identity",
                    "env.warmup_jobs=0", "env.measured_jobs=0", "eval.episodes=1", "eval.batch_size=1",
                    throughputs=gavel_json)
    nodes = experiment.build_nodes(config)
    assert [C.MODEL_NAMES[m] for m in nodes.model] == ["K80", "K80", "V100", "V100"]
    tp = G.load_throughputs(gavel_json)
    picks = [("ResNet-18 (batch size 256)", 1), ("Recommendation (batch size 1024)", 1),
             ("Transformer (batch size 16)", 1), ("A3C", 1), ("LM (batch size 80)", 2)]
    order = [0, 1, 0, 1, 2, 3, 2, 3, 4, 4]  # by arrival; each pair's first lands on a K80
    arrival = np.array([0, 0, 0, 0, 1e6, 1e6, 1e6, 1e6, 2e6, 2e6], np.float32)
    jobs = G.to_jobs(G.GavelJobs(arrival, np.full(10, 3600.0, np.float32),
                                 np.array([picks[i][1] for i in order], np.int32),
                                 np.array([tp.job_types.index(picks[i][0]) for i in order], np.int32)),
                     tp, G.MODELS, gpus_per_node=1, max_span=config.env.max_span)
    params = to_device(EnvParams(experiment.build_cluster(config, nodes), experiment.gavel_target(config.workload.gavel)))
    batch = jax.tree.map(lambda x: x[None], to_device(jobs))
    _, rec = ev.run_scheduler("first-fit", config, params, batch, experiment.episode_keys(0, 1, 1), 100)
    node, run_s = rec["node"][0], (rec["end_s"] - rec["start_s"])[0]
    assert (rec["outcome"][0] == 1).all()
    assert node.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 2] and rec["span_node"][0, 8:, 0].tolist() == [1, 3]

    raw = json.loads(gavel_json.read_text())
    for name, gpus in picks:
        k80, v100 = [j for j in range(10) if picks[order[j]][0] == name]
        suffix = "" if gpus == 1 else "_unconsolidated"  # 2 GPUs on one-GPU servers: spread
        steps = {gpu: raw[gpu + suffix][key(name, gpus)]["null"] for gpu in ("k80", "v100")}
        assert run_s[k80] / run_s[v100] == pytest.approx(steps["v100"] / steps["k80"], rel=1e-5), name
        one_server_v100 = raw["v100"][key(name, gpus)]["null"]
        assert run_s[v100] == pytest.approx(3600.0 * one_server_v100 / steps["v100"], rel=1e-5), name
    assert run_s[0] / run_s[2] > 10 and run_s[1] < run_s[3]  # ResNet-18 11.6x slower, Recommendation faster


@pytest.mark.slow
def test_fifo_runs_gavels_multi_gpu_workload_end_to_end_spanning_servers(gavel_json, tmp_path):
    """``python -m jaxsched evaluate --config configs/gavel.toml`` (in-process), shrunk to two
    episodes of 300 jobs: FIFO (first-fit) places every job, each job of k > 1 GPUs on k
    one-GPU servers, holding one GPU on each."""
    assert ev.main(["--config", str(PRESET), "--set", f'workload.throughputs="{gavel_json}"',
                    "--set", "workload.gavel.num_jobs=300", "--set", "env.warmup_jobs=50",
                    "--set", "env.measured_jobs=150", "--set", "eval.batch_size=2", "--episodes", "2",
                    "--schedulers", "first-fit", "--out", str(tmp_path), "--per-job", "--no-plots", "--quiet"]) == 0
    jobs = pd.read_csv(tmp_path / "per_job.csv")
    assert len(jobs) == 600 and (jobs.loc[jobs["measured"], "outcome"] == "placed").all()
    placed = jobs[jobs["outcome"] == "placed"]  # the episode ends when the measured jobs are done
    multi = placed[placed["num_gpu"] > 1]
    assert set(multi["num_gpu"]) == {2, 4, 8}
    assert (multi["num_nodes"] == multi["num_gpu"]).all() and (placed.loc[placed["num_gpu"] == 1, "num_nodes"] == 1).all()
    summary = pd.read_csv(tmp_path / "per_episode.csv")
    assert (summary["measured_finished"] == 150).all() and (summary["failed"] == 0).all()
    assert (summary["jct_mean_2to8"] > 0).all()  # multi-GPU jobs among the measured, finished


@pytest.mark.parametrize("override, field, problem", [
    ("workload.gavel.jobs_per_hour=0.0", "jobs_per_hour", "finite number > 0"),
    ("workload.gavel.distributed=[false, false]", "distributed", "needs at least one distributed job type"),
    ("env.spread_penalty=0.8", "env.spread_penalty", "must be 1.0"),
    ('workload.gavel.gang_speed="fast"', "gang_speed", "must be one of"),
    ('workload.throughputs="nowhere/throughputs.json"', None, "not found"),
])
def test_bad_gavel_workload_settings_are_named(override, field, problem):
    config = preset(override)
    with pytest.raises(DataError, match=problem) as e:
        experiment.build_workload(config, experiment.build_nodes(config))
    assert e.value.field == field


@pytest.mark.parametrize("override, problem", [
    ('cluster.node_groups=[["H100", 36, 1]]', r"node_groups: group 0 \('H100', 36, 1\): unknown GPU model"),
    ('cluster.node_groups=[["V100", 36, 1], ["K80", 0, 1]]', "group 1 .* servers must be an integer in"),
    ('cluster.node_groups=[["V100", 36, 9]]', "GPUs per server must be an integer in"),
    ('cluster.node_groups=[["V100", 36]]', r"expected \[model, servers, GPUs per server\]"),
    ('cluster.node_model="V100"', "node_groups and node_list, pai_machines or node_model"),
])
def test_bad_node_groups_are_named_when_the_config_loads(override, problem):
    with pytest.raises(DataError, match=f"ClusterConfig.*{problem}"):
        preset(override)


def test_gavel_settings_the_data_refuses_are_named(gavel_json):
    small = ("eval.episodes=1", "workload.gavel.num_jobs=200", "env.warmup_jobs=0", "env.measured_jobs=0")
    config = preset(*small, "env.max_span=4", throughputs=gavel_json)  # 8-GPU jobs on 1-GPU servers
    with pytest.raises(DataError, match="need more than the 4 GPUs of 4 server") as e:
        experiment.build_workload(config, experiment.build_nodes(config))
    assert e.value.field == "num_gpus"
    config = preset(*small, 'cluster.node_groups=[["T4", 4, 1]]', throughputs=gavel_json)
    with pytest.raises(DataError, match="no speeds") as e:
        experiment.episodes(config, experiment.build_nodes(config))
    assert e.value.field == "T4"
    config = preset(*small, "workload.gavel.distributed=[true, false]", throughputs=gavel_json)
    with pytest.raises(DataError, match="2 values; .* has 26 job types") as e:
        experiment.build_workload(config, experiment.build_nodes(config))
    assert e.value.field == "workload.gavel.distributed"
    with pytest.raises(DataError, match="no training workload") as e:
        experiment.training_workload(config, None, experiment.build_nodes(config))
    assert e.value.field == "workload.source"


def test_the_preset_draws_gavels_workload_on_gavels_cluster(gavel_json):
    """configs/gavel.toml as shipped: 108 one-GPU servers, a third of each GPU type, and each
    episode Gavel's workload at 0.8 jobs an hour as ``gavel.generate`` draws it from the
    episode's key, every job on the type row ``to_jobs`` gives it."""
    config = preset("eval.episodes=2", throughputs=gavel_json)
    nodes = experiment.build_nodes(config)
    models = [C.MODEL_NAMES[m] for m in nodes.model]
    assert len(nodes) == 108 and set(nodes.num_gpus) == {1}
    assert {m: models.count(m) for m in set(models)} == {"V100": 36, "P100": 36, "K80": 36}
    eps = experiment.episodes(config, nodes)
    assert eps.info["jobs_per_hour"] == 0.8 and eps.info["expected_offered_load"] == pytest.approx(0.3726, abs=1e-4)
    tp = G.load_throughputs(gavel_json)
    drawn = host(gen(experiment.episode_keys(config.eval.seed, 2, 0)[1], config.workload.gavel))
    jobs = jax.tree.map(np.asarray, eps.jobs)
    np.testing.assert_array_equal(jobs.num_gpu[1], drawn.num_gpus)
    np.testing.assert_array_equal(jobs.arrival_s[1], drawn.arrival_s)
    # Gavel's rules: a gang at its consolidated throughput, on one GPU type
    assert config.workload.gavel.gang_speed == "consolidated" and config.env.gang_one_model
    np.testing.assert_array_equal(jobs.job_type[1], G.type_row(drawn.job_type, drawn.num_gpus))
    speed = np.asarray(eps.params.cluster.type_speed)
    assert speed.shape == (108, 26 * 8)
    r18 = G.type_row(tp.job_types.index("ResNet-18 (batch size 256)"), 1)
    assert speed[[0, 36, 72], r18] == pytest.approx(tp.speed(1)[tp.job_types.index("ResNet-18 (batch size 256)"), ::-1])
    config = preset("eval.episodes=1", "workload.gavel.agnostic_speed=true", throughputs=gavel_json)
    mean = np.asarray(experiment.build_cluster(config, nodes).type_speed)
    r18_speeds = tp.speed(1)[tp.job_types.index("ResNet-18 (batch size 256)")]
    assert mean[[0, 36, 72], r18] == pytest.approx(np.full(3, r18_speeds.mean()))  # 36 of each type


def test_episodes_are_gavels_own_streams_or_a_trace_in_its_format(gavel_json, tmp_path):
    """``workload.gavel.generator = "gavel"``: episode i is Gavel's stream of seed eval.seed +
    i. ``workload.trace``: that file's first num_jobs jobs in every episode, at their own
    arrival times; a trace shorter than num_jobs, and a load sweep over it, are refused."""
    small = ("eval.episodes=2", "eval.seed=3", "workload.gavel.num_jobs=30", "env.warmup_jobs=0",
             "env.measured_jobs=0")
    config = preset(*small, 'workload.gavel.generator="gavel"', throughputs=gavel_json)
    nodes = experiment.build_nodes(config)
    jobs = jax.tree.map(np.asarray, experiment.episodes(config, nodes).jobs)
    for e, seed in enumerate((3, 4)):
        want = G.generate_as_gavel(seed, config.workload.gavel)
        np.testing.assert_array_equal(jobs.arrival_s[e], want.arrival_s)
        np.testing.assert_array_equal(jobs.job_type[e], G.type_row(want.job_type, want.num_gpus))

    tp = G.load_throughputs(gavel_json)
    ref = tp.gpu_types.index("v100")
    want = G.generate_as_gavel(3, config.workload.gavel)
    lines = [trace_line(tp.job_types[t], str(int(w * tp.steps_per_s[t, G.SCALE_FACTORS.index(g), ref])), str(g),
                        f"{a:.6f}") for t, w, g, a in zip(want.job_type, want.work_s, want.num_gpus, want.arrival_s)]
    (tmp_path / "trace.txt").write_text("\n".join(lines) + "\n")
    config = preset(*small, f'workload.trace="{tmp_path / "trace.txt"}"', "workload.gavel.num_jobs=25",
                    throughputs=gavel_json)
    eps = experiment.episodes(config, nodes)
    replayed = jax.tree.map(np.asarray, eps.jobs)
    assert eps.info["trace"] == str(tmp_path / "trace.txt") and "jobs_per_hour" not in eps.info
    for e in range(2):
        np.testing.assert_array_equal(replayed.arrival_s[e, :25], want.arrival_s[:25])
        np.testing.assert_array_equal(replayed.num_gpu[e, :25], want.num_gpus[:25])
        np.testing.assert_allclose(replayed.work_s[e, :25], want.work_s[:25], rtol=1e-3)
    with pytest.raises(DataError, match="31 jobs per episode; the trace .* has 30") as err:
        experiment.build_workload(dataclasses.replace(config, workload=dataclasses.replace(
            config.workload, gavel=dataclasses.replace(config.workload.gavel, num_jobs=31))), nodes)
    assert err.value.field == "workload.gavel.num_jobs"
    with pytest.raises(DataError, match="replayed at its own arrival times") as err:
        experiment.with_load(config, 0.5, nodes)
    assert err.value.field == "eval.sweep_loads"


def test_a_load_sweep_scales_the_rate_to_the_nominal_load():
    """``eval.sweep_loads`` (``experiment.with_load``) sets jobs_per_hour so that
    ``gavel.offered_load`` on the cluster's work capacity is the load asked for; the other
    settings, and so the episodes' draws but for their arrival times, stay."""
    config = preset()
    nodes = experiment.build_nodes(config)
    capacity = C.work_capacity(nodes)
    assert capacity == pytest.approx(36 * (1.0 + 0.6 + 0.3))
    swept = experiment.with_load(config, 0.5, nodes).workload.gavel
    assert G.offered_load(swept, capacity) == pytest.approx(0.5)
    assert G.offered_load(config.workload.gavel, capacity) == pytest.approx(
        0.8 / 3600 * G.expected_work_s() * 1.9 / capacity)
    assert dataclasses.replace(swept, jobs_per_hour=0.8) == config.workload.gavel
