"""driver: TODO."""
