"""Cluster specs: GPU models and their speeds, presets, and loaders for real node lists.

A ``NodeTable`` is the host-side description (one row per node, numpy arrays, plus names);
``to_cluster`` pads it to fixed shapes and returns the ``types.Cluster`` pytree the env uses.

GPU speed table (work units per second; a job's run time is ``work_s / speed``):
normalised single-GPU training throughput with the V100 at 1.0. P100, T4 and A10 follow
the usual published training-throughput ratios (e.g. Gavel, OSDI '20; vendor benchmarks);
the openb models G2 and G3 are undisclosed, so we pick G2 = 0.8 (a mid-range card, the most
common model in openb) and G3 = 1.2 (newer, on the largest nodes); PAI's "MISC" = 0.5; the
K80 0.3, from Gavel's measured throughputs (the comment at ``DEFAULT_SPEEDS``).
These are defaults: pass ``speeds={...}`` to override any of them.

Per-job-type speeds: ``to_cluster(table, type_speeds={model: [speed of type 0, 1, ...]})``
gives every GPU model one speed per job type (T types), so that a job's speed-up from one
model to another depends on its type (Gavel's throughputs: ``workload.gavel.type_speeds``).
The cluster's ``type_speed`` [N, T] holds them; its ``speed`` is type 0's. Without it the
cluster has one type whose speeds are the per-model table above. Jobs name their type in
``Jobs.job_type``; ``check_job_types`` checks it against the cluster on the host.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import numpy as np

from jaxsched.errors import DataError
from jaxsched.textfile import read_text
from jaxsched.types import MAX_GPUS_PER_NODE, Cluster, check_job_type

# Order fixes the model ids (bit positions of Jobs.model_mask): add a GPU model just before
# "CPU", which stays last (agents one-hot a node without GPUs as the last model, and
# MODEL_NAMES[:-1] are the GPU models); never reorder the others.
MODEL_NAMES = ("V100M16", "V100M32", "P100", "T4", "A10", "G2", "G3", "V100", "MISC", "K80", "CPU")
# K80 (Gavel's oldest GPU) = 0.3: the geometric mean over Gavel's 26 job types of their K80 /
# V100 throughput at one GPU (simulation_throughputs.json: 0.297; the ratios run from 0.09,
# ResNet-18 at batch size 256, to 1.51, Recommendation at 1024). The arithmetic mean, 0.44, is
# pulled up by the five Recommendation types, the only ones faster on the K80; the median is
# 0.25. (Gavel's P100 geometric mean is 0.94; the table keeps P100 at 0.6.) Gavel's per-type
# speeds replace these where a cluster is built with ``type_speeds`` (workload/gavel.py).
DEFAULT_SPEEDS = {
    "V100M16": 1.0, "V100M32": 1.0, "V100": 1.0, "P100": 0.6, "T4": 0.45, "A10": 1.1,
    "G2": 0.8, "G3": 1.2, "MISC": 0.5, "K80": 0.3, "CPU": 1.0,
}
INT32_MAX = int(np.iinfo(np.int32).max)

# Node types of openb_node_list_gpu_node.csv (Alibaba 2023) and how many nodes of each:
# (model, gpus, cpu_milli, memory_mib, count). 1,213 nodes, 6,212 GPUs in all.
OPENB_NODE_TYPES = (
    ("G2", 8, 96000, 393216, 549),
    ("T4", 2, 104000, 524288, 387),
    ("P100", 2, 16000, 122880, 107),
    ("G3", 8, 128000, 786432, 39),
    ("V100M16", 4, 32000, 131072, 28),
    ("P100", 2, 64000, 262144, 22),
    ("V100M32", 8, 96000, 786432, 21),
    ("V100M16", 1, 8000, 32768, 19),
    ("T4", 4, 96000, 393216, 17),
    ("V100M32", 4, 48000, 376832, 9),
    ("V100M16", 8, 64000, 262144, 7),
    ("P100", 1, 8000, 61440, 3),
    ("P100", 2, 8000, 61440, 2),
    ("A10", 1, 128000, 1048576, 2),
    ("V100M16", 8, 82000, 344064, 1),
)


def model_id(name: str) -> int:
    """Id of a GPU model name (its bit in a job's model mask)."""
    return MODEL_NAMES.index(name)


def model_mask(names) -> int:
    """int32 bitmask of allowed models from an iterable of names (repeats are fine)."""
    bits = 0
    for name in names:
        bits |= 1 << model_id(name)
    return int(np.int32(np.uint32(bits)))


@dataclasses.dataclass(frozen=True)
class NodeTable:
    """Host-side node list, one entry per node."""

    names: tuple
    model: np.ndarray  # [n] int32 model ids
    num_gpus: np.ndarray  # [n] int32
    cpu_milli: np.ndarray  # [n] int32
    mem_mib: np.ndarray  # [n] int32

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.num_gpus.sum())


