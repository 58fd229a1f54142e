"""Where training time goes: each learner's env steps per second while training, one update's
time split between the env, acting, replay and gradient steps, and a sweep over the env batch
and the learners' own knobs, all measured side by side in one process.

    python scripts/bench_train.py                  # 30 minutes on the shared 2-core machine
    python scripts/bench_train.py --quick          # the presets only, no sweep: about half

Most of the time is compiling (each setting's training program takes 1.5-2.5 minutes at
load 4-7); ``--sweep`` with fewer names, or none, shortens it.

Each learner (``jaxsched.agents.LEARNERS``) runs from its CPU preset at 64 nodes
(configs/gnn_ddqn.toml, configs/gnn_ppo.toml, configs/drr_64.toml) as one training run
(``train.num_seeds = 1``, no validation), with the program ``python -m jaxsched.train``
runs: the trainer's ``run_chunk`` through ``training.over_seeds``, jitted with the runner
donated. A chunk is ``--env-steps`` env steps of each env (GNN-DDQN: that many updates of one
step; GNN-PPO and DRR: updates of ``rollout_steps`` steps). Every program is compiled ahead
(its seconds reported apart), called once untimed, then timed over ``--calls`` calls (the
median is reported). GNN-DDQN's ``learning_starts`` is set to 0 so that every timed update
learns (the preset's 1,600 only delays the first gradient step).

The parts of the preset's chunk, each a jitted loop over the same shapes timed the same way,
on data the earlier parts produced (so no part sees a loop-invariant input XLA could hoist):
  env     the chunk's env steps: ``vmap(env.step)`` over num_envs with auto-reset, a uniform
          random placement as the action (no network); records the observations
  act     the policy on those observations: GNN-DDQN Q values and epsilon-greedy; GNN-PPO
          logits, value, a sample and its log-probability; DRR its features and actor
  replay  GNN-DDQN: the chunk's buffer adds and its samples (``gnn_ddqn.make_buffer``,
          ``sample_batch``); GNN-PPO: GAE and each epoch's shuffle of the rollout (the
          gathers summed); DRR: none (it learns from the rollout as it is)
  grad    the chunk's gradient steps (loss, backward, optimiser) on those batches:
          GNN-DDQN ``grad_steps`` per update, GNN-PPO ``epochs`` x ``num_minibatches`` per
          update, DRR one critic and one actor step per update
``parts / whole`` says how much of the whole chunk the parts account for (the rest: the
learner's bookkeeping, the target copy, what XLA fuses across parts in the whole, and noise).

The sweep times the whole chunk alone for other settings (``--sweep`` picks them; the
default: GNN-DDQN's grad_steps, the replay ratio, and num_envs; GNN-PPO's epochs,
num_minibatches and num_envs), with env steps/s, gradient steps/s and gradient samples per
env step, and the ratio of each to GNN-DDQN's preset measured in the same run.

Writes ``--out``/bench_train.md (the tables, the command, JAX's version and devices, the
load average before and after) and ``--out``/bench_train.csv (one row per timed program).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import platform
import sys
import time
from pathlib import Path

from jaxsched import compile_cache
from jaxsched.devices import configure_cpu

PRESETS = {"gnn-ddqn": "configs/gnn_ddqn.toml", "gnn-ppo": "configs/gnn_ppo.toml", "drr": "configs/drr_64.toml"}
# Settings of the sweep: (learner, label, --set overrides on its preset).
SWEEP = {
    "ddqn-grad-1": ("gnn-ddqn", "grad_steps 1", ["agent.grad_steps=1"]),
    "ddqn-grad-4": ("gnn-ddqn", "grad_steps 4", ["agent.grad_steps=4"]),
    "ddqn-envs-64": ("gnn-ddqn", "num_envs 64", ["train.num_envs=64"]),
    "ppo-epochs-1": ("gnn-ppo", "epochs 1", ["agent.epochs=1"]),
    "ppo-mb-1": ("gnn-ppo", "num_minibatches 1", ["agent.num_minibatches=1"]),
    "ppo-mb-16": ("gnn-ppo", "num_minibatches 16", ["agent.num_minibatches=16"]),
    "ppo-epochs-1-mb-16": ("gnn-ppo", "epochs 1, num_minibatches 16", ["agent.epochs=1", "agent.num_minibatches=16"]),
    "ppo-epochs-1-mb-1": ("gnn-ppo", "epochs 1, num_minibatches 1", ["agent.epochs=1", "agent.num_minibatches=1"]),
    "ppo-envs-64": ("gnn-ppo", "num_envs 64", ["train.num_envs=64"]),
    "ppo-envs-64-epochs-1": ("gnn-ppo", "num_envs 64, epochs 1", ["train.num_envs=64", "agent.epochs=1"]),
    "drr-envs-64": ("drr", "num_envs 64", ["train.num_envs=64"]),
}
DEFAULT_SWEEP = ("ddqn-grad-1", "ddqn-envs-64", "ppo-epochs-1", "ppo-mb-1", "ppo-envs-64", "ppo-envs-64-epochs-1")
PARTS = ("env", "act", "replay", "grad")
CSV_FIELDS = ("table", "learner", "setting", "program", "num_envs", "env_steps", "grad_steps", "grad_samples",
              "compile_s", "s_per_chunk", "env_steps_per_s", "grad_steps_per_s")


def main(argv=None) -> int:
    configure_cpu()
    import jax

    from jaxsched import train as train_lib

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--sweep", nargs="*", default=list(DEFAULT_SWEEP), choices=list(SWEEP),
                        help="settings timed after the presets (none: --sweep with no names)")
    parser.add_argument("--env-steps", type=int, default=32, help="env steps of each env per timed chunk")
    parser.add_argument("--calls", type=int, default=3, help="timed calls of each program (the median is kept)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override every preset (e.g. shorter episodes for a smoke test)")
    parser.add_argument("--quick", action="store_true", help="the presets only (no sweep), 2 timed calls")
    parser.add_argument("--no-parts", action="store_true", help="time the whole chunks side by side only")
    parser.add_argument("--out", default="results/bench_train", help="folder for bench_train.md and .csv")
    compile_cache.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.sweep, args.calls = [], min(args.calls, 2)
    compile_cache.enable_from_args(args)
    load_before = os.getloadavg()
    started = time.perf_counter()

    def load_run(learner, overrides=()):
        run = train_lib.load(PRESETS[learner], list(args.set) + list(overrides))
        steps = train_lib.learner_steps(run)
        if args.env_steps % steps:
            raise SystemExit(f"--env-steps {args.env_steps}: must be a multiple of {learner}'s "
                             f"{steps} env steps per update")
        updates = args.env_steps // steps
        train = dataclasses.replace(run.train, num_seeds=1, valid_episodes=0, checkpoint_every=0,
                                    chunk_updates=updates, total_updates=updates)
        agent = run.agent
        if learner == "gnn-ddqn":
            agent = dataclasses.replace(agent, learning_starts=0)
        return dataclasses.replace(run, train=train, agent=agent)

    # The split: each learner's whole chunk and its parts, timed in alternating rounds (a
    # change of load on the shared machine then touches all of them alike).
    rows, results, wholes = [], {}, []
    for learner in args.learners:
        run = load_run(learner)
        whole, runner = build_whole(run)
        wholes.append(whole)
        if args.no_parts:
            continue
        parts = build_parts(run, runner)
        time_rounds([whole] + list(parts.values()), args.calls)
        split = [whole.row("split")] + [prog.row("split") for prog in parts.values()]
        rows += split
        results[learner] = (split[0], split[1:])
        print(f"{learner}: {split[0]['env_steps_per_s']:,.0f} env steps/s; s per chunk: whole "
              f"{whole.median_s:.3f}, " + ", ".join(f"{name} {prog.median_s:.3f}" for name, prog in parts.items())
              + f" (compile s: whole {whole.compile_s:.0f}, "
              + ", ".join(f"{name} {prog.compile_s:.0f}" for name, prog in parts.items()) + ")", flush=True)
        for prog in parts.values():
            prog.release()
    # Side by side: the presets' whole chunks again and every sweep setting's, in alternating rounds.
    for name in args.sweep:
        learner, label, overrides = SWEEP[name]
        if learner in args.learners:
            wholes.append(build_whole(load_run(learner, overrides), setting=label)[0])
            print(f"built {learner}, {label} (compile {wholes[-1].compile_s:.0f} s)", flush=True)
    for prog in wholes:
        prog.seconds = []
    time_rounds(wholes, args.calls)
    rows += [prog.row("side by side") for prog in wholes]
    load_after = os.getloadavg()

    command = "python scripts/bench_train.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    text = report(rows, results, command=command, load=(load_before, load_after),
                  wall_s=time.perf_counter() - started,
                  machine=f"backend {jax.default_backend()}, {len(jax.devices())} devices, JAX {jax.__version__}, "
                          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()})")
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_train.md").write_text(text)
    with open(out / "bench_train.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return 0


# ----- timing ---------------------------------------------------------------------------------

class Program:
    """A jitted ``fn(carry, data) -> (carry, out)`` of one chunk of ``run``, with ``carry``
    donated: compiled ahead (``compile_s``) and called once untimed (``out`` is that call's
    output); each ``call()`` times one more call."""

    def __init__(self, run, name: str, fn, carry, data, setting: str = "preset", compile_s: float = 0.0):
        import jax

        self.run, self.name, self.setting, self.data, self.seconds = run, name, setting, data, []
        t0 = time.perf_counter()
        self.compiled = jax.jit(fn, donate_argnums=0).lower(carry, data).compile()
        self.compile_s = compile_s + time.perf_counter() - t0
        self.carry, self.out = jax.block_until_ready(self.compiled(carry, data))

    def call(self):
        import jax

        t0 = time.perf_counter()
        self.carry, self.out = jax.block_until_ready(self.compiled(self.carry, self.data))
        self.seconds.append(time.perf_counter() - t0)

    @property
    def median_s(self) -> float:
        import numpy as np

        return float(np.median(self.seconds))

    def row(self, table: str) -> dict:
        return row_of(self.run, table, self.setting, self.name, self.compile_s, self.median_s)

    def release(self):
        """Drop what the program holds (its carry and data: a replay buffer is large)."""
        self.carry = self.data = self.out = self.compiled = None


def time_rounds(programs, calls: int):
    """``calls`` rounds of one timed call of each program, in turn."""
    for _ in range(calls):
        for prog in programs:
            prog.call()


def chunk_counts(run) -> dict:
    """A chunk's env steps (all envs), gradient steps and gradient samples (transitions in
    the batches of those steps) for a run's settings."""
    from jaxsched import train as train_lib

    agent, tc = run.agent, run.train
    updates, kind = tc.chunk_updates, agent.kind
    env_steps = updates * tc.num_envs * train_lib.learner_steps(run)
    if kind == "gnn-ddqn":
        grad_steps, per_step = updates * agent.grad_steps, agent.batch_size
    elif kind == "gnn-ppo":
        grad_steps = updates * agent.epochs * agent.num_minibatches
        per_step = tc.num_envs * agent.rollout_steps // agent.num_minibatches
    else:  # drr: one critic and one actor step on the whole rollout
        grad_steps, per_step = updates, tc.num_envs * agent.rollout_steps
    return {"num_envs": tc.num_envs, "env_steps": env_steps, "grad_steps": grad_steps,
            "grad_samples": grad_steps * per_step}


