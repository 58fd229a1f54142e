"""The flat action layout, in one place (docs/semantics.md, "Actions").

With a window of K slots and N nodes, an action is one int in [0, K*N + K]:
  place (k, n)  k * N + n        K*N actions: put window slot k's job on node n
  reject k      K*N + k          K actions:   remove window slot k's job from the system
  wait          K*N + K          1 action:    do nothing until the next event
Every function works on Python ints, NumPy and JAX values alike (plain arithmetic).
"""

from __future__ import annotations


def num_actions(num_slots: int, num_nodes: int) -> int:
    """K*N place actions, K reject actions, one wait."""
    return num_slots * num_nodes + num_slots + 1


def place(slot, node, num_nodes: int):
    """The action that places window slot ``slot``'s job on ``node``."""
    return slot * num_nodes + node


def reject(slot, num_slots: int, num_nodes: int):
    """The action that rejects window slot ``slot``'s job."""
    return num_slots * num_nodes + slot


def wait(num_slots: int, num_nodes: int) -> int:
    """The wait action (the last one)."""
    return num_slots * num_nodes + num_slots


def is_place(action, num_slots: int, num_nodes: int):
    return (action >= 0) & (action < num_slots * num_nodes)


def is_reject(action, num_slots: int, num_nodes: int):
    return (action >= num_slots * num_nodes) & (action < num_slots * num_nodes + num_slots)


def is_wait(action, num_slots: int, num_nodes: int):
    return action == wait(num_slots, num_nodes)


def place_slot_node(action, num_nodes: int):
    """(slot, node) of a place action."""
    return action // num_nodes, action % num_nodes


def reject_slot(action, num_slots: int, num_nodes: int):
    """The slot of a reject action."""
    return action - num_slots * num_nodes
