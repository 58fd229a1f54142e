"""Reproduce the FGD paper's main experiment (Weng et al., ATC '23; ../shared/SPEC.md, "The FGD
paper's experiment").

Static mode on the openb GPU-node cluster (1,213 nodes, 6,212 GPUs): each pod list is tuned
to 130% of GPU capacity per seed, pods arrive one by one and never leave, a pod that fits
nowhere fails. For every scheduler the GPU allocation ratio is reported against arrived load
(every 1% from 0 to 130%, failed pods' requests included), averaged over the seeds, with a
table at 100% and 130% and the fragmentation rate (F / idle GPU milli) at 50% and 80%.

Each scheduler runs as one jitted call over all seeds: split across every CPU core with
``shard_map``, one after another on each (``lax.map``; unbatched, the policies' ``lax.cond``
branches really branch: FGD looks jobs up in the env's drop table and scores every node
only for shapes not in it). The step loop is a ``lax.while_loop`` to the episode's end that
also records the cluster's fragmentation F after every placement. Every pod list is padded to one shape (jobs, and weight-0 target-workload
classes, which change no sum), so each scheduler compiles once for all lists. GpuClustering's
node history (which job classes each node hosts) is kept exactly by the env
(``EnvConfig.track_job_classes``, set by the registry entry); FGD's drop table likewise
(``EnvConfig.fgd_table``).

    python scripts/reproduce_fgd.py                          # default list, seeds 42-51
    python scripts/reproduce_fgd.py --lists default gpushare40 --seeds 42 43 --out results/fgd/
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from jaxsched import cluster as cl
from jaxsched import compile_cache, devices, outputs, paths, policies
from jaxsched.errors import DataError
from jaxsched.sim import ClusterEnv, EnvConfig
from jaxsched.types import GPU_MILLI, OUTCOME_PLACED, EnvParams, jobs_from_numpy, to_device
from jaxsched.workload import alibaba

LISTS = ("default", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
         "gpuspec10", "gpuspec20", "gpuspec25", "gpuspec33",
         "multigpu20", "multigpu30", "multigpu40", "multigpu50",
         "cpu050", "cpu100", "cpu200", "cpu250")
# (label in the paper, registry name)
SCHEDULERS = (("Random", "random"), ("DotProd", "dot-product"), ("GpuClustering", "gpu-clustering"),
              ("GpuPacking", "gpu-packing"), ("BestFit", "best-fit"), ("FGD", "fgd"))
# Published allocation ratio (%) on the default list, means over seeds 42-51.
PUBLISHED = {
    100: {"Random": 86.30, "DotProd": 90.62, "GpuClustering": 91.65, "GpuPacking": 91.78,
          "BestFit": 92.86, "FGD": 95.23},
    130: {"Random": 87.47, "DotProd": 90.85, "GpuClustering": 91.88, "GpuPacking": 92.00,
          "BestFit": 93.08, "FGD": 95.39},
}
TUNE_RATIO = 1.3
MAX_LOAD_PCT = 130


def tune_pods(num_gpu, gpu_milli, capacity_milli: int, seed: int, ratio: float = TUNE_RATIO):
    """Indices of the tuned pod list (SPEC.md): shuffled rows, then uniform draws with
    replacement appended until the next one would push the requested GPU past ``ratio`` of
    capacity (the stop test adds the candidate's per-GPU milli, as published), or random
    pods removed while the list exceeds it."""
    rng = np.random.default_rng(seed)
    request = num_gpu.astype(np.int64) * gpu_milli
    order = list(rng.permutation(len(num_gpu)))
    target = ratio * capacity_milli
    total = int(request[order].sum())
    if total > target:
        while total > target:
            total -= int(request[order.pop(int(rng.integers(len(order))))])
        return np.asarray(order)
    while True:
        pick = int(rng.integers(len(num_gpu)))
        if total + int(gpu_milli[pick]) > target:
            return np.asarray(order)
        order.append(pick)
        total += int(request[pick])


def tuned_lists(trace, capacity_milli: int, seeds):
    """Per seed, the indices of its tuned pod list (``tune_pods``)."""
    return [tune_pods(trace.num_gpu, trace.gpu_milli, capacity_milli, s) for s in seeds]


def make_episodes(trace, capacity_milli: int, seeds, pad_to: int | None = None, lists=None):
    """Padded ``Jobs`` [S, J] (numpy), one tuned list per seed, arrivals 0, 1, 2, ...; J the
    longest list, or ``pad_to``. ``lists``: the tuned lists, if already drawn."""
    lists = tuned_lists(trace, capacity_milli, seeds) if lists is None else lists
    size = max(len(ix) for ix in lists) if pad_to is None else pad_to
    per_seed = [jobs_from_numpy(
        np.arange(len(ix)), np.zeros(len(ix)), trace.num_gpu[ix], trace.gpu_milli[ix],
        trace.cpu_milli[ix], trace.mem_mib[ix], model_mask=trace.model_mask[ix], pad_to=size)
        for ix in lists]
    return jax.tree.map(lambda *x: np.stack(x), *per_seed), [len(ix) for ix in lists]


def make_run(env: ClusterEnv, policy, num_steps: int):
    """Jitted run over a batch of seeds: final outcomes, done, and per step (placed job, F).

    The seeds are split across the local devices (one per CPU core, see ``jaxsched.devices``)
    and run one after another on each."""

    def episode(key, params, jobs):
        reset_key, step_key = jax.random.split(key)
        state, obs = env.reset(reset_key, params, jobs)
        f0 = obs.frag_node.sum()

        # The observation is made afresh each step, not carried: carried, it would be a copy
        # of the state's arrays (FGD's drop table among them) at every step.
        def body(carry):
            t, state, placed_job, frag = carry
            obs = env.observe(state, params)
            j = obs.window_job[0]
            k_policy, k_env = jax.random.split(jax.random.fold_in(step_key, t))
            action = policy(None, obs, k_policy)
            state, obs, _, _, _ = env.step(k_env, state, action, params)
            placed = (j >= 0) & (state.outcome[jnp.maximum(j, 0)] == OUTCOME_PLACED)
            return (t + 1, state, placed_job.at[t].set(jnp.where(placed, j, -1)),
                    frag.at[t].set(obs.frag_node.sum()))

        # Until the episode is done: lists padded to a longer one stop at their own end.
        init = (jnp.int32(0), state, jnp.full(num_steps, -1, jnp.int32), jnp.zeros(num_steps, jnp.float32))
        _, state, placed_job, frag = jax.lax.while_loop(
            lambda c: (c[0] < num_steps) & ~c[1].core.done, body, init)
        return state.outcome, state.core.done, placed_job, frag, f0

    def seeds_in_turn(keys, params, jobs):
        return jax.lax.map(lambda kj: episode(kj[0], params, kj[1]), (keys, jobs))

    mesh = jax.make_mesh((len(jax.devices()),), ("seeds",), axis_types=(jax.sharding.AxisType.Auto,))
    split, whole = jax.sharding.PartitionSpec("seeds"), jax.sharding.PartitionSpec()
    return jax.jit(jax.shard_map(seeds_in_turn, mesh=mesh, in_specs=(split, whole, split),
                                 out_specs=split, check_vma=False))


def curves(jobs, lengths, outcome, placed_job, frag, f0, capacity_milli: int):
    """Per seed: allocation (%) and fragmentation rate (%) binned by arrived load (%).

    Returns two [S, 131] arrays (NaN where a seed has no event in the bin)."""
    bins = np.arange(MAX_LOAD_PCT + 1)
    alloc_curves, frag_curves = [], []
    for s, n in enumerate(lengths):
        request = (jobs.num_gpu[s, :n].astype(np.int64) * jobs.gpu_milli[s, :n])
        placed = outcome[s, :n] == OUTCOME_PLACED
        arrived_pct = np.cumsum(request) / capacity_milli * 100
        alloc_milli = np.cumsum(request * placed)
        # F after event i = F after the last placement of a job with index <= i.
        f_event = np.full(n, np.nan)
        ok = placed_job[s] >= 0  # placed_job, frag: [S, steps]
        f_event[placed_job[s, ok]] = frag[s, ok]
        f_event = pd.Series(f_event).ffill().fillna(float(f0[s])).to_numpy()
        idle = capacity_milli - alloc_milli
        rate = np.where(idle > 0, f_event / np.maximum(idle, 1), 0.0)
        which = np.round(arrived_pct).astype(int)  # half to even
        frame = pd.DataFrame({"bin": which, "alloc": alloc_milli / capacity_milli * 100,
                              "frag": rate * 100})
        means = frame.groupby("bin").mean().reindex(bins)
        alloc_curves.append(means["alloc"].to_numpy())
        frag_curves.append(means["frag"].to_numpy())
    return np.stack(alloc_curves), np.stack(frag_curves)


def prepare_lists(names, data: Path, params, capacity_milli: int, seeds):
    """Every pod list's episodes, padded to one shape -> {name: (env params, jobs, numpy
    jobs, list lengths)}, and the seeds padded (repeating the last) to a multiple of the
    device count (the padding seeds' results are dropped)."""
    seeds = list(seeds) + [seeds[-1]] * (-len(seeds) % len(jax.devices()))
    traces = {name: alibaba.load_openb_pods(data / f"openb_pod_list_{name}.csv", mode="static")
              for name in names}
    lists = {name: tuned_lists(trace, capacity_milli, seeds) for name, trace in traces.items()}
    num_jobs = max(len(ix) for per_seed in lists.values() for ix in per_seed)
    num_classes = max(len(trace.frag_classes().weight) for trace in traces.values())
    prepared = {}
    for name, trace in traces.items():
        # From the untuned list, as published; padded with weight-0 classes.
        frag_classes = trace.frag_classes(max_classes=num_classes)
        jobs_np, lengths = make_episodes(trace, capacity_milli, seeds, num_jobs, lists[name])
        prepared[name] = (to_device(EnvParams(params.cluster, frag_classes)), to_device(jobs_np),
                          jobs_np, lengths)
    return prepared, seeds


def compile_runs(schedulers, prepared, seeds, log=print):
    """Each scheduler's run, compiled once for every list -> ({label: compiled}, {label: s})."""
    env_params, jobs, _, _ = next(iter(prepared.values()))
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    runs, seconds = {}, {}
    for label, reg_name in schedulers:
        sched = policies.get(reg_name)
        env = ClusterEnv(sched.env_config(EnvConfig(
            mode="static", window=1, queue_capacity=1, running_capacity=1,
            tie_break="permutation")))
        start = time.perf_counter()
        runs[label] = make_run(env, sched.policy, jobs.num_jobs).lower(keys, env_params, jobs).compile()
        seconds[label] = round(time.perf_counter() - start, 2)
        log(f"compiled {label} in {seconds[label]:.1f} s")
    return runs, seconds


def run_list(name: str, prepared, runs, capacity_milli: int, seeds, padded_seeds, log=print):
    """Every compiled scheduler run on one prepared pod list -> (curve rows, timing dict)."""
    env_params, jobs, jobs_np, lengths = prepared
    keys = jax.vmap(jax.random.key)(jnp.asarray(padded_seeds))
    rows, timings = [], {}
    for label, run in runs.items():
        start = time.perf_counter()
        out = jax.device_get(run(keys, env_params, jobs))
        seconds = time.perf_counter() - start
        outcome, done, placed_job, frag, f0 = (np.asarray(x)[:len(seeds)] for x in out)
        if not done.all():
            raise RuntimeError(f"{name}/{label}: an episode did not finish in {jobs.num_jobs} steps")
        alloc, frag_rate = curves(jobs_np, lengths, outcome, placed_job, frag, f0, capacity_milli)
        for pct in range(MAX_LOAD_PCT + 1):
            rows.append({"list": name, "scheduler": label, "arrived_pct": pct,
                         "alloc_pct": np.nanmean(alloc[:, pct]),
                         "alloc_pct_std": np.nanstd(alloc[:, pct]),
                         "frag_rate_pct": np.nanmean(frag_rate[:, pct]),
                         "seeds": int(np.isfinite(alloc[:, pct]).sum())})
        timings[label] = round(seconds, 2)
        log(f"{name:12s} {label:14s} alloc@100 {np.nanmean(alloc[:, 100]):6.2f}  "
            f"alloc@130 {np.nanmean(alloc[:, 130]):6.2f}  frag@80 {np.nanmean(frag_rate[:, 80]):6.2f}  "
            f"({seconds:.1f} s, {len(seeds)} seeds, {jobs.num_jobs} jobs)")
    return rows, timings


def markdown_table(curve: pd.DataFrame) -> str:
    """Allocation at 100% / 130% arrived load and fragmentation rate at 50% / 80%, per list."""
    lines = []
    for name, part in curve.groupby("list", sort=False):
        at = part.set_index(["scheduler", "arrived_pct"])
        lines += [f"### {name}", "",
                  "| scheduler | alloc % @100 | alloc % @130 | frag rate % @50 | frag rate % @80 |"
                  + (" published @100 | published @130 |" if name == "default" else ""),
                  "|---|---:|---:|---:|---:|" + ("---:|---:|" if name == "default" else "")]
        for label in part["scheduler"].unique():
            cells = [at.loc[(label, 100), "alloc_pct"], at.loc[(label, 130), "alloc_pct"],
                     at.loc[(label, 50), "frag_rate_pct"], at.loc[(label, 80), "frag_rate_pct"]]
            row = f"| {label} | " + " | ".join(f"{c:.2f}" for c in cells) + " |"
            if name == "default" and label in PUBLISHED[130]:
                row += f" {PUBLISHED[100][label]:.2f} | {PUBLISHED[130][label]:.2f} |"
            lines.append(row)
        lines.append("")
    return "\n".join(lines)


def plot(curve: pd.DataFrame, path: Path) -> None:
    """Allocation vs arrived load, one panel per pod list (the paper's main figure)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(curve["list"]))
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.6 * rows), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        part = curve[curve["list"] == name]
        for label in part["scheduler"].unique():
            s = part[part["scheduler"] == label]
            ax.plot(s["arrived_pct"], s["alloc_pct"], label=label, lw=1.2)
        ax.plot([0, 100], [0, 100], color="grey", lw=0.6, ls=":")
        ax.set_xlim(0, MAX_LOAD_PCT)
        ax.set_ylim(0, 100)
        ax.set_title(name)
        ax.set_xlabel("arrived GPU load (% of capacity)")
        ax.set_ylabel("GPU allocation ratio (%)")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", nargs="+", default=["default"], choices=LISTS + ("all",),
                        help="pod lists (names as in SPEC.md), or 'all' for the 17")
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(42, 52)))
    parser.add_argument("--schedulers", nargs="+", default=[label for label, _ in SCHEDULERS],
                        choices=[label for label, _ in SCHEDULERS])
    parser.add_argument("--out", default="results/fgd/")
    parser.add_argument("--data", help="folder with the openb CSVs (default: $JAXSCHED_DATA or "
                                       "../shared/data, /alibaba-gpu-v2023)")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    devices.configure_cpu()  # before the first JAX computation
    compile_cache.enable_from_args(args)
    names = list(LISTS) if "all" in args.lists else args.lists
    if args.data:
        data = Path(args.data)
    else:
        root = paths.data_dir()
        if root is None:
            print("error: openb data not found (set JAXSCHED_DATA or pass --data)", file=sys.stderr)
            return 2
        data = root / "alibaba-gpu-v2023"
    schedulers = [(label, reg) for label, reg in SCHEDULERS if label in args.schedulers]

    out = Path(args.out)
    start = time.perf_counter()
    try:  # every input checked before the runs: a bad file or folder is one line, exit 2
        outputs.check_writable(out, "--out")
        nodes = cl.load_openb_nodes(data / "openb_node_list_gpu_node.csv")
        capacity_milli = nodes.total_gpus * GPU_MILLI
        params = EnvParams(cl.to_cluster(nodes), None)
        prepared, padded_seeds = prepare_lists(names, data, params, capacity_milli, args.seeds)
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs, compile_seconds = compile_runs(schedulers, prepared, padded_seeds)
    all_rows, timings = [], {}
    for name in names:
        rows, t = run_list(name, prepared[name], runs, capacity_milli, args.seeds, padded_seeds)
        all_rows += rows
        timings[name] = t
    total = time.perf_counter() - start
    curve = pd.DataFrame(all_rows)
    curve.to_csv(out / "alloc_vs_load.csv", index=False)
    table = markdown_table(curve)
    header = (f"FGD experiment: {len(nodes)} nodes, {nodes.total_gpus} GPUs, seeds "
              f"{args.seeds[0]}..{args.seeds[-1]} ({len(args.seeds)}); {total:.0f} s in all on "
              f"{len(jax.devices())} {jax.devices()[0].platform} device(s)\n\n")
    (out / "table.md").write_text(header + table)
    plot(curve, out / "alloc_vs_load.png")
    (out / "run.json").write_text(json.dumps(
        {"lists": names, "seeds": args.seeds, "schedulers": [s for s, _ in schedulers],
         "seconds_total": round(total, 1), "compile_seconds": compile_seconds,
         "seconds_per_run": timings, "device": str(jax.devices()[0])}, indent=2))
    print(header + table)
    print(f"wrote {out}/alloc_vs_load.csv, alloc_vs_load.png, table.md, run.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
