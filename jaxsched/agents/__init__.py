"""Learned schedulers and the one training infrastructure they share.

``LEARNERS`` maps a name (``[agent] kind`` in a run config) to a ``Learner``: its settings
class (the rest of ``[agent]``) and its PureJaxRL-style ``make_train`` (``agents.training``
says what it returns). Modules: ``training`` (what every learner's loop shares),
``checkpoint`` (orbax checkpoints of any runner), ``gnn`` + ``ddqn`` + ``gnn_ddqn`` (the GNN
Double-DQN batch scheduler), ``drr`` (the attention actor-critic defragmentation scheduler),
``gnn_ppo`` (the same GNN as an actor-critic trained with PPO), ``policy_gradient`` (the masked
policy and GAE that DRR and GNN-PPO share).
Entry point: ``python -m jaxsched.train --config ...``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jaxsched.agents import ddqn, drr, gnn_ddqn, gnn_ppo


@dataclasses.dataclass(frozen=True)
class Learner:
    """A registry entry. config: its ``[agent]`` dataclass (with a ``kind`` field naming it).
    make_train(env, env_params, workload, agent_config, train_config) -> training.Trainer.
    log_fields: its own train_log.csv columns (besides every learner's). progress_fields:
    those shown on the progress bar. panels: learning-curve panels (field, y label, title,
    y scale). env_config(agent_config, env_config) -> the env it trains on. paired_metrics:
    the metrics compared with every baseline episode by episode after training.
    steps_per_update(agent_config): env steps of each env per update (for the logs).
    check(agent_config, train_config): raises ``ValueError`` on settings of the two tables
    that do not fit together (checked when a run config is loaded)."""

    name: str
    config: type
    make_train: Callable
    log_fields: tuple
    progress_fields: tuple
    panels: tuple
    env_config: Callable = lambda agent, env: env  # noqa: E731
    paired_metrics: tuple = ("jct_mean",)
    steps_per_update: Callable = lambda agent: 1  # noqa: E731 - env steps of each env per update
    check: Callable = lambda agent, train: None  # noqa: E731
    description: str = ""


LEARNERS = {
    learner.name: learner for learner in (
        Learner(gnn_ddqn.NAME, ddqn.AgentConfig, gnn_ddqn.make_train, gnn_ddqn.LOG_FIELDS,
                gnn_ddqn.PROGRESS_FIELDS, gnn_ddqn.PANELS, env_config=gnn_ddqn.env_config,
                description="GNN encoder + Double DQN over the window's (job, node) pairs"),
        Learner(drr.NAME, drr.DRRConfig, drr.make_train, drr.LOG_FIELDS, drr.PROGRESS_FIELDS, drr.PANELS,
                env_config=drr.env_config, paired_metrics=drr.PAIRED_METRICS,
                steps_per_update=lambda agent: agent.rollout_steps,
                description="attention actor-critic over nodes for the job at hand (DRR)"),
        # The queue order of its window as GNN-DDQN's (``gnn_ddqn.env_config`` reads queue_order only).
        Learner(gnn_ppo.NAME, gnn_ppo.PPOConfig, gnn_ppo.make_train, gnn_ppo.LOG_FIELDS, gnn_ppo.PROGRESS_FIELDS,
                gnn_ppo.PANELS, env_config=gnn_ddqn.env_config, steps_per_update=lambda agent: agent.rollout_steps,
                check=gnn_ppo.check_batch,
                description="GNN actor-critic trained with PPO over the window's (job, node) pairs"),
    )
}


def get(kind: str) -> Learner:
    """Look a learner up by its ``[agent] kind``, with a helpful error."""
    if kind not in LEARNERS:
        raise KeyError(f"unknown agent kind {kind!r}; known: {sorted(LEARNERS)}")
    return LEARNERS[kind]
