"""Graph encoder of an observation: jraph ``GraphsTuple`` with static padding, message passing.

One observation becomes one graph (unbatched; a batch is ``vmap`` of the same code):

  graph nodes  [N + K + 1]   cluster nodes 0..N-1, window jobs N..N+K-1, one padding node
  edges        [K * N]       edge e = k * N + n is job k -> node n (the flat place action's
                             order). A feasible edge (``obs.place_mask[k, n]``) links job k to
                             node n; an infeasible one is a padding edge from and to the padding
                             node, so it carries no message (jraph's padding convention).
  n_node = [N + K, 1], n_edge = [feasible, K*N - feasible]

The padding edges are not moved to the end (their position is the action), so graph-level
(global) aggregation by ``n_edge`` would be wrong: the encoder uses no globals and puts the
episode-level context (queue length) into every graph node's features instead.

Features (all roughly O(1)):
  cluster node [N, NODE_FEATURES]: free milli of each GPU sorted descending / 1000 (G values),
    GPUs on the node / G, free CPU and memory / capacity, CPU and memory capacity / cluster max,
    speed, FGD fragmentation / (1000 * G), wholly free GPUs / G, one-hot GPU model, valid,
    log queue length.
  job [K, JOB_FEATURES]: GPUs / G, milli per GPU / 1000, CPU and memory / cluster max, log work,
    log waiting time, slot position k / K, occupied, constrained to a model, allowed-model bits,
    log queue length.
  edge [K*N, EDGE_FEATURES]: log run time on the node (work / speed), CPU, memory and GPU left
    on the node after placing (fractions), feasible.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jraph
import numpy as np
from flax import nnx

from jaxsched.cluster import MODEL_NAMES
from jaxsched.types import ALL_MODELS, GPU_MILLI, Observation

NUM_MODELS = len(MODEL_NAMES)
MODEL_BITS = np.left_shift(1, np.arange(NUM_MODELS, dtype=np.int32))  # [M] bit of each model


def node_features(obs: Observation) -> jax.Array:
    """[N, 8 + G + M] features of the cluster nodes (see module docstring)."""
    c = obs.cluster
    g = c.max_gpus
    free_sorted = -jnp.sort(-obs.free_milli, axis=-1) / GPU_MILLI  # [N, G]
    cpu_cap = jnp.maximum(c.cpu_milli, 1).astype(jnp.float32)
    mem_cap = jnp.maximum(c.mem_mib, 1).astype(jnp.float32)
    whole = (obs.free_milli == GPU_MILLI).sum(-1)
    ql = jnp.full(c.num_gpus.shape, jnp.log1p(obs.queue_len.astype(jnp.float32)) / 5.0)
    scalars = jnp.stack([
        c.num_gpus / g,
        obs.free_cpu / cpu_cap,
        obs.free_mem / mem_cap,
        cpu_cap / cpu_cap.max(),
        mem_cap / mem_cap.max(),
        c.speed,
        obs.frag_node / (GPU_MILLI * g),
        whole / g,
    ], -1).astype(jnp.float32)
    model = jax.nn.one_hot(jnp.where(c.num_gpus > 0, c.gpu_model, NUM_MODELS - 1), NUM_MODELS)
    return jnp.concatenate([scalars, free_sorted, model, c.valid[:, None], ql[:, None]], -1)


def job_features(obs: Observation) -> jax.Array:
    """[K, 9 + M] features of the window jobs (zeros for empty slots, apart from position)."""
    c = obs.cluster
    k = obs.window_job.shape[0]
    occupied = obs.window_job >= 0
    constrained = occupied & (obs.job_model_mask != ALL_MODELS) & (obs.job_num_gpu > 0)
    bits = ((obs.job_model_mask[:, None] & MODEL_BITS) != 0) & constrained[:, None]
    ql = jnp.full((k,), jnp.log1p(obs.queue_len.astype(jnp.float32)) / 5.0)
    scalars = jnp.stack([
        obs.job_num_gpu / c.max_gpus,
        obs.job_gpu_milli / GPU_MILLI,
        obs.job_cpu_milli / jnp.maximum(c.cpu_milli.max(), 1),
        obs.job_mem_mib / jnp.maximum(c.mem_mib.max(), 1),
        jnp.log1p(obs.job_work_s) / 10.0,
        jnp.log1p(jnp.maximum(obs.job_wait_s, 0.0)) / 10.0,
        jnp.arange(k) / k,
        occupied,
        constrained,
    ], -1).astype(jnp.float32)
    return jnp.concatenate([scalars, bits, ql[:, None]], -1).astype(jnp.float32)


def edge_features(obs: Observation) -> jax.Array:
    """[K*N, 5] features of each (job k, node n) pair, in flat place-action order."""
    c = obs.cluster
    run_s = jnp.where(obs.job_num_gpu[:, None] > 0, obs.job_work_s[:, None] / c.speed[None, :],
                      obs.job_work_s[:, None])
    cpu_left = (obs.free_cpu[None, :] - obs.job_cpu_milli[:, None]) / jnp.maximum(c.cpu_milli, 1)[None, :]
    mem_left = (obs.free_mem[None, :] - obs.job_mem_mib[:, None]) / jnp.maximum(c.mem_mib, 1)[None, :]
    gpu_total = jnp.maximum(c.num_gpus, 1)[None, :] * GPU_MILLI
    gpu_left = (obs.free_milli.sum(-1)[None, :] - obs.job_num_gpu[:, None] * obs.job_gpu_milli[:, None]) / gpu_total
    feats = jnp.stack([jnp.log1p(run_s) / 10.0, cpu_left, mem_left, gpu_left, obs.place_mask], -1)
    return jnp.where(obs.place_mask[..., None], feats, 0.0).reshape(-1, feats.shape[-1]).astype(jnp.float32)


def build_graph(obs: Observation) -> jraph.GraphsTuple:
    """The padded graph of one observation (see module docstring for the layout)."""
    k, n = obs.place_mask.shape
    pad = n + k  # index of the padding node
    nodes_c, nodes_j = node_features(obs), job_features(obs)
    width = max(nodes_c.shape[-1], nodes_j.shape[-1])
    # One node array for both kinds: features zero-padded to a common width plus a type flag.
    widen = lambda x, kind: jnp.concatenate(  # noqa: E731
        [x, jnp.zeros((x.shape[0], width - x.shape[-1])), jnp.full((x.shape[0], 1), kind)], -1)
    nodes = jnp.concatenate([widen(nodes_c, 0.0), widen(nodes_j, 1.0),
                             jnp.zeros((1, width + 1))], 0).astype(jnp.float32)
    feasible = obs.place_mask.reshape(-1)  # [K*N]
    job_of_edge = n + jnp.arange(k * n) // n
    node_of_edge = jnp.arange(k * n) % n
    senders = jnp.where(feasible, job_of_edge, pad).astype(jnp.int32)
    receivers = jnp.where(feasible, node_of_edge, pad).astype(jnp.int32)
    num_feasible = feasible.sum().astype(jnp.int32)
    return jraph.GraphsTuple(
        nodes=nodes, edges=edge_features(obs), senders=senders, receivers=receivers, globals=None,
        n_node=jnp.array([n + k, 1], jnp.int32),
        n_edge=jnp.stack([num_feasible, k * n - num_feasible]).astype(jnp.int32))


class MLP(nnx.Module):
    """Dense layers with ReLU between them (and LayerNorm on hidden layers)."""

    def __init__(self, sizes, rngs: nnx.Rngs, final_activation: bool = False):
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.norms = nnx.List([nnx.LayerNorm(b, rngs=rngs) for b in sizes[1:-1]])
        self.final_activation = final_activation

    def __call__(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.norms):
                x = jax.nn.relu(self.norms[i](x))
        return jax.nn.relu(x) if self.final_activation else x


class GraphEncoder(nnx.Module):
    """Embed nodes and edges, then ``num_layers`` rounds of jraph.GraphNetwork (residual).

    Edge update: e + MLP(e, sender, receiver); node update: v + MLP(v, mean of the messages it
    sent, mean of those it received). Padding edges touch only the padding node. The first
    layer of the edge MLP is linear in (e, sender, receiver), so the sender and receiver
    parts are projected once per graph node and gathered (E = K*N edges >> N + K nodes):
    the same function as concatenating, at a third of the cost.
    """

    def __init__(self, node_in: int, edge_in: int, hidden: int, num_layers: int, rngs: nnx.Rngs):
        h = hidden
        self.embed_node = MLP([node_in, h, h], rngs)
        self.embed_edge = MLP([edge_in, h, h], rngs)
        self.edge_in = nnx.List([nnx.Linear(h, h, rngs=rngs) for _ in range(num_layers)])
        self.sender_in = nnx.List([nnx.Linear(h, h, use_bias=False, rngs=rngs) for _ in range(num_layers)])
        self.receiver_in = nnx.List([nnx.Linear(h, h, use_bias=False, rngs=rngs) for _ in range(num_layers)])
        self.edge_norm = nnx.List([nnx.LayerNorm(h, rngs=rngs) for _ in range(num_layers)])
        self.edge_out = nnx.List([nnx.Linear(h, h, rngs=rngs) for _ in range(num_layers)])
        self.node_mlps = nnx.List([MLP([3 * h, h, h], rngs) for _ in range(num_layers)])

    def __call__(self, graph: jraph.GraphsTuple) -> jraph.GraphsTuple:
        nodes, edges = self.embed_node(graph.nodes), self.embed_edge(graph.edges)
        for i in range(len(self.node_mlps)):
            def update_edge(e, sent, received, globals_, i=i):
                del globals_
                x = self.edge_in[i](e) + sent["s"] + received["r"]
                return e + self.edge_out[i](jax.nn.relu(self.edge_norm[i](x)))

            def update_node(v, sent, received, globals_, i=i):
                del globals_
                h = v["h"] + self.node_mlps[i](jnp.concatenate([v["h"], sent, received], -1))
                return {"h": h}

            net = jraph.GraphNetwork(update_edge_fn=update_edge, update_node_fn=update_node,
                                     aggregate_edges_for_nodes_fn=jraph.segment_mean)
            projected = {"h": nodes, "s": self.sender_in[i](nodes), "r": self.receiver_in[i](nodes)}
            out = net(graph._replace(nodes=projected, edges=edges))
            nodes, edges = out.nodes["h"], out.edges
        return graph._replace(nodes=nodes, edges=edges)
