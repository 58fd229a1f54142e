"""fgd-window: of the window's jobs on their FGD nodes, the one whose placement removes the
most fragmentation per GPU milli; worked out by hand on the test cluster (states.cluster:
n0 8 GPUs / 96 cores, n1 8 GPUs / 96 cores, n2 2 GPUs / 32 cores, n3 1 GPU / 8 cores).
"""

import jax

from jaxsched import actions, policies
from jaxsched.policies.fgd_window import window_choice
from tests.policies.states import frag_classes, observe_window

fgd = jax.jit(policies.get("fgd").policy)
fgd_window = jax.jit(policies.get("fgd-window").policy)
choice = jax.jit(window_choice)

# Target workload: half the jobs want 0.5 GPU, half a whole GPU (1 core each).
HALF_AND_WHOLE = frag_classes([(1000, 500, 1, 1), (1000, 1000, 1, 1)])
FULL = [0] * 8
# n2 [1000, 600]: F = 300 (the whole-GPU class cannot use the 600); n3 [1000]: F = 0.
FREE = [FULL, FULL, [1000, 600], [1000]]
WHOLE, HALF = (1, 1000, 1000), (1, 500, 1000)


def slot_and_node(action, obs):
    k, n = obs.place_mask.shape
    assert bool(actions.is_place(action, k, n)), f"not a place action: {int(action)}"
    slot, node = actions.place_slot_node(action, n)
    return int(slot), int(node)


def test_places_the_queued_job_that_fills_a_hole_first():
    # The head job takes a whole GPU: on n2 GPU 0 (F 300 -> 300) or n3 (0 -> 0), drop 0 either
    # way, tie to the lower rank: n2, where FGD puts it. The second job (0.5 GPU) on n2's GPU 1
    # leaves [1000, 100]: 100 too small for both classes, F = 100, a drop of 200 milli, 0.4 per
    # milli it takes: fgd-window places it first, on n2; the head job then still has n3.
    obs = observe_window([WHOLE, HALF], FREE, classes=HALF_AND_WHOLE)
    assert slot_and_node(fgd(None, obs, None), obs) == (0, 2)
    assert slot_and_node(fgd_window(None, obs, None), obs) == (1, 2)
    slot, node = choice(obs)
    assert (int(slot), int(node)) == (1, 2)


def test_without_fragmentation_to_gain_it_is_fgd_in_queue_order():
    # Two whole-GPU jobs: both drop 0 wherever they go; the earliest slot, on FGD's node.
    obs = observe_window([WHOLE, WHOLE], FREE, classes=HALF_AND_WHOLE)
    assert slot_and_node(fgd_window(None, obs, None), obs) == slot_and_node(fgd(None, obs, None), obs) == (0, 2)


def test_a_job_that_fits_nowhere_is_never_chosen_and_an_empty_fit_waits():
    # The second job wants 4 GPUs: no node has them free, so it is skipped whatever its score.
    obs = observe_window([WHOLE, (4, 1000, 1000)], FREE, classes=HALF_AND_WHOLE)
    assert not bool(obs.place_mask[1].any())
    assert slot_and_node(fgd_window(None, obs, None), obs) == (0, 2)
    # Nothing fits: wait, as every heuristic does.
    obs = observe_window([(4, 1000, 1000), (2, 1000, 1000)], [FULL, FULL, [0, 0], [1000]],
                         classes=HALF_AND_WHOLE)
    k, n = obs.place_mask.shape
    assert int(fgd_window(None, obs, None)) == int(actions.wait(k, n))

