"""Before the GPU check measures anything: versions, devices, every module imported, one tiny rollout.

    python scripts/gpu_preflight.py [--allow-cpu]

Prints the interpreter, the versions of the packages jaxsched uses and ``jax.devices()``,
then imports every module of jaxsched and runs two episodes of first-fit on 8 nodes under
``jit``. Each failing import or call is printed on one line (module or call, exception, first
line of its message) with the traceback's last frames, so an API that changed in the
device's JAX reads plainly. Exits 3 when JAX sees no GPU (unless ``--allow-cpu``, the
rehearsal on a CPU), 1 when a required import or the rollout fails, else 0.
Optional modules (the gymnax and Gymnasium envs) may fail to import where their extras are
not installed; that is reported and does not fail the check.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import platform
import sys
import traceback
from importlib import metadata

PACKAGES = ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "numpy", "flax", "optax", "chex",
            "orbax-checkpoint", "jraph", "flashbax", "pandas", "matplotlib", "tqdm", "tensorstore",
            "gymnax", "gymnasium")
OPTIONAL_MODULES = {"jaxsched.gym_env": "gymnasium", "jaxsched.gymnax_env": "gymnax"}


def failure(what: str, err: BaseException) -> str:
    message = (str(err).strip().splitlines() or [""])[0][:300]
    frames = traceback.extract_tb(err.__traceback__)[-3:]
    where = " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"FAILED {what}: {type(err).__name__}: {message}\n    at {where}"


def versions() -> None:
    print(f"python {platform.python_version()} ({sys.executable}) on {platform.platform()}")
    for name in PACKAGES:
        try:
            print(f"  {name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            print(f"  {name} -")


def import_all() -> int:
    """Import every jaxsched module; -> the number of required ones that failed."""
    import jaxsched
    failed = 0
    for module in sorted(m.name for m in pkgutil.walk_packages(jaxsched.__path__, "jaxsched.")):
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - every failure is reported, none hidden
            optional = OPTIONAL_MODULES.get(module)
            if optional and isinstance(err, ImportError) and optional in str(err):
                print(f"  skipped {module}: {optional} is not installed (optional)")
                continue
            print(failure(f"import {module}", err))
            failed += 1
    print(f"imported the jaxsched modules: {failed} failed")
    return failed


def tiny_rollout() -> int:
    """Two episodes of first-fit on 8 nodes, jitted, through the one rollout path."""
    try:
        import jax
        from jaxsched import cluster, policies
        from jaxsched.rollout import rollout
        from jaxsched.sim import ClusterEnv, EnvConfig
        from jaxsched.types import EnvParams, to_device
        from jaxsched.workload import classes, synthetic

        nodes = cluster.preset(8)
        workload = synthetic.SyntheticConfig(num_jobs=40, target_load=0.9,
                                             cluster_capacity=cluster.work_capacity(nodes))
        params = to_device(EnvParams(cluster.to_cluster(nodes), classes.target_workload([1000], [1], [1], [""])))
        env = ClusterEnv(EnvConfig())
        keys = jax.random.split(jax.random.key(0), 2)
        jobs = jax.vmap(lambda k: synthetic.generate(k, workload))(keys)
        run = jax.jit(lambda p, j, k: rollout(env, policies.get("first-fit").policy, None, p, j, k, 220))
        _, metrics = run(params, jobs, keys)
        print(f"tiny rollout on {jax.default_backend()}: {int(metrics['decisions'].sum())} decisions, "
              f"mean JCT {float(metrics['jct_mean'].mean()):.1f} s, done {metrics['done'].tolist()}")
        return 0
    except Exception as err:  # noqa: BLE001
        print(failure("tiny rollout", err))
        return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--allow-cpu", action="store_true", help="rehearsal: go on without a GPU")
    args = parser.parse_args(argv)
    versions()
    try:
        import jax
        devices = jax.devices()
    except Exception as err:  # noqa: BLE001
        print(failure("import jax / jax.devices()", err))
        return 1
    print(f"jax.devices(): {devices}  (default backend: {jax.default_backend()})")
    if jax.default_backend() != "gpu" and not args.allow_cpu:
        print("STOP: JAX sees no GPU here (its CUDA plugin is missing or found no device); nothing measured")
        return 3
    failed = import_all() + tiny_rollout()
    print("preflight: " + ("OK" if not failed else f"{failed} failures"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
