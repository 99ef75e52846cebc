"""Python's cyclic garbage collector, paused while one `optimize` call runs.

A rewrite builds millions of small objects (graph nodes and tensors that point at each other,
match states, records) that live until the call ends. Each of the collector's full passes walks
every one of them again, so on a large model its cost grows faster than the model. Reference
counting still frees every acyclic object at once; cycles left behind are collected as soon as the
collector runs again after the call.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector disabled for the block, then restored as it was (nesting is fine)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
