"""Outside JAX RL code training on jaxsched: rejax's PPO on the gymnax env, all in one jit.

    pip install -e '.[examples]'   # gymnax, rejax (and distrax)
    python examples/rejax_ppo.py --timesteps 300000
    python examples/rejax_ppo.py --timesteps 300000 --masked

rejax 0.1.3 builds its networks from ``observation_space(params).shape`` and unpacks the
5-value ``step`` of older gymnax, so it trains on ``gymnax_adapters.for_rejax(env)``: the flat
[D + A] observation (features, then the legal-action mask as 0/1) and ``done = terminated |
truncated``. Its PPO (rejax's defaults but gamma 0.995, 64 envs x 64 steps per update) samples
from all A actions: an illegal one is a wait when an event is pending, else a no-op (it
counts as a step). ``--masked`` swaps in a policy whose logits are set to -1e9 outside the
mask read from the observation's last A entries (a 10-line subclass of rejax's
``DiscretePolicy``), so it only picks legal actions, like sb3-contrib's MaskablePPO in
``examples/maskable_ppo.py``.

Training draws its episodes from ``make``'s bank of 1,024 synthetic episodes (seed 0); the
held-out episodes are fresh draws (``bank_size=0``) from keys training never used. On them
it plays the trained policy (greedy: the most likely action, legal or not), uniformly random
legal actions, and first-fit (the lowest legal place action: the first window job that fits,
on its lowest-index node; wait when nothing fits), and prints each one's mean JCT, return,
and the share of its steps that were illegal actions.

Measured (8-node openb-mix preset, 64 synthetic jobs per episode at offered load 0.9,
window 4; seed 0; 300,000 training steps, 63 s unmasked and 131 s masked, compile included,
on 2 CPU cores shared with other work; 100 held-out episodes; +- is the standard error over
the episodes; rejax 0.1.3 with jax 0.10.2, flax 0.12.8, gymnax 1.0.1):
    policy              mean JCT (s)     return  illegal steps
    rejax-ppo               696 +- 131     -14.84         76.0%
    rejax-ppo-masked        391 +-  14      -6.95          0.0%
    random legal            428 +-  15      -7.60          0.0%
    first-fit               369 +-  14      -6.56          0.0%
Unmasked, rejax's PPO has not learned which of the A = 37 actions are legal: three of four
of its greedy steps are illegal (waits or no-ops), and it is far worse than random legal
placement. Masked, it beats random placement (9% lower mean JCT) but not first-fit, as
MaskablePPO did.
"""

from __future__ import annotations

import argparse
import time

import distrax
import jax
import jax.numpy as jnp
import numpy as np
from rejax import PPO
from rejax.networks import DiscretePolicy

from jaxsched import gymnax_adapters, gymnax_env


class MaskedPolicy(DiscretePolicy):
    """rejax's ``DiscretePolicy`` that reads the legal actions from the flat observation's last
    ``action_dim`` entries and never picks another."""

    def _action_dist(self, obs):
        logits = self.action_logits(self.features(obs))
        mask = gymnax_adapters.action_mask(obs, self.action_dim)
        return distrax.Categorical(logits=jnp.where(mask, logits, -1e9))


class MaskedPPO(PPO):
    """rejax's PPO with ``MaskedPolicy`` as its actor."""

    @classmethod
    def create_agent(cls, config, env, env_params):
        agent = super().create_agent(config, env, env_params)
        actor = agent["actor"]
        return {**agent, "actor": MaskedPolicy(actor.action_dim, actor.hidden_layer_sizes, actor.activation)}


def play(env: gymnax_env.ClusterGymnax, params: gymnax_env.Params, choose, keys) -> dict:
    """Episodes from ``reset_env(keys[i])`` [E] with ``choose(key, flat obs [D + A]) -> action``,
    to their end or the step cap -> per-episode mean JCT (s), return, illegal steps, steps."""
    cap = params.max_steps_in_episode

    def episode(key):
        obs, state = env.reset_env(key, params)

        def body(carry):
            obs, state, total, illegal, t, done = carry
            k_act, k_step = jax.random.split(jax.random.fold_in(key, t))
            obs, state, reward, done, info = env.step_env(k_step, state, choose(k_act, gymnax_adapters.flatten(obs)),
                                                          params)
            return obs, state, total + reward, illegal + ~info["legal"], t + 1, done

        carry = (obs, state, 0.0, 0, 0, False)
        _, state, total, illegal, steps, _ = jax.lax.while_loop(lambda c: ~c[-1] & (c[-2] < cap), body, carry)
        return env.metrics(state, params)["jct_mean"], total, illegal, steps

    jct, ret, illegal, steps = jax.jit(jax.vmap(episode))(keys)
    return {"jct": np.asarray(jct), "return": np.asarray(ret), "illegal": int(illegal.sum()), "steps": int(steps.sum())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timesteps", type=int, default=300_000)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--masked", action="store_true", help="a policy that only picks legal actions")
    args = parser.parse_args(argv)
    kwargs = dict(num_nodes=args.nodes, num_jobs=args.jobs, load=args.load, window=args.window)

    env, params = gymnax_env.make(**kwargs, seed=args.seed)  # training: the bank of 1,024 episodes
    algo = (MaskedPPO if args.masked else PPO).create(
        env=gymnax_adapters.for_rejax(env), env_params=params, total_timesteps=args.timesteps,
        eval_freq=args.timesteps, num_envs=64, num_steps=64, num_minibatches=16, gamma=0.995,
        skip_initial_evaluation=True)
    algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))  # held-out episodes below
    start = time.time()
    ts, _ = jax.block_until_ready(jax.jit(algo.train)(jax.random.key(args.seed)))
    print(f"trained {args.timesteps} steps in {time.time() - start:.0f} s (compile included)", flush=True)

    held_out, held_params = gymnax_env.make(**kwargs, seed=args.seed, bank_size=0)  # fresh episodes
    keys = jax.random.split(jax.random.key(10_000 + args.seed), args.eval_episodes)
    num_actions = env.num_actions
    num_place = args.window * args.nodes

    def ppo(key, obs):
        return algo.actor.apply(ts.actor_ts.params, obs[None], method="_action_dist").mode()[0]

    def random_legal(key, obs):
        return jax.random.categorical(key, jnp.where(gymnax_adapters.action_mask(obs, num_actions), 0.0, -jnp.inf))

    def first_fit(key, obs):
        place = gymnax_adapters.action_mask(obs, num_actions)[:num_place]
        return jnp.where(place.any(), place.argmax(), num_actions - 1)

    name = "rejax-ppo-masked" if args.masked else "rejax-ppo"
    print(f"{'policy':17s} {'mean JCT (s)':>14s} {'return':>10s} {'illegal steps':>14s}  "
          f"({args.eval_episodes} held-out episodes)")
    for label, choose in ((name, ppo), ("random legal", random_legal), ("first-fit", first_fit)):
        r = play(held_out, held_params, choose, keys)
        print(f"{label:17s} {r['jct'].mean():9.0f} +- {r['jct'].std(ddof=1) / np.sqrt(len(r['jct'])):3.0f} "
              f"{r['return'].mean():10.2f} {r['illegal'] / r['steps']:13.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
