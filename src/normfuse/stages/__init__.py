"""stages: TODO."""
