"""facts: TODO."""
