"""DRR: its features on a hand-made state, the actor's mask, what each switch changes, its
losses, resume, and a short training run that must learn."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import evaluate as ev
from jaxsched import experiment
from jaxsched import train as train_lib
from jaxsched.agents import drr
from jaxsched.agents import policy_gradient as pg
from jaxsched.policies import get
from jaxsched.policies.fgd import fgd
from jaxsched.sim import EnvConfig, frag
from jaxsched.types import GPU_MILLI
from tests.agents.test_training import SLOW_THEN_FAST, _leaves_equal, _mean_jct
from tests.agents.tiny import tiny_drr
from tests.policies import states

CLASSES = states.frag_classes([(1000, 500, 1, 3), (2000, 1000, 1, 2), (4000, 1000, 2, 1)])
# Node 0: 8 GPUs, two partly used; node 1: 8 GPUs, all free; node 2: 2 GPUs, one free;
# node 3: 1 GPU with 200 milli free (too little for the job).
FREE = [[1000, 1000, 1000, 1000, 1000, 1000, 300, 600], [1000] * 8, [1000, 0], [200]]
JOB = (1, 500, 4000)  # one GPU at 500 milli, 4 cores


def _obs():
    obs = states.observe(JOB, FREE, free_cpu=[90000, 96000, 30000, 8000], classes=CLASSES,
                         node_rank=[3, 2, 1, 0])
    c = obs.cluster
    frag_node = frag.node_frag(obs.free_milli, obs.free_cpu, c.gpu_model, CLASSES)
    return obs.replace(frag_node=jnp.where(c.valid, frag_node, 0.0))


def test_features_size_and_contents_on_a_hand_made_state():
    obs = _obs()
    feat = jax.jit(drr.features)(obs)
    nodes = np.asarray(feat.nodes)
    assert nodes.shape == (states.N_NODES, drr.NODE_FEATURES) == (4, 57)
    assert np.asarray(feat.job).shape == (drr.JOB_FEATURES,)
    np.testing.assert_allclose(nodes[0, 0:8], [1, 1, 1, 1, 1, 1, 0.6, 0.3])  # free milli, most free first
    np.testing.assert_array_equal(nodes[0, 8:16], [1, 1, 1, 1, 1, 1, 1, 0])  # room for 500 milli
    np.testing.assert_array_equal(nodes[2, 8:16], [1, 0, 0, 0, 0, 0, 0, 0])
    model = 16 + int(obs.cluster.gpu_model[0])
    assert nodes[0, model] == 1 and nodes[0, 16:16 + drr.NUM_MODELS].sum() == 1 and drr.NUM_MODELS == 11
    np.testing.assert_allclose(nodes[:, 28], [1, 1, 0.25, 0.125])  # GPUs / 8
    np.testing.assert_allclose(nodes[0, 29:32], [6 / 8, 2 / 8, 6.9 / 8])  # whole, partly used, free milli
    feasible = np.asarray(obs.place_mask[0])
    np.testing.assert_array_equal(nodes[:, 39], feasible)
    assert feasible.tolist() == [True, True, True, False]
    np.testing.assert_allclose(nodes[0, 40], (90000 - 4000) / 96000, rtol=1e-6)  # CPU after placing
    np.testing.assert_allclose(nodes[3, 40], 8000 / 8000)  # does not fit: as now
    # A fractional job takes a wholly free GPU only where no partly used GPU has room.
    np.testing.assert_allclose(nodes[:3, 43], [6 / 8, 7 / 8, 0 / 8])
    # The fragmentation a placement removes: F_n now minus F_n with the job on the node's best GPU.
    c = obs.cluster
    for n in range(3):
        best = -np.inf
        for g in range(int(c.num_gpus[n])):
            if int(obs.free_milli[n, g]) < 500:
                continue
            free = np.asarray(obs.free_milli).copy()
            free[n, g] -= 500
            cpu = np.asarray(obs.free_cpu).copy()
            cpu[n] -= 4000
            after = frag.node_frag(jnp.asarray(free), jnp.asarray(cpu), c.gpu_model, CLASSES)[n]
            best = max(best, float(obs.frag_node[n] - after))
        np.testing.assert_allclose(nodes[n, 47], best / GPU_MILLI, atol=2e-3)
        np.testing.assert_allclose(nodes[n, 45] - nodes[n, 46], best / (GPU_MILLI * int(c.num_gpus[n])), atol=2e-3)
    # FGD's choice is the node the fgd policy picks.
    assert nodes[:, 50].tolist() == [float(i == int(fgd(None, obs, None))) for i in range(4)]
    assert int(feat.fgd_choice) == int(fgd(None, obs, None))
    np.testing.assert_allclose(nodes[:, 52], [3 / 4, 2 / 4, 1 / 4, 0])  # rank / N
    np.testing.assert_allclose(nodes[:, 56], 3 / 4)  # share of nodes where the job fits
    job = np.asarray(feat.job)
    np.testing.assert_allclose(job[[0, 1, 6, 7]], [1 / 8, 0.5, 1, 0])  # GPUs, milli, fractional, CPU-only



def test_the_job_at_hand_is_the_first_that_fits_or_fgd_windows_choice():
    # Window: a whole-GPU job, then a 0.5-GPU one that fills node 2's 600-milli hole (the
    # case worked out in tests/policies/test_fgd_window.py).
    classes = states.frag_classes([(1000, 500, 1, 1), (1000, 1000, 1, 1)])
    obs = states.observe_window([(1, 1000, 1000), (1, 500, 1000)], [[0] * 8, [0] * 8, [1000, 600], [1000]],
                                classes=classes)
    first = jax.jit(drr.features)(obs)
    window = jax.jit(lambda o: drr.features(o, "fgd-window"))(obs)
    assert int(first.slot) == 0 and int(window.slot) == 1
    np.testing.assert_allclose(np.asarray(window.job[:2]), [1 / 8, 0.5])  # the 0.5-GPU job's row
    np.testing.assert_array_equal(np.asarray(window.feasible), np.asarray(obs.place_mask[1]))
    assert int(window.fgd_choice) == 2  # FGD's node for that job: the teacher's, fgd-window's
    graphdefs, params = _net(drr.DRRConfig(hidden=16, heads=2))
    action = int(jax.jit(drr.greedy_policy(graphdefs, "fgd-window"))(params, obs, None))
    assert action // states.N_NODES == 1  # the greedy agent places the window's job, slot 1
    with pytest.raises(ValueError, match="job_at_hand"):
        drr.DRRConfig(job_at_hand="last")

def _net(config, key=0):
    graphdefs, params = drr.create(config, jax.random.key(key))
    return graphdefs, params


def test_masked_nodes_are_never_chosen():
    obs = _obs()
    config = drr.DRRConfig(hidden=16, heads=2)
    graphdefs, params = _net(config)
    feat = drr.features(obs)
    logits = drr._apply(graphdefs["actor"], params["actor"], feat)
    assert bool(jnp.isneginf(logits[3])) and bool(jnp.isfinite(logits[:3]).all())
    draws = jax.random.categorical(jax.random.key(1), jnp.where(feat.feasible, logits * 0, -1e9), shape=(2000,))
    assert set(np.asarray(draws).tolist()) == {0, 1, 2}  # uniform logits: every feasible node, never node 3
    policy = jax.jit(drr.greedy_policy(graphdefs))
    for seed in range(8):  # whatever the network, the greedy agent places on a feasible node
        _, p = _net(config, seed)
        assert 0 <= int(policy(p, obs, None)) < 3


def test_attention_is_what_mixes_the_nodes():
    obs = _obs()
    feat = drr.features(obs)
    other = feat._replace(nodes=feat.nodes.at[2].set(feat.nodes[2] + 1.0))  # change node 2 only
    for use_attn, mixes in ((True, True), (False, False)):
        graphdefs, params = _net(drr.DRRConfig(hidden=16, heads=2, use_attn=use_attn))
        a = drr._apply(graphdefs["actor"], params["actor"], feat)
        b = drr._apply(graphdefs["actor"], params["actor"], other)
        assert bool(jnp.abs(a[0] - b[0]) > 1e-6) == mixes  # node 0's logit sees node 2 only through attention


def test_advantage_adjustment_damps_negative_advantages_only():
    adv = jnp.array([-2.0, -0.5, 0.0, 1.5])
    np.testing.assert_array_equal(drr.adjust_advantages(adv, 0.0), adv)  # off
    np.testing.assert_allclose(drr.adjust_advantages(adv, 0.6), [-0.8, -0.2, 0.0, 1.5])


def test_dynamic_entropy_follows_its_target_and_is_fixed_when_off():
    on = drr.DRRConfig(beta0=0.04, entropy_target=0.5, beta_lr=0.1)
    log_beta = jnp.log(0.04)
    assert float(drr.next_log_beta(log_beta, 0.1, 2.0, on)) > float(log_beta)  # less random than the target: up
    assert float(drr.next_log_beta(log_beta, 1.9, 2.0, on)) < float(log_beta)  # more random: down
    off = dataclasses.replace(on, use_dynamic_entropy=False)
    assert float(drr.next_log_beta(log_beta, 0.1, 2.0, off)) == float(log_beta)
    for _ in range(1000):  # clipped to [beta0 / 100, 10 beta0]
        log_beta = drr.next_log_beta(log_beta, 0.0, 2.0, on)
    np.testing.assert_allclose(float(jnp.exp(log_beta)), 0.4, rtol=1e-5)


def test_imitation_loss_is_zero_when_the_policy_is_the_teacher():
    feasible = jnp.array([True, True, False, True])
    teacher = jnp.array(3)
    logp = pg.masked_log_softmax(jnp.array([0.0, -1e6, 0.0, 0.0]).at[3].set(1e6), feasible)
    assert float(drr.imitation_loss(logp, teacher)) == 0.0
    uniform = pg.masked_log_softmax(jnp.zeros(4), feasible)
    np.testing.assert_allclose(float(drr.imitation_loss(uniform, teacher)), np.log(3), rtol=1e-6)
    np.testing.assert_allclose(float(pg.entropy(uniform, feasible)), np.log(3), rtol=1e-6)


def _batch(config):
    """A batch of 2 steps x 3 envs of the hand-made state, with random actions and teachers."""
    feat = drr.features(_obs())
    widen = lambda x: jnp.broadcast_to(x, (2, 3) + x.shape)  # noqa: E731
    return {"feat": jax.tree.map(widen, feat), "node": jnp.array([[0, 1, 2], [1, 1, 0]]),
            "teacher": jnp.array([[2, 2, -1], [2, 0, 2]]), "decided": jnp.ones((2, 3), bool)}


def test_each_switch_changes_its_own_term_and_nothing_else():
    base = drr.DRRConfig(hidden=16, heads=2, use_imitation=True, imitation_loss_weight=0.1)
    graphdefs, params = _net(base)
    batch = _batch(base)
    adv = jnp.array([[1.0, -1.0, 0.5], [-0.5, 2.0, -2.0]])

    def grads(config, advantages=adv, beta=0.04):
        return jax.jit(jax.grad(lambda p: drr.actor_loss(p, graphdefs["actor"], batch, advantages, beta, config)[0]))(
            params["actor"])

    def same(a, b):
        return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))

    off = dataclasses.replace(base, use_imitation=False)
    assert same(grads(off), grads(dataclasses.replace(base, imitation_loss_weight=0.0)))  # off = weight 0
    assert not same(grads(off), grads(base))
    # Entropy weight: only the entropy term moves the gradient.
    assert not same(grads(off, beta=0.0), grads(off, beta=0.04))
    logs = drr.actor_loss(params["actor"], graphdefs["actor"], batch, adv, 0.04, base)[1]
    logs_off = drr.actor_loss(params["actor"], graphdefs["actor"], batch, adv, 0.04, off)[1]
    assert {k: float(v) for k, v in logs.items()} == {k: float(v) for k, v in logs_off.items()}  # same terms, summed differently
    # The env settings: rescheduling on (DRR's values) or off, nothing else of the env changes.
    env = EnvConfig(window=4, queue_capacity=99)
    on = drr.env_config(base, env)
    assert (on.resched_interval_s, on.resched_max_moves, on.resched_util_threshold, on.gpu_rule) == (3600.0, 5, 0.5, "fgd")
    no = drr.env_config(dataclasses.replace(base, use_rescheduling=False), env)
    assert no.resched_interval_s == 0.0
    assert dataclasses.replace(on, resched_interval_s=0.0) == no
    assert dataclasses.replace(no, gpu_rule="best-fit") == env
    # The trained agent is evaluated on the env it trained on.
    assert drr.scheduler(base, graphdefs).env_config(env) == on


def test_published_flags_override_the_config():
    overrides, derived = train_lib.published_overrides(
        ["--lr_actor", "0.05", "--use_imitation", "False", "--use-attn=True", "--num-node", "32",
         "--init_dim", "1792", "--teacher", "best-fit"], drr.DRRConfig)
    run = tiny_drr(*overrides)
    assert (run.agent.lr_actor, run.agent.use_imitation, run.agent.use_attn, run.agent.teacher) == (0.05, False, True, "best-fit")
    assert run.base.cluster.preset_nodes == 32
    train_lib.check_derived(run, derived)  # 56 x 32
    with pytest.raises(train_lib.DataError, match="init_dim.*1792"):
        train_lib.check_derived(tiny_drr(), derived)  # the tiny cluster has 4 nodes
    with pytest.raises(train_lib.DataError, match="--lr-actress"):
        train_lib.published_overrides(["--lr-actress", "1"], drr.DRRConfig)


@pytest.mark.slow
def test_drr_resume_after_interruption_reproduces_uninterrupted_run(tmp_path):
    run = tiny_drr("train.total_updates=20")
    whole = train_lib.train(run, tmp_path / "whole", show_progress=False)
    train_lib.train(run, tmp_path / "cut", show_progress=False, stop_after=10)
    resumed = train_lib.train(run, tmp_path / "cut", resume=True, show_progress=False)
    _leaves_equal(resumed.runners, whole.runners)
    np.testing.assert_array_equal(resumed.log[["update", "entropy", "beta"]].to_numpy(),
                                  whole.log[["update", "entropy", "beta"]].to_numpy())


@pytest.mark.slow
def test_short_drr_training_run_beats_random_placement(tmp_path):
    # The slow-then-fast cluster of the GNN-DDQN test: where a job runs decides its JCT, and
    # the placement reward says so at once. No teacher (FGD ignores speed), no fragmentation term.
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(SLOW_THEN_FAST)
    run = tiny_drr(f'cluster.node_list="{nodes}"', "workload.synthetic.target_load=0.3", 'env.reward="placed_jct"',
                   "agent.use_imitation=false", "agent.frag_penalty=0.0", "agent.use_rescheduling=false",
                   "agent.optimizer=\"adam\"", "agent.lr_actor=3e-3", "agent.lr_critic=3e-3",
                   "train.seed=2", "train.total_updates=150", "train.chunk_updates=50", "train.checkpoint_every=0")
    trained = train_lib.train(run, tmp_path / "learn", show_progress=False)
    agent = trained.trainer.scheduler
    # The network before any update: train's own init (compiled already), no update run.
    untrained = train_lib.train(run, tmp_path / "untrained", show_progress=False, stop_after=0).selection.params
    random_sched = get("random")
    agent_jct, untrained_jct = _mean_jct(run, agent.policy, agent.gpu_rule, trained.selection.params, untrained)
    [random_jct] = _mean_jct(run, random_sched.policy, random_sched.gpu_rule, None)
    assert agent_jct < 0.8 * random_jct, (agent_jct, random_jct)
    assert agent_jct < 0.8 * untrained_jct, (agent_jct, untrained_jct)


@pytest.mark.slow
def test_load_sweep_runs_a_trained_agent_beside_the_heuristics_at_each_load(tmp_path):
    """``train --checkpoint DIR --eval-set eval.sweep_loads=…``: the agent's rows of the sweep
    are its episodes at each load, as evaluated alone, and it gets a maximum sustainable load."""
    run = tiny_drr()
    tr, _ = train_lib.make_trainer(run)
    # An untrained agent: train's own init (the resume test's program), no update run.
    params = train_lib.train(run, tmp_path, show_progress=False, stop_after=0).selection.params
    config = train_lib.with_eval_overrides(run, ["eval.sweep_loads=[0.5, 1.2]", 'eval.schedulers=["fgd"]',
                                                 "eval.episodes=4", "eval.batch_size=4"]).base
    per_episode, _, max_load, _ = ev.sweep_load(config, show_progress=False, agents=[(tr.scheduler, params)])
    assert list(max_load.scheduler) == ["fgd", tr.scheduler.name]
    rows = per_episode[per_episode.scheduler == tr.scheduler.name]
    nodes = experiment.build_nodes(config)
    for load in (0.5, 1.2):
        alone = train_lib.agent_episodes(experiment.with_load(config, load, nodes), tr.scheduler)(params)
        np.testing.assert_array_equal(rows[rows.load == load].jct_mean.to_numpy(), alone["jct_mean"])
    assert not np.array_equal(rows[rows.load == 0.5].jct_mean.to_numpy(), rows[rows.load == 1.2].jct_mean.to_numpy())
