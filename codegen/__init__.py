"""Code generation: scheduled programs -> CUDA/HIP sources."""
