"""The fusion passes' names, in the order the driver runs them, and the ones run by default: known
without importing the passes themselves (the command line's help needs only the names)."""

PASS_NAMES = ("group-norm", "layer-norm", "rms-norm", "skip-norm")
# skip-norm only when named, or chosen per site by timing (optimize --tune-for).
DEFAULT_PASS_NAMES = ("group-norm", "layer-norm", "rms-norm")
