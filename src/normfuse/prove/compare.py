"""Compare a candidate's outputs with the original's, with dtype-aware tolerances.

An element passes when |candidate - original| <= atol + rtol * |original| (NumPy's `allclose`
rule). NaN and Inf are values: a non-finite element must be matched by the same non-finite value
(NaN by NaN, +Inf by +Inf), both ways. An element that differs passes only as a *repair*: where a
float64 evaluation of the original is available and the candidate is within tolerance of it while
the original is not (float16 overflow fixed by float32 statistics), or the candidate's output as a
whole is no further from it than the original's (`distance`); repairs are counted and reported.
Non-float outputs must be equal exactly.
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
    repaired: int = 0

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
    `compute_dtype` the model's narrowest float type (see `tolerances`). Sequence and optional
    outputs (lists, None) are compared element by element."""
    if not isinstance(original, np.ndarray) or not isinstance(candidate, np.ndarray):
        return _compare_structured(name, original, candidate, atol, rtol, compute_dtype)
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
    finite = np.isfinite(wide_original) & np.isfinite(wide_candidate)
    same_special = (np.isnan(wide_original) & np.isnan(wide_candidate)) | (
        ~np.isfinite(wide_original) & (wide_original == wide_candidate)
    )
    with np.errstate(invalid="ignore"):
        diff = np.where(finite, np.abs(wide_candidate - wide_original), 0.0)
    magnitude = np.abs(wide_original)
    close = finite & (diff <= atol_ + rtol_ * np.where(finite, magnitude, 0.0))
    differs = ~(close | same_special)
    repaired = np.zeros_like(differs)
    wide_reference = None
    if reference is not None and reference.shape == original.shape:
        wide_reference = reference.astype(np.float64)
        repaired = differs & _within(wide_candidate, wide_reference, atol_, rtol_)
        repaired &= ~_within(wide_original, wide_reference, atol_, rtol_)
    # The output as a whole no further from float64 than the original's: a repair.
    if (
        wide_reference is not None
        and (differs & ~repaired).any()
        and no_further(wide_candidate, wide_original, wide_reference, atol_, rtol_)
    ):
        repaired = differs
    failing = differs & ~repaired
    max_abs = float(diff[finite].max()) if finite.any() else 0.0
    if (differs & ~finite).any():
        max_abs = float("inf")
    relative = diff / np.maximum(magnitude, np.finfo(np.float64).tiny)
    max_rel = float(relative[finite].max()) if finite.any() else 0.0
    detail = _detail(failing, finite, diff, atol_, rtol_, max_abs)
    if repaired.any():
        note = f"{int(repaired.sum())} elements repaired (closer to the float64 reference)"
        detail = f"{detail}; {note}" if detail else note
    reference_errors = (None, None)
    if wide_reference is not None:
        reference_errors = (
            _max_abs(wide_original, wide_reference),
            _max_abs(wide_candidate, wide_reference),
        )
    return OutputComparison(
        name,
        str(dtype),
        max_abs,
        max_rel,
        float(diff[finite].mean()) if finite.any() else 0.0,
        atol_,
        rtol_,
        not failing.any(),
        detail,
        *reference_errors,
        int(repaired.sum()),
    )


def _compare_structured(name: str, original, candidate, atol, rtol, compute_dtype):
    """A sequence (list of arrays) or optional (None) output: same structure, every element
    within tolerance."""
    if original is None or candidate is None:
        same = original is None and candidate is None
        detail = "" if same else "an optional output is empty on one side only"
        return OutputComparison(name, "optional", 0.0 if same else np.inf, 0, 0, 0, 0, same, detail)
    if not isinstance(original, list) or not isinstance(candidate, list):
        equal = type(original) is type(candidate) and bool(np.all(original == candidate))
        detail = "" if equal else "the values differ"
        return OutputComparison(name, type(original).__name__, 0, 0, 0, 0, 0, equal, detail)
    if len(original) != len(candidate):
        detail = f"sequence of {len(candidate)} elements, the original has {len(original)}"
        return OutputComparison(name, "sequence", np.inf, np.inf, np.inf, 0, 0, False, detail)
    parts = [
        compare_output(f"{name}[{i}]", a, b, atol, rtol, None, compute_dtype)
        for i, (a, b) in enumerate(zip(original, candidate, strict=True))
    ]
    failed = [part for part in parts if not part.passed]
    worst = max(parts, key=lambda part: part.max_abs, default=None)
    return OutputComparison(
        name,
        "sequence",
        worst.max_abs if worst else 0.0,
        worst.max_rel if worst else 0.0,
        worst.mean_abs if worst else 0.0,
        worst.atol if worst else 0.0,
        worst.rtol if worst else 0.0,
        not failed,
        failed[0].detail if failed else "",
    )


