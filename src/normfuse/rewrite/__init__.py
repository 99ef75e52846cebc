"""rewrite: TODO."""
