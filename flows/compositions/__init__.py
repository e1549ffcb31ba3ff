"""Flows made of stages: the cached pipeline, the demo, train-rounds, the experiments, compare,
and the scheduled re-index."""
