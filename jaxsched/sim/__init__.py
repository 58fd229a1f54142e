"""The vectorised cluster simulator: env (reset/step), resources, fragmentation, metrics."""

from jaxsched.sim.env import ClusterEnv, EnvConfig

__all__ = ["ClusterEnv", "EnvConfig"]
