"""prove: evidence that a rewrite changes nothing. ONNX Runtime sessions (and OpenVINO), generated
inputs and input profiles, float64 reference evaluations, comparison with tolerances, each site
run alone (`validate`, `site_inputs`, `subgraph`), and the output guard with rollback by bisection
(`guard`, `rollback`). Imports `rewrite` and below."""
