"""Loaders for the Alibaba GPU traces, with validation, and the tools to turn them into episodes.

Two traces (see ``shared/data/README.md``):

* **openb** (Alibaba 2023, the FGD paper's trace): ``load_openb_pods``.
  - *dynamic* mode (episodes with departures): arrival = ``creation_time``; run time =
    ``deletion_time - scheduled_time``. The GPU model a pod actually ran on is not in the
    trace, so **the run time is taken as work on a speed-1.0 GPU** (``work_s`` = run time):
    on a node whose model has speed s the job then runs ``run time / s``. Pending pods
    (empty ``scheduled_time``: they never ran) have no run time; they are left out and
    counted in ``report["left_out_pending"]`` (``strict=True`` makes them an error).
    Pods whose creation_time lies apart from all the others (``isolated_arrivals``: a
    compressed window holding one would squeeze its other pods together) are warned about
    and counted in ``report["isolated_arrivals"]`` (``strict=True`` refuses them).
  - *static* mode (the FGD paper's protocol, no departures): every row, sorted by ``name``
    as the paper does, arrival = position in that order (0, 1, 2, ...), ``work_s`` = 0.
    The 5-column ``multigpu`` lists (no times) support static mode only.
* **PAI** (Alibaba 2020, "MLaaS in the Wild"): ``load_pai`` joins the task table on the job
  table (a task, ``(job_name, task_name)``, on two rows is an error). Only ``Terminated``
  tasks; arrival = the job's ``start_time`` (its submission); run
  time = the task's ``end_time - start_time`` (taken as work at speed 1.0, as above); each
  of the task's ``inst_num`` instances becomes one job on one node. **Gang placement across
  nodes is not modelled**: an instance that asks for more GPUs than any node has is simply
  unschedulable, and ``TraceWorkload.count_unschedulable`` counts such jobs.

Every loader returns a ``TraceWorkload``: host numpy columns, **sorted by arrival** (stable:
ties keep file order), the source line of each job, and a ``report`` dict of counts. Bad input
raises ``errors.DataError`` naming the file, the 1-based line (header = line 1) and the field.

Episodes: ``trace_windows`` cuts distinct contiguous windows of arrivals, each re-based to
start at 0; ``compress_to_load`` divides arrival times by a factor so that the offered load
``offered_load`` (ρ = Σ GPUs × work / (the cluster's work capacity × arrival span); the work
capacity is ``cluster.work_capacity``, in speed-1.0 GPUs) hits a target, and reports the
factor.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from jaxsched import cluster as _cluster
from jaxsched.errors import DataError
from jaxsched.textfile import read_text
from jaxsched.types import ALL_MODELS, GPU_MILLI, Jobs, jobs_from_numpy

log = logging.getLogger(__name__)

INT32_MAX = int(np.iinfo(np.int32).max)
# Trace times are seconds: anything past this is not a time (epoch milliseconds, garbage).
MAX_TRACE_TIME_S = 1e11
TIME = {"integer": False, "maximum": MAX_TRACE_TIME_S}
MAX_PAI_JOBS = 20_000_000  # instances a PAI task table may expand to (the 2020 trace: ~1.2M)
MAX_EPISODE_S = float(2 ** 24)  # float32 keeps whole seconds up to here (``TraceWorkload.to_jobs``)
# Isolated arrivals (``isolated_arrivals``): at most this share of the pods, cut off from the
# others by a gap longer than the others' whole span.
ISOLATED_MAX_SHARE = 0.01

OPENB_BASE_FIELDS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPENB_TIME_FIELDS = ("creation_time", "deletion_time", "scheduled_time")
OPENB_FIELDS = OPENB_BASE_FIELDS + ("gpu_spec", "qos", "pod_phase") + OPENB_TIME_FIELDS
# openb's qos values, highest priority first (``load_openb_pods``'s ``qos_classes``): LS,
# Alibaba's latency-sensitive class (Koordinator's LS: online services its co-location
# protects); then Kubernetes' own QoS classes in their eviction order, Guaranteed before
# Burstable (BestEffort is evicted first); BE last, Alibaba's best-effort class (Koordinator's
# BE: batch work on resources reclaimed from the others, the first suppressed or evicted).
# Guaranteed and Burstable are 107 of the default list's 8,152 pods: their place matters little.
OPENB_QOS_CLASSES = ("LS", "Guaranteed", "Burstable", "BE")

# Column lists of the headerless PAI 2020 tables (as in pai_job_table.header / pai_task_table.header).
PAI_JOB_FIELDS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
PAI_TASK_FIELDS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                   "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
# PAI gpu_type values that do not constrain placement: MISC is a mix of older cards (no one
# model), CPU means none; any other name not in cluster.MODEL_NAMES is also unconstrained.
PAI_UNCONSTRAINED_TYPES = ("MISC", "CPU", "")


# --------------------------------------------------------------------------------------------
# The workload container
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class TraceWorkload:
    """A trace turned into jobs, on the host: one entry per job, sorted by ``arrival_s``.

    names       [J] str      pod / instance name
    arrival_s   [J] float64  submission time (seconds; static mode: 0, 1, 2, ...)
    work_s      [J] float64  run time on a speed-1.0 GPU (static mode: 0)
    num_gpu     [J] int32    0 = CPU-only, 1 = one GPU (whole or a fraction), k >= 2 whole GPUs
    gpu_milli   [J] int32    milli-GPU per GPU (0 for CPU-only, 1000 for k >= 2)
    cpu_milli   [J] int32;   mem_mib [J] int32
    model_mask  [J] int32    allowed GPU models (``types.ALL_MODELS`` = any)
    gpu_spec    [J] str      the model constraint as written ("" = none; PAI: the gpu_type)
    qos_class   [J] int32    priority class, higher = more important (openb: the pod's ``qos``
                             by ``qos_classes``; 0 where the trace has none)
    lines       [J] int64    1-based line of the job's row in ``path``
    path        str          the file the jobs came from (PAI: the task table)
    report      dict         counts: rows_read, jobs, left_out_*, ... (see the loaders)
    """

    names: np.ndarray
    arrival_s: np.ndarray
    work_s: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    model_mask: np.ndarray
    gpu_spec: np.ndarray
    qos_class: np.ndarray
    lines: np.ndarray
    path: str
    report: dict

    _COLUMNS = ("names", "arrival_s", "work_s", "num_gpu", "gpu_milli", "cpu_milli", "mem_mib",
                "model_mask", "gpu_spec", "qos_class", "lines")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def take(self, index, **report) -> "TraceWorkload":
        """The jobs at ``index`` (an index array or slice), with ``report`` entries added."""
        cols = {c: getattr(self, c)[index] for c in self._COLUMNS}
        return TraceWorkload(**cols, path=self.path, report={**self.report, **report})

    def with_arrivals(self, arrival_s, **report) -> "TraceWorkload":
        """The same jobs with new arrival times (must keep the order), ``report`` entries added."""
        return dataclasses.replace(self, arrival_s=np.asarray(arrival_s, np.float64),
                                   report={**self.report, **report})

    def to_jobs(self, pad_to: int | None = None) -> Jobs:
        """The ``types.Jobs`` pytree (numpy arrays), padded to ``pad_to`` jobs if given.

        The env keeps times in float32, which holds whole seconds only up to 2^24 s (194 days):
        an arrival or a run time past that (a window that is not re-based, a trace in epoch
        seconds replayed whole) is a ``DataError`` naming the job's line, not a silent rounding."""
        for field, values in (("arrival (seconds from the episode's start)", self.arrival_s),
                              ("run time (seconds)", self.work_s)):
            i = _first_line(self.lines, ~(np.abs(values) <= MAX_EPISODE_S))
            if i is not None:
                raise DataError(self.path, int(self.lines[i]), field,
                                f"{values[i]:g} s is past what float32 times hold to the second "
                                f"({MAX_EPISODE_S:g} s, 194 days): cut shorter windows or compress time")
        return jobs_from_numpy(self.arrival_s, self.work_s, self.num_gpu, self.gpu_milli,
                               self.cpu_milli, self.mem_mib, model_mask=self.model_mask,
                               pad_to=pad_to, qos_class=self.qos_class)

    def offered_load(self, cluster_capacity: float) -> float:
        """ρ of these jobs on a cluster of work capacity ``cluster_capacity`` (see ``offered_load``)."""
        return offered_load(self.arrival_s, self.work_s, self.num_gpu, self.gpu_milli, cluster_capacity)

    def frag_classes(self, coverage: float = 0.95, max_classes: int | None = None):
        """FGD's target workload of these jobs (``classes.target_workload``)."""
        from jaxsched.workload.classes import target_workload
        return target_workload(self.cpu_milli, self.gpu_milli, self.num_gpu, self.gpu_spec,
                               coverage=coverage, max_classes=max_classes)

    def unschedulable_mask(self, nodes: "_cluster.NodeTable", max_span: int | None = None) -> np.ndarray:
        """[J] bool: the job fits no node of the *empty* cluster (docs/semantics.md, fit rule).
        ``max_span`` is read by gang workloads (``philly.PhillyWorkload``); a pod fits one node."""
        return ~_fits_any(nodes, self.cpu_milli, self.mem_mib, self.num_gpu, self.model_mask)

    def count_unschedulable(self, nodes: "_cluster.NodeTable") -> tuple[int, list[str]]:
        """(how many jobs fit no node of the empty cluster, their names in job order)."""
        bad = self.unschedulable_mask(nodes)
        return int(bad.sum()), [str(n) for n in self.names[bad]]

    def check_schedulable(self, nodes: "_cluster.NodeTable", strict: bool = False, max_span: int | None = None
                          ) -> tuple[int, list[str]]:
        """Report the jobs that fit no node (logged); with ``strict`` they raise ``DataError``.

        Such jobs are valid data (they fail at arrival in an episode), not errors, unless strict.
        """
        bad = self.unschedulable_mask(nodes, max_span)
        names = [str(n) for n in self.names[bad]]
        if names:
            j = int(np.flatnonzero(bad)[0])
            field, why = _why_unschedulable(nodes, self, j)
            msg = (f"{len(names)} job(s) fit no node of the empty cluster ({len(nodes)} nodes); "
                   f"first: {str(names[0])!r}: {why}")
            if strict:
                raise DataError(self.path, int(self.lines[j]), field, msg)
            log.warning("%s: %s", self.path, msg)
        return len(names), names


