"""Jinja templates (*.j2) and hand-written device headers (include/kiec/*.cuh), shipped as package data."""
