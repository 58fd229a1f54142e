"""From a run config to what a run needs: nodes, workload, env params and episode keys.

The one way through the code from a ``jaxsched.config.Config`` to arrays. ``evaluate``,
``train``, ``gymnax_env`` and the scripts all call it, so a setting read here means the same
everywhere::

    nodes = experiment.build_nodes(config)              # NodeTable: node list, PAI machines, groups or preset
    ep = experiment.episodes(config, nodes)             # held-out episodes: jobs, params, keys
    ep.jobs                                             # Jobs, every field [E, J]
    env_params, workload = experiment.training_workload(config, train, nodes)

Episode i of a run is fixed by (``eval.seed``, i) alone: its jobs come from
``episode_keys(seed, E, stream=0)`` (synthetic) or the i-th trace window, and its env key
(tie-breaks) is ``episode_keys(seed, E, stream=1)[i]``, whatever the batch size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched import cluster as cl
from jaxsched import config as cfg_lib
from jaxsched import paths
from jaxsched.errors import DataError
from jaxsched.sim import gangs
from jaxsched.types import EnvParams, Jobs, to_device
from jaxsched.workload import alibaba, classes, gavel, philly, synthetic

TRACES = ("openb", "philly")  # workload sources replayed from a trace (``load_trace``)
REPLAYS = ("windows", "native", "resample")  # workload.replay (``trace_episodes``)
SOURCES = ("synthetic", *TRACES, "gavel")  # every workload.source


def build_nodes(config: cfg_lib.Config) -> cl.NodeTable:
    """The cluster's node table from the config (node list, PAI machines, groups of alike
    servers, alike nodes, or a preset)."""
    c = config.cluster
    if c.node_groups:
        return cl.groups(c.node_groups)
    if c.node_list:
        return cl.load_openb_nodes(paths.resolve_data_path(c.node_list))
    if c.pai_machines:
        return cl.load_pai_machines(paths.resolve_data_path(c.pai_machines))
    if c.node_model:
        return cl.uniform(c.preset_nodes, c.node_model, c.node_gpus)
    return cl.preset(c.preset_nodes)


def span_within(config: cfg_lib.Config, nodes: cl.NodeTable) -> cfg_lib.Config:
    """``config`` with ``env.max_span`` at most the cluster's nodes: a gang cannot span more
    nodes than there are, so the schedules are the same, and the gang arrays (and the
    compile) no longer grow with a span no cluster has (``env.max_span=100`` on 64 nodes ran
    for minutes with no output)."""
    if config.env.max_span <= len(nodes):
        return config
    return dataclasses.replace(config, env=dataclasses.replace(config.env, max_span=len(nodes)))


def unschedulable(config: cfg_lib.Config, params: EnvParams, jobs: Jobs) -> np.ndarray:
    """[E, J] bool: the jobs of each episode no node (gangs: no set of up to ``env.max_span``
    nodes) of the empty cluster can hold under the run's env settings; they fail at arrival
    (static mode tests fit at each arrival instead: none here)."""
    if config.env.mode == "static":
        return np.zeros(np.shape(jobs.valid), bool)
    fails = jax.jit(jax.vmap(lambda j: gangs.never_fits(params.cluster, j, config.env.max_span,
                                                        one_model=config.env.gang_one_model,
                                                        rule=config.env.gang_rule)))
    return np.asarray(fails(jobs))


def build_cluster(config: cfg_lib.Config, nodes: cl.NodeTable):
    """The ``Cluster`` (numpy) of ``nodes``: the default per-model speeds, or for
    ``workload.source = "gavel"`` Gavel's per-job-type speeds (``gavel.type_speeds`` of
    ``workload.throughputs``; with ``workload.gavel.agnostic_speed`` each job type's mean over
    the cluster's GPU models, weighted by their GPUs)."""
    if config.workload.source == "gavel":
        throughputs = gavel.load_throughputs(paths.resolve_data_path(config.workload.throughputs))
        gpus = None
        if config.workload.gavel.agnostic_speed:
            names = [cl.MODEL_NAMES[m] for m in nodes.model]
            gpus = {m: int(sum(g for n, g in zip(names, nodes.num_gpus) if n == m)) for m in set(names)}
        return cl.to_cluster(nodes, type_speeds=gavel.type_speeds(throughputs, gavel.MODELS, gpus))
    return cl.to_cluster(nodes)


