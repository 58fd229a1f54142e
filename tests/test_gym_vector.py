"""The Gymnasium vector envs on a tiny cluster: ``ClusterGymVectorEnv`` steps and infos as
``make_vec(..., "sync")`` over the single env gives them (Gymnasium's vector info
convention), observations inside their finite Box, pickling, and ``AsyncVectorEnv``: it runs
with the "spawn" context and is refused, not deadlocked, with "fork"."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import gymnasium
import numpy as np
import pytest

from jaxsched import compile_cache, gym_env
from tests.test_gym import ID, TINY, _random_legal


@pytest.fixture(scope="module")
def vec():
    envs = gymnasium.make_vec(ID, num_envs=64, vectorization_mode="vector_entry_point", **TINY)
    yield envs
    envs.close()


def _first(info: dict, n: int) -> dict:
    """``info`` as a vector env of its first ``n`` envs would give it: rows [:n], without the
    keys none of them has (Gymnasium's vector info: "_key" marks the envs that have "key")."""
    out = {}
    for key, value in info.items():
        if not key.startswith("_") and info["_" + key][:n].any():
            out[key] = _first(value, n) if isinstance(value, dict) else value[:n]
            out["_" + key] = info["_" + key][:n]
    return out


def _assert_close(got, want, **kwargs):
    """Equal, floats to float32 rounding: XLA may round a vmapped step's divisions apart."""
    if np.issubdtype(np.asarray(want).dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-6, **kwargs)
    else:
        np.testing.assert_array_equal(got, want, **kwargs)


def _assert_same_info(got: dict, want: dict):
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, dict):
            _assert_same_info(got[key], value)
        else:
            assert got[key].dtype == value.dtype, key
            _assert_close(got[key], value, err_msg=key)


def test_vector_env_steps_and_infos_are_the_sync_vector_envs(vec):
    n = 8  # the sync env of the first 8 single envs (seeded 20 + i, as the vector env's are)
    sync = gymnasium.make_vec(ID, num_envs=n, vectorization_mode="sync", **TINY)
    obs, info = vec.reset(seed=20)
    s_obs, s_info = sync.reset(seed=20)
    _assert_close(obs[:n], s_obs)
    _assert_same_info(_first(info, n), s_info)
    rng = np.random.default_rng(2)
    episodes, with_metrics = np.zeros(n, int), 0
    while episodes.min() < 2:  # the steps that end an episode, and the autoreset steps after
        act = _random_legal(rng, info["action_mask"])
        obs, reward, terminated, truncated, info = vec.step(act)
        s_obs, s_reward, s_terminated, s_truncated, s_info = sync.step(act[:n])
        _assert_close(obs[:n], s_obs)
        _assert_close(reward[:n], s_reward)
        np.testing.assert_array_equal(terminated[:n], s_terminated)
        np.testing.assert_array_equal(truncated[:n], s_truncated)
        _assert_same_info(_first(info, n), s_info)
        if "metrics" in info:  # every env whose episode ended now, and only those
            np.testing.assert_array_equal(info["_metrics"], terminated | truncated)
            assert (info["metrics"]["done"][info["_metrics"]] == 1).all()
        episodes += s_terminated | s_truncated
        with_metrics += "metrics" in s_info
    assert with_metrics > 0
    sync.close()


def test_observations_stay_inside_the_finite_box(vec):
    space = vec.single_observation_space
    assert np.isfinite(space.high).all() and (space.low == 0).all()
    np.testing.assert_array_equal(space.high, gym_env.feature_high(vec.unwrapped.gx, vec.unwrapped.params))
    rng = np.random.default_rng(4)
    obs, info = vec.reset(seed=40)
    assert vec.observation_space.contains(obs)
    random_any = np.arange(64) % 2 == 0  # these act at random, legal or not: waits, no-ops, long waits
    for _ in range(2 * vec.unwrapped.params.max_steps_in_episode):  # two episodes at least
        act = np.where(random_any, rng.integers(0, vec.single_action_space.n, 64),
                       _random_legal(rng, info["action_mask"]))
        obs, _, _, _, info = vec.step(act)
        assert vec.observation_space.contains(obs), obs[~((obs >= 0) & (obs <= space.high)).all(-1)]


def test_vector_env_pickles_and_the_copy_plays_the_same_steps(vec):
    rng = np.random.default_rng(5)
    _, info = vec.reset(seed=50)
    for _ in range(5):
        _, _, _, _, info = vec.step(_random_legal(rng, info["action_mask"]))
    twin = pickle.loads(pickle.dumps(vec))
    ended = 0
    for _ in range(40):  # across episode ends and autoresets
        act = _random_legal(rng, info["action_mask"])
        want, got = vec.step(act), twin.step(act)
        for w, g in zip(want[:4], got[:4]):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(got[4]["action_mask"], want[4]["action_mask"])
        info, ended = want[4], ended + want[2].sum()
    assert ended > 0


def _build_env(queue):
    try:
        gym_env.ClusterGymEnv(**TINY)
        queue.put("built")
    except RuntimeError as err:
        queue.put(str(err))


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # JAX's, for the fork tried on purpose
def test_async_vector_env_runs_with_spawn_and_refuses_fork(monkeypatch):
    # The expected steps: env i of a vector env seeded 30 is the single env seeded 30 + i.
    single, rng = gymnasium.make(ID, **TINY), np.random.default_rng(3)
    want, acts = [], []
    for i in range(2):
        obs, info = single.reset(seed=30 + i)
        rows = [obs]
        for _ in range(3):
            acts.append(_random_legal(rng, info["action_mask"][None])[0])
            obs, _, _, _, info = single.step(acts[-1])
            rows.append(obs)
        want.append(rows)
    want, acts = np.stack(want, 1), np.array(acts).reshape(2, 3).T  # [4 obs, 2 envs, D], [3 steps, 2 envs]

    with pytest.raises(RuntimeError, match="vector_kwargs=\\{'context': 'spawn'\\}"):
        envs = gymnasium.make_vec(ID, num_envs=2, vectorization_mode="async",
                                  vector_kwargs={"context": "fork"}, **TINY)
        try:  # (without the check: the workers deadlock, and this times out)
            envs.reset_async(seed=30)
            envs.reset_wait(timeout=60)
        finally:
            envs.close(terminate=True)
    fork = multiprocessing.get_context("fork")  # any process forked after an env was built
    queue = fork.Queue()
    child = fork.Process(target=_build_env, args=(queue,))
    child.start()
    try:
        assert "forked process" in queue.get(timeout=60)
    finally:
        child.kill()

    # The workers read what this process compiled from the tests' persistent cache.
    if os.environ.get(compile_cache.ENV_VAR):
        monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", os.environ[compile_cache.ENV_VAR])
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
    envs = gymnasium.make_vec(ID, num_envs=2, vectorization_mode="async",
                              vector_kwargs={"context": "spawn"}, **TINY)
    try:
        envs.reset_async(seed=30)
        obs, _ = envs.reset_wait(timeout=300)
        np.testing.assert_array_equal(obs, want[0])
        for t in range(3):
            envs.step_async(acts[t])
            obs, _, _, _, _ = envs.step_wait(timeout=120)
            np.testing.assert_array_equal(obs, want[t + 1])
    finally:
        envs.close(terminate=True)
