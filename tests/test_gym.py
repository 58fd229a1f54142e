"""The gymnax and Gymnasium envs (``jaxsched.gymnax_env``, ``jaxsched.gym_env``) on a tiny
cluster: the same episodes as the native ``ClusterEnv`` API, gymnasium's checker, the vector
env to the end of every episode, and seeding."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from jaxsched import actions, gym_env as gym_module, gymnax_env, policies
from jaxsched.workload import synthetic

TINY = dict(num_nodes=4, num_jobs=12, load=0.9, window=2)  # 4 nodes x 2 slots: 11 actions
ID = "jaxsched:jaxsched/Cluster-v0"


def _first_fit(obs):
    return policies.get("first-fit").policy(None, obs, None)


def test_gymnax_under_jit_vmap_plays_the_native_episodes():
    env, params = gymnax_env.make(**TINY, allow_wait=True, bank_size=0)  # the mask: the env's less rejects
    keys = jax.random.split(jax.random.key(3), 4)
    steps = params.max_steps_in_episode

    def gymnax_episode(key):
        obs0, state = env.reset(key, params)

        def body(state, t):
            action = _first_fit(env.sim.observe(state.sim, params.sim))
            obs, state, reward, done, info = env.step_env(jax.random.fold_in(key, t), state, action, params)
            return state, (reward, done, info["legal"], action, obs.action_mask)

        state, out = jax.lax.scan(body, state, jnp.arange(steps))
        return state.sim.jobs, obs0, env.metrics(state, params), out

    def native_episode(key):  # what gymnax_env says reset_env does, with the native API
        k_jobs, k_sim = jax.random.split(key)
        jobs = synthetic.generate(k_jobs, params.synthetic)
        state, obs0 = env.sim.reset(k_sim, params.sim, jobs)

        def body(carry, t):
            state, obs = carry
            state, obs, reward, done, _ = env.sim.step(jax.random.fold_in(key, t), state, _first_fit(obs), params.sim)
            return (state, obs), (reward, done)

        (state, _), out = jax.lax.scan(body, (state, obs0), jnp.arange(steps))
        return jobs, obs0.action_mask, env.sim.metrics(state, params.sim), out

    both = jax.jit(jax.vmap(lambda k: (gymnax_episode(k), native_episode(k))))
    (g_jobs, g_obs0, g_metrics, (g_reward, g_done, g_legal, g_action, g_mask)), \
        (n_jobs, n_mask0, n_metrics, (n_reward, n_done)) = both(keys)

    equal = lambda a, b: jax.tree.map(np.testing.assert_array_equal, a, b)  # noqa: E731
    equal(g_jobs, n_jobs)
    np.testing.assert_array_equal(g_reward, n_reward)
    np.testing.assert_array_equal(g_done, n_done)
    equal(g_metrics, n_metrics)
    assert g_done[:, -1].all() and not g_done[:, 0].any()  # whole episodes of several decisions
    assert (np.asarray(g_metrics["done"]) == 1).all() and (g_reward < 0).any()
    live = ~np.concatenate([np.zeros((4, 1), bool), np.asarray(g_done[:, :-1])], 1)
    assert g_legal[live].all()
    # Each action was legal in the mask the agent saw; a done episode has no legal action.
    before = np.concatenate([np.asarray(g_obs0.action_mask)[:, None], np.asarray(g_mask)[:, :-1]], 1)
    assert np.take_along_axis(before, np.asarray(g_action)[..., None], -1)[..., 0][live].all()
    assert not before[~live].any()
    # The mask is the env's with rejects off (allow_reject=False).
    is_reject = actions.is_reject(np.arange(env.num_actions), 2, 4)
    np.testing.assert_array_equal(g_obs0.action_mask, np.asarray(n_mask0) & ~is_reject)
    assert is_reject.any() and np.asarray(n_mask0)[:, is_reject].any()
    assert g_obs0.features.shape == (4,) + env.observation_space(params).spaces["features"].shape


def test_gymnax_bank_picks_each_episode_uniformly():
    env, params = gymnax_env.make(**TINY, bank_size=0)
    bank = jax.vmap(lambda k: synthetic.generate(k, params.synthetic))(jax.random.split(jax.random.key(9), 3))
    params = params.replace(bank=bank)
    drawn = jax.jit(jax.vmap(env.draw_jobs, in_axes=(0, None)))(jax.random.split(jax.random.key(0), 300), params)
    picks = [[np.array_equal(w, bank.work_s[b]) for b in range(3)] for w in np.asarray(drawn.work_s)]
    assert all(sum(p) == 1 for p in picks)  # every draw is one of the bank's episodes
    counts = np.sum(picks, 0)
    assert counts.min() > 70  # about 100 each


def test_make_refuses_bad_arguments_and_masks_wait_by_default():
    with pytest.raises(ValueError, match="max_steps = -5"):
        gymnax_env.make(**TINY, max_steps=-5)
    with pytest.raises(ValueError, match="target_load.*100000.0 cannot be reached"):
        gymnax_env.make(**{**TINY, "load": 1e5})  # past every job at the work cap
    env, _ = gymnax_env.make(**TINY)
    assert not env.agent.allow_wait  # the default outside learners do best with


@pytest.fixture(scope="module")
def gym_env():
    env = gymnasium.make(ID, **TINY)
    yield env
    env.close()


def test_gymnasium_make_needs_no_import_and_passes_check_env(gym_env):
    # In a fresh interpreter, gymnasium's "module:id" import of jaxsched alone registers the env.
    find = ("import sys, gymnasium.envs.registration as r; spec = r._find_spec('jaxsched:jaxsched/Cluster-v0'); "
            "assert spec.vector_entry_point and 'jax' not in sys.modules, spec")
    subprocess.run([sys.executable, "-c", find], check=True, timeout=60)
    check_env(gym_env.unwrapped)  # the render check too: it builds the env again with render_mode="ansi"
    assert gym_env.action_space.n == actions.num_actions(2, 4)


def _random_legal(rng, mask):
    """One uniformly random legal action per row of ``mask`` [E, A] (0 where none is legal)."""
    scores = np.where(mask, rng.random(mask.shape), -1.0)
    return scores.argmax(-1)


def test_gymnasium_episode_masks_metrics_and_seeding(gym_env):
    rng = np.random.default_rng(0)

    def play(seed):
        obs, info = gym_env.reset(seed=seed)
        trace, rewards = [obs], []
        while True:
            mask = info["action_mask"]
            np.testing.assert_array_equal(mask, gym_env.unwrapped.action_masks())
            assert mask.dtype == np.int8 and mask[gym_env.action_space.sample(mask)]  # Gymnasium's idiom
            obs, reward, terminated, truncated, info = gym_env.step(_random_legal(rng, mask[None])[0])
            assert info["legal"]
            trace.append(obs)
            rewards.append(reward)
            if terminated or truncated:
                return np.stack(trace), rewards, terminated, info["metrics"]

    rng = np.random.default_rng(0)
    a = play(5)
    compiled = gym_module.advance_one._cache_size()
    rng = np.random.default_rng(0)
    b = play(5)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1] and a[2]  # terminated, not truncated
    assert a[3]["done"] == 1 and a[3]["jct_mean"] > 0
    np.testing.assert_allclose(sum(a[1]), sum(b[1]))
    # Unseeded resets go on along the key chain: a new episode, not the seeded one again.
    gym_env.reset(seed=5)
    gym_env.reset()
    e_jobs = np.asarray(gym_env.unwrapped._ep.state.sim.jobs.arrival_s)
    gym_env.reset(seed=5)
    assert not np.array_equal(e_jobs, np.asarray(gym_env.unwrapped._ep.state.sim.jobs.arrival_s))
    assert gym_module.advance_one._cache_size() == compiled  # the step compiled once, for every episode


def test_illegal_actions_cannot_hang_an_episode(gym_env):
    """Nothing but a masked-off action (reject slot 0; rejects are off): never a reject, but
    waits while events are pending, then no-ops until the step cap truncates the episode."""
    _, info = gym_env.reset(seed=0)
    illegal = actions.reject(0, 2, 4)
    assert not info["action_mask"][illegal]
    cap = gym_env.unwrapped.params.max_steps_in_episode
    for t in range(1, cap + 1):
        _, _, terminated, truncated, info = gym_env.step(illegal)
        assert not info["legal"]
        if terminated or truncated:
            break
    assert truncated and not terminated and t == cap
    assert info["metrics"]["done"] == 0 and info["metrics"]["rejected"] == 0


def test_gymnasium_refuses_actions_outside_its_discrete_space(gym_env):
    gym_env.reset(seed=0)
    n = gym_env.action_space.n
    for bad in (-1, n, 2**31 - 1, 0.7, float("inf"), True, "3", [1, 2]):
        with pytest.raises(ValueError, match="action"):
            gym_env.step(bad)
    gym_env.step(np.int64(n - 1))  # any integer type in range is an action (here: wait)


@pytest.mark.slow
def test_make_vec_64_envs_run_every_episode_to_its_end(gym_env):
    envs = gymnasium.make_vec(ID, num_envs=64, vectorization_mode="vector_entry_point", **TINY)
    assert envs.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.NEXT_STEP
    rng = np.random.default_rng(1)
    obs, info = envs.reset(seed=10)
    with pytest.raises(ValueError, match="2 seeds for 64 envs"):
        envs.reset(seed=[1, 2])  # not a silently smaller batch
    assert obs.shape == (64,) + envs.single_observation_space.shape
    with pytest.raises(ValueError, match="64 integers"):
        envs.step(np.zeros(3, int))  # one action per env
    first_jobs = np.asarray(envs.unwrapped._eps.state.sim.jobs.arrival_s)
    ended = np.zeros(64, bool)
    compiled = None
    for _ in range(envs.unwrapped.params.max_steps_in_episode):
        obs, reward, terminated, truncated, info = envs.step(_random_legal(rng, info["action_mask"]))
        compiled = compiled or gym_module.advance_all._cache_size()
        assert not truncated.any()
        first = terminated & ~ended
        if first.any():
            metrics = envs.unwrapped.metrics()  # NEXT_STEP: the finished episodes are still there
            assert (metrics["done"][first] == 1).all()
        ended |= terminated
        if ended.all():
            break
    assert ended.all()
    # The next step resets exactly the envs that just ended: reward 0, a live new episode.
    just = terminated.copy()
    obs, reward, terminated, truncated, info = envs.step(_random_legal(rng, info["action_mask"]))
    assert (reward[just] == 0).all() and info["action_mask"][just].any(-1).all()
    assert gym_module.advance_all._cache_size() == compiled
    # Env i of a vector env seeded s plays the episode of the single env seeded s + i.
    gym_env.reset(seed=10 + 7)
    np.testing.assert_array_equal(np.asarray(gym_env.unwrapped._ep.state.sim.jobs.arrival_s), first_jobs[7])
    envs.close()


def test_openb_workload_is_a_bank_of_trace_windows(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
            "creation_time,deletion_time,scheduled_time"]
    for i in range(60):  # pods of one GPU (a share of one), 10 s apart, running 300..600 s
        t, milli = 10 * i, rng.choice([250, 500, 1000])
        rows.append(f"pod-{i},4000,8192,1,{milli},,LS,Running,{t},{t + 300 + 50 * (i % 7)},{t}")
    path.write_text("\n".join(rows) + "\n")
    env, params = gymnax_env.make(**{**TINY, "num_jobs": 12}, workload="openb", trace=str(path), trace_windows=3)
    assert params.bank.arrival_s.shape == (3, 12) and params.bank.valid.all()
    assert params.starts[1].sim.jobs.arrival_s.shape == (3, 12)  # each window started once: a reset picks one
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(2), 30), params)
    for w in np.asarray(state.sim.jobs.work_s):
        assert sum(np.array_equal(w, params.bank.work_s[b]) for b in range(3)) >= 1
    drawn = jax.jit(jax.vmap(env.draw_jobs, in_axes=(0, None)))(jax.random.split(jax.random.key(1), 30), params)
    for w in np.asarray(drawn.work_s):
        assert sum(np.array_equal(w, params.bank.work_s[b]) for b in range(3)) >= 1
    assert set(np.asarray(drawn.num_gpu).ravel()) == {1}  # the trace's pods, not synthetic ones


def test_envs_of_equal_settings_share_their_compiled_functions(gym_env):
    _, info = gym_env.reset(seed=0)
    gym_env.step(_random_legal(np.random.default_rng(0), info["action_mask"][None])[0])
    gym_env.unwrapped.metrics()
    fns = (gym_module.start_one, gym_module.advance_one, gym_module.metrics_one)
    before = [f._cache_size() for f in fns]
    other = gymnasium.make(ID, **TINY)  # built apart, with equal settings: nothing compiles again
    _, info = other.reset(seed=1)
    other.step(_random_legal(np.random.default_rng(0), info["action_mask"][None])[0])
    other.unwrapped.metrics()
    assert [f._cache_size() for f in fns] == before
    # Other settings of the same shapes (wait left in the mask) get programs of their own.
    waits = gymnasium.make(ID, **TINY, allow_wait=True).unwrapped
    assert waits.settings != other.unwrapped.settings and other.unwrapped.settings == gym_env.unwrapped.settings
    gym_module.metrics_one(waits.settings, waits.params, other.unwrapped._ep.state)
    assert gym_module.metrics_one._cache_size() == before[2] + 1


def _play(env, actions):
    """(obs, reward, terminated, truncated, info) of each action in turn, to the episode's end."""
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


