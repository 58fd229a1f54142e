"""DRR: the attention actor-critic defragmentation scheduler, and its A2C training loop
(PureJaxRL style, whole inside ``jit`` over vmapped envs): ``make_train(...) ->
training.Trainer``.

DRR's command line is public (../shared/SPEC.md, "DRR"), its internals are not: every part
below is this project's reading, defined in docs/drr.md, each published idea a switch.

Decision. At each decision point the actor picks the node of the job at hand among the
nodes where it fits (``action_space`` = nodes); the env's GPU rule "fgd" then picks the GPUs
inside the node (as FGD's). Which window job is at hand is ``job_at_hand``: "first", the
first window job that fits some node (with the default backfilling window: the first queued
job that fits, the heuristics' choice too); "fgd-window", the job the fgd-window heuristic
would place (``policies.fgd_window``: of the window's jobs on their FGD nodes, the one whose
placement removes the most fragmentation per GPU milli).

State. ``NODE_FEATURES`` = 46 + ``NUM_MODELS`` (57 with the 11 models of
``cluster.MODEL_NAMES``) features per node, listed in ``features``; ``JOB_FEATURES`` of the
job at hand, appended to every node's row. DRR's published ``init_dim`` is 56 x nodes (from
when the project had 10 models); ``PUBLISHED_NODE_FEATURES`` keeps that number, so the
published flag still names the node count (``train.check_derived``).

Networks (Flax NNX; actor and critic separate, each with its own optax optimiser at
``lr_actor`` / ``lr_critic``). The actor embeds every node's row with an MLP; with ``use_attn``
one pre-norm transformer block (multi-head self-attention over the valid nodes, then an
MLP, both residual) follows, without it the MLP per node is all. Actor: one logit per node,
masked to the nodes where the job fits. Critic: the mean over valid nodes of a per-node MLP
(no attention) -> MLP -> V(s).

Algorithm: A2C (synchronous advantage actor-critic). One update = ``rollout_steps`` steps of
every env, GAE(lambda) advantages normalised over the batch, one gradient step for each
network. Why not PPO: DRR's published knobs are an actor-critic's (two learning rates, an
entropy weight, an advantage factor) with none of PPO's (clip range, epochs, minibatches);
its learning rates (0.02-0.06) are plain-SGD rates, which A2C with SGD takes as published.

Its four ideas (docs/drr.md):
  use_imitation              + imitation_loss_weight * cross-entropy(policy, teacher's node)
  use_dynamic_entropy        entropy weight beta starts at beta0 and follows a target
                             entropy (a fraction of the uniform policy's): beta rises while
                             the policy is less random than the target, falls while more
  use_advantage_adjustment   factor c in (0, 1]: negative advantages are scaled by (1 - c),
                             so a poor action is discouraged less than a good one is
                             encouraged (0 = off: plain advantages)
  use_rescheduling           the env's migration pass every re_time s, up to re_num jobs off
                             nodes below util_threshold GPU allocation (docs/schedulers.md,
                             "Rescheduling"); the env chooses the moves
Reward: the env's (``env.reward``, times ``train.reward_scale``) plus ``frag_penalty`` times
the fragmentation the placement removed from its node (FGD's F_n, in GPUs; negative when it
adds fragmentation).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxsched import actions, policies
from jaxsched.agents import gnn, training
from jaxsched.agents.policy_gradient import entropy, gae, masked_log_softmax
from jaxsched.cluster import MODEL_NAMES
from jaxsched.config import check_positive_ints
from jaxsched.policies.common import best_node, first_fitting_slot, place_or_wait, window_job
from jaxsched.policies.fgd import NO_ROOM, table_drops
from jaxsched.policies.fgd_window import window_choice
from jaxsched.sim import frag
from jaxsched.sim.env import ClusterEnv
from jaxsched.types import ALL_MODELS, GPU_MILLI, EnvParams, Jobs, Observation
from jaxsched.workload import synthetic

NAME = "drr"
GPU_SLOTS = 8  # per-GPU features of the 8 GPUs with most free milli (the openb nodes have <= 8)
JOB_FEATURES = 10
LOG_FIELDS = ("actor_loss", "critic_loss", "entropy", "beta", "imitation_loss", "teacher_agreement",
              "value_mean", "frag_removed_gpus")
PROGRESS_FIELDS = ("entropy", "beta", "teacher_agreement")
PANELS = (("critic_loss", "value loss", "critic", "log"), ("entropy", "policy entropy (nats)", "entropy", "linear"),
          ("beta", "entropy weight beta", "dynamic entropy", "log"),
          ("teacher_agreement", "share of teacher's nodes", "agreement with the teacher", "linear"))
# The goal's rulers: the rate and GPU allocation, and beside them F over capacity and work
# allocation, which a loaded cluster keeps steadier (docs/drr.md, "Results").
PAIRED_METRICS = ("frag_rate", "frag_amount", "gpu_alloc", "work_alloc", "jct_mean", "queue_delay_mean")
NUM_MODELS = len(MODEL_NAMES)
# Per node (``features``): 8 GPU slots' free milli and room, the model one-hot, 30 more columns.
NODE_FEATURES = GPU_SLOTS + GPU_SLOTS + NUM_MODELS + 1 + 12 + 5 + 8 + 4
PUBLISHED_NODE_FEATURES = 56  # DRR's published init_dim / nodes (docs/drr.md)
JOB_AT_HAND = ("first", "fgd-window")  # DRRConfig.job_at_hand


@dataclasses.dataclass(frozen=True)
class DRRConfig:
    """DRR's settings (hashable; the ``[agent]`` TOML table with ``kind = "drr"``). The
    published flag names (SPEC.md) are field names: ``--lr_actor 0.04`` sets ``lr_actor``.

    Decision. job_at_hand: which window job the actor places, "first" (the first that fits)
    or "fgd-window" (the fgd-window heuristic's job; module docstring).
    Networks. hidden: embedding width. heads: attention heads. use_attn: self-attention over
    nodes (False: an MLP per node only).
    A2C. lr_actor, lr_critic: the two optimisers' learning rates. optimizer: "sgd" (the
    published rates are SGD rates) or "adam". max_grad_norm: global-norm clipping of each
    network's gradient. rollout_steps: env steps of every env per update. gamma, gae_lambda:
    discount and GAE's lambda (gamma 0.9: the placement reward credits each decision at
    once, and a short horizon learns far faster; 0.99 did not learn in the 150-update test).
    Ideas (module docstring, docs/drr.md). use_imitation, imitation_loss_weight, teacher
    (a registered heuristic; "fgd"). use_dynamic_entropy, beta0 (the entropy weight, fixed
    when dynamic entropy is off), entropy_target (target entropy as a fraction of the
    uniform policy's over the legal nodes), beta_lr (step of log beta per update).
    use_advantage_adjustment: the factor c (0 = off). use_rescheduling, util_threshold,
    re_time (s), re_num: the env's rescheduling passes (``EnvConfig.resched_*``).
    frag_penalty: reward per GPU of fragmentation a placement removes (0 = the env's reward only).
    """

    kind: str = "drr"
    job_at_hand: str = "first"
    hidden: int = 32
    heads: int = 4
    use_attn: bool = True
    lr_actor: float = 0.04
    lr_critic: float = 0.02
    optimizer: str = "sgd"
    max_grad_norm: float = 0.5
    rollout_steps: int = 16
    gamma: float = 0.9
    gae_lambda: float = 0.95
    use_imitation: bool = True
    imitation_loss_weight: float = 0.1
    teacher: str = "fgd"
    use_dynamic_entropy: bool = True
    beta0: float = 0.04
    entropy_target: float = 0.2
    beta_lr: float = 0.05
    use_advantage_adjustment: float = 0.6
    use_rescheduling: bool = True
    util_threshold: float = 0.5
    re_time: float = 3600.0
    re_num: int = 5
    frag_penalty: float = 1.0

    def __post_init__(self):
        def bad(field, why):
            raise ValueError(f"DRRConfig.{field} = {getattr(self, field)!r}: {why}")

        if self.kind != NAME:
            bad("kind", "this is DRR's config")
        check_positive_ints(self, ("hidden", "heads", "rollout_steps", "re_num"))
        if self.hidden % self.heads:
            bad("hidden", f"must be a multiple of heads ({self.heads})")
        if self.job_at_hand not in JOB_AT_HAND:
            bad("job_at_hand", f"must be one of {JOB_AT_HAND}")
        if self.optimizer not in ("sgd", "adam"):
            bad("optimizer", "must be 'sgd' or 'adam'")
        for field in ("lr_actor", "lr_critic", "max_grad_norm", "re_time"):
            if not getattr(self, field) > 0:
                bad(field, "must be > 0")
        for field in ("imitation_loss_weight", "beta0", "beta_lr", "frag_penalty"):
            if not getattr(self, field) >= 0:
                bad(field, "must be >= 0")
        for field in ("gamma", "gae_lambda", "entropy_target", "util_threshold"):
            if not 0.0 <= getattr(self, field) <= 1.0:
                bad(field, "must be in [0, 1]")
        if not 0.0 <= float(self.use_advantage_adjustment) <= 1.0:
            bad("use_advantage_adjustment", "is the factor c in [0, 1] (0 = off)")
        if self.teacher not in policies.flat_names():
            bad("teacher", f"must be a registered scheduler of flat actions: {sorted(policies.flat_names())}")


def env_config(agent: DRRConfig, config):
    """The env DRR trains and is evaluated on: FGD's GPU rule inside the chosen node and,
    with ``use_rescheduling``, the env's rescheduling passes at DRR's settings."""
    return dataclasses.replace(config, **dict(_env_changes(agent)))


def _env_changes(agent: DRRConfig) -> tuple:
    changes = (("gpu_rule", "fgd"), ("track_frag", True))
    if agent.job_at_hand == "fgd-window":  # every window job's drops: FGD's table, kept per event
        changes += (("fgd_table", policies.FGD_TABLE),)
    if agent.use_rescheduling:
        changes += (("resched_interval_s", float(agent.re_time)), ("resched_max_moves", agent.re_num),
                    ("resched_util_threshold", float(agent.util_threshold)))
    else:
        changes += (("resched_interval_s", 0.0),)
    return changes


# ----- features -----------------------------------------------------------------------------

class Features(NamedTuple):
    """What the networks see at one decision point (leading batch axes allowed)."""

    nodes: jax.Array         # [N, NODE_FEATURES] float32
    job: jax.Array           # [JOB_FEATURES] float32, the job at hand
    valid: jax.Array         # [N] bool: real nodes
    feasible: jax.Array      # [N] bool: the job at hand fits there now (the actor's mask)
    fgd_choice: jax.Array    # [] int32: the node the fgd policy would pick
    slot: jax.Array          # [] int32: the job at hand's window slot
    frag_removed: jax.Array  # [N] float32: F_n before - after placing the job there (GPUs; 0 where infeasible)


def job_slot(obs: Observation, job_at_hand: str = "first"):
    """[] int32: the window slot of the job at hand (``DRRConfig.job_at_hand``)."""
    if job_at_hand == "fgd-window":
        return window_choice(obs, table_drops)[0]
    return first_fitting_slot(obs).astype(jnp.int32)


def features(obs: Observation, job_at_hand: str = "first") -> Features:
    """The features of one (unbatched) observation, for the job at hand (``job_slot``).
    Node features, in order:

    0-7    free milli of the node's GPUs / 1000, most free first (8 slots, 0 past its GPUs)
    8-15   1 where that GPU (same order) has room for the job's per-GPU milli (GPU jobs only)
    16-26  GPU model, one-hot over ``cluster.MODEL_NAMES``
    27     the job's model constraint allows this node's model
    28-31  GPUs on the node, wholly free GPUs, partly used GPUs (each / 8), free GPU milli / 8000
    32     the node's GPU allocation (1 - free milli / its GPU milli; 0 without GPUs)
    33-36  free CPU and memory / the node's; CPU and memory capacity / the cluster's largest
    37-39  GPU speed, a real node, the job fits here now
    40-43  after placing the job here (as now where it does not fit): free CPU and memory /
           the node's, free GPU milli / 8000, wholly free GPUs / 8
    44     log(1 + run time here, s) / 10 (work / speed)
    45-47  FGD fragmentation F_n / (1000 x GPUs): now, after placing the job here; and the
           fragmentation the placement removes, (before - after) / 1000 (GPUs)
    48-50  FGD's score / 100; 1 where it ties for FGD's best feasible score; 1 on FGD's choice
    51     the node's fragmentation rate (F_n / its idle milli)
    52     per-episode tie-break rank / N
    53-56  the cluster (same on every node): GPU allocation, fragmentation rate,
           log(1 + queue length) / 5, share of nodes where the job fits
    Job features: GPUs / 8, milli per GPU / 1000, CPU and memory / the cluster's largest,
    log(1 + work s) / 10, log(1 + wait s) / 10, fractional, CPU-only, model-constrained,
    log(1 + queue length) / 5.
    """
    c = obs.cluster
    n_nodes = obs.free_milli.shape[0]
    slot = job_slot(obs, job_at_hand)
    job = window_job(obs, slot)
    feasible = obs.place_mask[slot]
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731

    free = jnp.where(c.gpu_exists, obs.free_milli, 0)
    top = -jnp.sort(-free, axis=-1)[:, :GPU_SLOTS]  # [N, <=8]
    top = jnp.pad(top, ((0, 0), (0, GPU_SLOTS - top.shape[1])))
    room = (top >= job["gpu_milli"]) & (job["gpu_milli"] > 0) & (job["num_gpu"] > 0)  # missing GPUs: top 0
    model = jax.nn.one_hot(jnp.where(c.num_gpus > 0, c.gpu_model, NUM_MODELS - 1), NUM_MODELS)
    model_ok = ((job["model_mask"] >> c.gpu_model) & 1) == 1

    gpu_cap = f32(c.num_gpus) * GPU_MILLI
    free_gpu = f32(free.sum(-1))
    whole = f32((free == GPU_MILLI).sum(-1) * (c.num_gpus > 0))
    partly = f32(((free > 0) & (free < GPU_MILLI) & c.gpu_exists).sum(-1))
    cpu_cap = jnp.maximum(f32(c.cpu_milli), 1.0)
    mem_cap = jnp.maximum(f32(c.mem_mib), 1.0)
    fractional = (job["num_gpu"] == 1) & (job["gpu_milli"] < GPU_MILLI)
    taken_gpu = f32(job["num_gpu"] * job["gpu_milli"])
    # Wholly free GPUs the job takes: whole-GPU jobs their GPUs; a fractional one a wholly free
    # GPU only where no partly used GPU has room (the best-fit reading of the GPU choice).
    partial_room = ((free >= job["gpu_milli"]) & (free < GPU_MILLI) & c.gpu_exists).any(-1)
    whole_taken = jnp.where(fractional, jnp.where(partial_room, 0.0, 1.0),
                            f32(jnp.where(job["gpu_milli"] >= GPU_MILLI, job["num_gpu"], 0)))

    def after(now, taken):
        return jnp.where(feasible, now - taken, now)

    drop = table_drops(obs, job)
    ok = feasible & (drop != NO_ROOM)
    removed = jnp.where(ok, frag.frag_milli(jnp.where(ok, drop, 0), obs.frag_classes), 0.0)  # milli
    frag_now = obs.frag_node
    score = jnp.where(ok, frag.fgd_score(removed, 0.0), 0)
    top_score = jnp.where(ok, score, -1).max()
    choice = best_node(jnp.where(ok, score, -1), feasible, obs.node_rank)
    per_gpu = jnp.maximum(gpu_cap, 1.0)
    idle = jnp.maximum(free_gpu, 1.0)
    total_cap = jnp.maximum(gpu_cap.sum(), 1.0)
    cluster_alloc = 1.0 - free_gpu.sum() / total_cap
    cluster_frag_rate = frag_now.sum() / jnp.maximum(free_gpu.sum(), 1.0)
    queue = jnp.log1p(f32(obs.queue_len)) / 5.0
    ones = jnp.ones((n_nodes,), jnp.float32)

    columns = [
        top / GPU_MILLI, room,                                                    # 0-15
        model, model_ok,                                                          # 16-27
        f32(c.num_gpus) / 8, whole / 8, partly / 8, free_gpu / (8 * GPU_MILLI),   # 28-31
        jnp.where(c.num_gpus > 0, 1.0 - free_gpu / per_gpu, 0.0),                 # 32
        f32(obs.free_cpu) / cpu_cap, f32(obs.free_mem) / mem_cap,                 # 33-36
        cpu_cap / cpu_cap.max(), mem_cap / mem_cap.max(),
        f32(c.speed), c.valid, feasible,                                          # 37-39
        after(f32(obs.free_cpu), f32(job["cpu_milli"])) / cpu_cap,                # 40-43
        after(f32(obs.free_mem), f32(job["mem_mib"])) / mem_cap,
        after(free_gpu, taken_gpu) / (8 * GPU_MILLI),
        after(whole, whole_taken) / 8,
        jnp.log1p(f32(job["work_s"]) / jnp.maximum(f32(c.speed), 1e-3)) / 10.0,   # 44
        frag_now / per_gpu, (frag_now - removed) / per_gpu, removed / GPU_MILLI,  # 45-47
        f32(score) / 100.0, ok & (score == top_score),                            # 48-50
        jnp.arange(n_nodes) == choice,
        frag_now / idle,                                                          # 51
        f32(obs.node_rank) / n_nodes,                                             # 52
        cluster_alloc * ones, cluster_frag_rate * ones, queue * ones,             # 53-56
        f32(feasible.sum()) / n_nodes * ones,
    ]
    nodes = jnp.concatenate([f32(x).reshape(n_nodes, -1) for x in columns], -1)
    constrained = (job["model_mask"] != ALL_MODELS) & (job["num_gpu"] > 0)
    job_row = jnp.stack([
        f32(job["num_gpu"]) / 8, f32(job["gpu_milli"]) / GPU_MILLI,
        f32(job["cpu_milli"]) / cpu_cap.max(), f32(job["mem_mib"]) / mem_cap.max(),
        jnp.log1p(f32(job["work_s"])) / 10.0,
        jnp.log1p(jnp.maximum(f32(obs.job_wait_s[slot]), 0.0)) / 10.0,
        f32(fractional), f32(job["num_gpu"] == 0), f32(constrained), queue])
    return Features(nodes=nodes, job=job_row, valid=c.valid, feasible=feasible,
                    fgd_choice=choice.astype(jnp.int32), slot=slot.astype(jnp.int32),
                    frag_removed=removed / GPU_MILLI)


# ----- networks -----------------------------------------------------------------------------

class NodeEncoder(nnx.Module):
    """[N, NODE_FEATURES + JOB_FEATURES] -> [N, hidden]: an MLP per node, then (use_attn) one
    pre-norm transformer block over the valid nodes."""

    def __init__(self, config: DRRConfig, rngs: nnx.Rngs):
        h = config.hidden
        self.embed = gnn.MLP([NODE_FEATURES + JOB_FEATURES, h, h], rngs)
        self.use_attn = config.use_attn
        if config.use_attn:
            self.attn_norm = nnx.LayerNorm(h, rngs=rngs)
            self.attn = nnx.MultiHeadAttention(config.heads, h, decode=False, keep_rngs=False, rngs=rngs)
            self.mlp_norm = nnx.LayerNorm(h, rngs=rngs)
            self.mlp = gnn.MLP([h, h, h], rngs)

    def __call__(self, x, valid):
        e = self.embed(x)
        if self.use_attn:
            mask = (valid[None, :] & valid[:, None])[None]  # [1 (heads), N (queries), N (keys)]
            e = e + self.attn(self.attn_norm(e), mask=mask)
            e = e + self.mlp(self.mlp_norm(e))
        return e


def _rows(feat: Features):
    """[N, NODE_FEATURES + JOB_FEATURES]: every node's row with the job at hand's features."""
    job = jnp.broadcast_to(feat.job[None, :], (feat.nodes.shape[0], JOB_FEATURES))
    return jnp.concatenate([feat.nodes, job], -1)


class Actor(nnx.Module):
    def __init__(self, config: DRRConfig, rngs: nnx.Rngs):
        self.encoder = NodeEncoder(config, rngs)
        self.head = gnn.MLP([config.hidden, config.hidden, 1], rngs)

    def __call__(self, feat: Features):
        """[N] logits, -inf where the job does not fit (all 0 if it fits nowhere)."""
        logits = self.head(self.encoder(_rows(feat), feat.valid))[:, 0]
        return jnp.where(feat.feasible, logits, jnp.where(feat.feasible.any(), -jnp.inf, 0.0))


class Critic(nnx.Module):
    """V(s) from the mean over valid nodes of a per-node MLP (no attention: a sum over nodes
    needs none, and the critic's cost is half of each update's)."""

    def __init__(self, config: DRRConfig, rngs: nnx.Rngs):
        self.embed = gnn.MLP([NODE_FEATURES + JOB_FEATURES, config.hidden, config.hidden], rngs)
        self.head = gnn.MLP([config.hidden + JOB_FEATURES, config.hidden, 1], rngs)

    def __call__(self, feat: Features):
        """[] V(s)."""
        e = self.embed(_rows(feat))
        valid = feat.valid[:, None]
        pooled = (e * valid).sum(0) / jnp.maximum(valid.sum(), 1)
        return self.head(jnp.concatenate([pooled, feat.job]))[0]


def create(config: DRRConfig, key):
    """(graphdefs, params): {"actor", "critic"} each."""
    k_actor, k_critic = jax.random.split(key)
    actor_def, actor = nnx.split(Actor(config, nnx.Rngs(k_actor)))
    critic_def, critic = nnx.split(Critic(config, nnx.Rngs(k_critic)))
    return {"actor": actor_def, "critic": critic_def}, {"actor": actor, "critic": critic}


def _apply(graphdef, params, feat: Features):
    """The module on ``feat`` with any number of leading batch axes."""
    fn = nnx.merge(graphdef, params).__call__
    for _ in range(feat.nodes.ndim - 2):
        fn = jax.vmap(fn)
    return fn(feat)


def greedy_policy(graphdefs, job_at_hand: str = "first"):
    """``policy(params, obs, key) -> flat action``: the job at hand on its most likely node."""

    def policy(params, obs, key):
        del key
        feat = features(obs, job_at_hand)
        node = jnp.argmax(_apply(graphdefs["actor"], params["actor"], feat))
        return place_or_wait(obs, feat.slot, node)

    return policy


def scheduler(config: DRRConfig, graphdefs) -> policies.Scheduler:
    """The trained agent as a ``Scheduler`` (its env settings travel with it)."""
    changes = _env_changes(config)
    return policies.Scheduler(NAME, greedy_policy(graphdefs, config.job_at_hand), "fgd", "DRR actor-critic (trained)",
                              turns=None, env_changes=tuple(c for c in changes if c[0] != "gpu_rule"))


# ----- losses -------------------------------------------------------------------------------

def imitation_loss(logp, teacher):
    """[...] cross-entropy of the policy against the teacher's node: -log pi(teacher | s).
    Zero exactly when the policy puts all its probability on the teacher's node."""
    return -jnp.take_along_axis(logp, teacher[..., None], axis=-1)[..., 0]


def adjust_advantages(advantages, factor: float):
    """Advantage adjustment: negative advantages scaled by (1 - factor); factor 0 = unchanged."""
    if not factor:
        return advantages
    return jnp.where(advantages < 0, (1.0 - factor) * advantages, advantages)


def next_log_beta(log_beta, mean_entropy, mean_max_entropy, config: DRRConfig):
    """Dynamic entropy: log beta += beta_lr * (target - entropy) / max entropy, target =
    entropy_target x the uniform policy's entropy; beta kept in [beta0 / 100, 10 beta0]."""
    if not config.use_dynamic_entropy or config.beta0 == 0:
        return log_beta
    scale = jnp.maximum(mean_max_entropy, 1e-6)
    step = config.beta_lr * (config.entropy_target * mean_max_entropy - mean_entropy) / scale
    lo, hi = jnp.log(config.beta0 / 100.0), jnp.log(config.beta0 * 10.0)
    return jnp.clip(log_beta + step, lo, hi)


def actor_loss(params, graphdef, batch, advantages, beta, config: DRRConfig):
    """The actor's loss on a batch -> (loss, logs): policy gradient - beta x entropy (+
    imitation_loss_weight x imitation with ``use_imitation``), each a mean over the steps
    that were decisions. batch: ``feat`` (Features [T, E, ...]), ``node`` (taken), ``teacher``
    (the teacher's node, -1: none), ``decided`` [T, E]; advantages [T, E] (adjusted)."""
    feasible = batch["feat"].feasible
    logp = masked_log_softmax(_apply(graphdef, params, batch["feat"]), feasible)
    w = batch["decided"].astype(jnp.float32)
    count = jnp.maximum(w.sum(), 1.0)
    taken = jnp.take_along_axis(logp, batch["node"][..., None], -1)[..., 0]
    pg = -(w * taken * advantages).sum() / count
    mean_ent = (w * entropy(logp, feasible)).sum() / count
    has_teacher = w * (batch["teacher"] >= 0)
    teachers = jnp.maximum(has_teacher.sum(), 1.0)
    imitate = (has_teacher * imitation_loss(logp, jnp.maximum(batch["teacher"], 0))).sum() / teachers
    loss = pg - beta * mean_ent
    if config.use_imitation:
        loss = loss + config.imitation_loss_weight * imitate
    greedy = jnp.argmax(jnp.where(feasible, logp, -jnp.inf), -1)
    agree = (has_teacher * (greedy == batch["teacher"])).sum() / teachers
    return loss, {"actor_loss": pg, "entropy": mean_ent, "imitation_loss": imitate, "teacher_agreement": agree}


def value_loss(params, graphdef, batch, last_value, gamma: float, lam: float):
    """The critic's loss on a rollout -> (loss, (advantages, values)): the mean squared error,
    over decisions, of V(s) against the GAE returns of the same (stopped) values, so one
    forward pass gives both. batch: ``feat``, ``reward``, ``done``, ``decided`` [T, E];
    last_value [E] = V(s_T)."""
    values = _apply(graphdef, params, batch["feat"])
    adv, returns = gae(batch["reward"], jax.lax.stop_gradient(values), batch["done"], last_value, gamma, lam)
    w = batch["decided"].astype(jnp.float32)
    loss = (w * (values - jax.lax.stop_gradient(returns)) ** 2).sum() / jnp.maximum(w.sum(), 1.0)
    return loss, (adv, values)


# ----- training -----------------------------------------------------------------------------

class Runner(NamedTuple):
    """Everything a DRR training run carries from one update to the next (a pytree)."""

    params: dict            # {"actor", "critic"}
    opt_state: dict         # {"actor", "critic"}
    log_beta: jax.Array     # [] log of the entropy weight
    env_state: object       # SimState [E]
    obs: object             # Observation [E]
    ep_return: jax.Array    # [E] env return so far of each env's current episode
    update: jax.Array       # [] updates done
    key: jax.Array


def _optimiser(lr: float, config: DRRConfig):
    step = optax.sgd(lr) if config.optimizer == "sgd" else optax.adam(lr)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), step)


