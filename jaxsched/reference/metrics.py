"""``ReferenceSim``'s results: per-job records and the episode metrics (semantics.md, "Metrics")."""

from __future__ import annotations

import math

import numpy as np

from jaxsched.types import GPU_MILLI, OUTCOME_PLACED, OUTCOME_REJECTED


class MetricsMixin:
    """ReferenceSim's ``results`` and the metrics it is made of."""

    def results(self) -> dict:
        """Per-job records and the episode metrics (semantics.md, Metrics), as of now."""
        static = self.config.mode == "static"
        t_end = self.time_s
        start_s = np.array(self.start_s, np.float32)
        end_s = np.array(self.end_s, np.float32)
        arrival_s = np.array([job.arrival_s for job in self.jobs], np.float32)
        outcome = np.array(self.outcome)
        placed = outcome == OUTCOME_PLACED
        if static:
            finished_mask = placed  # placed jobs count as finished; they never end
        else:
            finished_mask = placed & (end_s <= t_end)
        finished = int(finished_mask.sum())
        index = np.arange(self.J)
        measured = (index < self.J_valid) & (index >= self.measure_first) & (index <= self.measure_last)
        left = measured & (finished_mask | ((outcome == OUTCOME_REJECTED) & (end_s <= t_end)))

        metrics = {
            "decisions": self.decisions,
            "invalid_actions": self.invalid_actions,
            "jobs_total": self.J_valid,
            "placed": self.placed,
            "finished": finished,
            "rejected": self.rejected,
            "failed": self.failed,
            "dropped_overflow": self.dropped_overflow,
            "unfinished": self.J_valid - finished - self.rejected - self.failed - self.dropped_overflow,
            "running_full": int(self.running_full),
            "done": int(self.done),
            "measured_jobs": int(measured.sum()),
            "measured_finished": int((measured & finished_mask).sum()),
            "started_after_arrivals": int((measured & np.isfinite(start_s) & (start_s > (
                arrival_s[self.J_valid - 1] if self.J_valid else np.inf))).sum()),
            "reservations": self.reservations,
            "migrations": self.migrations,
        }
        metrics["migration_gpu_s"] = self.migration_gpu_s
        preemptions = np.array(self.preemptions, np.int32)
        if self._rounds():  # (without rounds the metrics are those both simulators had before)
            metrics.update(self._preemption_metrics(preemptions, measured, t_end))
        metrics.update(self._job_metrics(arrival_s, start_s, end_s, finished_mask & measured, static))
        jct = lambda mask: float((end_s[mask] - arrival_s[mask]).astype(np.float64).mean()) if mask.any() else 0.0  # noqa: E731
        metrics["time_in_system_mean"] = 0.0 if static else jct(left)
        metrics["episode_jct_mean"] = 0.0 if static else jct(finished_mask)
        metrics.update(self._episode_metrics(end_s, finished_mask, static))
        measured_work = sum(self._gpu_work(j) for j in np.flatnonzero(measured))
        metrics.update(self._resource_metrics(int(measured.sum()), measured_work, static))
        return {
            "outcome": np.array(self.outcome, np.int32),
            "node": np.array(self.node, np.int32),
            "gpu_bits": np.array(self.gpu_bits, np.int32),
            "span_node": np.array(self.span_node, np.int32).reshape(self.J, -1),
            "span_bits": np.array(self.span_bits, np.int32).reshape(self.J, -1),
            "start_s": start_s,
            "end_s": end_s,
            # Preemption (semantics.md, "Preemption and rounds"): times each job was
            # preempted, its attained service now (seconds held, and GPU-seconds), and its
            # closed run segments, [(start, run_from, stop, speed)] (the reference's record).
            "preemptions": preemptions,
            "attained_s": np.array([self.attained_now(j)[0] for j in range(self.J)], np.float32),
            "attained_gpu_s": np.array([self.attained_now(j)[1] for j in range(self.J)], np.float32),
            "segments": [list(seg) for seg in self.segments],
            "metrics": metrics,
        }

    def _preemption_metrics(self, preemptions, measured, t_end) -> dict:
        """preemptions, preemptions_per_job (over the measured jobs) and restart_gpu_s (the
        restart costs of the closed segments, and of the running ones up to ``t_end``)."""
        restart_gpu_s = self.restart_gpu_s + sum(
            self._gpus(j) * min(float(self.seg_cost_s[j]), float(t_end) - float(self.seg_start_s[j]))
            for j in range(self.J) if self._in_segment(j))
        return {"preemptions": int(preemptions.sum()),
                "preemptions_per_job": float(preemptions[measured].mean()) if measured.any() else 0.0,
                "restart_gpu_s": restart_gpu_s}

    def _job_metrics(self, arrival_s, start_s, end_s, mask, static: bool) -> dict:
        """Statistics over the jobs of ``mask`` (the measured jobs that finished), and the
        JCT and delay means by job size (at most 1 GPU, 2 to 8, more than 8)."""
        names = ("jct_mean", "jct_p50", "jct_p95", "jct_p99", "queue_delay_mean",
                 "queue_delay_p95", "slowdown_mean")
        num_gpu = np.array([job.num_gpu for job in self.jobs])
        by_size = {}
        for size, in_size in (("small", num_gpu <= 1), ("2to8", (num_gpu >= 2) & (num_gpu <= 8)),
                              ("over8", num_gpu > 8)):
            sized = mask & in_size
            for name, x in (("jct_mean", end_s), ("queue_delay_mean", start_s)):
                differences = (x[sized] - arrival_s[sized]).astype(np.float64)
                by_size[f"{name}_{size}"] = float(differences.mean()) if sized.any() and not static else 0.0
        if static or not mask.any():
            return {**dict.fromkeys(names, 0.0), **by_size}
        # Differences in float32 like the per-job arrays; statistics in float64.
        jct_s = (end_s[mask] - arrival_s[mask]).astype(np.float64)
        delay_s = (start_s[mask] - arrival_s[mask]).astype(np.float64)
        run_s = (end_s[mask] - start_s[mask]).astype(np.float64)
        slowdown = np.maximum(jct_s / np.maximum(run_s, 10.0), 1.0)
        return {
            "jct_mean": float(jct_s.mean()),
            "jct_p50": float(np.percentile(jct_s, 50)),
            "jct_p95": float(np.percentile(jct_s, 95)),
            "jct_p99": float(np.percentile(jct_s, 99)),
            "queue_delay_mean": float(delay_s.mean()),
            "queue_delay_p95": float(np.percentile(delay_s, 95)),
            "slowdown_mean": float(slowdown.mean()),
            **by_size,
        }

    def _episode_metrics(self, end_s, finished_mask, static: bool) -> dict:
        """makespan_s and throughput_per_h, over every finished job of the episode."""
        if static or not finished_mask.any():
            return {"makespan_s": 0.0, "throughput_per_h": 0.0}
        makespan_s = float(np.float32(end_s[finished_mask].max() - self.t0_s))
        return {"makespan_s": makespan_s,
                "throughput_per_h": float(finished_mask.sum() / (makespan_s / 3600.0)) if makespan_s > 0 else 0.0}

    def _resource_metrics(self, num_measured: int, measured_work: float, static: bool) -> dict:
        def ratio(num, den):
            return float(num / den) if den > 0 else 0.0

        cap_work = sum(GPU_MILLI * len(self.gpus_of[n]) * float(self.speed[n]) for n in range(self.N))
        if static:
            # Snapshot at the end: the FGD paper's protocol has no time axis.
            frag = self.cluster_frag()
            work = sum((GPU_MILLI * len(self.gpus_of[n]) - sum(self._free_gpus(n))) * float(self.speed[n])
                       for n in range(self.N))
            out = {
                "gpu_alloc": ratio(self.allocated_milli(), self.cluster_milli),
                "work_alloc": ratio(work, cap_work),
                "frag_amount": ratio(frag, self.cluster_milli),
                "frag_rate": ratio(frag, self.idle_milli()),
                "jobs_in_system": 0.0, "queue_len_mean": 0.0, "backlog_growth": 0.0,
                "backlog_work_growth": 0.0,
                "measure_span_s": 0.0,
            }
        else:
            span_s = max(float(self.measure_to_s) - float(self.measure_from_s), 0.0)
            milli_s = self.cluster_milli * span_s
            out = {
                "gpu_alloc": ratio(self.alloc_milli_s, milli_s),
                "work_alloc": ratio(self.work_milli_s, cap_work * span_s),
                "frag_amount": ratio(self.frag_milli_s, milli_s),
                "frag_rate": ratio(self.frag_milli_s, milli_s - self.alloc_milli_s),
                "jobs_in_system": ratio(self.jobs_s, span_s),
                "queue_len_mean": ratio(self.queue_s, span_s),
                "backlog_growth": ratio(self.backlog_last_s - self.backlog_first_s,
                                        span_s / 4 * num_measured),
                "backlog_work_growth": ratio(self.backlog_work_last - self.backlog_work_first,
                                             span_s / 4 * measured_work),
                "measure_span_s": span_s,
            }
        if not self.config.track_frag:
            out.update(frag_amount=math.nan, frag_rate=math.nan)
        return out
