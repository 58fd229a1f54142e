"""Workloads: real-trace loaders (``alibaba``) and FGD's target workload (``classes``)."""
