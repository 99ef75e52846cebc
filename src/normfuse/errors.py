"""Errors that the command line reports as one line with exit code 2."""


class NormfuseError(Exception):
    """An expected failure caused by the user's input (bad file, bad option)."""
