"""`python -m normfuse` runs the command line."""

from normfuse.cli import program

raise SystemExit(program())
