"""Device-taint eviction controller (placeholder until written)."""