def _fits_any(nodes, cpu_milli, mem_mib, num_gpu, model_mask) -> np.ndarray:
    """[J] bool: each job fits at least one node of the empty cluster ``nodes``."""
    types = np.unique(np.stack([np.asarray(nodes.cpu_milli, np.int64), np.asarray(nodes.mem_mib, np.int64),
                                np.asarray(nodes.num_gpus, np.int64), np.asarray(nodes.model, np.int64)],
                               axis=1), axis=0)
    out = np.zeros(len(cpu_milli), bool)
    num_gpu = np.asarray(num_gpu, np.int64)
    mask = np.asarray(model_mask, np.int64)
    for cpu, mem, gpus, model in types:  # a handful of distinct node types
        gpu_ok = (num_gpu == 0) | ((((mask >> model) & 1) == 1) & (gpus >= num_gpu))
        out |= (np.asarray(cpu_milli) <= cpu) & (np.asarray(mem_mib) <= mem) & gpu_ok
    return out


def _why_unschedulable(nodes, w: TraceWorkload, j: int) -> tuple[str | None, str]:
    """The field to blame for job j fitting nowhere, and a sentence saying why."""
    cpu_ok = nodes.cpu_milli >= w.cpu_milli[j]
    mem_ok = nodes.mem_mib >= w.mem_mib[j]
    k = int(w.num_gpu[j])
    model_ok = ((int(w.model_mask[j]) >> nodes.model.astype(np.int64)) & 1) == 1
    gpu_ok = np.ones(len(nodes), bool) if k == 0 else (model_ok & (nodes.num_gpus >= k))
    ask = (f"cpu_milli={w.cpu_milli[j]}, memory_mib={w.mem_mib[j]}, num_gpu={k}, "
           f"gpu_milli={w.gpu_milli[j]}, gpu_spec={str(w.gpu_spec[j])!r}")
    for field, ok in (("num_gpu", gpu_ok), ("cpu_milli", cpu_ok), ("memory_mib", mem_ok)):
        if not ok.any():
            return field, f"no node has enough {field} ({ask})"
    if k and not (gpu_ok & cpu_ok).any():
        return "cpu_milli", f"no node with enough GPUs of an allowed model has enough CPU ({ask})"
    return "memory_mib", f"no node has enough CPU, memory and GPUs together ({ask})"