def episode_keys(seed: int, num_episodes: int, stream: int):
    """[E] keys; episode i's key depends only on (seed, stream, i), not on batching."""
    base = jax.random.fold_in(jax.random.key(seed), stream)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_episodes))


def load_trace(w: cfg_lib.WorkloadConfig) -> alibaba.TraceWorkload:
    """The trace of ``workload.trace``: openb's pod list (dynamic mode, its qos mapped by
    ``workload.qos_classes``) or Philly's jobs of ``workload.vcs``."""
    if not w.trace:
        raise DataError("config", None, "workload.trace", f"source {w.source!r} needs a trace path")
    if w.source == "philly":
        return philly.load(paths.resolve_data_path(w.trace), vcs=list(w.vcs) or None, strict=w.strict)
    return alibaba.load_openb_pods(paths.resolve_data_path(w.trace), mode="dynamic", strict=w.strict,
                                   qos_classes=list(w.qos_classes) or None)


def trace_episodes(trace, nodes: cl.NodeTable, span, jobs_per_window: int, num_windows: int,
                   seed: int, target_load: float, span_field: str, max_work_s: float = math.inf,
                   replay: str = "windows", max_span: int | None = None):
    """([E, J] numpy ``Jobs``, compression factors): episodes of ``jobs_per_window`` jobs
    from the part ``span`` of ``trace``, work capped at ``max_work_s``, at offered load
    ``target_load`` on the cluster's work capacity (jobs no node can hold count as no work).
    ``replay`` "windows": ``num_windows`` windows of consecutive arrivals, each
    time-compressed (the factors are returned); "native": the same windows at the trace's own
    arrival times (factor 1.0; ``target_load`` not read); "resample": pods drawn with
    replacement, Poisson arrivals (``alibaba.resample``; factors are NaN)."""
    part = alibaba.cap_work(alibaba.trace_part(trace, span, span_field), max_work_s)
    capacity = cl.work_capacity(nodes)
    if replay == "resample":
        episodes = alibaba.resample(part, jobs_per_window, num_windows, seed, capacity, target_load,
                                    runnable=~part.unschedulable_mask(nodes, max_span))
        factors = [math.nan] * len(episodes)
    elif replay == "windows":
        windows = alibaba.trace_windows(part, jobs_per_window, num_windows, seed)
        compressed = [alibaba.compress_to_load(win, capacity, target_load,
                                               runnable=~win.unschedulable_mask(nodes, max_span)) for win in windows]
        episodes, factors = [c for c, _ in compressed], [f for _, f in compressed]
    elif replay == "native":
        episodes = alibaba.trace_windows(part, jobs_per_window, num_windows, seed)
        factors = [1.0] * len(episodes)
    else:
        raise DataError("config", None, "workload.replay", f"must be one of {REPLAYS}, got {replay!r}")
    jobs = jax.tree.map(lambda *x: np.stack(x), *[e.to_jobs(pad_to=jobs_per_window) for e in episodes])
    return jobs, factors


