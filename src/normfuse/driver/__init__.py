"""driver: the route of one model through `optimize`: load, view, stages, rounds, export, proof
(guard, rollback, validation, repairs), and the report (`report`). The public API
(`normfuse.optimize`, `inspect`, `validate`, `save`) lives in `optimize`. Imports every layer
below; nothing below imports it."""