# --------------------------------------------------------------------------------------------
# Reading and validating columns
# --------------------------------------------------------------------------------------------

def _read_records(path: Path):
    """Non-blank CSV records of ``path`` and the 1-based line each one starts on
    (``textfile.read_text``: UTF-8 with or without a byte-order mark, or a ``DataError``)."""
    text = read_text(path)
    rows, lines = [], []
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    try:
        for rec in reader:
            if rec and any(v.strip() for v in rec):
                rows.append([v.strip() for v in rec])
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as err:
        raise DataError(path, reader.line_num, None, f"malformed CSV: {err}") from None
    return rows, np.asarray(lines, np.int64)


def _read_table(path: Path, needed) -> tuple:
    """(header, header line, rows, lines) of a CSV with a header row; a ``DataError`` for an
    empty file, a column named twice, or a ``needed`` column missing."""
    rows, lines = _read_records(path)
    if not rows:
        raise DataError(path, None, None, "empty file (no header row)")
    header, header_line = tuple(rows[0]), int(lines[0])
    if not any(c in header for c in needed) and any(_is_number(x) for x in header):
        raise DataError(path, header_line, None, f"no header row: line {header_line} looks like data ({header[:4]}...); "
                        f"the file's first line must name its columns, among them {list(needed)}")
    _check_header(path, header, header_line)
    missing = [c for c in needed if c not in header]
    if missing:
        raise DataError(path, header_line, missing[0], f"missing column(s) {missing}; header is {header}")
    return header, header_line, rows[1:], lines[1:]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_header(path, header, line) -> None:
    """A column named twice is a ``DataError`` (which of the two would be read is a guess)."""
    seen = set()
    for name in header:
        if name in seen:
            raise DataError(path, line, name, f"column {name!r} appears twice in the header {tuple(header)}")
        seen.add(name)


def _check_unique(path, lines, field, values) -> None:
    """Every value of ``values`` (a name column) appears once; else a ``DataError`` at the repeat."""
    dup = pd.Series(values).duplicated().to_numpy()
    i = _first_line(lines, dup)
    if i is not None:
        first = int(lines[int(np.flatnonzero(values == values[i])[0])])
        raise DataError(path, int(lines[i]), field, f"duplicate {field} {str(values[i])!r} (first at line {first})")


def _check_unique_tasks(path, lines, job_names, task_names) -> None:
    """Every PAI task (job_name, task_name) has one row; else a ``DataError`` at the repeat
    (a task listed twice would add its instances twice)."""
    dup = pd.DataFrame({"job": job_names, "task": task_names}).duplicated().to_numpy()
    i = _first_line(lines, dup)
    if i is not None:
        first = int(lines[int(np.flatnonzero((job_names == job_names[i]) & (task_names == task_names[i]))[0])])
        raise DataError(path, int(lines[i]), "task_name",
                        f"duplicate task (job_name, task_name) = ({str(job_names[i])!r}, {str(task_names[i])!r}) "
                        f"(first at line {first}): its instances would be counted twice")


def _columns(path, rows, lines, fields, names) -> dict:
    """Columns ``names`` of ``rows`` (laid out as ``fields``) as numpy str arrays; ragged rows fail."""
    lens = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    short = np.flatnonzero(lens < len(fields))
    if len(short):
        i = int(short[0])
        raise DataError(path, int(lines[i]), fields[lens[i]],
                        f"missing value: the row has {lens[i]} fields, expected {len(fields)} {fields}")
    long = np.flatnonzero(lens > len(fields))
    if len(long):
        i = int(long[0])
        raise DataError(path, int(lines[i]), None,
                        f"the row has {lens[i]} fields, expected {len(fields)} {fields}")
    out = {}
    for name in names:
        c = fields.index(name)
        out[name] = np.asarray([r[c] for r in rows], dtype=str) if rows else np.zeros(0, str)
    return out


def _numbers(path, lines, field, texts, *, integer=True, allow_empty=False, minimum=0.0,
             maximum=None, where=None) -> np.ndarray:
    """Parse a str column to float64, vectorised; the first bad row (among ``where``) raises.

    Empty cells become NaN when ``allow_empty``. ``integer``: whole numbers only.
    ``maximum`` defaults to the int32 range for integer columns.
    """
    values = pd.to_numeric(pd.Series(texts, dtype=object), errors="coerce").to_numpy(np.float64)
    empty = texts == ""
    consider = np.ones(len(texts), bool) if where is None else np.asarray(where, bool)
    if maximum is None and integer:
        maximum = INT32_MAX

    def first(bad):
        idx = np.flatnonzero(bad & consider)
        return int(idx[0]) if len(idx) else None

    finite = np.isfinite(values)
    safe = np.where(finite, values, 0.0)
    no = np.zeros(len(texts), bool)
    checks = (
        (empty if not allow_empty else no, lambda t: "missing value (empty)"),
        (~empty & ~finite, lambda t: f"not a number: {t!r}"),
        (finite & (safe < minimum),
         lambda t: f"negative value {t}" if minimum == 0 else f"must be >= {minimum:g}, got {t}"),
        (finite & (safe != np.floor(safe)) if integer else no, lambda t: f"not a whole number: {t!r}"),
        (finite & (safe > maximum) if maximum is not None else no,
         lambda t: f"value {t} is too large (max {maximum:g})"),
    )
    found = [(i, problem) for bad, problem in checks if (i := first(bad)) is not None]
    if found:  # the earliest bad row in the file, whatever is wrong with it
        i, problem = min(found, key=lambda x: x[0])
        raise DataError(path, int(lines[i]), field, problem(str(texts[i])))
    return values


