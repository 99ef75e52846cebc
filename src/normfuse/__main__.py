"""`python -m normfuse` runs the command line."""

from normfuse.cli.main import program

raise SystemExit(program())
