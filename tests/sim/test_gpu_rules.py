"""The GPU rules inside a chosen node (resources.choose_gpus), on rows worked out by hand."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxsched.sim.resources import choose_gpus

# free milli of a node's 4 GPUs; a 500-milli job has room on GPUs 0 (1000) and 2 (600) only
ROW = jnp.array([1000, 300, 600, 0], jnp.int32)


def pick(rule, num_gpu=1, milli=500, key=None, scores=None, row=ROW):
    return np.flatnonzero(np.asarray(choose_gpus(row, num_gpu, milli, rule, key, scores))).tolist()


def test_best_fit_takes_least_leftover_and_first_fit_lowest_index():
    assert pick("best-fit") == [2]  # 600 - 500 leaves 100 < 1000 - 500
    assert pick("first-fit") == [0]


def test_random_rule_only_picks_gpus_with_room_and_uses_them_all():
    keys = jax.random.split(jax.random.key(0), 200)
    picks = jax.vmap(lambda k: choose_gpus(ROW, 1, 500, "random", k))(keys)
    chosen = np.asarray(picks).argmax(-1)
    assert np.asarray(picks).sum(-1).tolist() == [1] * 200  # exactly one GPU each time
    assert set(chosen.tolist()) == {0, 2}  # both GPUs with room, never 1 (300) or 3 (missing)


def test_fgd_rule_takes_top_score_among_gpus_with_room_lowest_index_on_ties():
    scores = jnp.array([40, 90, 55, 99], jnp.int32)  # GPUs 1 and 3 score high but lack room
    assert pick("fgd", scores=scores) == [2]
    assert pick("fgd", scores=jnp.array([55, 0, 55, 0], jnp.int32)) == [0]


def test_whole_gpu_jobs_take_lowest_index_wholly_free_gpus_and_cpu_jobs_none():
    row = jnp.array([1000, 999, 1000, 1000], jnp.int32)
    for rule in ("best-fit", "first-fit", "fgd"):
        assert pick(rule, num_gpu=2, milli=1000, row=row, scores=jnp.zeros(4, jnp.int32)) == [0, 2]
    assert pick("best-fit", num_gpu=0, milli=0) == []