def gavel_episodes(config: cfg_lib.Config, nodes: cl.NodeTable):
    """([E, J] numpy ``Jobs``, Gavel's throughputs): ``eval.episodes`` draws of Gavel's
    workload (``workload.gavel``), episode i from ``episode_keys(eval.seed, E, 0)[i]`` (with
    ``gavel.generator = "gavel"``, Gavel's own stream of seed eval.seed + i; or,
    with ``workload.trace``, the first ``gavel.num_jobs`` jobs of that trace in Gavel's own
    format, ``gavel.load_trace``, in every episode), as
    ``gavel.to_jobs`` makes them for the cluster's largest server and ``env.max_span``: a job
    larger than a server spans servers at Gavel's measured spread speed, so
    ``env.spread_penalty`` must be 1.0."""
    w = config.workload
    w.gavel.validate()
    if config.env.spread_penalty != 1.0:
        raise DataError("config", None, "env.spread_penalty",
                        f"must be 1.0 with workload.source = 'gavel', got {config.env.spread_penalty}: "
                        "jobs spread over servers already run at Gavel's measured spread throughput")
    throughputs = gavel.load_throughputs(paths.resolve_data_path(w.throughputs))
    if len(w.gavel.distributed) != len(throughputs.job_types):
        raise DataError("config", None, "workload.gavel.distributed",
                        f"{len(w.gavel.distributed)} values; {throughputs.path} has {len(throughputs.job_types)} job types")
    if w.trace:  # one stream in Gavel's own format, the same in every episode
        stream = gavel.load_trace(paths.resolve_data_path(w.trace), throughputs)
        if len(stream.arrival_s) < w.gavel.num_jobs:
            raise DataError("config", None, "workload.gavel.num_jobs",
                            f"{w.gavel.num_jobs} jobs per episode; the trace {w.trace} has {len(stream.arrival_s)}")
        drawn = jax.tree.map(lambda x: np.repeat(x[None, :w.gavel.num_jobs], config.eval.episodes, axis=0), stream)
    elif w.gavel.generator == "gavel":  # Gavel's own draws: episode i is its --seed eval.seed + i
        streams = [gavel.generate_as_gavel(config.eval.seed + e, w.gavel) for e in range(config.eval.episodes)]
        drawn = jax.tree.map(lambda *x: np.stack(x), *streams)
    else:
        keys = episode_keys(config.eval.seed, config.eval.episodes, stream=0)
        drawn = jax.device_get(jax.vmap(lambda k: gavel.generate(k, w.gavel))(keys))
    per_episode = [gavel.to_jobs(jax.tree.map(lambda x: x[e], drawn), throughputs, gavel.MODELS,
                                 gpus_per_node=int(nodes.num_gpus.max()), max_span=config.env.max_span,
                                 gang_speed=w.gavel.gang_speed)
                   for e in range(config.eval.episodes)]
    return jax.tree.map(lambda *x: np.stack(x), *per_episode), throughputs


def gavel_target(config: gavel.GavelConfig) -> classes.TargetWorkload:
    """FGD's target workload of Gavel's jobs: whole GPUs, 1, 2, 4 and 8 weighted by their
    probabilities in percent (one GPU alone without multi-GPU jobs)."""
    sizes, weights = (gavel.SCALE_FACTORS, [round(100 * p) for p in gavel.SCALE_FACTOR_PROBS]) \
        if config.multi_gpu else ((1,), [1])
    gpus = np.repeat(sizes, weights)
    return classes.target_workload(np.zeros(len(gpus)), np.full(len(gpus), 1000), gpus, [""] * len(gpus), coverage=1.0)


def with_capacity(syn: synthetic.SyntheticConfig, nodes: cl.NodeTable) -> synthetic.SyntheticConfig:
    """``syn`` with ``cluster_capacity`` filled in from the cluster when a target load needs it."""
    if syn.target_load is not None and syn.cluster_capacity is None:
        syn = syn.replace(cluster_capacity=cl.work_capacity(nodes))
    return syn


def with_load(config: cfg_lib.Config, load: float, nodes: cl.NodeTable) -> cfg_lib.Config:
    """``config`` with the workload's offered load set to ``load`` by the arrival rate, the
    work distribution kept (as published load sweeps do): synthetic, the mean inter-arrival
    scaled by (its load / ``load``) with the work median the config gives; openb, the trace
    windows compressed to ``load``; gavel, ``jobs_per_hour`` scaled to the nominal load
    ``load`` (``gavel.offered_load``). The same episode keys then give the same jobs,
    arriving faster or slower."""
    w = config.workload
    if w.source == "gavel" and w.trace:
        raise DataError("config", None, "eval.sweep_loads",
                        f"a Gavel trace ({w.trace}) is replayed at its own arrival times: it has no load to sweep")
    if w.source == "gavel":
        base = gavel.offered_load(w.gavel, cl.work_capacity(nodes))
        w = dataclasses.replace(w, gavel=dataclasses.replace(w.gavel, jobs_per_hour=w.gavel.jobs_per_hour * float(load) / base))
    elif w.source == "synthetic":
        syn = with_capacity(w.synthetic, nodes)
        base = synthetic.expected_offered_load(syn, cl.work_capacity(nodes))
        syn = syn.replace(target_load=None, median_work_s=synthetic.effective_median_work_s(syn),
                          mean_interarrival_s=syn.mean_interarrival_s * base / float(load))
        w = dataclasses.replace(w, synthetic=syn)
    else:
        w = dataclasses.replace(w, target_load=float(load))
    span_s = {"gavel": lambda: w.gavel.num_jobs / w.gavel.jobs_per_hour * 3600.0,
              "synthetic": lambda: w.synthetic.num_jobs * w.synthetic.mean_interarrival_s}.get(w.source, lambda: 0.0)()
    if span_s > alibaba.MAX_EPISODE_S:  # (trace windows are checked as they are cut)
        raise DataError("config", None, "eval.sweep_loads",
                        f"at load {load:g} an episode's arrivals span about {span_s:.3g} s, past the "
                        f"{alibaba.MAX_EPISODE_S:g} s float32 keeps to the second: its times would be rounded; "
                        f"the lowest load this workload takes is about {load * span_s / alibaba.MAX_EPISODE_S:.2g}")
    return dataclasses.replace(config, workload=w)