def row_of(run, table: str, setting: str, program: str, compile_s: float, seconds: float) -> dict:
    counts = chunk_counts(run)
    return {"table": table, "learner": run.agent.kind, "setting": setting, "program": program, **counts,
            "compile_s": compile_s,
            "s_per_chunk": seconds, "env_steps_per_s": counts["env_steps"] / seconds if seconds else 0.0,
            "grad_steps_per_s": counts["grad_steps"] / seconds if seconds else 0.0}


def build_whole(run, setting: str = "preset"):
    """(the whole chunk's ``Program``, the runner after its untimed call, unbatched): the
    training program of ``python -m jaxsched.train`` with one run. Its compile seconds are
    init's and run_chunk's together."""
    import jax

    from jaxsched import train as train_lib
    from jaxsched.agents import training

    tr, _ = train_lib.make_trainer(run)
    keys = training.seed_keys(run.train.seed, 1)
    t0 = time.perf_counter()
    init = jax.jit(training.over_seeds(tr.init, 1)).lower(keys).compile()
    init_compile_s = time.perf_counter() - t0
    runners = init(keys)
    chunk = training.over_seeds(tr.run_chunk, 1)
    whole = Program(run, "whole", lambda r, _: chunk(r), runners, None, setting, compile_s=init_compile_s)
    # A copy: the whole program's next calls donate its carry.
    return whole, jax.block_until_ready(jax.tree.map(lambda x: x[0], whole.carry))


