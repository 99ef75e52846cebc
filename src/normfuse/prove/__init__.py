"""prove: TODO."""
