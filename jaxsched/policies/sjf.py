"""sjf: shortest (known) work first, best-fit placement.

The order is the env's: the registry entry sets ``queue_order="sjf"``, so the window holds
the queued jobs by least work; the node rule is best-fit's.
"""

from jaxsched.policies.best_fit import best_fit


def sjf(params, obs, key):
    """policy(params, obs, key) -> flat action: best-fit on the SJF-ordered window."""
    return best_fit(params, obs, key)