# ----- the parts ------------------------------------------------------------------------------

def copy(tree):
    """A copy of every array of ``tree`` (an input that a program donates and another reads)."""
    import jax
    import jax.numpy as jnp

    return jax.tree.map(jnp.copy, tree)


def checksum(tree):
    """[] float32 sum of every leaf: an output that keeps each leaf computed."""
    import jax
    import jax.numpy as jnp

    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(tree))


def build_parts(run, runner) -> dict:
    """{part: Program} of the env, act, replay and grad parts of one chunk of ``run`` (see
    the module docstring), starting from ``runner`` (the whole program's, unbatched)."""
    import jax
    import jax.numpy as jnp

    from jaxsched import train as train_lib
    from jaxsched.agents import ddqn, training
    from jaxsched.agents.gnn_ddqn import strip_static

    env, env_params, workload, _ = train_lib.setup(run)
    tc = run.train
    num_envs, steps = tc.num_envs, tc.chunk_updates * train_lib.learner_steps(run)
    reset_envs = training.make_reset(env, env_params, workload, tc)
    placer = ddqn.AgentConfig(allow_reject=False, allow_wait=False)  # places a job whenever one fits

    def env_loop(carry, _):
        def body(c, _):
            state, obs, key = c
            key, k_act, k_step, k_reset = jax.random.split(key, 4)
            legal = ddqn.legal_mask(placer, obs)
            action = jax.random.categorical(k_act, jnp.where(legal, 0.0, -jnp.inf)).astype(jnp.int32)
            state, next_obs, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(k_step, num_envs), state, action, env_params)
            state, next_obs = training.auto_reset(reset_envs, k_reset, done, state, next_obs)
            # What a learner keeps of each step (its replay or rollout), as training does.
            return (state, next_obs, key), {"obs": strip_static(obs), "action": action, "reward": reward,
                                            "done": done}
        return jax.lax.scan(body, carry, None, length=steps)

    start = (runner.env_state, runner.obs, jax.random.key(1))
    env_part = Program(run, "env", env_loop, start, None)
    learner_parts = {"gnn-ddqn": ddqn_parts, "gnn-ppo": ppo_parts, "drr": drr_parts}[run.agent.kind]
    return {"env": env_part, **learner_parts(run, env_params, reset_envs, runner, env_part.out)}


