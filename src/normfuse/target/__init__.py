"""target: TODO."""