def test_pickle_round_trip_plays_the_same_next_steps(gym_env):
    _, info = gym_env.reset(seed=3)
    rng = np.random.default_rng(3)
    for _ in range(3):
        _, _, _, _, info = gym_env.step(_random_legal(rng, info["action_mask"][None])[0])
    compiled = gym_module.advance_one._cache_size()
    copies = [pickle.loads(pickle.dumps(gym_env)), copy.deepcopy(gym_env)]
    actions_ = [int(a) for a in rng.integers(0, gym_env.action_space.n, 300)]  # legal or not: all are steps
    expected = _play(gym_env, actions_)
    next_episode = gym_env.reset()[0]
    for env in copies:
        np.testing.assert_array_equal(env.unwrapped.action_masks(), info["action_mask"])
        got = _play(env, actions_)
        assert len(got) == len(expected) and (got[-1][2] or got[-1][3])
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g[0], e[0])
            np.testing.assert_array_equal(g[4].pop("action_mask"), e[4]["action_mask"])
            assert g[1:4] == e[1:4] and g[4] == {k: v for k, v in e[4].items() if k != "action_mask"}
        # The key chain came along: the next (unseeded) episode is the same too.
        np.testing.assert_array_equal(env.reset()[0], next_episode)
    assert gym_module.advance_one._cache_size() == compiled  # the copies compiled nothing