def ddqn_parts(run, env_params, reset_envs, runner, record) -> dict:
    """GNN-DDQN's act, replay and grad parts -> {part: Program}."""
    import jax
    import jax.numpy as jnp
    import optax

    from jaxsched.agents import ddqn, gnn_ddqn, training

    agent = run.agent
    example = training.example_obs(reset_envs)
    graphdef, _ = jax.eval_shape(lambda key: ddqn.create(agent, example, key), jax.random.key(0))
    buffer, optimiser = gnn_ddqn.make_buffer(agent, run.train.num_envs), gnn_ddqn.make_optimiser(agent)

    def act(key, data):
        params, obs_steps = data

        def body(key, obs):
            key, k = jax.random.split(key)
            obs = gnn_ddqn.restore_static(obs, env_params)
            q = ddqn.q_values(graphdef, params, obs)
            return key, ddqn.epsilon_greedy(k, q, ddqn.legal_mask(agent, obs), agent.eps_end)
        return jax.lax.scan(body, key, obs_steps)

    def replay(carry, steps):  # one add and grad_steps samples per update (one env step)
        def body(c, step):
            buf, key = c
            key, k = jax.random.split(key)
            buf = buffer.add(buf, jax.tree.map(lambda x: x[:, None], step))
            batches = [gnn_ddqn.sample_batch(buffer, buf, kk, agent, env_params)
                       for kk in jax.random.split(k, agent.grad_steps)]
            return (buf, key), checksum(batches)
        return jax.lax.scan(body, carry, steps)

    grad_steps = run.train.chunk_updates * agent.grad_steps
    distinct = min(grad_steps, 8)

    def grad(carry, data):
        target, batches = data

        def body(c, i):
            params, opt_state = c
            batch = jax.tree.map(lambda x: x[i % distinct], batches)
            (loss, _), grads = jax.value_and_grad(ddqn.td_loss, has_aux=True)(
                params, target, graphdef, agent, batch, agent.gamma ** agent.n_step)
            updates, opt_state = optimiser.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss
        return jax.lax.scan(body, carry, jnp.arange(grad_steps))

    parts = {"act": Program(run, "act", act, jax.random.key(2), (runner.params, record["obs"])),
             "replay": Program(run, "replay", replay, (runner.buffer, jax.random.key(3)), record)}
    buf = parts["replay"].carry[0]
    batches = jax.block_until_ready(jax.jit(jax.vmap(lambda k: gnn_ddqn.sample_batch(
        buffer, buf, k, agent, env_params)))(jax.random.split(jax.random.key(4), distinct)))
    parts["grad"] = Program(run, "grad", grad, copy((runner.params, runner.opt_state)),
                            (runner.target_params, batches))
    return parts