def _within(values: np.ndarray, reference: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Elements of `values` within tolerance of a finite reference."""
    with np.errstate(invalid="ignore"):
        ok = np.abs(values - reference) <= atol + rtol * np.abs(reference)
    return np.isfinite(reference) & np.isfinite(values) & ok


def _detail(failing, finite, diff, atol: float, rtol: float, max_abs: float) -> str:
    if not failing.any():
        return ""
    special = int((failing & ~finite).sum())
    if special:
        return f"{special} elements differ in NaN/Inf (a non-finite value on one side only)"
    worst = int(np.argmax(np.where(failing, diff, -1.0)))
    return (
        f"max abs error {max_abs:.3g} exceeds atol {atol:g} + rtol {rtol:g} * |x| "
        f"(worst at flat index {worst})"
    )


# How much larger the rewrite's typical (root-mean-square) distance from float64 may be than
# the original's, where its largest is further: float32 rounding of an ill-conditioned row.
TYPICAL_ALLOWANCE = 1.25


def no_further(
    candidate: np.ndarray, original: np.ndarray, reference: np.ndarray, atol: float, rtol: float
) -> bool:
    """Whether `candidate` is no further from the float64 `reference` than `original`
    (`nearness`)."""
    return nearness(candidate, original, reference, atol, rtol) is not None


def nearness(
    candidate: np.ndarray, original: np.ndarray, reference: np.ndarray, atol: float, rtol: float
) -> str | None:
    """How `candidate` is no further from the float64 `reference` than `original`: "largest",
    at its largest distance, up to the tolerance the comparison holds outputs to (atol + rtol *
    the reference's largest finite magnitude); "typical", where both are far (two float32
    evaluations of an ill-conditioned row, rows of 100 + 0.05 N(0,1): each some 1e-3 off, and
    which is nearer at its worst element is a coin toss), at its typical (RMS) distance, within
    `TYPICAL_ALLOWANCE`; None where it is further. A non-finite value where the reference is
    finite is infinitely far."""
    finite = np.abs(reference[np.isfinite(reference)].astype(np.float64))
    slack = atol + rtol * (float(finite.max()) if finite.size else 0.0)
    if distance(candidate, reference) <= distance(original, reference) + slack:
        return "largest"
    typical = _rms_distance(candidate, reference)
    if typical <= TYPICAL_ALLOWANCE * _rms_distance(original, reference) + slack:
        return "typical"
    return None


def typical_distances(
    candidate: np.ndarray, original: np.ndarray, reference: np.ndarray
) -> tuple[float, float]:
    """(original's, candidate's) typical (RMS) distance from the float64 `reference`."""
    return _rms_distance(original, reference), _rms_distance(candidate, reference)


def _rms_distance(values: np.ndarray, reference: np.ndarray) -> float:
    if not np.issubdtype(values.dtype, np.floating):
        return float(np.count_nonzero(values != reference))
    finite = np.isfinite(reference)
    wide = values.astype(np.float64)[finite]
    if not np.isfinite(wide).all():
        return float("inf")
    difference = wide - reference[finite].astype(np.float64)
    return float(np.sqrt(np.mean(difference * difference))) if difference.size else 0.0


def distance(values: np.ndarray, reference: np.ndarray) -> float:
    """The largest distance of `values` from `reference` where the reference is finite (a
    non-finite value there is infinitely far); for non-float values, the count that differ."""
    if not np.issubdtype(values.dtype, np.floating):
        return float(np.count_nonzero(values != reference))
    wide, exact = values.astype(np.float64), reference.astype(np.float64)
    finite = np.isfinite(exact)
    if not finite.any():
        return 0.0
    if not np.isfinite(wide[finite]).all():
        return float("inf")
    return float(np.abs(wide[finite] - exact[finite]).max())


def _max_abs(values: np.ndarray, reference: np.ndarray) -> float:
    finite = np.isfinite(reference) & np.isfinite(values)
    if not finite.any():
        return float("nan")
    return float(np.abs(values[finite] - reference[finite]).max())
