"""Baselines kiec is measured against (torch eager, torch.compile) and RESULTS.md."""