def make_train(env: ClusterEnv, env_params: EnvParams, workload: synthetic.SyntheticConfig | Jobs,
               agent: DRRConfig, config: training.TrainConfig) -> training.Trainer:
    """Build DRR's pure training functions (workload: see ``training.make_reset``)."""
    num_envs, steps = config.num_envs, agent.rollout_steps
    reset_envs = training.make_reset(env, env_params, workload, config)
    graphdefs, _ = create(agent, jax.random.key(0))
    opt = {"actor": _optimiser(agent.lr_actor, agent), "critic": _optimiser(agent.lr_critic, agent)}
    teacher = policies.get(agent.teacher).policy
    batch_features = jax.vmap(lambda obs: features(obs, agent.job_at_hand))

    def teacher_nodes(obs, feat, key):
        if agent.teacher == "fgd":
            return feat.fgd_choice
        acts = jax.vmap(teacher, in_axes=(None, 0, 0))(None, obs, jax.random.split(key, num_envs))
        slot, node = actions.place_slot_node(acts, obs.place_mask.shape[-1])
        same_job = actions.is_place(acts, *obs.place_mask.shape[-2:]) & (slot == feat.slot)
        return jnp.where(same_job, node, -1)  # -1: the teacher did not place the job at hand

    def init(key) -> Runner:
        k_net, k_env, key = jax.random.split(key, 3)
        _, params = create(agent, k_net)
        state, obs = reset_envs(k_env)
        return Runner(params=params, opt_state={k: opt[k].init(params[k]) for k in opt},
                      log_beta=jnp.log(jnp.float32(max(agent.beta0, 1e-12))), env_state=state, obs=obs,
                      ep_return=jnp.zeros(num_envs), update=jnp.int32(0), key=key)

    def env_step(carry, _):
        runner, finished_return, finished = carry
        key, k_act, k_step, k_reset, k_teacher = jax.random.split(runner.key, 5)
        obs = runner.obs
        feat = batch_features(obs)
        logits = _apply(graphdefs["actor"], runner.params["actor"], feat)
        node = jax.random.categorical(k_act, jnp.where(feat.feasible, logits, -1e9)).astype(jnp.int32)
        action = jax.vmap(place_or_wait)(obs, feat.slot, node)
        state, next_obs, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), runner.env_state, action, env_params)
        reward = reward * config.reward_scale
        decided = feat.feasible.any(-1)
        removed = jnp.where(decided, jnp.take_along_axis(feat.frag_removed, node[:, None], -1)[:, 0], 0.0)
        ep_return, ended_return, ended = training.finished_episodes(runner.ep_return, reward, done)
        state, next_obs = training.auto_reset(reset_envs, k_reset, done, state, next_obs)
        step = {"feat": feat, "node": node, "teacher": teacher_nodes(obs, feat, k_teacher),
                "reward": reward + agent.frag_penalty * removed, "env_reward": reward, "done": done,
                "decided": decided, "removed": removed}
        runner = runner._replace(env_state=state, obs=next_obs, ep_return=ep_return, key=key)
        return (runner, finished_return + ended_return, finished + ended), step

    def one_update(runner: Runner, _):
        (runner, finished_return, finished), batch = jax.lax.scan(
            env_step, (runner, jnp.float32(0), jnp.int32(0)), None, length=steps)  # every leaf [T, E, ...]
        last_value = _apply(graphdefs["critic"], runner.params["critic"], batch_features(runner.obs))
        (critic_loss, (adv, values)), g_critic = jax.value_and_grad(value_loss, has_aux=True)(
            runner.params["critic"], graphdefs["critic"], batch, last_value, agent.gamma, agent.gae_lambda)
        w = batch["decided"].astype(jnp.float32)
        count = jnp.maximum(w.sum(), 1.0)
        mean = (w * adv).sum() / count
        std = jnp.sqrt((w * (adv - mean) ** 2).sum() / count) + 1e-8
        adv = adjust_advantages((adv - mean) / std, float(agent.use_advantage_adjustment))
        beta = jnp.exp(runner.log_beta) if agent.beta0 > 0 else jnp.float32(0)
        (_, actor_logs), g_actor = jax.value_and_grad(actor_loss, has_aux=True)(
            runner.params["actor"], graphdefs["actor"], batch, jax.lax.stop_gradient(adv), beta, agent)
        params, opt_state = {}, {}
        for name, grads in (("actor", g_actor), ("critic", g_critic)):
            updates, opt_state[name] = opt[name].update(grads, runner.opt_state[name], runner.params[name])
            params[name] = optax.apply_updates(runner.params[name], updates)
        legal = batch["feat"].feasible.sum(-1)
        max_ent = (w * jnp.log(jnp.maximum(legal, 1).astype(jnp.float32))).sum() / count
        log_beta = next_log_beta(runner.log_beta, actor_logs["entropy"], max_ent, agent)
        runner = runner._replace(params=params, opt_state=opt_state, log_beta=log_beta, update=runner.update + 1)
        logs = {"reward": batch["env_reward"].mean(), "critic_loss": critic_loss, "beta": beta,
                "value_mean": (w * values).sum() / count, "frag_removed_gpus": (w * batch["removed"]).sum() / count,
                "finished_return": finished_return, "finished": finished, **actor_logs}
        return runner, logs

    def run_chunk(runner: Runner):
        runner, logs = jax.lax.scan(one_update, runner, None, length=config.chunk_updates)
        return runner, training.chunk_summary(runner.update, logs, means=tuple(f for f in LOG_FIELDS if f != "beta"),
                                              lasts=("beta",))

    def train(key):
        runner = init(key)
        return jax.lax.scan(lambda r, _: run_chunk(r), runner, None,
                            length=config.total_updates // config.chunk_updates)

    return training.Trainer(init=init, run_chunk=run_chunk, train=train, scheduler=scheduler(agent, graphdefs))
