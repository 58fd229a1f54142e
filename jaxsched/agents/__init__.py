"""Learned schedulers: the GNN encoder (``gnn``), Double DQN (``ddqn``), the jitted training
loop (``trainer``) and its checkpoints (``checkpoint``). Entry point: ``python -m jaxsched.train``."""