def _first_line(lines, bad) -> int | None:
    idx = np.flatnonzero(bad)
    return int(idx[0]) if len(idx) else None


def _spec_masks(path, lines, specs) -> np.ndarray:
    """model_mask of each gpu_spec string ("A|B|A" -> bits of A and B; "" -> ALL_MODELS)."""
    out = np.full(len(specs), ALL_MODELS, np.int32)
    uniq, inverse = np.unique(specs, return_inverse=True)
    for u, spec in enumerate(uniq):
        if spec == "":
            continue
        parts = [p.strip() for p in str(spec).split("|")]
        bad = [p for p in parts if p not in _cluster.MODEL_NAMES or p == "CPU"]
        if bad:
            i = int(np.flatnonzero(inverse == u)[0])
            raise DataError(path, int(lines[i]), "gpu_spec",
                            f"unknown GPU model {bad[0]!r} in {str(spec)!r}; "
                            f"known: {_cluster.MODEL_NAMES[:-1]}")
        out[inverse == u] = _cluster.model_mask(parts)
    return out


def _check_gpu_request(path, lines, num_gpu, gpu_milli) -> None:
    """num_gpu / gpu_milli consistency (data/README.md semantics)."""
    checks = (
        ((num_gpu == 0) & (gpu_milli != 0), "CPU-only (num_gpu 0) but gpu_milli is {m:g}; must be 0"),
        ((num_gpu >= 2) & (gpu_milli != GPU_MILLI),
         "num_gpu {g:g} >= 2 needs whole GPUs: gpu_milli must be 1000, got {m:g}"),
        ((num_gpu == 1) & ((gpu_milli < 1) | (gpu_milli > GPU_MILLI)),
         "a GPU pod's gpu_milli must be in 1..1000, got {m:g}"),
    )
    found = [(i, problem) for bad, problem in checks if (i := _first_line(lines, bad)) is not None]
    if found:
        i, problem = min(found, key=lambda x: x[0])
        raise DataError(path, int(lines[i]), "gpu_milli", problem.format(g=num_gpu[i], m=gpu_milli[i]))


def isolated_arrivals(arrival_s) -> np.ndarray:
    """[J] bool: the arrivals cut off from the rest of the trace (``arrival_s`` sorted).

    Rule: a group of at most ``ISOLATED_MAX_SHARE`` of the jobs (1%; so none in a trace of
    fewer than 100) at either end of the trace is isolated when the gap between it and the
    other jobs is longer than the other jobs' whole arrival span. One such timestamp puts
    its window's span almost all into that gap, and ``compress_to_load`` then squeezes the
    window's other jobs into a sliver of the episode. (In the openb lists the largest such
    ratio is 0.6, except gpushare100: 7 pods 72 days before the others, which span 46 days.)
    """
    t = np.asarray(arrival_s, np.float64)
    n = len(t)
    out = np.zeros(n, bool)
    k = int(ISOLATED_MAX_SHARE * n)
    if k < 1:
        return out
    i = np.arange(k)                                   # gap i: after the first i + 1 jobs
    head = (t[i + 1] - t[i]) > (t[-1] - t[i + 1])     # ... longer than the span of the rest
    if head.any():
        out[: int(i[head].max()) + 1] = True
    j = n - 2 - np.arange(k)                          # gap j: before the last n - 1 - j jobs
    tail = (t[j + 1] - t[j]) > (t[j] - t[0])
    if tail.any():
        out[int(j[tail].min()) + 1:] = True
    return out


def _check_isolated(path, lines, field, names, arrival_s, strict, noun: str = "pod") -> int:
    """Warn about (``strict``: refuse) ``isolated_arrivals``, naming the file, the first
    such row and ``field``; how many there are."""
    bad = isolated_arrivals(arrival_s)
    if not bad.any():
        return 0
    t = np.asarray(arrival_s, np.float64)
    rest = t[~bad]
    i = int(np.flatnonzero(bad)[np.argmin(lines[bad])])  # the first in the file
    gap = float(rest.min() - t[i]) if t[i] < rest.min() else float(t[i] - rest.max())
    where = "before" if t[i] < rest.min() else "after"
    shown = ", ".join(str(int(x)) for x in np.sort(lines[bad])[:5]) + (", ..." if bad.sum() > 5 else "")
    msg = (f"{int(bad.sum())} {noun}(s) (lines {shown}) arrive apart from the other {len(rest)}: "
           f"{str(names[i])!r} at {t[i]:g} s is {gap:g} s {where} them, longer than their whole "
           f"span ({float(rest.max() - rest.min()):g} s); a trace window holding it spans that gap, "
           f"and compressing the window to a target load squeezes its other {noun}s together. "
           f"Check the timestamp (strict, workload.strict in a config, refuses it)")
    if strict:
        raise DataError(path, int(lines[i]), field, msg)
    log.warning("%s, line %d, field '%s': %s", path, int(lines[i]), field, msg)
    return int(bad.sum())


# --------------------------------------------------------------------------------------------
# openb (Alibaba 2023)
# --------------------------------------------------------------------------------------------

