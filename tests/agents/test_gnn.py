"""The observation graph: static shapes, padding, and feasibility edges for odd sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsched import cluster as cl
from jaxsched.agents import ddqn, gnn
from jaxsched.sim.env import ClusterEnv, EnvConfig
from jaxsched.types import EnvParams, to_device
from jaxsched.workload import classes, synthetic
from tests.settings import extended


def _observation(num_nodes, window, seed=0):
    nodes = cl.preset(num_nodes)
    params = to_device(EnvParams(cl.to_cluster(nodes), classes.target_workload([4000], [500], [1], [""])))
    env = ClusterEnv(EnvConfig(window=window, queue_capacity=32, running_capacity=64))
    syn = synthetic.SyntheticConfig(num_jobs=30, target_load=1.5, cluster_capacity=cl.work_capacity(nodes))

    @jax.jit  # one program: run op by op, the env's ops took 16-23 s of compiling per test
    def build(key, params):
        state, obs = env.reset(key, params, synthetic.generate(key, syn))

        def wait(i, carry):  # build a queue so several window slots are filled
            state, obs, *_ = env.step(jax.random.fold_in(key, i), carry[0], env.wait_action(params), params)
            return state, obs
        return jax.lax.fori_loop(0, 12, wait, (state, obs))[1]

    return build(jax.random.key(seed), params)


@pytest.mark.parametrize("num_nodes,window", [extended(5, 3), extended(7, 1), (3, 5)])
def test_graph_has_static_padded_shapes_and_feasibility_edges(num_nodes, window):
    obs = _observation(num_nodes, window)
    graph = gnn.build_graph(obs)
    n, k = num_nodes, window
    assert graph.nodes.shape[0] == n + k + 1
    assert graph.edges.shape[0] == graph.senders.shape[0] == graph.receivers.shape[0] == k * n
    assert int(graph.n_node.sum()) == graph.nodes.shape[0]
    assert int(graph.n_edge.sum()) == k * n
    mask = np.asarray(obs.place_mask).reshape(-1)
    assert int(graph.n_edge[0]) == mask.sum()
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    e = np.arange(k * n)
    np.testing.assert_array_equal(senders[mask], n + e[mask] // n)   # job k -> node n
    np.testing.assert_array_equal(receivers[mask], e[mask] % n)
    assert (senders[~mask] == n + k).all() and (receivers[~mask] == n + k).all()  # padding node
    assert not np.asarray(graph.nodes[-1]).any()
    assert not np.asarray(graph.edges)[~mask].any()
    assert np.isfinite(np.asarray(graph.nodes)).all()


def test_q_network_scores_every_flat_action_batched_or_not():
    obs = _observation(5, 3)
    config = ddqn.AgentConfig(hidden=8, num_layers=2)
    graphdef, params = ddqn.create(config, obs, jax.random.key(0))
    q_values = jax.jit(lambda p, o: ddqn.q_values(graphdef, p, o))
    q = q_values(params, obs)
    assert q.shape == (3 * 5 + 3 + 1,)
    assert np.isfinite(np.asarray(q)).all()
    # Any leading batch axes give the same per-observation Q values (the policy is vmapped).
    batched = jax.tree.map(lambda x: jnp.stack([x, x]), obs)
    np.testing.assert_allclose(q_values(params, batched)[1], q, rtol=1e-5, atol=1e-5)
