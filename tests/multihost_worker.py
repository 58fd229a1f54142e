"""One process of a multi-process (multi-host style) sharded rollout; run by test_multihost.py.

usage: python tests/multihost_worker.py PROCESS_ID NUM_PROCESSES PORT
Prints the gathered per-episode metrics as JSON on its last line.
"""

import json
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
process_id, num_processes, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes,
                           process_id=process_id)

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from tests.test_multihost import episode_setup  # noqa: E402
from jaxsched.policies import get  # noqa: E402
from jaxsched.rollout import sharded_rollout  # noqa: E402

env, params, jobs, keys = episode_setup()
_, metrics = jax.jit(lambda p, j, k: sharded_rollout(env, get("best-fit").policy, None, p, j, k, 300))(
    params, jobs, keys)
gathered = {k: np.asarray(multihost_utils.process_allgather(v, tiled=True)).tolist()
            for k, v in metrics.items()}
print(json.dumps({"devices": len(jax.devices()), "local_devices": len(jax.local_devices()),
                  "metrics": gathered}))