def _qos_class(path, lines, qos, qos_classes) -> np.ndarray:
    """[rows] int32 each row's priority class: ``len(classes) - 1 - i`` for the i-th of
    ``qos_classes`` (highest first; None: ``OPENB_QOS_CLASSES``, and a class the trace lacks
    is fine). A value not in the list is a ``DataError`` at its row, field ``qos``; a class of
    a given ``qos_classes`` that no row has (or no ``qos`` column), a one-line error naming
    ``workload.qos_classes``. ``qos`` None: the file has no qos column (every row class 0)."""
    classes = OPENB_QOS_CLASSES if qos_classes is None else tuple(qos_classes)
    if qos_classes is not None:
        if not classes or not all(isinstance(c, str) and c for c in classes) or len(set(classes)) < len(classes):
            raise DataError("config", None, "workload.qos_classes",
                            f"must name distinct qos values, highest priority first, got {list(classes)!r}")
        present = set() if qos is None else set(np.unique(qos).tolist())
        absent = [c for c in classes if c not in present]
        if absent:
            where = "has no qos column" if qos is None else f"has qos values {sorted(present)}"
            raise DataError("config", None, "workload.qos_classes",
                            f"{absent[0]!r} is not in the trace {path} (it {where})")
    if qos is None:
        return np.zeros(len(lines), np.int32)
    index = pd.Index(classes).get_indexer(qos)
    i = _first_line(lines, index < 0)
    if i is not None:
        raise DataError(path, int(lines[i]), "qos", f"{str(qos[i])!r} is not a priority class of "
                        f"workload.qos_classes {list(classes)} (highest first)")
    return (len(classes) - 1 - index).astype(np.int32)


def load_openb_pods(path, mode: str = "dynamic", strict: bool = False, qos_classes=None) -> TraceWorkload:
    """Load an openb pod list (11-column lists; 5-column ``multigpu`` lists in static mode).

    ``mode="dynamic"``: Pending pods are left out (``report["left_out_pending"]``; with
    ``strict`` they raise); arrival = creation_time, ``work_s`` = deletion_time -
    scheduled_time, the run time taken as work on a speed-1.0 GPU (the model the pod ran on
    is unknown). ``mode="static"``: every row, sorted by name, arrival = 0, 1, 2, ..., work 0.

    Validation (``DataError`` naming file, line, field): missing column, empty or
    non-numeric or negative value, non-whole resource counts, deletion_time before
    scheduled_time or creation_time, num_gpu 0 with gpu_milli != 0, num_gpu >= 2 with
    gpu_milli != 1000, gpu_milli outside 1..1000 for a 1-GPU pod, an unknown model in
    gpu_spec, an empty file. In dynamic mode, pods whose creation_time lies apart from the
    others (``isolated_arrivals``) are warned about, naming the first one's line, and
    counted in ``report["isolated_arrivals"]``; ``strict`` refuses them.
    """
    path = Path(path)
    if mode not in ("dynamic", "static"):
        raise DataError(path, None, "mode", f"must be 'dynamic' or 'static', got {mode!r}")
    header, header_line, rows, lines = _read_table(path, OPENB_BASE_FIELDS)
    has_times = [c for c in OPENB_TIME_FIELDS if c in header]
    if mode == "dynamic" and len(has_times) < len(OPENB_TIME_FIELDS):
        lack = [c for c in OPENB_TIME_FIELDS if c not in header]
        raise DataError(path, header_line, lack[0],
                        f"missing time column(s) {lack}: dynamic mode needs arrival and run times "
                        f"(5-column lists such as the multigpu ones support mode='static' only)")
    if not rows:
        raise DataError(path, None, None, "no pods in file (header only)")
    wanted = [c for c in header if c in OPENB_FIELDS]
    col = _columns(path, rows, lines, header, wanted)

    names = col["name"]
    i = _first_line(lines, names == "")
    if i is not None:
        raise DataError(path, int(lines[i]), "name", "missing value (empty)")
    _check_unique(path, lines, "name", names)
    cpu = _numbers(path, lines, "cpu_milli", col["cpu_milli"])
    mem = _numbers(path, lines, "memory_mib", col["memory_mib"])
    num_gpu = _numbers(path, lines, "num_gpu", col["num_gpu"])
    gpu_milli = _numbers(path, lines, "gpu_milli", col["gpu_milli"])
    _check_gpu_request(path, lines, num_gpu, gpu_milli)
    specs = col["gpu_spec"] if "gpu_spec" in col else np.full(len(rows), "", dtype=object)
    masks = _spec_masks(path, lines, specs)
    qos_class = _qos_class(path, lines, col.get("qos"), qos_classes)

    report = {"path": str(path), "mode": mode, "rows_read": len(rows)}
    if "pod_phase" in col:
        ph, cnt = np.unique(col["pod_phase"], return_counts=True)
        report["phases"] = {str(p): int(c) for p, c in zip(ph, cnt)}

    times = len(has_times) == len(OPENB_TIME_FIELDS)
    if times:
        created = _numbers(path, lines, "creation_time", col["creation_time"], **TIME)
        deleted = _numbers(path, lines, "deletion_time", col["deletion_time"], **TIME)
        scheduled = _numbers(path, lines, "scheduled_time", col["scheduled_time"], **TIME, allow_empty=True)
        with np.errstate(invalid="ignore"):
            for field, later, earlier, label in (
                    ("deletion_time", deleted, scheduled, "scheduled_time"),
                    ("deletion_time", deleted, created, "creation_time"),
                    ("scheduled_time", scheduled, created, "creation_time")):
                i = _first_line(lines, later < earlier)
                if i is not None:
                    raise DataError(path, int(lines[i]), field,
                                    f"reversed times: {field} {later[i]:g} < {label} {earlier[i]:g}")

    if mode == "dynamic":
        pending = np.isnan(scheduled)
        report["left_out_pending"] = int(pending.sum())
        if strict and pending.any():
            i = int(np.flatnonzero(pending)[0])
            raise DataError(path, int(lines[i]), "scheduled_time",
                            f"empty: pod {str(names[i])!r} never ran (Pending), and strict=True refuses to "
                            f"leave rows out ({int(pending.sum())} such rows)")
        keep = np.flatnonzero(~pending)
        arrival = created[keep]
        order = keep[np.argsort(arrival, kind="stable")]
        arrival_s = created[order]
        work_s = deleted[order] - scheduled[order]
        report["isolated_arrivals"] = _check_isolated(path, lines[order], "creation_time", names[order],
                                                      arrival_s, strict)
    else:
        report["left_out_pending"] = 0
        order = np.argsort(names, kind="stable")
        arrival_s = np.arange(len(order), dtype=np.float64)
        work_s = np.zeros(len(order), np.float64)
    report["jobs"] = len(order)
    return TraceWorkload(
        names=names[order].astype(object), arrival_s=arrival_s, work_s=work_s,
        num_gpu=num_gpu[order].astype(np.int32), gpu_milli=gpu_milli[order].astype(np.int32),
        cpu_milli=cpu[order].astype(np.int32), mem_mib=mem[order].astype(np.int32),
        model_mask=masks[order], gpu_spec=np.asarray(specs, dtype=object)[order],
        qos_class=qos_class[order], lines=lines[order], path=str(path), report=report,
    )


