"""Compare a candidate's outputs with the original's, with dtype-aware tolerances.

An element passes when |candidate - original| <= atol + rtol * |original| (NumPy's `allclose`
rule). A non-finite candidate value where the original is finite fails. Non-float outputs must be
equal exactly. Errors against a float64 reference are reported where one is available.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

# (atol, rtol) by output dtype: float32 to the 1e-4; half precision by its resolution.
DEFAULT_TOLERANCES = {
    "float64": (1e-7, 1e-6),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}


@dataclass(frozen=True)
class OutputComparison:
    """How far one output of the candidate is from the original's."""

    output: str
    dtype: str
    max_abs: float
    max_rel: float
    mean_abs: float
    atol: float
    rtol: float
    passed: bool
    detail: str = ""
    reference_error_original: float | None = None
    reference_error_candidate: float | None = None

    def as_dict(self) -> dict:
        """The JSON form."""
        return asdict(self)


def tolerances(
    dtype: np.dtype, atol: float | None, rtol: float | None, compute_dtype: str | None = None
) -> tuple[float, float]:
    """The (atol, rtol) for an output of `dtype` from a model computing in `compute_dtype` (its
    narrowest float type: a float32 output of a float16 model carries float16 rounding), each
    overridden when given."""
    candidates = [DEFAULT_TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))]
    if compute_dtype in DEFAULT_TOLERANCES:
        candidates.append(DEFAULT_TOLERANCES[compute_dtype])
    default_atol, default_rtol = max(candidates)
    return (default_atol if atol is None else atol, default_rtol if rtol is None else rtol)


def compare_output(
    name: str,
    original: np.ndarray,
    candidate: np.ndarray,
    atol: float | None = None,
    rtol: float | None = None,
    reference: np.ndarray | None = None,
    compute_dtype: str | None = None,
) -> OutputComparison:
    """Compare one output; `reference` is the float64 run of the original, when there is one;
    `compute_dtype` the model's narrowest float type (see `tolerances`)."""
    dtype = original.dtype
    if original.shape != candidate.shape or original.dtype != candidate.dtype:
        detail = f"shape/dtype {candidate.shape} {candidate.dtype} != {original.shape} {dtype}"
        return OutputComparison(name, str(dtype), np.inf, np.inf, np.inf, 0, 0, False, detail)
    if not np.issubdtype(dtype, np.floating):
        equal = bool(np.array_equal(original, candidate))
        mismatched = float(np.count_nonzero(original != candidate))
        detail = "" if equal else f"{int(mismatched)} elements differ"
        return OutputComparison(name, str(dtype), mismatched, 0, 0, 0, 0, equal, detail)
    atol_, rtol_ = tolerances(dtype, atol, rtol, compute_dtype)
    wide_original, wide_candidate = original.astype(np.float64), candidate.astype(np.float64)
    finite = np.isfinite(wide_original)
    new_non_finite = int(np.count_nonzero(finite & ~np.isfinite(wide_candidate)))
    diff = np.abs(wide_candidate - wide_original)[finite]
    magnitude = np.abs(wide_original)[finite]
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = (
        float((diff / np.maximum(magnitude, np.finfo(np.float64).tiny)).max()) if diff.size else 0.0
    )
    within = bool(np.all(diff <= atol_ + rtol_ * magnitude))
    detail = f"{new_non_finite} NaN/Inf where the original is finite" if new_non_finite else ""
    if not within and not detail:
        worst = int(np.argmax(diff - (atol_ + rtol_ * magnitude)))
        bound = f"atol {atol_:g} + rtol {rtol_:g} * |x|"
        detail = f"max abs error {max_abs:.3g} exceeds {bound} (worst at flat index {worst})"
    reference_errors = (None, None)
    if reference is not None and reference.shape == original.shape:
        reference_errors = (
            _max_abs(wide_original, reference),
            _max_abs(wide_candidate, reference),
        )
    return OutputComparison(
        name,
        str(dtype),
        max_abs,
        max_rel,
        float(diff.mean()) if diff.size else 0.0,
        atol_,
        rtol_,
        within and not new_non_finite,
        detail,
        *reference_errors,
    )


def _max_abs(values: np.ndarray, reference: np.ndarray) -> float:
    finite = np.isfinite(reference) & np.isfinite(values)
    return float(np.abs(values - reference)[finite].max()) if finite.any() else float("nan")
