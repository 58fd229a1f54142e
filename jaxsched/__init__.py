"""jaxsched: a JAX-vectorised simulator of shared GPU clusters and their schedulers.

With gymnasium installed, importing the package registers ``jaxsched/Cluster-v0``
(``jaxsched.gym_env``), so ``gymnasium.make("jaxsched:jaxsched/Cluster-v0")`` works as is.
"""


def _register_gymnasium() -> None:
    try:
        import gymnasium
    except ImportError:
        return
    if "jaxsched/Cluster-v0" not in gymnasium.registry:
        gymnasium.register(id="jaxsched/Cluster-v0", entry_point="jaxsched.gym_env:ClusterGymEnv",
                           vector_entry_point="jaxsched.gym_env:ClusterGymVectorEnv")


_register_gymnasium()