# --------------------------------------------------------------------------------------------
# PAI (Alibaba 2020)
# --------------------------------------------------------------------------------------------

def _read_headerless(path: Path, fields) -> tuple[dict, np.ndarray]:
    rows, lines = _read_records(path)
    if not rows:
        raise DataError(path, None, None, f"empty file (expected headerless rows of {fields})")
    return _columns(path, rows, lines, fields, fields), lines


def load_pai(job_table_path, task_table_path, strict: bool = False) -> TraceWorkload:
    """Load the PAI 2020 job and task tables (headerless CSV, columns ``PAI_*_FIELDS``).

    Only ``status == "Terminated"`` tasks become jobs; the others are left out and counted
    (``report["left_out_not_terminated"]``), as are Terminated tasks whose job is missing
    from the job table (``left_out_unknown_job``) and tasks with ``inst_num == 0``
    (``left_out_zero_instances``); ``strict=True`` makes any left-out row a ``DataError``.
    A task is ``(job_name, task_name)``: a pair on two rows (whatever their status) is a
    ``DataError`` naming the repeat's line and the first's, as a job named twice in the job
    table is.

    Each of a task's ``inst_num`` instances becomes one job (named ``job/task/i``) on one node:
    * arrival = the job's ``start_time`` in the job table (its submission);
    * ``work_s`` = the task's ``end_time - start_time`` (run time taken as speed-1.0 work);
    * ``plan_gpu`` (percent of a GPU): 0 or empty -> CPU-only; below 100 -> one GPU at
      ``plan_gpu × 10`` milli; otherwise ``ceil(plan_gpu / 100)`` whole GPUs;
    * CPU = ``plan_cpu × 10`` milli-cores (plan_cpu is percent of a core); memory =
      ``plan_mem × 1024`` MiB (plan_mem is GB); empty plan_cpu / plan_mem count as 0 and are
      counted in the report;
    * ``gpu_type`` constrains the model when it names a known model (``cluster.MODEL_NAMES``);
      MISC (a mix of older cards), CPU, empty or unknown names put no constraint
      (``report["gpu_type_unconstrained"]`` counts such GPU instances).

    Gang placement across nodes is **not** modelled: an instance needing more GPUs than any
    node has is unschedulable; ``TraceWorkload.count_unschedulable`` counts them.
    """
    job_path, task_path = Path(job_table_path), Path(task_table_path)
    jobs, job_lines = _read_headerless(job_path, PAI_JOB_FIELDS)
    tasks, lines = _read_headerless(task_path, PAI_TASK_FIELDS)

    _check_unique(job_path, job_lines, "job_name", jobs["job_name"])
    _check_unique_tasks(task_path, lines, tasks["job_name"], tasks["task_name"])
    i = _first_line(job_lines, jobs["job_name"] == "")
    if i is not None:
        raise DataError(job_path, int(job_lines[i]), "job_name", "missing value (empty)")
    job_start = _numbers(job_path, job_lines, "start_time", jobs["start_time"], **TIME, allow_empty=True)

    status = tasks["status"]
    st, cnt = np.unique(status, return_counts=True)
    report = {"path": str(task_path), "job_table": str(job_path), "rows_read": len(status),
              "job_rows_read": len(job_start), "status": {str(s): int(c) for s, c in zip(st, cnt)}}
    term = status == "Terminated"
    report["left_out_not_terminated"] = int((~term).sum())
    if strict and not term.all():
        i = int(np.flatnonzero(~term)[0])
        raise DataError(task_path, int(lines[i]), "status",
                        f"status {str(status[i])!r} is not 'Terminated', and strict=True refuses to "
                        f"leave rows out ({int((~term).sum())} such rows)")

    inst = _numbers(task_path, lines, "inst_num", tasks["inst_num"], where=term)
    start = _numbers(task_path, lines, "start_time", tasks["start_time"], **TIME, where=term)
    end = _numbers(task_path, lines, "end_time", tasks["end_time"], **TIME, where=term)
    plan = {f: _numbers(task_path, lines, f, tasks[f], integer=False, allow_empty=True, where=term)
            for f in ("plan_cpu", "plan_mem", "plan_gpu")}
    with np.errstate(invalid="ignore"):
        i = _first_line(lines, term & (end < start))
    if i is not None:
        raise DataError(task_path, int(lines[i]), "end_time",
                        f"reversed times: end_time {end[i]:g} < start_time {start[i]:g}")
    for f in ("plan_cpu", "plan_mem"):
        report[f"empty_{f}"] = int((term & np.isnan(plan[f])).sum())

    job_idx = pd.Index(jobs["job_name"]).get_indexer(tasks["job_name"])
    unknown = term & (job_idx < 0)
    report["left_out_unknown_job"] = int(unknown.sum())
    if strict and unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise DataError(task_path, int(lines[i]), "job_name",
                        f"job {str(tasks['job_name'][i])!r} is not in the job table {job_path}")
    zero = term & ~unknown & (inst == 0)
    report["left_out_zero_instances"] = int(zero.sum())
    if strict and zero.any():
        i = int(np.flatnonzero(zero)[0])
        raise DataError(task_path, int(lines[i]), "inst_num", "0 instances: the task makes no job")
    keep = np.flatnonzero(term & ~unknown & ~zero)
    no_start = np.isnan(job_start[job_idx[keep]])
    if no_start.any():
        t = int(keep[np.flatnonzero(no_start)[0]])
        raise DataError(job_path, int(job_lines[job_idx[t]]), "start_time",
                        f"missing value (empty), but the Terminated task at {task_path} line "
                        f"{int(lines[t])} needs it as its arrival")
    report["tasks_used"] = len(keep)

    # Per task, then expanded to one job per instance.
    pg = np.nan_to_num(plan["plan_gpu"][keep])
    num_gpu = np.where(pg <= 0, 0, np.where(pg < 100, 1, np.ceil(pg / 100 - 1e-9))).astype(np.int64)
    gpu_milli = np.where(pg <= 0, 0, np.where(pg < 100, np.clip(np.rint(pg * 10), 1, GPU_MILLI),
                                               GPU_MILLI)).astype(np.int64)
    cpu = np.rint(np.nan_to_num(plan["plan_cpu"][keep]) * 10)
    mem = np.rint(np.nan_to_num(plan["plan_mem"][keep]) * 1024)
    for field, values in (("plan_cpu", cpu), ("plan_mem", mem), ("plan_gpu", num_gpu)):
        i = _first_line(lines[keep], values > INT32_MAX)
        if i is not None:
            raise DataError(task_path, int(lines[keep][i]), field, "value too large")
    gtype = tasks["gpu_type"][keep]
    known = np.isin(gtype, [m for m in _cluster.MODEL_NAMES if m not in PAI_UNCONSTRAINED_TYPES])
    mask = np.full(len(keep), ALL_MODELS, np.int64)
    for m in np.unique(gtype[known & (num_gpu > 0)]):
        mask[(gtype == m) & (num_gpu > 0)] = _cluster.model_mask([str(m)])
    spec = np.where(known & (num_gpu > 0), gtype, "")

    reps = inst[keep].astype(np.int64)
    if reps.sum() > MAX_PAI_JOBS:  # np.repeat would fail with a MemoryError, naming nothing
        i = int(np.argmax(reps))
        raise DataError(task_path, int(lines[keep][i]), "inst_num",
                        f"{reps[i]:,} instances: the table expands to {int(reps.sum()):,} jobs, more than "
                        f"{MAX_PAI_JOBS:,} (one job per instance)")
    report["gpu_type_unconstrained"] = int(reps[(num_gpu > 0) & ~known].sum())
    expand = np.repeat(np.arange(len(keep)), reps)
    within = np.arange(len(expand)) - np.repeat(np.cumsum(reps) - reps, reps)
    arrival = job_start[job_idx[keep]][expand]
    order = np.argsort(arrival, kind="stable")
    expand, within = expand[order], within[order]
    src = keep[expand]
    names = np.char.add(np.char.add(np.char.add(np.char.add(
        tasks["job_name"][src], "/"), tasks["task_name"][src]), "/"), within.astype(str))
    report["jobs"] = len(expand)
    return TraceWorkload(
        names=names.astype(object), arrival_s=arrival[order],
        work_s=(end - start)[src], num_gpu=num_gpu[expand].astype(np.int32),
        gpu_milli=gpu_milli[expand].astype(np.int32), cpu_milli=cpu[expand].astype(np.int32),
        mem_mib=mem[expand].astype(np.int32), model_mask=mask[expand].astype(np.int32),
        gpu_spec=spec[expand].astype(object), qos_class=np.zeros(len(expand), np.int32),
        lines=lines[src], path=str(task_path), report=report,
    )


