"""The zoo's norms of 2024-26 models (issue 26), as `models/export.py` names them: its tests and
the benchmark tables select them by these names."""

RECENT = ("cohere", "olmo2", "phi3", "nemotron_h_gated_norm", "dit", "sd3", "flux", "dyt")
