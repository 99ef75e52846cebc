"""match: deciding whether a subgraph is exactly a normalisation. Patterns (`pattern`), the context
a check reads (facts + policy), the checks every norm pass shares (`norm_checks`: axes, divisor,
epsilon, affine, dtypes), the fused node a proved site becomes (`fused_sites`), the final check
every site passes whatever pass built it, and the records (`Site`, `NearMiss`) and reason
registry they report. The passes (`normfuse.passes`) build on this layer. Imports `target` and
below."""