# --------------------------------------------------------------------------------------------
# Offered load, windows, time compression
# --------------------------------------------------------------------------------------------

def offered_load(arrival_s, work_s, num_gpu, gpu_milli, cluster_capacity) -> float:
    """ρ = Σ (num_gpu × gpu_milli/1000 × work_s) / (cluster_capacity × arrival span).

    ``cluster_capacity``: the cluster's work capacity in speed-1.0 GPUs (``cluster.work_capacity``).
    The arrival span is ``max(arrival_s) - min(arrival_s)``. CPU-only jobs add nothing.
    Raises ``DataError`` when the span or ``cluster_capacity`` is not positive.
    """
    arrival = np.asarray(arrival_s, np.float64)
    if not cluster_capacity > 0:
        raise DataError("offered_load", None, "cluster_capacity", f"must be > 0, got {cluster_capacity}")
    span = float(arrival.max() - arrival.min()) if len(arrival) else 0.0
    if not span > 0:
        raise DataError("offered_load", None, "arrival_s",
                        f"arrival span is {span:g}: the offered load is undefined")
    gpu_work = (np.asarray(num_gpu, np.float64) * np.asarray(gpu_milli, np.float64) / GPU_MILLI
                * np.asarray(work_s, np.float64)).sum()
    return float(gpu_work / (float(cluster_capacity) * span))


def trace_part(workload: TraceWorkload, span, field: str = "trace_span") -> TraceWorkload:
    """The jobs from fraction ``span[0]`` to ``span[1]`` of the workload, in arrival order
    (``(0, 1)``: all of it). Cutting training and evaluation windows from disjoint parts keeps
    the evaluation windows unseen in training. ``report["trace_span"]`` records the span."""
    try:
        lo, hi = (float(x) for x in span)
    except (TypeError, ValueError):
        raise DataError(workload.path, None, field, f"must be two fractions [lo, hi], got {span!r}") from None
    if not 0.0 <= lo < hi <= 1.0:
        raise DataError(workload.path, None, field, f"must satisfy 0 <= lo < hi <= 1, got {span!r}")
    n = len(workload)
    return workload.take(slice(round(lo * n), round(hi * n)), trace_span=(lo, hi))


