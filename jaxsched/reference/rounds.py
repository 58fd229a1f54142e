"""``ReferenceSim``'s segments, rounds and preemption (semantics.md, "Preemption and rounds")."""

from __future__ import annotations

import heapq

import numpy as np

from jaxsched.cluster import MODEL_NAMES
from jaxsched.types import GPU_MILLI


def round_after(t, round_s: float) -> np.float32:
    """float32(t + round_s), or the next float32 after t where that is t itself (past 2^24 s
    with 1-s rounds: float32 time no longer holds a round; semantics.md, "The round clock")."""
    return max(np.float32(np.float32(t) + np.float32(round_s)), np.nextafter(np.float32(t), np.float32(np.inf)))


class RoundsMixin:
    """ReferenceSim's methods for running segments, rounds and preemption; they read
    and write its state."""

    def _speed_now(self, j: int) -> np.float32:
        """The speed running job j works at on its parts: its type's speed, the slowest part's
        times spread_penalty for a gang; 1.0 for a CPU-only job."""
        job = self.jobs[j]
        if job.num_gpu == 0:
            return np.float32(1)
        speed = min(self.type_speed[i][job.job_type] for i, *_ in self.parts[j])
        if len(self.parts[j]) > 1:
            speed = np.float32(speed * np.float32(self.config.spread_penalty))
        return speed

    def _restart_cost(self, j: int) -> np.float32:
        """restart_overhead_s[i], i = how many thresholds of restart_above_gpus job j's GPU
        count exceeds."""
        cfg = self.config
        return np.float32(cfg.restart_overhead_s[sum(self.jobs[j].num_gpu > b for b in cfg.restart_above_gpus)])

    def _begin_segment(self, j: int, cost_s: np.float32) -> None:
        """Job j starts a run segment now on its parts: ``cost_s`` wall seconds without work,
        then its remaining work at its speed: ``end = (t + cost) + remaining / speed`` (float32;
        CPU-only: ``(t + cost) + remaining``). With no cost and all its work left this is the
        run time of semantics.md, "Resources and fit"."""
        speed = self._speed_now(j)
        self.seg_start_s[j], self.seg_speed[j], self.seg_cost_s[j] = self.time_s, speed, cost_s
        self.run_from_s[j] = np.float32(self.time_s + cost_s)
        if self.jobs[j].num_gpu > 0:
            self.end_s[j] = np.float32(self.run_from_s[j] + self.remaining_s[j] / speed)
        else:
            self.end_s[j] = np.float32(self.run_from_s[j] + self.remaining_s[j])

    def _remaining_now(self, j: int) -> np.float32:
        """Job j's work left now (reference-speed seconds): ``(end - t) * speed`` once its
        restart cost is paid, else the work left when its segment began (float32)."""
        if self._in_segment(j) and self.time_s >= self.run_from_s[j]:
            return np.float32(np.float32(self.end_s[j] - self.time_s) * self.seg_speed[j])
        return self.remaining_s[j]

    def _end_segment(self, j: int) -> None:
        """Close running job j's segment now: its attained service and restart cost grow by
        what it held since the segment began; its remaining work is what is left now."""
        t = self.time_s
        self.remaining_s[j] = np.float32(0) if t >= self.end_s[j] else self._remaining_now(j)
        self.segments[j].append((self.seg_start_s[j], self.run_from_s[j], t, self.seg_speed[j]))
        self.attained_s[j] = np.float32(self.attained_s[j] + np.float32(t - self.seg_start_s[j]))
        m = self.gpu_model[self.node[j]]
        self.attained_model_s[j][m] = np.float32(self.attained_model_s[j][m] + np.float32(t - self.seg_start_s[j]))
        restart_s = min(float(self.seg_cost_s[j]), float(t) - float(self.seg_start_s[j]))
        self.restart_gpu_s += self._gpus(j) * restart_s
        self.seg_start_s[j] = self.run_from_s[j] = np.float32(np.inf)

    def _gpus(self, j: int) -> float:
        """GPUs job j holds: num_gpu * gpu_milli / 1000 (0 for CPU-only)."""
        job = self.jobs[j]
        return job.num_gpu * job.gpu_milli / GPU_MILLI

    def attained_now(self, j: int) -> tuple[np.float32, np.float32]:
        """Job j's attained service now, (seconds, GPU-seconds): the wall seconds it has held
        its resources, the running segment included, and that times its GPUs (float32)."""
        attained = self.attained_s[j]
        if self._in_segment(j):
            attained = np.float32(attained + np.float32(self.time_s - self.seg_start_s[j]))
        gpus = np.float32(self.jobs[j].num_gpu * self.jobs[j].gpu_milli) / np.float32(GPU_MILLI)
        return attained, np.float32(attained * gpus)

    def attained_by_model_now(self, j: int) -> list:
        """Job j's attained wall seconds now by GPU model id ([M] float32): on the models of
        its segments' anchor nodes, the running segment included."""
        attained = list(self.attained_model_s[j])
        if self._in_segment(j):
            m = self.gpu_model[self.node[j]]
            attained[m] = np.float32(attained[m] + np.float32(self.time_s - self.seg_start_s[j]))
        return attained

    def remaining_now(self, j: int) -> np.float32:
        """Job j's work left now, in reference-speed seconds (an oracle: policies that know
        job sizes read it)."""
        return self._remaining_now(j)

    def _in_segment(self, j: int) -> bool:
        """Job j is running (dynamic mode): its segment is open."""
        return bool(np.isfinite(self.seg_start_s[j]))


    def step_round(self, priority) -> None:
        """Decide the round due now (semantics.md, "Preemption and rounds"): ``priority`` is
        a float per job ([J]) or per (job, GPU model id) ([J, M]; read for queued and running
        jobs only), higher runs first, ties to the lower job index (then model); NaN or -inf
        holds a job (a pair) back (a running one is preempted). ``priority`` may be a pair
        (priority, memory): ``memory`` is a dict of ``policy_model`` (J model ids, -1: none)
        and/or ``policy_share`` ([J, M] floats), kept for the policy's next rounds
        (``self.policy_model``, ``self.policy_share``). No-op once the episode is done."""
        if not self._rounds():
            raise ValueError("step_round needs RefConfig.round_s > 0")
        if self.done:
            return
        if not self.round_due:
            raise ValueError("no round is due now")
        memory = {}
        if isinstance(priority, tuple):
            priority, memory = priority
            if not isinstance(memory, dict) or not set(memory) <= {"policy_model", "policy_share"}:
                raise ValueError(f"a round policy's memory must be a dict of policy_model, policy_share; got {memory!r}")
            for name, value in memory.items():
                if len(value) != self.J:
                    raise ValueError(f"{name} has {len(value)} entries; the episode has {self.J} jobs")
        priority = np.asarray(priority, np.float32)
        if priority.ndim not in (1, 2) or priority.shape[0] != self.J:
            raise ValueError(f"priority has shape {priority.shape}; the episode has {self.J} jobs: "
                             f"give [{self.J}] or [{self.J}, models]")
        self.decisions += 1
        if self.reset_due:  # each job's service at the reset (semantics.md, "Allocation resets")
            self.attained_at_reset_s = [self.attained_now(j)[0] for j in range(self.J)]
            self.attained_model_at_reset_s = [self.attained_by_model_now(j) for j in range(self.J)]
        self._allocate_round(priority)
        if "policy_model" in memory:
            self.policy_model = [int(m) for m in memory["policy_model"]]
        if "policy_share" in memory:
            self.policy_share = np.asarray(memory["policy_share"], np.float32).reshape(self.J, len(MODEL_NAMES))
        self.round_due = self.reset_due = False
        if self.config.round_ends_early:
            self.next_round_s = self._round_end()
        self._advance()

    def _round_end(self) -> np.float32:
        """round_ends_early: the round starting now ends when its last running job does, at
        most round_s on; with no job running, at the next arrival (round_s on if none)."""
        full = round_after(self.time_s, self.config.round_s)
        if self.running:
            return min(full, max(end for end, _ in self.running))
        if self.next_arrival < self.J_valid:
            return np.float32(self.jobs[self.next_arrival].arrival_s)
        return full

    def _allocate_round(self, priority: np.ndarray) -> None:
        """Held running jobs are preempted; then the queued and running jobs (with per-model
        priorities: the (job, model) pairs, a running job only on its anchor's model), by
        priority, each keep their nodes (running) or are placed first-fit (queued; on the
        pair's model only), preempting the lowest-priority running jobs still to come in the
        order when nothing else fits. A guarded running job (``_guarded``) is neither."""
        per_model = priority.ndim == 2
        score = {}  # (job, model) -> priority; model None: any model
        running = {j for _, j in self.running}
        for j in self.queue + sorted(running):
            if not per_model:
                units = [(None, priority[j])]
            elif j in running:  # its own pair only: the model of its anchor node
                m = self.gpu_model[self.node[j]]
                units = [(m, priority[j, m] if m < priority.shape[1] else np.nan)]
            else:
                units = list(enumerate(priority[j]))
            for m, p in units:
                if p > -np.inf:  # not NaN or -inf
                    score[j, m] = float(p)
        listed = {j for j, _ in score}
        guarded = {j for j in running if self._guarded(j)}
        for j in sorted(running - listed - guarded):
            self._preempt(j)  # held: its own pair is not listed
        named = [MODEL_NAMES.index(name) for name in self.config.round_model_order]

        def place(m):  # the pair's model's place in round_model_order (unnamed: after, by id; none: 0)
            if not named or m is None:
                return 0
            return named.index(m) if m in named else len(named) + m
        order = sorted(score, key=lambda u: (place(u[1]), -score[u], u[0], -1 if u[1] is None else u[1]))
        for pos, (j, m) in enumerate(order):
            if self._in_segment(j) or len(self.running) >= self.config.running_capacity:
                continue  # a running (or already placed) job keeps its nodes; a full set takes none
            lower = [v for v, _ in order[pos + 1:] if v in running and self._in_segment(v) and v not in guarded]
            if m is None:
                self._place_preempting(j, lower)
                continue
            job = self.jobs[j]
            self.jobs[j] = job._replace(model_mask=job.model_mask & (1 << m))  # this pair's model only
            try:
                self._place_preempting(j, lower)
            finally:
                self.jobs[j] = job

    def _guarded(self, j: int) -> bool:
        """Running job j is kept on its nodes at a round now by the restart guard: its segment
        began with a restart cost c > 0 and it is not yet c seconds past it (semantics.md,
        "The restart guard")."""
        cost = self.seg_cost_s[j]
        return self.config.restart_guard and cost > 0 and bool(self.time_s < np.float32(self.run_from_s[j] + cost))

    def _place_preempting(self, j: int, lower: list[int]) -> None:
        """Place queued job j first-fit, after giving back (in thought) the running jobs of
        ``lower`` (lower priority, in priority order), the last first, until it fits; those
        whose resources it then took are preempted, the others take theirs back. Nothing
        changes if it fits nowhere even with all of them given back."""
        released = []
        for v in reversed(lower):
            if self._first_fit_node(j) >= 0:
                break
            self._give_back(v)
            released.append(v)
        node = self._first_fit_node(j)
        if node < 0:
            for v in released:
                self._take_back(v)
            return
        touched = {n for v in released for n, *_ in self.parts[v]}
        self._place(j, node)
        for v in reversed(released):  # in priority order
            if self._parts_free(v):
                self._take_back(v)
            else:
                self._preempt(v, given_back=True)
        for n in touched | {n for n, *_ in self.parts[j]}:  # F_n once the what-if is over
            self.frag_node[n] = self._node_frag(n)

    def _first_fit_node(self, j: int) -> int:
        """The round's placement rule: the lowest-index node job j fits (as the anchor, for a
        gang) with the current free resources; -1 if none."""
        return next((n for n in range(self.N) if self._fits(j, n)), -1)

    def _parts_free(self, j: int) -> bool:
        """Every part of running job j (its GPUs, milli-cores, MiB) is free now."""
        return all(all(self.free_milli[n][g] >= self.jobs[j].gpu_milli for g in gpus)
                   and self.free_cpu[n] >= cpu and self.free_mem[n] >= mem
                   for n, gpus, cpu, mem in self.parts[j])

    def _take_back(self, j: int) -> None:
        """Running job j takes its parts again after ``_give_back`` (free lists only)."""
        for n, gpus, cpu, mem in self.parts[j]:
            for g in gpus:
                self.free_milli[n][g] -= self.jobs[j].gpu_milli
            self.free_cpu[n] -= cpu
            self.free_mem[n] -= mem

    def _preempt(self, j: int, given_back: bool = False) -> None:
        """Suspend running job j now: it leaves its resources (already given back in thought
        when ``given_back``), keeps the work it has left, and rejoins the queue in its
        discipline's order (never dropped)."""
        self._end_segment(j)
        self.waiting_work += self._gpus(j) * float(self.remaining_s[j])  # it waits again, with its work left
        if given_back:
            nodes = [n for n, *_ in self.parts[j]]
            self.parts[j] = []
            for n in nodes:
                self.frag_node[n] = self._node_frag(n)
        else:
            self._release(j)
        self.running.remove((self.end_s[j], j))
        heapq.heapify(self.running)
        self.end_s[j] = np.float32(np.inf)
        self.preemptions[j] += 1
        self._enqueue(j)
