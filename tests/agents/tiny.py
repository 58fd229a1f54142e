"""A tiny run config shared by the agent tests (4-node openb-mix cluster, short episodes)."""

from jaxsched import train as train_lib

TINY = [
    "cluster.preset_nodes=4",
    "workload.synthetic.num_jobs=40",
    "workload.synthetic.target_load=0.8",
    "env.window=2",
    "env.queue_capacity=64",
    "env.running_capacity=64",
    "env.warmup_jobs=0",
    "env.measured_jobs=0",
    "env.reserve_after_s=inf",  # the agent tests compile many envs: the reservation path off
    "agent.hidden=16",
    "agent.num_layers=1",
    "agent.allow_wait=false",
    "train.num_envs=8",
    "train.train_jobs=40",
    "train.buffer_size=4096",
    "train.batch_size=32",
    "train.learning_starts=256",
    "train.chunk_updates=10",
    "train.checkpoint_every=10",
    "train.total_updates=40",
    "train.eps_decay=200",
    "train.target_every=50",
    "train.lr=1e-3",
    "eval.episodes=16",
    "eval.batch_size=16",
    "eval.seed=1000",
]


def tiny_run(*extra):
    """The tiny ``RunConfig`` with extra ``section.key=value`` overrides."""
    return train_lib.load(None, [*TINY, *extra])