def resample(workload: TraceWorkload, num_jobs: int, num_episodes: int, seed: int,
             cluster_capacity: float, rho: float, runnable=None) -> list[TraceWorkload]:
    """``num_episodes`` episodes of ``num_jobs`` pods drawn uniformly with replacement from
    ``workload`` (request, model constraint and work of each kept together), arriving as a
    Poisson process whose rate gives offered load ``rho`` on ``cluster_capacity`` in
    expectation: mean gap = E[GPUs x work of a drawn pod] / (rho x capacity), a pod that no
    node can hold (``runnable`` False) counting as no work. For steady-state episodes longer
    than a trace allows (openb's 7,255 running pods cover about 20 h of arrivals at rho 0.9
    on the 64-node preset, less than a warm-up and a measurement window): the trace's job
    mix and run times, not its order. ``report["resampled_from"]`` = pods drawn from."""
    if not rho > 0:
        raise DataError("resample", None, "rho", f"must be > 0, got {rho}")
    if len(workload) < 1 or num_jobs < 1 or num_episodes < 1:
        raise DataError(workload.path, None, "jobs", "nothing to resample from, or no jobs asked for")
    runnable = np.ones(len(workload), bool) if runnable is None else np.asarray(runnable, bool)
    gpu_work = np.where(runnable, workload.num_gpu * workload.gpu_milli / GPU_MILLI * workload.work_s, 0.0)
    if not gpu_work.mean() > 0:
        raise DataError(workload.path, None, "work_s",
                        "the workload offers no GPU work: no arrival rate reaches a load > 0")
    gap = float(gpu_work.mean()) / (float(rho) * float(cluster_capacity))
    rng = np.random.default_rng(seed)
    out = []
    for e in range(num_episodes):
        # Drawn independently of position: a sorted draw would replay the trace's drift in
        # job mix (openb's middle part is heavier) and move the load across the episode.
        pick = rng.integers(0, len(workload), num_jobs)
        arrival = np.cumsum(rng.exponential(gap, num_jobs))
        out.append(workload.take(pick, resampled_from=len(workload), episode=e, mean_gap_s=gap,
                                 offered_load=float(rho), cluster_capacity=float(cluster_capacity))
                   .with_arrivals(arrival))
    return out


def trace_windows(workload: TraceWorkload, jobs_per_window: int, num_windows: int,
                  seed: int) -> list[TraceWorkload]:
    """``num_windows`` distinct windows of ``jobs_per_window`` consecutive arrivals.

    Starts are drawn from ``seed``: non-overlapping whenever ``num_windows × jobs_per_window``
    fits in the workload (uniformly spread gaps), otherwise distinct but overlapping
    (``report["windows_overlap"]`` says which). Windows come in time order; each is
    re-based so its first arrival is 0 (``report["window_t0"]`` keeps the original time,
    ``report["window_start"]`` the index of its first job).
    """
    n, w, k = len(workload), int(jobs_per_window), int(num_windows)
    if w < 1 or k < 1:
        raise DataError("trace_windows", None, "jobs_per_window" if w < 1 else "num_windows",
                        f"must be >= 1, got {w if w < 1 else k}")
    if w > n or n - w + 1 < k:
        raise DataError(workload.path, None, "jobs_per_window",
                        f"cannot cut {k} distinct windows of {w} jobs from {n} jobs")
    rng = np.random.default_rng(seed)
    if k * w <= n:
        offsets = np.sort(rng.integers(0, n - k * w + 1, size=k))
        starts = offsets + w * np.arange(k)
        overlap = False
    else:
        starts = np.sort(rng.choice(n - w + 1, size=k, replace=False))
        overlap = True
    out = []
    for i, s in enumerate(starts):
        win = workload.take(slice(int(s), int(s) + w))
        t0 = float(win.arrival_s[0])
        out.append(win.with_arrivals(win.arrival_s - t0, window_index=i, window_start=int(s),
                                     window_t0=t0, windows_overlap=overlap, jobs=w))
    return out


def cap_work(workload: TraceWorkload, max_work_s: float) -> TraceWorkload:
    """The jobs with their work capped at ``max_work_s`` (``report["work_capped"]``: how many
    were). Steady state needs run times short beside an episode
    (docs/concepts/loaded-clusters.md)."""
    if not max_work_s > 0:
        raise DataError("cap_work", None, "max_work_s", f"must be > 0, got {max_work_s}")
    capped = workload.work_s > max_work_s
    return dataclasses.replace(workload, work_s=np.minimum(workload.work_s, max_work_s),
                               report={**workload.report, "work_capped": int(capped.sum())})


def compress_to_load(workload: TraceWorkload, cluster_capacity: float, rho: float,
                     runnable=None) -> tuple[TraceWorkload, float]:
    """Divide arrival times by ``factor`` so that the offered load becomes ``rho``.

    ``factor = rho / offered_load(workload)`` (> 1 compresses time, < 1 stretches it); it is
    returned and stored in ``report["compress_factor"]`` (with ``offered_load_before`` and
    ``offered_load``). Work, resources and order are unchanged. ``runnable`` ([J] bool): the
    jobs some node can hold; only their work counts towards the load (a job that fits no node
    fails at arrival and offers nothing), and ``report["load_excludes"]`` says how many were
    left out of it.
    """
    if not rho > 0:
        raise DataError("compress_to_load", None, "rho", f"must be > 0, got {rho}")
    runnable = np.ones(len(workload), bool) if runnable is None else np.asarray(runnable, bool)
    work = np.where(runnable, workload.work_s, 0.0)  # over the whole window's arrival span
    before = offered_load(workload.arrival_s, work, workload.num_gpu, workload.gpu_milli, cluster_capacity)
    if not before > 0:
        raise DataError(workload.path, None, "work_s",
                        "the workload offers no GPU work: no time compression reaches a load > 0")
    factor = float(rho) / before
    out = workload.with_arrivals(workload.arrival_s / factor, compress_factor=factor,
                                 offered_load_before=before, offered_load=float(rho),
                                 cluster_capacity=float(cluster_capacity),
                                 load_excludes=int((~runnable).sum()))
    return out, factor