def ppo_parts(run, env_params, reset_envs, runner, record) -> dict:
    """GNN-PPO's act, replay (GAE and shuffles) and grad parts -> {part: Program}."""
    import jax
    import jax.numpy as jnp
    import optax

    from jaxsched.agents import ddqn, gnn_ppo, training
    from jaxsched.agents.gnn_ddqn import make_optimiser, restore_static
    from jaxsched.agents.policy_gradient import gae, masked_log_softmax

    agent, tc = run.agent, run.train
    example = training.example_obs(reset_envs)
    graphdef, _ = jax.eval_shape(lambda key: gnn_ppo.create(agent, example, key), jax.random.key(0))
    optimiser = make_optimiser(agent)  # GNN-PPO's: adam after global-norm clipping
    batch_size = tc.num_envs * agent.rollout_steps
    minibatch = batch_size // agent.num_minibatches

    def act(key, data):
        params, obs_steps = data

        def body(key, obs):
            key, k = jax.random.split(key)
            obs = restore_static(obs, env_params)
            logits, value = gnn_ppo.evaluate(graphdef, params, obs)
            legal = ddqn.legal_mask(agent, obs)
            action = gnn_ppo.sample_action(k, logits, legal)
            logp = jnp.take_along_axis(masked_log_softmax(logits, legal), action[:, None], -1)[:, 0]
            return key, {"action": action, "logp": logp, "value": value}
        return jax.lax.scan(body, key, obs_steps)

    def per_update(tree):  # [U x T, ...] -> [U, T, ...]
        return jax.tree.map(lambda x: x.reshape((tc.chunk_updates, agent.rollout_steps) + x.shape[1:]), tree)

    def rollout_batch(rollout, last_value):
        """One update's samples [T x E, ...] with GAE's advantages and targets."""
        adv, target = gae(rollout["reward"], rollout["value"], rollout["done"], last_value, agent.gamma,
                          agent.gae_lambda)
        samples = {"obs": rollout["obs"], "action": rollout["action"], "logp": rollout["logp"],
                   "advantage": adv, "target": target}
        return jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:]), samples)

    def replay(key, rollouts):
        def body(key, rollout):
            key, k = jax.random.split(key)
            samples = rollout_batch(rollout, rollout["value"][-1])
            sums = [checksum(jax.tree.map(lambda x: x[jax.random.permutation(kk, batch_size)], samples))
                    for kk in jax.random.split(k, agent.epochs)]
            return key, sum(sums)
        return jax.lax.scan(body, key, rollouts)

    def grad(carry, samples):
        def body(c, i):
            params, opt_state = c
            batch = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(
                x, (i % agent.num_minibatches) * minibatch, minibatch), samples)
            batch = {**batch, "obs": restore_static(batch["obs"], env_params)}
            (loss, _), grads = jax.value_and_grad(gnn_ppo.ppo_loss, has_aux=True)(params, graphdef, agent, batch)
            updates, opt_state = optimiser.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss
        return jax.lax.scan(body, carry, jnp.arange(tc.chunk_updates * agent.epochs * agent.num_minibatches))

    parts = {"act": Program(run, "act", act, jax.random.key(2), (runner.params, record["obs"]))}
    rollouts = per_update({**record, **parts["act"].out})
    parts["replay"] = Program(run, "replay", replay, jax.random.key(3), rollouts)
    first = jax.tree.map(lambda x: x[0], rollouts)
    samples = jax.jit(rollout_batch)(first, first["value"][-1])
    parts["grad"] = Program(run, "grad", grad, copy((runner.params, runner.opt_state)), samples)
    return parts


