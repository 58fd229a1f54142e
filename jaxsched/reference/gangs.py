"""``ReferenceSim``'s gangs: how a job's GPUs split over nodes (semantics.md, "Gang jobs")."""

from __future__ import annotations

from jaxsched.reference.heuristics import _buddy_gpus, _fgd_gpu
from jaxsched.reference.resources import _is_fractional, _model_allowed, node_fragmentation
from jaxsched.types import GPU_MILLI


class GangsMixin:
    """ReferenceSim's methods for gangs; they read and write its state."""

    def _may_span(self, j: int) -> bool:
        """Job j may run on several nodes: gangs are on and it wants >= 2 whole GPUs (under
        the "helios" rule: more GPUs than a node has)."""
        k = self.jobs[j].num_gpu
        if self.config.gang_rule == "helios":
            return self.config.max_span > 1 and k > self._node_gpus()
        return self.config.max_span > 1 and k >= 2

    def _node_gpus(self) -> int:
        """G: the most GPUs one node of the cluster has."""
        return max((len(self.gpus_of[n]) for n in range(self.N) if self.node_valid[n]), default=0)

    def _part_request(self, j: int, g: int) -> tuple[int, int]:
        """(milli-cores, MiB) of job j's part of g GPUs: its request times g / k, rounded up."""
        job = self.jobs[j]
        return -(-job.cpu_milli * g // job.num_gpu), -(-job.mem_mib * g // job.num_gpu)

    def _cap(self, j: int, i: int) -> int:
        """The most whole GPUs node i can give job j now: the largest g whose part fits."""
        job = self.jobs[j]
        closed = self.resv_job >= 0 and i == self.resv_node and j != self.resv_job
        if not self.node_valid[i] or closed or not _model_allowed(job.model_mask, self.gpu_model[i]):
            return 0
        whole = sum(free == GPU_MILLI for free in self._free_gpus(i))
        fitting = [g for g in range(whole + 1)
                   if all(need <= free for need, free in zip(self._part_request(j, g), (self.free_cpu[i], self.free_mem[i])))]
        return max(fitting, default=0)

    def _gang_parts(self, j: int, n: int) -> list[tuple[int, int]]:
        """[(node, GPUs)] job j would take with anchor n, in the gang rule's order, the GPUs
        adding up to fewer than k when it does not fit. Fits alone: [(n, k)]."""
        k = self.jobs[j].num_gpu
        cap = {i: self._cap(j, i) for i in range(self.N)}
        if self.config.gang_rule == "helios":
            return self._helios_parts(k, cap, n)
        if cap[n] == 0:
            return []
        if cap[n] >= k:
            return [(n, k)]
        others = sorted((i for i in range(self.N) if i != n and cap[i] > 0
                         and (not self.config.gang_one_model or self.gpu_model[i] == self.gpu_model[n])),
                        key=lambda i: (-cap[i], self.node_rank[i]))
        nodes = [n] + others[: self.config.max_span - 1]
        taken = dict.fromkeys(nodes, 0)
        if self.config.gang_rule == "consolidate":
            for i in nodes:
                taken[i] = min(cap[i], k - sum(taken.values()))
        else:  # spread: one GPU per node with room, pass after pass
            while sum(taken.values()) < k and any(taken[i] < cap[i] for i in nodes):
                for i in nodes:
                    if taken[i] < cap[i] and sum(taken.values()) < k:
                        taken[i] += 1
        return [(i, taken[i]) for i in nodes if taken[i] > 0]

    def _helios_parts(self, k: int, cap: dict, n: int) -> list[tuple[int, int]]:
        """Helios's placer (semantics.md, "Gang jobs") for k > G GPUs: the first k // G nodes
        that can give G GPUs, by index, then k % G GPUs on the next node by (GPUs it can give,
        descending; index). [] unless that plan exists, fits in max_span nodes and starts at n."""
        per_node = self._node_gpus()
        if per_node == 0:  # a cluster without GPUs holds no GPU job
            return []
        q, r = divmod(k, per_node)
        whole = [i for i in range(self.N) if cap[i] >= per_node][:q]
        if len(whole) < q:
            return []
        plan = [(i, per_node) for i in whole]
        if r:
            rest = sorted((i for i in range(self.N) if cap[i] >= 1 and i not in whole), key=lambda i: (-cap[i], i))
            if not rest or cap[rest[0]] < r:
                return []
            plan.append((rest[0], r))
        if len(plan) > self.config.max_span or plan[0][0] != n:
            return []
        return plan

    def _node_frag(self, n: int) -> float:
        if not (self.node_valid[n] and self.config.track_frag):
            return 0.0
        return node_fragmentation(self._free_gpus(n), self.free_cpu[n], self.gpu_model[n], self.classes)

    def _choose_gpus(self, j: int, n: int, rule: str | None = None) -> list[int]:
        """GPUs of node n that job j gets under ``rule`` (default: the config's GPU rule;
        assumes it fits).

        Fractional jobs: "first-fit" the lowest-index GPU with room, "fgd" FGD's own choice
        (``_fgd_gpu``), "best-fit" and "buddy" the least free GPU with room. Whole-GPU jobs:
        the lowest-index wholly free GPUs, inside a power-of-two aligned block under "buddy"
        (``_buddy_gpus``).
        """
        job, rule = self.jobs[j], rule or self.config.gpu_rule
        if job.num_gpu == 0:
            return []
        if _is_fractional(job.num_gpu, job.gpu_milli):
            room = [g for g in self.gpus_of[n] if self.free_milli[n][g] >= job.gpu_milli]
            if rule == "first-fit":
                return [room[0]]
            if rule == "fgd":
                return [_fgd_gpu(self, j, n, room)]
            # best-fit: least free milli; min() keeps the first (lowest index) on ties.
            return [min(room, key=lambda g: self.free_milli[n][g])]
        whole = [g for g in self.gpus_of[n] if self.free_milli[n][g] == GPU_MILLI]
        if rule == "buddy":
            return _buddy_gpus(self.gpus_of[n], whole, job.num_gpu)
        return whole[: job.num_gpu]

    def _take(self, j: int, n: int, gpus: list[int], cpu: int | None = None, mem: int | None = None) -> None:
        """Job j takes ``gpus`` of node n and ``cpu``, ``mem`` (default: its whole request)
        there: one more part of it."""
        job = self.jobs[j]
        cpu = job.cpu_milli if cpu is None else cpu
        mem = job.mem_mib if mem is None else mem
        for g in gpus:
            self.free_milli[n][g] -= job.gpu_milli
        self.free_cpu[n] -= cpu
        self.free_mem[n] -= mem
        self.frag_node[n] = self._node_frag(n)
        self.parts[j].append((n, gpus, cpu, mem))

    def _release(self, j: int) -> None:
        # Completion gives back exactly what placement took, on every node of the job.
        self._give_back(j)
        for n, *_ in self.parts[j]:
            self.frag_node[n] = self._node_frag(n)
        self.parts[j] = []

    def allocated_milli(self) -> int:
        """GPU milli held by jobs right now, over the whole cluster."""
        return self.cluster_milli - self.idle_milli()

    def idle_milli(self) -> int:
        """Free GPU milli over the existing GPUs of valid nodes."""
        return sum(sum(self._free_gpus(n)) for n in range(self.N))

    def cluster_frag(self) -> float:
        """Cluster fragmentation F = sum of F_n over valid nodes (milli-GPU)."""
        return sum(self.frag_node[n] for n in range(self.N) if self.node_valid[n])
