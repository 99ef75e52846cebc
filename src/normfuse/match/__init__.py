"""match: TODO."""
