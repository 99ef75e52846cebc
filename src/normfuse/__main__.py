"""`python -m normfuse` runs the command line."""

from normfuse.cli.commands import program

raise SystemExit(program())