def drr_parts(run, env_params, reset_envs, runner, record) -> dict:
    """DRR's act (features and actor) and grad parts (no replay: 0 s) -> {part: Program}."""
    import jax
    import jax.numpy as jnp
    import optax

    from jaxsched.agents import drr
    from jaxsched.agents.gnn_ddqn import restore_static
    from jaxsched.policies.common import place_or_wait

    agent, tc = run.agent, run.train
    graphdefs, _ = jax.eval_shape(lambda key: drr.create(agent, key), jax.random.key(0))
    opt = {"actor": drr._optimiser(agent.lr_actor, agent), "critic": drr._optimiser(agent.lr_critic, agent)}

    def act(key, data):
        params, obs_steps = data

        def body(key, obs):
            key, k = jax.random.split(key)
            obs = restore_static(obs, env_params)
            feat = jax.vmap(lambda o: drr.features(o, agent.job_at_hand))(obs)
            logits = drr._apply(graphdefs["actor"], params["actor"], feat)
            node = jax.random.categorical(k, jnp.where(feat.feasible, logits, -1e9)).astype(jnp.int32)
            return key, {"feat": feat, "node": node, "action": jax.vmap(place_or_wait)(obs, feat.slot, node)}
        return jax.lax.scan(body, key, obs_steps)

    def grad(carry, rollouts):  # one critic and one actor step per update, as drr.make_train's
        def body(c, rollout):
            params, opt_state = c
            feat = rollout["feat"]
            decided = feat.feasible.any(-1)
            batch = {"feat": feat, "node": rollout["node"], "teacher": feat.fgd_choice, "reward": rollout["reward"],
                     "done": rollout["done"], "decided": decided}
            last_value = drr._apply(graphdefs["critic"], params["critic"], jax.tree.map(lambda x: x[-1], feat))
            (_, (adv, _)), g_critic = jax.value_and_grad(drr.value_loss, has_aux=True)(
                params["critic"], graphdefs["critic"], batch, last_value, agent.gamma, agent.gae_lambda)
            w = decided.astype(jnp.float32)
            count = jnp.maximum(w.sum(), 1.0)
            mean = (w * adv).sum() / count
            std = jnp.sqrt((w * (adv - mean) ** 2).sum() / count) + 1e-8
            adv = drr.adjust_advantages((adv - mean) / std, float(agent.use_advantage_adjustment))
            (loss, _), g_actor = jax.value_and_grad(drr.actor_loss, has_aux=True)(
                params["actor"], graphdefs["actor"], batch, jax.lax.stop_gradient(adv), jnp.float32(agent.beta0), agent)
            new_params, new_opt = {}, {}
            for name, grads in (("actor", g_actor), ("critic", g_critic)):
                updates, new_opt[name] = opt[name].update(grads, opt_state[name], params[name])
                new_params[name] = optax.apply_updates(params[name], updates)
            return (new_params, new_opt), loss
        return jax.lax.scan(body, carry, rollouts)

    parts = {"act": Program(run, "act", act, jax.random.key(2), (runner.params, record["obs"]))}
    acted = parts["act"].out
    rollouts = jax.tree.map(lambda x: x.reshape((tc.chunk_updates, agent.rollout_steps) + x.shape[1:]),
                            {"feat": acted["feat"], "node": acted["node"], "reward": record["reward"],
                             "done": record["done"]})
    parts["grad"] = Program(run, "grad", grad, copy((runner.params, runner.opt_state)), rollouts)
    return parts


