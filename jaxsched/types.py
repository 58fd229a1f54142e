"""The data of one episode as fixed-shape arrays: cluster, jobs, state, observation.

Shape letters used throughout the package:
  N  nodes (padded)          G  GPUs per node (padded, <= 31)
  J  jobs (padded)           K  observation window (queued jobs shown)
  Q  queue capacity          R  running-set capacity
  M  FGD workload classes

Units: time in seconds (float32), GPU in milli-GPU (1000 = one whole GPU, int32),
CPU in milli-cores (int32), memory in MiB (int32). Every container here is a pytree, so a
batch of episodes is simply the same container with a leading batch axis (``vmap``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsched.errors import DataError

GPU_MILLI = 1000  # capacity of one GPU in milli-GPU
MAX_GPUS_PER_NODE = 8
# Total FragClasses.weight allowed: sum_m weight_m * F_n(m) <= MAX_FRAG_WEIGHT * 8,000 fits int32.
MAX_FRAG_WEIGHT = int(np.iinfo(np.int32).max) // (MAX_GPUS_PER_NODE * GPU_MILLI)
ALL_MODELS = -1  # model_mask with every bit set: the job accepts any GPU model

# Job outcomes written into ``SimState.outcome`` by ``step``; the others are derived at the end.
OUTCOME_NONE, OUTCOME_PLACED, OUTCOME_REJECTED = 0, 1, 2


@struct.dataclass
class Cluster:
    """A heterogeneous cluster, padded to N nodes x G GPUs (padding rows have valid=False).

    num_gpus   [N] int32    GPUs on the node (0..G)
    gpu_model  [N] int32    index into ``cluster.MODEL_NAMES`` (ignored when num_gpus == 0)
    speed      [N] float32  speed of the node's GPU model for job type 0 (work units per
                            second): what node rankings, price and work capacity read
    cpu_milli  [N] int32    CPU capacity, milli-cores
    mem_mib    [N] int32    memory capacity, MiB
    valid      [N] bool     False for padding nodes
    gpu_exists [N, G] bool  GPU g exists on node n (g < num_gpus[n] and valid[n])
    type_speed [N, T] float32  speed of job type t on node n (T job types, >= 1; column 0 ==
                            ``speed``): a GPU job of type t runs ``work_s / type_speed[n, t]``
                            seconds on node n. Node-major like every field here, so that
                            selecting nodes selects its rows
    """

    num_gpus: jax.Array
    gpu_model: jax.Array
    speed: jax.Array
    cpu_milli: jax.Array
    mem_mib: jax.Array
    valid: jax.Array
    gpu_exists: jax.Array
    type_speed: jax.Array

    @property
    def num_nodes(self) -> int:
        return self.num_gpus.shape[-1]

    @property
    def max_gpus(self) -> int:
        return self.gpu_exists.shape[-1]

    @property
    def num_types(self) -> int:
        """T, the job types the cluster has speeds for."""
        return self.type_speed.shape[-1]


@struct.dataclass
class Jobs:
    """A workload, sorted by arrival (ties keep input order), padded to J (valid=False).

    arrival_s  [J] float32  submission time (padding: +inf)
    work_s     [J] float32  run time on a speed-1.0 GPU (CPU-only jobs: run time anywhere)
    num_gpu    [J] int32    0 = CPU-only; 1 = one GPU (whole or a fraction); k>=2 = k whole GPUs
    gpu_milli  [J] int32    milli-GPU per GPU (0 for CPU-only, 1000 for k>=2)
    cpu_milli  [J] int32    CPU request, milli-cores
    mem_mib    [J] int32    memory request, MiB
    model_mask [J] int32    bit m set = GPU model m allowed (ALL_MODELS = any)
    deadline_s [J] float32  deadline for EDF order (+inf when none)
    valid      [J] bool     False for padding
    job_type   [J] int32    row of ``Cluster.type_speed`` giving the job's speed on each node
                            (0 everywhere by default: one type, the per-model speeds);
                            ``0 <= job_type < Cluster.num_types``, checked on the host
                            (``cluster.check_job_types``), not in the env
    qos_class  [J] int32    the job's priority class, higher = more important (0 everywhere by
                            default: one class; padding 0). Only the ``priority`` round
                            policy reads it; the openb loader maps the trace's ``qos`` to it
                            (``workload.qos_classes``)
    """

    arrival_s: jax.Array
    work_s: jax.Array
    num_gpu: jax.Array
    gpu_milli: jax.Array
    cpu_milli: jax.Array
    mem_mib: jax.Array
    model_mask: jax.Array
    deadline_s: jax.Array
    valid: jax.Array
    job_type: jax.Array
    qos_class: jax.Array

    @property
    def num_jobs(self) -> int:
        return self.arrival_s.shape[-1]


@struct.dataclass
class FragClasses:
    """FGD's target workload: M job classes and their popularity (SPEC.md, fgd).

    cpu_milli, gpu_milli, num_gpu, model_mask  [M] int32
    weight  [M] int32  popularity as integer job counts (padding classes 0), at most
            ``MAX_FRAG_WEIGHT`` in all, so that sum_m weight_m * F_n(m) is an exact int32
            (F_n(m) <= MAX_GPUS_PER_NODE * GPU_MILLI) and needs no ordered float sum
    prob    weight / total weight, float32 (the classes' frequencies p_m)
    """

    cpu_milli: jax.Array
    gpu_milli: jax.Array
    num_gpu: jax.Array
    model_mask: jax.Array
    weight: jax.Array

    @property
    def prob(self):
        return (self.weight / self.weight.sum()).astype(np.float32)


@struct.dataclass
class EnvParams:
    """Per-episode inputs that are data, not shapes: the cluster and FGD's target workload."""

    cluster: Cluster
    frag_classes: FragClasses


@struct.dataclass
class Core:
    """The part of the state that every event touches (small arrays; the event loop's carry).

    time_s        []      float32  the clock
    next_arrival  []      int32    jobs with index < next_arrival have arrived
    free_milli    [N, G]  int32    free milli-GPU per GPU (0 for missing GPUs)
    free_cpu      [N]     int32    free CPU milli-cores
    free_mem      [N]     int32    free memory MiB
    frag_node     [N]     float32  FGD fragmentation F_n of each node (milli-GPU)
    max_free      [N]     int32    largest free milli on one GPU of each node   } caches of
    whole_free    [N]     int32    number of wholly free GPUs of each node      } free_milli
    queue         [Q]     int32    queued job indices in queue order, -1 after the end
    queue_key     [Q]     float32  the discipline's sort key of each queued job (+inf after the end)
    queue_len     []      int32
    win_job       [K]     int32    the window's jobs, slot by slot (-1: empty slot)
    win_pos       [K]     int32    their queue positions (win_job[k] == queue[win_pos[k]]),
                                   ascending; Q for empty slots
    win_len       []      int32    jobs in the window
    scan_pos      []      int32    queue positions < scan_pos have been examined: each such job
                                   is in the window or *parked* (it fits no node now); later
                                   ones have not been looked at. The window is full or
                                   scan_pos == queue_len (docs/semantics.md, "The window")
    window_fit    [N]     int32    bit k of node n: window slot k's job fits node n now (and
                                   the reservation allows it; running capacity aside; K <= 31
                                   bits). Kept exact per event: a node's bits when its
                                   resources change, a slot's bits on every node when a job
                                   enters or leaves the window (``ClusterEnv._window_fit_mask``
                                   unpacks [K, N])
    resv_job      []      int32    the queued job holding the reservation (-1: none)
    resv_node     []      int32    the node reserved for it: closed to every other job (-1: none)
    run_job       [R]     int32    running jobs, a ring sorted by end time: run_job[run_head]
    run_end_s     [R]     float32  ends first; entries past num_running are -1 / +inf
    run_head      []      int32    ring position of the running job that ends first
    num_running   []      int32
    class_count   [N, C]  int32    jobs of each gpu-clustering class on each node (class 0
                                   "share", class k "k GPUs"), C = G + 1, when
                                   ``EnvConfig.track_job_classes``; else a [1, 1] placeholder
    fgd_shape     [2S, 3] int32    the job shapes (num_gpu, gpu_milli, cpu_milli) of the FGD
                                   drop table, S fractional ones then S others (unused rows
                                   int32 max), when ``EnvConfig.fgd_table`` = S > 0; else a
                                   [1, 3] placeholder of -1
    fgd_drop      [N, 2S] int32    each node's FGD drop for each of those shapes (the fgd
                                   policy's ``fgd_drops``), kept per event; else [1, 1]
    next_resched_s []     float32  time of the next rescheduling pass (+inf when off)
    resched_due   []      bool     the event loop stopped because a pass is due now
    resv_due      []      bool     the event loop stopped because a reservation is due now
    measure_from_s []     float32  the measurement interval [measure_from_s, measure_to_s]:
    measure_to_s  []      float32  arrivals of the first and last measured job (semantics.md)
    measure_last  []      int32    index of the last measured job
    measure_open  []      int32    measured jobs that arrived and are queued or running
    acc           sim.metrics.Accumulators
    done          []      bool     the episode has ended
    rounds        RoundClock when ``EnvConfig.round_s`` > 0 (docs/semantics.md, "Preemption
                  and rounds"), else None (no leaves: the programs without rounds are unchanged)
    With rounds the queue holds Q + R slots (a preempted job is never dropped), in no
    particular order (the round decision reads priorities only), and the window stays empty.
    """

    time_s: jax.Array
    next_arrival: jax.Array
    free_milli: jax.Array
    free_cpu: jax.Array
    free_mem: jax.Array
    frag_node: jax.Array
    max_free: jax.Array
    whole_free: jax.Array
    queue: jax.Array
    queue_key: jax.Array
    queue_len: jax.Array
    win_job: jax.Array
    win_pos: jax.Array
    win_len: jax.Array
    scan_pos: jax.Array
    window_fit: jax.Array
    resv_job: jax.Array
    resv_node: jax.Array
    run_job: jax.Array
    run_end_s: jax.Array
    run_head: jax.Array
    num_running: jax.Array
    class_count: jax.Array
    fgd_shape: jax.Array
    fgd_drop: jax.Array
    next_resched_s: jax.Array
    resched_due: jax.Array
    resv_due: jax.Array
    measure_from_s: jax.Array
    measure_to_s: jax.Array
    measure_last: jax.Array
    measure_open: jax.Array
    acc: "object"
    done: jax.Array
    rounds: "RoundClock | None" = None


@struct.dataclass
class RoundClock:
    """The round clock (``Core.rounds``, with rounds only).

    next_round_s []  float32  time of the next round event (the first at t0, then + round_s)
    due          []  bool     a round event was handled and waits for its priorities
                              (``ClusterEnv.step_round``); dropped at a boundary with no job
                              queued or running (unless it is a reset)
    last_reset_s []  float32  the last allocation reset (``EnvConfig.round_reset_s`` > 0;
                              -inf before the first; docs/semantics.md, "Allocation resets")
    changed      []  bool     a job arrived or finished since the last reset
    reset        []  bool     the due round is a reset
    settled_until [] float32  ``EnvConfig.settled_rounds``: the rounds due before this time
                              are dropped (the last decided round changed nothing, and no
                              arrival or completion since); -inf: none is
    """

    next_round_s: jax.Array
    due: jax.Array
    last_reset_s: jax.Array
    changed: jax.Array
    reset: jax.Array
    settled_until: jax.Array


@struct.dataclass
class Segments:
    """Per-job run segments (``SimState.segments``, with rounds only; docs/semantics.md,
    "Preemption and rounds"). Written by ``step_round`` alone: a completion in the event loop
    leaves the job's last segment open here (``seg_start_s`` finite, ``end_s <= t``), and the
    readers close it at ``min(end_s, t)``.

    remaining_s   [J] float32  work left (reference-speed seconds) when the current (or next)
                               segment began; ``work_s`` until the first start
    seg_start_s   [J] float32  start of the current (or, once finished, last) segment; +inf
                               while queued
    run_from_s    [J] float32  seg_start_s + the restart cost: work is done from here on
    seg_speed     [J] float32  the speed of the current segment (1.0 for CPU-only jobs)
    attained_s    [J] float32  wall seconds held over the closed (preempted) segments
    attained_model_s [J, M] float32  the same by the GPU model id of the segment's anchor
                               node (M = len(cluster.MODEL_NAMES)): what per-model round
                               policies (las-perf) read
    preemptions   [J] int32    times the job was preempted
    restart_gpu_s []  float32  GPU-seconds of restart cost over the closed segments
    waiting_since_s [J] float32 when the job was last preempted, while it waits to start again;
                               +inf otherwise
    rewait_growth []  float32  the ``backlog_work_growth`` numerator of the waits after a
                               preemption that have ended (docs/semantics.md, "Metrics")
    policy_model  [J] int32    a GPU model id a round policy keeps for each job from one
                               round to the next (-1: none; Gavel's FIFO: the type it allocated
                               the job), written only from a policy's ``(priority, memory)``
                               (docs/semantics.md, "Policy memory")
    policy_share  [J, M] float32  a share per (job, GPU model id) a round policy keeps the same
                               way (0: none; las-perf with resets: its LP's allocation)
    attained_at_reset_s [J] float32  attained_s at the last allocation reset (0 before the
                               first): the time received since it is attained_s now minus this
    attained_model_at_reset_s [J, M] float32  attained service by model at the last reset
                               (the time received on each model since it, likewise)
    """

    remaining_s: jax.Array
    seg_start_s: jax.Array
    run_from_s: jax.Array
    seg_speed: jax.Array
    attained_s: jax.Array
    attained_model_s: jax.Array
    preemptions: jax.Array
    restart_gpu_s: jax.Array
    waiting_since_s: jax.Array
    rewait_growth: jax.Array
    policy_model: jax.Array
    policy_share: jax.Array
    attained_at_reset_s: jax.Array
    attained_model_at_reset_s: jax.Array


@struct.dataclass
class SimState:
    """One episode: the small ``core``, per-job records, the workload and episode constants.

    Per-job records are written when ``step`` takes a decision about the job, and by a
    rescheduling pass when it moves the job; never inside the event loop (so the loop
    carries only ``core``):
      outcome   [J] int32    OUTCOME_NONE / PLACED / REJECTED
      node      [J] int32    node the job runs (ran) on, the last one if it migrated (-1 if never placed)
      gpu_bits  [J] int32    bit g set = the job holds GPU g of its node
      start_s   [J] float32  first start time (+inf if never started)
      end_s     [J] float32  end time (+inf if never started, or in static mode); for a
                             rejected job, the time it was rejected (it left the system)
      span_node [J, S-1] int32  a gang's other nodes, in its list order (-1: unused), and
      span_bits [J, S-1] int32  its GPUs on each (docs/semantics.md, "Gang jobs"); ``node`` and
                             ``gpu_bits`` are its anchor's. [1, 1] placeholders when
                             ``EnvConfig.max_span`` is 1 (checkpointers refuse zero-size arrays)
    jobs       Jobs          this episode's workload (read-only)
    unschedulable [J] bool   the job fits no node even of the empty cluster
    node_rank  [N] int32     per-episode tie-break rank (lower wins)
    segments   Segments      run segments and preemptions, with rounds only (else None)
    """

    core: Core
    outcome: jax.Array
    node: jax.Array
    gpu_bits: jax.Array
    start_s: jax.Array
    end_s: jax.Array
    jobs: Jobs
    unschedulable: jax.Array
    node_rank: jax.Array
    span_node: jax.Array
    span_bits: jax.Array
    segments: "Segments | None" = None


@struct.dataclass
class Cursor:
    """An episode between event turns: what a rollout that interleaves decisions and event
    turns carries per episode (``ClusterEnv.cursor``, ``act_at``, ``turns``).

    state     SimState
    stop      []  bool  no event turn is due: a decision point, the end, or (with
                        ``ClusterEnv.interrupted``) a rescheduling pass or a
                        reservation to run first
    """

    state: SimState
    stop: jax.Array


@struct.dataclass
class Observation:
    """What a policy sees at a decision point.

    window_job   [K]     int32    job index in window slot k (-1 = empty slot)
    job_num_gpu, job_gpu_milli, job_cpu_milli, job_mem_mib, job_model_mask  [K] int32
    job_work_s   [K]     float32  work of the window jobs (seconds at speed 1.0)
    job_wait_s   [K]     float32  time each window job has waited so far
    job_deadline_s [K]   float32  deadline of the window jobs (+inf: none, and for empty slots)
    job_type     [K]     int32    job type of the window jobs (their speeds: ``cluster.type_speed``
                                  [:, job_type]; 0 for empty slots)
    place_mask   [K, N]  bool     job k fits on node n now
    action_mask  [K*N + K + 1] bool  legal flat actions (place, reject, wait)
    free_milli   [N, G]  int32;  free_cpu, free_mem [N] int32;  frag_node [N] float32
    node_rank    [N]     int32    per-episode tie-break rank
    cluster      Cluster          static capacities
    time_s       []      float32;  queue_len [] int32
    frag_classes FragClasses      FGD's target workload (what fgd scores against)
    node_class_jobs [N, C] int32  gpu-clustering classes: jobs of class c on node n, c = 0
                                  "share", c = k "k GPUs", k <= max_span * G ([N, 1] zeros
                                  unless ``EnvConfig.track_job_classes``)
    measure_from_s []    float32  start of the measurement interval (the first measured job's
                                  arrival): before it the episode is warming up
    fgd_shape    [2S, 3] int32    job shapes of the FGD drop table, and each node's drop for
    fgd_drop     [N, 2S] int32    each (``EnvConfig.fgd_table``; placeholders when off)
    """

    window_job: jax.Array
    job_num_gpu: jax.Array
    job_gpu_milli: jax.Array
    job_cpu_milli: jax.Array
    job_mem_mib: jax.Array
    job_model_mask: jax.Array
    job_work_s: jax.Array
    job_wait_s: jax.Array
    job_deadline_s: jax.Array
    job_type: jax.Array
    place_mask: jax.Array
    action_mask: jax.Array
    free_milli: jax.Array
    free_cpu: jax.Array
    free_mem: jax.Array
    frag_node: jax.Array
    node_rank: jax.Array
    cluster: Cluster
    time_s: jax.Array
    queue_len: jax.Array
    frag_classes: FragClasses
    node_class_jobs: jax.Array
    measure_from_s: jax.Array
    fgd_shape: jax.Array
    fgd_drop: jax.Array


def jobs_from_numpy(
    arrival_s, work_s, num_gpu, gpu_milli, cpu_milli, mem_mib,
    model_mask=None, deadline_s=None, pad_to: int | None = None, job_type=None,
    num_types: int | None = None, qos_class=None,
) -> Jobs:
    """Build a sorted, padded ``Jobs`` from 1-D host arrays (stable sort by arrival).

    ``job_type`` (default all 0) must hold whole numbers >= 0, and < ``num_types`` when given
    (the cluster's T): else a ``DataError`` naming the first bad job (its input row).
    ``qos_class``: each job's priority class (default all 0), whole numbers."""
    n = len(arrival_s)
    model_mask = np.full(n, ALL_MODELS, np.int32) if model_mask is None else model_mask
    deadline_s = np.full(n, np.inf, np.float32) if deadline_s is None else deadline_s
    job_type = np.zeros(n, np.int32) if job_type is None else check_job_type(job_type, num_types, n)
    qos_class = np.zeros(n, np.int32) if qos_class is None else np.asarray(qos_class)
    if qos_class.shape != (n,) or qos_class.dtype.kind not in "biu":
        raise DataError("jobs", None, "qos_class",
                        f"expected {n} whole numbers, got {qos_class.dtype} of shape {qos_class.shape}")
    order = np.argsort(np.asarray(arrival_s, np.float64), kind="stable")
    size = n if pad_to is None else pad_to
    if size < n:
        raise ValueError(f"pad_to={pad_to} is smaller than the {n} jobs given")

    def pad(values, dtype, fill):
        out = np.full(size, fill, dtype)
        out[:n] = np.asarray(values)[order].astype(dtype)
        return out

    return Jobs(
        arrival_s=pad(arrival_s, np.float32, np.inf),
        work_s=pad(work_s, np.float32, 0.0),
        num_gpu=pad(num_gpu, np.int32, 0),
        gpu_milli=pad(gpu_milli, np.int32, 0),
        cpu_milli=pad(cpu_milli, np.int32, 0),
        mem_mib=pad(mem_mib, np.int32, 0),
        model_mask=pad(model_mask, np.int32, 0),
        deadline_s=pad(deadline_s, np.float32, np.inf),
        valid=pad(np.ones(n, bool), bool, False),
        job_type=pad(job_type, np.int32, 0),
        qos_class=pad(qos_class, np.int32, 0),
    )


def check_job_type(job_type, num_types: int | None = None, num_jobs: int | None = None,
                   where: str = "jobs") -> np.ndarray:
    """``job_type`` as int32 [J] after checking it: whole numbers, >= 0, < ``num_types`` (when
    given), ``num_jobs`` of them (when given). A ``DataError`` names ``where``, the field
    ``job_type`` and the first bad job (its index in the input)."""
    values = np.asarray(job_type)
    if values.ndim != 1 or (num_jobs is not None and len(values) != num_jobs):
        raise DataError(where, None, "job_type", f"expected {num_jobs} job types, got shape {values.shape}")
    as_float = values.astype(np.float64) if values.dtype.kind in "biuf" else None
    if as_float is None:
        raise DataError(where, None, "job_type", f"not numbers (dtype {values.dtype})")
    top = np.inf if num_types is None else num_types
    bad = np.flatnonzero(~((as_float == np.floor(as_float)) & (as_float >= 0) & (as_float < top)))
    if bad.size:
        j = int(bad[0])
        limit = "" if num_types is None else f" and < {num_types} (the cluster's job types)"
        raise DataError(where, None, "job_type",
                        f"job {j}: must be a whole number >= 0{limit}, got {values[j].item()!r}")
    return values.astype(np.int32)


def to_device(tree):
    """Host (numpy) pytree -> device arrays."""
    return jax.tree.map(jnp.asarray, tree)