def _table(rows) -> NodeTable:
    names, models, gpus, cpus, mems = zip(*rows) if rows else ((),) * 5
    return NodeTable(
        names=tuple(names),
        model=np.asarray([model_id(m) for m in models], np.int32),
        num_gpus=np.asarray(gpus, np.int32),
        cpu_milli=np.asarray(cpus, np.int32),
        mem_mib=np.asarray(mems, np.int32),
    )


def preset(num_nodes: int) -> NodeTable:
    """A cluster of ``num_nodes`` whose node types follow the openb GPU-node mix.

    Counts per type are proportional to openb's (largest remainder), so 32/64/128-node
    presets keep the mix of 8-GPU G2 nodes, 2-GPU T4 and P100 nodes, V100 nodes, etc.
    """
    if num_nodes < 1:
        raise DataError("preset", None, "num_nodes", f"must be >= 1, got {num_nodes}")
    counts = np.array([t[4] for t in OPENB_NODE_TYPES], np.float64)
    share = counts / counts.sum() * num_nodes
    take = np.floor(share).astype(int)
    for i in np.argsort(-(share - take), kind="stable")[: num_nodes - take.sum()]:
        take[i] += 1
    rows = []
    for (model, gpus, cpu, mem, _), k in zip(OPENB_NODE_TYPES, take):
        rows += [(f"{model.lower()}-{len(rows) + i:04d}", model, gpus, cpu, mem) for i in range(k)]
    return _table(rows)


def uniform(num_nodes: int, model: str, gpus: int) -> NodeTable:
    """``num_nodes`` alike nodes of ``gpus`` GPUs of ``model``, with the CPU and memory of the
    openb node type of that model and GPU count (the first such type)."""
    types = [t for t in OPENB_NODE_TYPES if t[0] == model and t[1] == gpus]
    if not types:
        known = sorted({f"{t[0]} x {t[1]}" for t in OPENB_NODE_TYPES})
        raise DataError("cluster", None, "node_model", f"no openb node type has {gpus} x {model}; known: {known}")
    if num_nodes < 1:
        raise DataError("cluster", None, "preset_nodes", f"must be >= 1, got {num_nodes}")
    _, _, cpu, mem, _ = types[0]
    return _table([(f"{model.lower()}-{i:04d}", model, gpus, cpu, mem) for i in range(num_nodes)])


# CPU and memory of a node of ``groups`` per GPU: openb's one-V100 nodes' (8 cores, 32 GiB). The
# GPU-only workloads that use groups (Gavel's) ask for none, so they never bind.
GROUP_CPU_MILLI_PER_GPU = 8000
GROUP_MEM_MIB_PER_GPU = 32768


