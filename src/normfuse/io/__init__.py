"""io: files. Loading a model and the files it references (read-only, never written), planning
and committing outputs atomically (staged beside their destination, renamed at the end, removed
on any error or signal), the weightless skeleton of a model, and text for the terminal within 100
columns (`columns`). Imports nothing of normfuse but `errors`."""