def check_measurement(config: cfg_lib.Config) -> None:
    """The measured jobs must lie inside every episode: a ``DataError`` naming the keys if not."""
    e, w = config.env, config.workload
    jobs, key = {"synthetic": (w.synthetic.num_jobs, "workload.synthetic.num_jobs"),
                 "gavel": (w.gavel.num_jobs, "workload.gavel.num_jobs")}.get(
        w.source, (w.window_jobs, "workload.window_jobs"))
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise DataError("config", None, key, f"must be an integer >= 1 (jobs per episode), got {jobs!r}")
    if e.warmup_jobs + max(e.measured_jobs, 1) > jobs:
        raise DataError("config", None, "env.warmup_jobs",
                        f"warm-up {e.warmup_jobs} + measured {e.measured_jobs} jobs do not fit in "
                        f"episodes of {jobs} jobs ({key})")


def synthetic_target(syn: synthetic.SyntheticConfig) -> classes.TargetWorkload:
    """FGD's target workload of a synthetic mix: its class table, each row repeated by weight."""
    rows = np.repeat(np.asarray(syn.job_classes), np.asarray(syn.job_classes)[:, 4], axis=0)
    return classes.target_workload(rows[:, 2], rows[:, 1], rows[:, 0], [""] * len(rows))


def check_source_settings(w: cfg_lib.WorkloadConfig) -> None:
    """A setting that only another source reads is refused, naming it (``qos_classes`` on a
    source without qos values was silently ignored)."""
    for key, value, source in (("qos_classes", w.qos_classes, "openb"), ("vcs", w.vcs, "philly")):
        if value and w.source != source:
            raise DataError("config", None, f"workload.{key}",
                            f"is read for source {source!r} only; source {w.source!r} has none: leave it empty")


def build_workload(config: cfg_lib.Config, nodes: cl.NodeTable):
    """Jobs for every episode ([E, J] arrays), FGD's target workload, and a report dict."""
    w, episodes = config.workload, config.eval.episodes
    check_measurement(config)
    check_source_settings(w)
    if w.source == "synthetic":
        syn = with_capacity(w.synthetic, nodes)
        syn.validate()
        keys = episode_keys(config.eval.seed, episodes, stream=0)
        jobs = jax.vmap(lambda k: synthetic.generate(k, syn))(keys)
        info = {"source": "synthetic", "jobs_per_episode": syn.num_jobs,
                "mean_interarrival_s": syn.mean_interarrival_s,
                "median_work_s": synthetic.effective_median_work_s(syn),
                "expected_offered_load": synthetic.expected_offered_load(syn, cl.work_capacity(nodes))}
        return jobs, synthetic_target(syn), info
    if w.source in TRACES:
        trace = load_trace(w)
        unschedulable, names = trace.check_schedulable(nodes, strict=w.strict, max_span=config.env.max_span)
        jobs, factors = trace_episodes(trace, nodes, w.trace_span, w.window_jobs, episodes,
                                       config.eval.seed, w.target_load, "workload.trace_span",
                                       w.max_work_s, w.replay, config.env.max_span)
        info = {"source": w.source, "trace": w.trace, "replay": w.replay, "jobs_per_episode": w.window_jobs,
                "left_out_pending": trace.report.get("left_out_pending", 0),
                "unschedulable_jobs": unschedulable, "target_load": w.target_load,
                "max_work_s": w.max_work_s, "trace_span": list(w.trace_span),
                "compress_factor_min": min(factors), "compress_factor_max": max(factors)}
        return to_device(jobs), trace.frag_classes(), info
    if w.source == "gavel":
        jobs, throughputs = gavel_episodes(config, nodes)
        capacity = cl.work_capacity(nodes)
        info = {"source": "gavel", "throughputs": throughputs.path, "jobs_per_episode": w.gavel.num_jobs}
        if w.trace:
            info["trace"] = w.trace
        else:
            info.update(jobs_per_hour=w.gavel.jobs_per_hour, multi_gpu=w.gavel.multi_gpu,
                        expected_offered_load=gavel.offered_load(w.gavel, capacity))
        return to_device(jobs), gavel_target(w.gavel), info
    raise DataError("config", None, "workload.source", f"must be one of {SOURCES}, got {w.source!r}")


