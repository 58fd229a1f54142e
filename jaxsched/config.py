"""Configuration as data: typed, frozen dataclasses loaded from TOML, overridable by ``--set``.

A run config has four sections, each a dataclass::

    [cluster]              ClusterConfig   which nodes
    [workload]             WorkloadConfig  which jobs (synthetic by default, or an openb trace)
    [workload.synthetic]   workload.synthetic.SyntheticConfig
    [env]                  sim.env.EnvConfig
    [eval]                 EvalConfig      schedulers, episodes, seeds, output folder

``load(path, overrides)`` reads a TOML file (any key may be left out: defaults apply) and then
applies ``section.key=value`` overrides, where value is a TOML value (``env.window=4``,
``eval.schedulers=["first-fit"]``). An unknown key or a value of the wrong type raises
``DataError`` naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import textwrap
import tomllib
import typing
from pathlib import Path

from jaxsched import cluster
from jaxsched.errors import DataError
from jaxsched.sim.env import EnvConfig
from jaxsched.workload.gavel import GavelConfig
from jaxsched.workload.synthetic import SyntheticConfig


# The built-in run measures loaded clusters (docs/concepts/loaded-clusters.md): an episode of the
# synthetic workload on the 64-node preset at offered load 0.9 (8 s between arrivals) is 24 h
# of warm-up arrivals (the cluster reaches steady state in about 20 h: results/steady_state/),
# 8 h of measured arrivals, and 8 h more that keep the cluster loaded while the measured jobs
# wait and run (no measured job starts after the last arrival, at loads up to 0.9).
WARMUP_JOBS = 10_800
MEASURED_JOBS = 3_600
EPISODE_JOBS = 18_000
# Gavel's workload (workload.source = "gavel"; configs/gavel.toml says why these): jobs per hour
# and jobs per episode.
GAVEL_JOBS_PER_HOUR = 0.8
GAVEL_EPISODE_JOBS = 2_000


def check_positive_ints(obj, names) -> None:
    """A ``ValueError`` naming ``Type.field`` for the first of ``names`` of the dataclass ``obj``
    that is not an integer >= 1 (for a config's ``__post_init__``)."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{type(obj).__name__}.{name} = {value!r}: must be a positive integer")


INT32 = (-2**31, 2**31 - 1)


def check_seeds(obj, names, offset: int = 0) -> None:
    """A ``ValueError`` naming ``Type.field`` for the first of ``names`` that is not an integer
    whose keys (``jax.random.key(seed + i)``, i < ``offset`` + 1) stay in the int32 range."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or not INT32[0] <= value <= INT32[1] - offset:
            raise ValueError(f"{type(obj).__name__}.{name} = {value!r}: must be an integer in "
                             f"[{INT32[0]}, {INT32[1] - offset}] (JAX keys are int32)")


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """preset_nodes: size of the openb-mix preset (used unless a node list is given).
    node_list: path of an openb node list CSV; pai_machines: path of pai_machine_spec.csv.
    node_model: a GPU model name (e.g. "V100M32"): instead of the openb mix, ``preset_nodes``
    alike nodes of ``node_gpus`` GPUs of that model, with the CPU and memory of the openb node
    type of that model and GPU count (``cluster.uniform``; the Philly preset's 64 x 8 GPUs).
    node_groups: a mixed cluster of groups of alike servers, ``[[model, servers, GPUs per
    server], ...]`` (``cluster.groups``; the Gavel preset's ``[["V100", 36, 1], ["P100", 36,
    1], ["K80", 36, 1]]``), instead of all of the above."""

    preset_nodes: int = 64
    node_list: str = ""
    pai_machines: str = ""
    node_model: str = ""
    node_gpus: int = 8
    node_groups: tuple = ()

    def __post_init__(self):
        if self.node_list and self.pai_machines:
            raise ValueError("ClusterConfig: node_list and pai_machines both given; a cluster comes "
                             "from one source (set the other to \"\")")
        check_positive_ints(self, ("preset_nodes",))
        if self.node_groups:
            if self.node_list or self.pai_machines or self.node_model:
                raise ValueError("ClusterConfig: node_groups and node_list, pai_machines or node_model given; "
                                 "a cluster comes from one source")
            groups = tuple(tuple(g) if isinstance(g, list) else g for g in self.node_groups)
            object.__setattr__(self, "node_groups", groups)  # hashable, as a frozen config should be
            try:
                cluster.groups(groups)
            except DataError as err:
                raise ValueError(f"ClusterConfig.node_groups: {err.problem}") from None


@dataclasses.dataclass(frozen=True)
class WorkloadConfig:
    """source: "synthetic" (default, needs no data), "openb" (a pod-list trace), "philly"
    (the Microsoft Philly trace, ``trace`` its CSV, ``vcs`` the virtual clusters kept, all
    when empty; its windows are replayed as openb's are, gang sizes as given) or "gavel"
    (Gavel's synthetic workload, ``workload.gavel``: its rate in jobs per hour, jobs per
    episode, multi-GPU jobs or not; job types run at the speeds of the throughput table
    ``throughputs``, on a cluster of K80, P100 and V100 GPUs; workload/gavel.py; with
    ``trace`` set, the first ``gavel.num_jobs`` jobs of that file in Gavel's own trace format,
    ``gavel.load_trace``, replayed at their own arrival times in every episode, and
    ``jobs_per_hour`` and ``multi_gpu`` not read).

    For "openb": ``trace`` is the pod list; each episode is a window of ``window_jobs``
    consecutive arrivals, work capped at ``max_work_s``, time-compressed to offered load
    ``target_load`` on the cluster's work capacity, cut from the part ``trace_span`` = [lo, hi]
    of the trace (fractions of its jobs in arrival order; ``jaxsched.train`` cuts its training
    windows from ``train.trace_span``). The window's first ``env.warmup_jobs`` pods, which
    precede the measured ones in the trace, are its warm-up. ``replay = "native"`` keeps each
    window at the trace's own arrival times (no compression; ``target_load`` is not read: a
    trace replayed as it ran, e.g. a Philly VC beside Helios's simulator). ``replay = "resample"`` draws
    each episode's pods with replacement from that part instead, arriving as a Poisson
    process at the target load (``alibaba.resample``): for steady-state episodes longer than
    the trace (openb's pods cover about 20 h of arrivals at load 0.9 on 64 nodes).
    ``qos_classes`` (openb): the trace's ``qos`` values, highest priority first, giving each
    pod's ``Jobs.qos_class`` (the ``priority`` round policy reads it); empty: openb's
    ``alibaba.OPENB_QOS_CLASSES`` (LS, Guaranteed, Burstable, BE). A pod whose qos is not
    listed is an error naming its row; a listed class no pod of the trace has, an error
    naming ``workload.qos_classes``.
    For "synthetic": ``synthetic.target_load`` sets the load (its cluster_capacity is filled
    in from the cluster when left out); every job is class 0, as with philly and gavel.
    """

    source: str = "synthetic"
    trace: str = ""
    window_jobs: int = 500
    target_load: float = 0.9
    max_work_s: float = 8 * 3600.0
    replay: str = "windows"
    strict: bool = False
    trace_span: tuple = (0.0, 1.0)
    vcs: tuple = ()
    qos_classes: tuple = ()
    synthetic: SyntheticConfig = SyntheticConfig(num_jobs=EPISODE_JOBS, target_load=0.9)
    throughputs: str = "../shared/data/gavel/simulation_throughputs.json"
    gavel: GavelConfig = GavelConfig(jobs_per_hour=GAVEL_JOBS_PER_HOUR, num_jobs=GAVEL_EPISODE_JOBS, multi_gpu=True)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """schedulers: registry names; episodes: how many; batch_size: episodes per jitted call;
    seed: base seed (episode i uses key fold_in(seed, i), so results do not depend on the
    batch split); max_steps: decision cap per episode (0 = 3 x jobs + 100; with rounds,
    ``experiment.round_cap``: enough rounds for any schedule); out_dir: output.
    per_job: also write per_job.csv, the complete schedule (one row per job and scheduler).
    plots: write the PNG plots; timeline_episodes: episodes stepped again to record the
    cluster over time (the allocation/fragmentation plot and timeline.csv; 0 = none).
    sweep_loads: offered loads rho; when given, every scheduler runs at each load (the
    workload's target load) and sweep.csv / sweep.png are written instead.
    warmup_scheduler: "" (default): every scheduler plays its episodes from the first
    arrival. A registry name (e.g. "first-fit"): that scheduler takes every decision before
    the first measured job arrives, for every scheduler evaluated, so they are compared
    from one common loaded start (``policies.warmed_up``)."""

    schedulers: tuple = ("first-fit", "best-fit")
    episodes: int = 32
    batch_size: int = 32
    seed: int = 0
    max_steps: int = 0
    out_dir: str = "results/runs/evaluate"
    per_job: bool = False
    plots: bool = True
    timeline_episodes: int = 1
    sweep_loads: tuple = ()
    warmup_scheduler: str = ""

    def __post_init__(self):
        check_positive_ints(self, ("episodes", "batch_size"))
        check_seeds(self, ("seed",))
        if not self.schedulers or not all(isinstance(s, str) and s for s in self.schedulers):
            raise ValueError(f"EvalConfig.schedulers = {list(self.schedulers)!r}: must name at least one scheduler")
        for field in ("max_steps", "timeline_episodes"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"EvalConfig.{field} = {value!r}: must be an integer >= 0")


@dataclasses.dataclass(frozen=True)
class Config:
    cluster: ClusterConfig = ClusterConfig()
    workload: WorkloadConfig = WorkloadConfig()
    env: EnvConfig = EnvConfig(warmup_jobs=WARMUP_JOBS, measured_jobs=MEASURED_JOBS)
    eval: EvalConfig = EvalConfig()


def _coerce(value, kind, where: tuple):
    """Check/convert a TOML value to the dataclass field type ``kind``."""
    path, key = where
    origin = typing.get_origin(kind)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if key.endswith("restart_overhead_s") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value),)  # one constant cost, as EnvConfig reads a number
    if kind is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise DataError(path, None, key, f"expected a list, got {value!r}")
        return tuple(value)
    if kind in (int, float, str, bool) and not (isinstance(value, kind)
                                                and not (kind is int and isinstance(value, bool))):
        raise DataError(path, None, key, f"expected {kind.__name__}, got {value!r}")
    return value


def from_dict(cls, data: dict, path="config", prefix=""):
    """Build dataclass ``cls`` from a (nested) dict, starting from its defaults."""
    return _merge(cls(), data, path, prefix)


def _merge(obj, data: dict, path, prefix):
    hints = typing.get_type_hints(type(obj))
    known = {f.name for f in dataclasses.fields(obj)}
    changes = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        if name not in known:
            raise DataError(path, None, key, f"unknown key; known: {sorted(known)}")
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise DataError(path, None, key, f"expected a table, got {value!r}")
            changes[name] = _merge(current, value, path, key + ".")
        else:
            kind = hints[name]
            kind = float if kind == "float" else kind
            changes[name] = _coerce(value, _plain_type(kind, current), (path, key))
    try:
        return dataclasses.replace(obj, **changes)
    except (ValueError, TypeError) as err:
        raise DataError(path, None, prefix.rstrip(".") or None, str(err)) from None


def _plain_type(kind, current):
    """The runtime type to check against (annotations may be strings or unions)."""
    if isinstance(kind, type):
        return kind
    if typing.get_origin(kind) is tuple:
        return tuple
    return type(current) if current is not None else object


def parse_override(text: str) -> dict:
    """``"a.b=value"`` -> ``{"a": {"b": value}}`` with value parsed as TOML (bare words = strings)."""
    if "=" not in text:
        raise DataError("--set", None, text, "expected key=value")
    key, raw = text.split("=", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare word such as best-fit
    out: dict = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"  # the checkout's configs/


def presets() -> dict:
    """The shipped run configs: {name: path} of ``configs/*.toml`` (name: the file's stem)."""
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.toml"))}


def preset_help() -> str:
    """The presets, one line each (name and the first line of its header comment), for ``--help``."""
    lines = ["presets (--config NAME, or a TOML path; [train]: a learner's, for jaxsched train):"]
    for name, path in presets().items():
        text = path.read_text()
        first = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#")), "")
        kind = "[train]" if "\n[agent]" in text else ""
        lines.append(f"  {name:15s}{kind:8s}{textwrap.shorten(first.rstrip(':'), 72, placeholder=' ...')}")
    return "\n".join(lines)


def resolve(path: str | Path) -> Path:
    """A config path as given, or a preset: a name (``drr_64``) or a ``configs/...`` path from
    any folder. Left as given when neither exists (``read_toml`` then names it)."""
    path = Path(path)
    if path.exists():
        return path
    if path.suffix == "" and str(path) in presets():
        return presets()[str(path)]
    in_checkout = PRESET_DIR.parent / path
    return in_checkout if not path.is_absolute() and in_checkout.is_file() else path


def read_toml(path: str | Path) -> dict:
    """A TOML file as a dict; a missing or malformed file raises ``DataError`` naming it."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        hint = f" (nor a preset: {', '.join(presets())})" if path.suffix in ("", ".toml") else ""
        raise DataError(path, None, None, f"config file not found{hint}") from None
    except IsADirectoryError:
        raise DataError(path, None, None, "is a folder, not a TOML config file") from None
    except UnicodeDecodeError as err:
        raise DataError(path, None, None, f"not a UTF-8 text file (byte {err.start}): not a TOML config") from None
    except OSError as err:
        raise DataError(path, None, None, f"cannot read the config: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise DataError(path, getattr(err, "lineno", None), None, f"not valid TOML: {err}") from None


LEARNER_SECTIONS = ("agent", "train")  # a training config's own sections (jaxsched.train reads them)


def load(path: str | Path | None = None, overrides=()) -> Config:
    """Load a run config from TOML (or defaults when ``path`` is None; a preset name such as
    ``"drr_64"`` is ``configs/drr_64.toml``, see ``resolve``) plus overrides. A
    training config's [agent] and [train] are left to ``jaxsched.train``: evaluating it runs
    the heuristics on the same cluster, workload and env."""
    config = Config()
    if path is not None:
        path = resolve(path)
        data = {k: v for k, v in read_toml(path).items() if k not in LEARNER_SECTIONS}
        config = _merge(config, data, Path(path), "")
    return apply_overrides(config, overrides)


def apply_overrides(config, overrides, where: str = "--set"):
    """``config`` with ``section.key=value`` overrides, all applied at once (a later one wins a
    key), so that settings checked together (e.g. env.restart_overhead_s and
    env.restart_above_gpus) can come in separate ``--set`` flags."""
    merged: dict = {}
    for text in overrides:
        _update_nested(merged, parse_override(text))
    return _merge(config, merged, where, "") if merged else config


def _update_nested(into: dict, new: dict) -> None:
    """Merge nested dict ``new`` into ``into`` in place (tables merge, values replace)."""
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _update_nested(into[key], value)
        else:
            into[key] = value


def to_dict(config) -> dict:
    """A config as plain nested dicts (for saving next to results)."""
    return dataclasses.asdict(config)