def groups(spec) -> NodeTable:
    """Nodes in groups of alike servers: ``spec`` = [(model, servers, GPUs per server), ...],
    e.g. Gavel's cluster ``[("V100", 36, 1), ("P100", 36, 1), ("K80", 36, 1)]``; each node
    has ``GROUP_CPU_MILLI_PER_GPU`` and ``GROUP_MEM_MIB_PER_GPU`` per GPU. Nodes are numbered
    group after group (``<model>-<i>``). A bad group is a ``DataError`` naming ``node_groups``
    and the group."""
    def bad(i, problem):
        return DataError("cluster", None, "node_groups", f"group {i} {spec[i]!r}: {problem}")

    if not isinstance(spec, (list, tuple)) or not spec:
        raise DataError("cluster", None, "node_groups", f"expected [[model, servers, GPUs per server], ...], got {spec!r}")
    rows = []
    for i, group in enumerate(spec):
        if not isinstance(group, (list, tuple)) or len(group) != 3:
            raise bad(i, "expected [model, servers, GPUs per server]")
        model, servers, gpus = group
        if model not in MODEL_NAMES or model == "CPU":
            raise bad(i, f"unknown GPU model {model!r}; known: {MODEL_NAMES[:-1]}")
        for name, value, top in (("servers", servers, INT32_MAX), ("GPUs per server", gpus, MAX_GPUS_PER_NODE)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= top:
                raise bad(i, f"{name} must be an integer in [1, {top}], got {value!r}")
        rows += [(f"{model.lower()}-{len(rows) + k:04d}", model, gpus, gpus * GROUP_CPU_MILLI_PER_GPU,
                  gpus * GROUP_MEM_MIB_PER_GPU) for k in range(servers)]
    return _table(rows)


def _int_field(path, line, field, text, minimum=0) -> int:
    try:
        value = float(text)
    except ValueError:
        raise DataError(path, line, field, f"not a number: {text!r}") from None
    if not np.isfinite(value) or value != int(value):
        raise DataError(path, line, field, f"not a whole number: {text!r}")
    if value < minimum:
        raise DataError(path, line, field, f"must be >= {minimum}, got {text}")
    if value > INT32_MAX:
        raise DataError(path, line, field, f"too large (> {INT32_MAX}): {text}")
    return int(value)


def _model_field(path, line, field, text, gpus: int) -> str:
    """The GPU model of a node with ``gpus`` (> 0) GPUs; "CPU" contradicts the count."""
    if text not in MODEL_NAMES:
        raise DataError(path, line, field, f"unknown GPU model {text!r}; known: {MODEL_NAMES}")
    if text == "CPU":
        raise DataError(path, line, field, f"{gpus} GPUs on a node whose model is CPU")
    return text


def _unique(path, line: int, field: str, name: str, seen: dict) -> None:
    """A node named twice is a ``DataError`` at the second (``seen``: name -> first line)."""
    if name in seen:
        raise DataError(path, line, field, f"duplicate {field} {name!r} (first at line {seen[name]})")
    seen[name] = line


def load_openb_nodes(path) -> NodeTable:
    """Load an openb node list (``sn,cpu_milli,memory_mib,gpu,model``, with header).

    CPU-only nodes (``gpu == 0``) get model "CPU" whatever their model column says.
    """
    path = Path(path)
    need = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise DataError(path, None, None, "empty file (no header row)")
        missing = [c for c in need if c not in reader.fieldnames]
        if missing:
            raise DataError(path, 1, missing[0], f"missing column(s) {missing}")
        rows, seen = [], {}
        for rec in reader:
            line = reader.line_num  # counts blank lines too, as an editor does
            empty = [c for c in need[:4] if rec.get(c) in (None, "")]  # CPU nodes may lack a model
            if empty:
                raise DataError(path, line, empty[0], "missing value")
            if rec.get(None):  # DictReader puts a row's extra fields under None
                raise DataError(path, line, None, f"{len(reader.fieldnames) + len(rec[None])} fields, "
                                f"the header has {len(reader.fieldnames)}")
            _unique(path, line, "sn", rec["sn"], seen)
            gpus = _int_field(path, line, "gpu", rec["gpu"])
            if gpus > MAX_GPUS_PER_NODE:
                raise DataError(path, line, "gpu", f"{gpus} GPUs > {MAX_GPUS_PER_NODE} per node")
            model = _model_field(path, line, "model", rec["model"] or "", gpus) if gpus else "CPU"
            rows.append((rec["sn"], model, gpus,
                         _int_field(path, line, "cpu_milli", rec["cpu_milli"]),
                         _int_field(path, line, "memory_mib", rec["memory_mib"])))
    if not rows:
        raise DataError(path, None, None, "no nodes in file")
    return _table(rows)


def load_pai_machines(path) -> NodeTable:
    """Load the PAI 2020 ``pai_machine_spec.csv`` (no header: machine,gpu_type,cap_cpu,cap_mem,cap_gpu).

    ``cap_cpu`` is in cores (-> x1000 milli), ``cap_mem`` in GB (-> x1024 MiB). A
    ``gpu_type`` of "CPU" (or cap_gpu == 0) is a CPU-only machine.
    """
    path = Path(path)
    fields = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")
    rows, seen = [], {}
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.reader(f)
        for rec in reader:
            line = reader.line_num
            if not rec:
                continue
            if len(rec) != len(fields):
                field = fields[min(len(rec), len(fields) - 1)]
                raise DataError(path, line, field, f"expected {len(fields)} fields {fields}, got {len(rec)}")
            name, gpu_type, cap_cpu, cap_mem, cap_gpu = rec
            _unique(path, line, "machine", name, seen)
            gpus = _int_field(path, line, "cap_gpu", cap_gpu)
            if gpus > MAX_GPUS_PER_NODE:
                raise DataError(path, line, "cap_gpu", f"{gpus} GPUs > {MAX_GPUS_PER_NODE} per node")
            model = _model_field(path, line, "gpu_type", gpu_type, gpus) if gpus else "CPU"
            cpu_milli = 1000 * _int_field(path, line, "cap_cpu", cap_cpu)
            mem_mib = 1024 * _int_field(path, line, "cap_mem", cap_mem)
            for field, value in (("cap_cpu", cpu_milli), ("cap_mem", mem_mib)):
                if value > INT32_MAX:
                    raise DataError(path, line, field, f"too large once converted: {value}")
            rows.append((name, model, gpus, cpu_milli, mem_mib))
    if not rows:
        raise DataError(path, None, None, "no machines in file")
    return _table(rows)


def work_capacity(table: NodeTable, speeds: dict | None = None) -> float:
    """Work the cluster does per second with every GPU busy, in speed-1.0 GPUs: the sum over
    its GPUs of their speed (``DEFAULT_SPEEDS`` overridden by ``speeds``). The offered load
    rho is GPU work arriving per second over this (SPEC.md, docs/concepts/loaded-clusters.md)."""
    speed_of = {**DEFAULT_SPEEDS, **(speeds or {})}
    return float(sum(int(g) * speed_of[MODEL_NAMES[m]] for g, m in zip(table.num_gpus, table.model)))


def to_cluster(table: NodeTable, pad_nodes: int | None = None, max_gpus: int = MAX_GPUS_PER_NODE,
               speeds: dict | None = None, type_speeds: dict | None = None) -> Cluster:
    """Pad a ``NodeTable`` to ``pad_nodes`` x ``max_gpus`` and build the ``Cluster`` pytree (numpy).

    ``speeds`` overrides ``DEFAULT_SPEEDS`` per model (one job type). ``type_speeds`` instead
    gives, per model name, the speeds of T job types (a sequence of T finite numbers > 0, the
    same T for every model): every GPU model of the table must be in it (CPU-only and padding
    nodes get 1.0); ``Cluster.speed`` is then its type 0. Give one or the other.
    """
    n = len(table)
    size = n if pad_nodes is None else pad_nodes
    if size < n:
        raise DataError("cluster", None, "pad_nodes", f"{pad_nodes} < {n} nodes")
    if max_gpus > MAX_GPUS_PER_NODE:  # FGD's exact integer fragmentation sums rely on it
        raise DataError("cluster", None, "max_gpus", f"{max_gpus} > {MAX_GPUS_PER_NODE} GPUs per node")
    if table.num_gpus.max(initial=0) > max_gpus:
        raise DataError("cluster", None, "max_gpus", f"a node has more than {max_gpus} GPUs")
    if type_speeds is None:
        speed_of = {**DEFAULT_SPEEDS, **(speeds or {})}
        for name, value in speed_of.items():
            if not value > 0:
                raise DataError("speeds", None, name, f"speed must be > 0, got {value}")
        per_type = {name: np.asarray([value], np.float32) for name, value in speed_of.items()}
    elif speeds is not None:
        raise DataError("cluster", None, "speeds", "give speeds or type_speeds, not both")
    else:
        per_type = _type_speed_table(table, type_speeds)
    num_types = len(next(iter(per_type.values())))

    def pad(values, dtype, fill=0):
        out = np.full(size, fill, dtype)
        out[:n] = values
        return out

    num_gpus = pad(table.num_gpus, np.int32)
    valid = pad(np.ones(n, bool), bool, False)
    type_speed = np.ones((size, num_types), np.float32)
    for i, (model, gpus) in enumerate(zip(table.model, table.num_gpus)):
        if gpus > 0 or type_speeds is None:  # with type_speeds, CPU-only nodes run at 1.0
            type_speed[i] = per_type[MODEL_NAMES[model]]
    return Cluster(
        num_gpus=num_gpus,
        gpu_model=pad(table.model, np.int32, model_id("CPU")),
        speed=type_speed[:, 0].copy(),
        cpu_milli=pad(table.cpu_milli, np.int32),
        mem_mib=pad(table.mem_mib, np.int32),
        valid=valid,
        gpu_exists=(np.arange(max_gpus)[None, :] < num_gpus[:, None]) & valid[:, None],
        type_speed=type_speed,
    )


def _type_speed_table(table: NodeTable, type_speeds: dict) -> dict:
    """{model name: [T] float32} of ``to_cluster``'s ``type_speeds``, checked (``DataError``
    naming the model, and the type index for a bad speed)."""
    if not isinstance(type_speeds, dict) or not type_speeds:
        raise DataError("type_speeds", None, None, "expected a non-empty {model name: [speeds per job type]}")
    out, num_types = {}, None
    for name, values in type_speeds.items():
        if name not in MODEL_NAMES or name == "CPU":
            raise DataError("type_speeds", None, str(name), f"unknown GPU model; known: {MODEL_NAMES[:-1]}")
        row = np.asarray(values, np.float64).reshape(-1) if np.ndim(values) <= 1 else None
        if row is None or row.size == 0:
            raise DataError("type_speeds", None, name, f"expected a list of speeds, one per job type, got {values!r}")
        if num_types is not None and row.size != num_types:
            raise DataError("type_speeds", None, name, f"{row.size} job types; the first model has {num_types}")
        num_types = row.size
        bad = np.flatnonzero(~(np.isfinite(row) & (row > 0)))
        if bad.size:
            raise DataError("type_speeds", None, name,
                            f"job type {bad[0]}: speed must be a finite number > 0, got {row[bad[0]]}")
        out[name] = row.astype(np.float32)
    lacking = sorted({MODEL_NAMES[m] for m, g in zip(table.model, table.num_gpus) if g > 0} - set(out))
    if lacking:
        raise DataError("type_speeds", None, lacking[0], "a GPU model of the cluster has no speeds")
    return out


def check_job_types(cluster: Cluster, jobs, where: str = "jobs") -> None:
    """Every valid job's ``job_type`` names a row of ``cluster.type_speed`` (0 <= type < T):
    else a ``DataError`` naming the first bad job. The env does not check (inside ``jit`` it
    cannot raise): call this where a workload meets a cluster on the host."""
    valid = np.asarray(jobs.valid, bool)
    check_job_type(np.where(valid, np.asarray(jobs.job_type), 0), cluster.num_types, where=where)
