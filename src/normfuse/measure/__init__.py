"""measure: TODO."""
