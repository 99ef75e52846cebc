"""`python -m normfuse` runs the command line."""

from normfuse.cli import main

raise SystemExit(main())