def test_render_ansi_shows_the_clock_queue_and_free_gpus():
    env = gymnasium.make(ID, **TINY, render_mode="ansi")
    assert env.metadata["render_modes"] == ["ansi"]
    assert env.unwrapped.render() == gym_module.NOT_RESET  # (gymnasium.make's wrapper refuses it)
    _, info = env.reset(seed=0)
    env.step(_random_legal(np.random.default_rng(0), info["action_mask"][None])[0])
    text = env.render()
    lines = text.splitlines()
    assert lines[0].startswith("time ") and "decision 1/" in lines[0] and "queue " in lines[0]
    assert lines[1].startswith("window: k0: ") and len(lines) == 3 + 4  # header lines and one per node
    obs = env.unwrapped.gx.sim.observe(env.unwrapped._ep.state.sim, env.unwrapped.params.sim)
    whole = np.asarray((obs.free_milli == 1000) & obs.cluster.gpu_exists).sum(-1)
    assert [int(line.split()[1].split("/")[0]) for line in lines[3:]] == whole.tolist()
    with pytest.raises(ValueError, match="render_mode='human'.*'ansi'"):
        gymnasium.make(ID, **TINY, render_mode="human")


def test_a_mistyped_keyword_is_named_with_the_valid_ones():
    for make in (lambda **kw: gymnasium.make(ID, **kw),
                 lambda **kw: gymnasium.make_vec(ID, num_envs=2, vectorization_mode="vector_entry_point", **kw)):
        with pytest.raises(TypeError, match="unknown keyword 'num_node' \\(did you mean 'num_nodes'\\?\\); "
                                            "valid: .*num_nodes, num_jobs.*, reward,") as err:
            make(**{**TINY, "num_node": 8})
        assert "\n" not in str(err.value)


def test_gymnasium_envs_draw_fresh_episodes_not_the_gymnax_bank(gym_env):
    """Held-out seeds must be new episodes: the Gymnasium envs don't take the gymnax env's
    pre-drawn bank (the same 1,024 episodes for every seed) unless asked."""
    env = gym_env.unwrapped if hasattr(gym_env, "unwrapped") else gym_env
    assert env.params.bank is None
