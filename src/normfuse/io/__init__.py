"""io: TODO."""
