"""Graph-to-graph passes and the pipeline that orders them."""
