"""Integrations of rvv-attention with other frameworks (imported on demand)."""