# ----- report ---------------------------------------------------------------------------------

def report(rows, results, command: str, load, wall_s: float, machine: str) -> str:
    """The markdown report: the split of each preset's chunk, the sweep, and PPO against GNN-DDQN."""
    lines = [f"`{command}`", "",
             f"{machine}; load average (1, 5, 15 min) {fmt_load(load[0])} before, {fmt_load(load[1])} after; "
             f"{wall_s:.0f} s in all.", ""]
    if results:
        lines += split_table(results)
    whole_rows = [r for r in rows if r["table"] == "side by side"]
    base = next((r for r in whole_rows if r["learner"] == "gnn-ddqn" and r["setting"] == "preset"), None)
    lines += ["## Settings side by side (the whole chunk)", "",
              "Every setting's whole chunk, the presets' again, timed in alternating rounds (the median).", "",
              "| learner | setting | num_envs | env steps/s | gradient steps/s | gradient samples per env step | "
              "env steps/s vs GNN-DDQN's preset |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in whole_rows:
        ratio = f"{r['env_steps_per_s'] / base['env_steps_per_s']:.2f}x" if base else "—"
        lines.append(f"| {r['learner']} | {r['setting']} | {r['num_envs']} | {r['env_steps_per_s']:,.0f} | "
                     f"{r['grad_steps_per_s']:,.1f} | {r['grad_samples'] / r['env_steps']:.2f} | {ratio} |")
    ppo = [r for r in whole_rows if r["learner"] == "gnn-ppo"]
    if base and ppo:
        best = max(ppo, key=lambda r: r["env_steps_per_s"])
        preset = next(r for r in ppo if r["setting"] == "preset")
        goal = "met" if best["env_steps_per_s"] >= 5 * base["env_steps_per_s"] else "not met"
        lines += ["", f"GNN-PPO / GNN-DDQN env steps/s, both presets: "
                  f"**{preset['env_steps_per_s'] / base['env_steps_per_s']:.2f}x**; the fastest GNN-PPO setting "
                  f"({best['setting']}): **{best['env_steps_per_s'] / base['env_steps_per_s']:.2f}x**. "
                  f"The goal of 5x is {goal} in this run."]
        ddqn = {r["setting"]: r for r in whole_rows if r["learner"] == "gnn-ddqn"}
        for r in ppo:
            if r["setting"] != "preset" and r["setting"] in ddqn:
                lines.append(f"With {r['setting']} for both: GNN-PPO / GNN-DDQN "
                             f"{r['env_steps_per_s'] / ddqn[r['setting']]['env_steps_per_s']:.2f}x.")
    return "\n".join(lines) + "\n"


def split_table(results) -> list:
    """Markdown lines of the split: each preset's whole chunk and its parts."""
    lines = ["## Where a chunk's time goes (each preset, one run)", "",
             "| learner | num_envs | env steps per chunk | compile s | whole s | env steps/s | "
             + " | ".join(PARTS) + " | parts / whole |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(PARTS) + "---:|"]
    for learner, (whole, parts) in results.items():
        by_part = {p["program"]: p for p in parts}
        total = sum(p["s_per_chunk"] for p in parts)
        shares = [f"{by_part[p]['s_per_chunk']:.3f} s ({by_part[p]['s_per_chunk'] / whole['s_per_chunk']:.0%})"
                  if p in by_part else "—" for p in PARTS]
        lines.append(f"| {learner} | {whole['num_envs']} | {whole['env_steps']} | {whole['compile_s']:.0f} | "
                     f"{whole['s_per_chunk']:.3f} | {whole['env_steps_per_s']:,.0f} | " + " | ".join(shares)
                     + f" | {total / whole['s_per_chunk']:.0%} |")
    lines += ["", "Compile seconds of the parts (a program already in the compile cache is read back): " + "; ".join(
        f"{learner} " + ", ".join(f"{p['program']} {p['compile_s']:.1f}" for p in parts)
        for learner, (_, parts) in results.items()) + ".", ""]
    return lines


def fmt_load(load) -> str:
    return ", ".join(f"{x:.2f}" for x in load)


if __name__ == "__main__":
    sys.exit(main())