class Episodes(NamedTuple):
    """A run's held-out episodes (``episodes``): what every scheduler is played on."""

    jobs: Jobs                # every field [E, J]
    params: EnvParams         # the cluster and FGD's target workload, on the device
    max_steps: int            # decisions per episode before a rollout stops (eval.max_steps or 3 J + 100)
    env_keys: jax.Array       # [E] the env's keys (tie-breaks), stream 1 of eval.seed
    info: dict                # the workload's report (``build_workload``)


def episodes(config: cfg_lib.Config, nodes: cl.NodeTable) -> Episodes:
    """The ``eval.episodes`` episodes of ``config`` on ``nodes``: jobs, env params, step cap, keys."""
    jobs, frag, info = build_workload(config, nodes)
    params = to_device(EnvParams(build_cluster(config, nodes), frag))
    max_steps = config.eval.max_steps or 3 * jobs.num_jobs + 100
    return Episodes(jobs, params, max_steps, episode_keys(config.eval.seed, config.eval.episodes, stream=1), info)


def round_cap(jobs: Jobs, params: EnvParams, round_s: float) -> int:
    """The step cap of episodes run in rounds of ``round_s`` seconds (when eval.max_steps is 0):
    a round is a decision, and every round of an episode that runs one job at a time on its
    slowest GPU fits in it: ceil((arrival span + sum of work / slowest positive speed) /
    round_s) + 3 J + 100, the largest over the episodes (``jobs`` [E, J]), at most 2^31 - 1."""
    valid = np.asarray(jobs.valid, bool)
    arrival = np.where(valid, np.asarray(jobs.arrival_s, np.float64), np.nan)
    speeds = np.asarray(params.cluster.type_speed, np.float64)
    slowest = min(1.0, speeds[speeds > 0].min()) if (speeds > 0).any() else 1.0
    work = np.where(valid, np.asarray(jobs.work_s, np.float64), 0.0).sum(-1) / slowest
    span = np.nan_to_num(np.nanmax(arrival, -1) - np.nanmin(arrival, -1))
    rounds = np.ceil((span + work) / round_s).max() + 3 * jobs.num_jobs + 100
    return int(min(rounds, 2**31 - 1))


def training_workload(config: cfg_lib.Config, train, nodes: cl.NodeTable):
    """(env params, training workload) of a learner's run (``train``: its ``TrainConfig``).

    The training workload is ``workload.synthetic`` (capacity filled in), or for
    ``workload.source = "openb"`` a bank of ``train.trace_windows`` trace windows of
    ``train.train_jobs`` jobs from the part ``train.trace_span`` of the trace, compressed to
    ``workload.target_load`` (``training.make_reset`` draws from either)."""
    w = config.workload
    check_source_settings(w)
    if w.source == "gavel":
        raise DataError("config", None, "workload.source", "'gavel' has no training workload yet: "
                        "learners train on 'synthetic', 'openb' or 'philly'")
    if w.source in TRACES:
        trace = load_trace(w)
        trace.check_schedulable(nodes, strict=w.strict, max_span=config.env.max_span)  # as build_workload
        workload, _ = trace_episodes(trace, nodes, train.trace_span, train.train_jobs, train.trace_windows,
                                     train.seed, w.target_load, "train.trace_span", w.max_work_s, w.replay,
                                     config.env.max_span)
        frag = trace.frag_classes()
    elif w.source == "synthetic":
        check_measurement(config)
        workload = with_capacity(w.synthetic, nodes)
        workload.validate()
        frag = synthetic_target(workload)
    else:
        raise DataError("config", None, "workload.source", f"must be one of {SOURCES}, got {w.source!r}")
    return to_device(EnvParams(build_cluster(config, nodes), frag)), workload
