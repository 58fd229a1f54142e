"""Tiny run configs shared by the agent tests (4-node openb-mix cluster, short episodes)."""

from jaxsched import train as train_lib

COMMON = [
    "cluster.preset_nodes=4",
    "workload.synthetic.num_jobs=40",
    "workload.synthetic.target_load=0.8",
    "env.window=2",
    "env.queue_capacity=64",
    "env.running_capacity=64",
    "env.warmup_jobs=0",
    "env.measured_jobs=0",
    "env.reserve_after_s=inf",  # the agent tests compile many envs: the reservation path off
    "train.num_envs=8",
    "train.train_jobs=40",
    "train.chunk_updates=10",
    "train.checkpoint_every=10",
    "train.total_updates=40",
    "eval.episodes=16",
    "eval.batch_size=16",
    "eval.seed=1000",
]
GNN_DDQN = [
    "agent.hidden=16",
    "agent.num_layers=1",
    "agent.allow_wait=false",
    "agent.buffer_size=4096",
    "agent.batch_size=32",
    "agent.learning_starts=256",
    "agent.eps_decay=200",
    "agent.target_every=50",
    "agent.lr=1e-3",
]
DRR = [
    'agent.kind="drr"',
    "agent.hidden=16",
    "agent.heads=2",
    "agent.rollout_steps=4",
]
GNN_PPO = [
    'agent.kind="gnn-ppo"',
    "agent.hidden=16",
    "agent.num_layers=1",
    "agent.allow_wait=false",
    "agent.rollout_steps=4",
    "agent.epochs=2",
    "agent.num_minibatches=2",
]


def tiny_run(*extra):
    """The tiny GNN-DDQN ``RunConfig`` with extra ``section.key=value`` overrides."""
    return train_lib.load(None, [*COMMON, *GNN_DDQN, *extra])


def tiny_drr(*extra):
    """The tiny DRR ``RunConfig`` with extra ``section.key=value`` overrides."""
    return train_lib.load(None, [*COMMON, *DRR, *extra])


def tiny_ppo(*extra):
    """The tiny GNN-PPO ``RunConfig`` with extra ``section.key=value`` overrides."""
    return train_lib.load(None, [*COMMON, *GNN_PPO, *extra])
