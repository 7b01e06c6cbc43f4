"""pipeplan: a DNN model partitioning planner for shared, contended GPU clusters."""

__version__ = "0.1.0"
