"""The ordered probit of `bfm` with `ordinal`: a rating on a scale of whole steps is the step into
which a latent score plus N(0, 1) noise falls, between cutpoints c_0 < ... < c_(K-2).

Each sweep first draws the cutpoints with the latent values integrated out: a Metropolis-Hastings step
whose proposal is a multivariate t about the posterior's mode, in parameters a with c_0 = a_0 and
c_k = c_(k-1) + exp(a_k), each under a N(0, 1) prior (Albert and Chib's scheme, as myFM samples its
cutpoints; cutpoints drawn given the latent values hardly move, as they are pinned between them). Then
each rating's latent value is drawn from its normal truncated to its step, and the factorisation
machine's sweep fits those as it fits ratings, with the noise precision held at 1.
"""

import math

import numba
import numpy as np
from scipy import special

from recsys.errors import RecsysError
from recsys.train.jit import compiled

# The prior precision of each cutpoint parameter a_k, and the degrees of freedom of the proposal's t.
CUTPOINT_PRIOR, PROPOSAL_DEGREES = 1.0, 5.0
# A scale of more steps than this is no ordinal scale but a continuous one.
MAX_STEPS = 100
# How far (in steps) a rating may lie from its step's value and be read as on it: float32's rounding
# of decimal steps (0.1, 0.2) moves a rating a millionth of a step or so; a rating off the scale by
# a hundredth of a step makes a scale of over MAX_STEPS steps, refused either way.
ON_GRID = 1e-2
# The ratings' log-likelihood is summed in this many parts side by side: a fixed number, so that the
# sum, and so the chain, is the same on any number of threads.
_PARTS = 64
_SQRT2, _SQRT2PI = math.sqrt(2.0), math.sqrt(2.0 * math.pi)


def rating_steps(values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Each rating's step (0 for the lowest), the lowest rating and the step's size: the smallest gap
    between the ratings' values. Ratings off that grid, or a scale of one value or over MAX_STEPS
    steps, are refused."""
    levels = np.unique(values)
    if len(levels) < 2:
        raise RecsysError(f"`ordinal` needs ratings of two values or more; every rating is {levels[0]:g}")
    lowest, step = float(levels[0]), float(np.diff(levels).min())
    # The ratings are float32 (0.1 is 0.10000000149): the smallest gap is off a true step by their
    # rounding, so the step is taken over the whole span where that is a whole number of gaps, and a
    # rating within ON_GRID of a step of its place is on it.
    span = float(levels[-1]) - lowest
    if abs(span / step - round(span / step)) <= ON_GRID:
        step = span / round(span / step)
    places = (values - lowest) / step
    steps = np.round(places)
    off = np.flatnonzero(np.abs(places - steps) > ON_GRID)
    if len(off):
        closest = int(np.argmin(np.diff(levels)))
        raise RecsysError(
            f"`ordinal` reads ratings on a scale of whole steps: rating {values[off[0]]:g} is not {lowest:g} "
            f"plus a multiple of {step:g} (the smallest gap between the ratings, {levels[closest]:g} to "
            f"{levels[closest + 1]:g}); leave `ordinal` out"
        )
    if steps.max() >= MAX_STEPS:
        raise RecsysError(
            f"`ordinal` reads at most {MAX_STEPS} steps: the ratings from {lowest:g} by {step:g} make "
            f"{int(steps.max()) + 1}; leave `ordinal` out"
        )
    return steps.astype(np.int64), lowest, step


@compiled(parallel=True)
def _cutpoint_terms(
    scores: np.ndarray, steps: np.ndarray, cutpoints: np.ndarray, chunks: int
) -> tuple[float, np.ndarray, np.ndarray]:
    """The log-likelihood of the ratings' steps given their scores and `cutpoints`, with its gradient
    and Hessian in the cutpoints: sum_n log(Phi(c_(y_n) - s_n) - Phi(c_(y_n - 1) - s_n)), c_(-1) = -inf
    and c_(K-1) = inf. Each difference is taken on the side of 0 where it keeps its digits."""
    k = len(cutpoints)
    logs, gradients, hessians = np.zeros(chunks), np.zeros((chunks, k)), np.zeros((chunks, k, k))
    size = (len(scores) + chunks - 1) // chunks
    for chunk in numba.prange(chunks):
        for n in range(chunk * size, min(len(scores), (chunk + 1) * size)):
            y, score = steps[n], scores[n]
            has_low, has_high = y > 0, y < k
            low = cutpoints[y - 1] - score if has_low else -np.inf
            high = cutpoints[y] - score if has_high else np.inf
            if low > 0:  # both in the upper tail: the difference of the upper tails
                chance = 0.5 * math.erfc(low / _SQRT2) - 0.5 * math.erfc(high / _SQRT2)
            else:
                chance = 0.5 * math.erfc(-high / _SQRT2) - 0.5 * math.erfc(-low / _SQRT2)
            chance = max(chance, 1e-300)
            logs[chunk] += math.log(chance)
            if has_high:
                density = math.exp(-high * high / 2) / _SQRT2PI
                gradients[chunk, y] += density / chance
                hessians[chunk, y, y] -= (high * density * chance + density * density) / chance**2
            if has_low:
                density = math.exp(-low * low / 2) / _SQRT2PI
                gradients[chunk, y - 1] -= density / chance
                hessians[chunk, y - 1, y - 1] += (low * density * chance - density * density) / chance**2
            if has_low and has_high:
                both = math.exp(-(high * high + low * low) / 2) / (_SQRT2PI**2 * chance**2)
                hessians[chunk, y, y - 1] += both
                hessians[chunk, y - 1, y] += both
    return logs.sum(), gradients.sum(axis=0), hessians.sum(axis=0)


def cutpoints_of(parameters: np.ndarray) -> np.ndarray:
    """c_0 = a_0, c_k = c_(k-1) + exp(a_k): rising whatever the parameters."""
    return np.cumsum(np.concatenate([parameters[:1], np.exp(parameters[1:])]))


def _posterior(
    parameters: np.ndarray, scores: np.ndarray, steps: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """The log-posterior of the cutpoint parameters (to a constant), its gradient and its Hessian."""
    log, gradient, hessian = _cutpoint_terms(scores, steps, cutpoints_of(parameters), _PARTS)
    k = len(parameters)
    grows = np.exp(parameters)
    jacobian = np.tril(np.broadcast_to(grows, (k, k))).copy()  # d c_i / d a_j
    jacobian[:, 0] = 1.0
    curvature = jacobian.T @ hessian @ jacobian
    # c_i's second derivative in a_j (j >= 1, j <= i) is exp(a_j): the gradient's weight on it.
    tails = np.cumsum(gradient[::-1])[::-1]
    curvature[np.arange(1, k), np.arange(1, k)] += grows[1:] * tails[1:]
    return (
        log - CUTPOINT_PRIOR / 2 * parameters @ parameters,
        jacobian.T @ gradient - CUTPOINT_PRIOR * parameters,
        curvature - CUTPOINT_PRIOR * np.eye(k),
    )


def _positive(precision: np.ndarray) -> np.ndarray:
    """`precision` where it is positive definite, else it plus the least multiple of the identity
    (doubled from a thousandth of its largest diagonal entry) that makes it so: in the parameters a
    the posterior is not everywhere log-concave, and far from its mode (the scores moved since the
    last sweep) Newton's step could go downhill and the proposal's precision fail its Cholesky."""
    if not np.isfinite(precision).all():
        raise FloatingPointError(f"the cutpoints' posterior has no finite curvature: {precision.tolist()}")
    shift = 0.0
    eye = np.eye(len(precision))
    for _ in range(200):  # the shift doubles: past the largest entry the matrix is positive definite
        try:
            np.linalg.cholesky(precision + shift * eye)
            return precision + shift * eye
        except np.linalg.LinAlgError:
            shift = max(2 * shift, 1e-3 * max(1.0, float(np.abs(np.diag(precision)).max())))
    raise FloatingPointError(
        f"no shift made the cutpoints' precision positive definite: {precision.tolist()}"
    )


def _mode(
    parameters: np.ndarray, scores: np.ndarray, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """The posterior's mode, by Newton's method (damped where the Hessian is not negative definite)
    with step halving from `parameters`; the precision (the negative Hessian, made positive definite)
    there, and the log-posterior at `parameters` itself."""
    value, gradient, hessian = _posterior(parameters, scores, steps)
    start_value = value
    for _ in range(100):
        direction = np.linalg.solve(_positive(-hessian), gradient)
        if gradient @ direction < 1e-6:  # the rise Newton's step promises, in log-likelihood: none left
            break
        size = 1.0
        while True:
            tried = parameters + size * direction
            found = _posterior(tried, scores, steps)
            if found[0] >= value:
                break
            size /= 2
            if size < 1e-3:  # no rise along the step: the mode, to the sums' rounding
                return parameters, _positive(-hessian), start_value
        parameters, (value, gradient, hessian) = tried, found
    return parameters, _positive(-hessian), start_value


def first_cutpoint_parameters(scores: np.ndarray, steps: np.ndarray, n_steps: int) -> np.ndarray:
    """A chain's first cutpoint parameters: the posterior's mode given its first scores."""
    return _mode(np.zeros(n_steps - 1), scores, steps)[0]


def draw_cutpoint_parameters(
    parameters: np.ndarray, scores: np.ndarray, steps: np.ndarray, random: np.random.Generator
) -> np.ndarray:
    """A Metropolis-Hastings step of the cutpoint parameters from `parameters`, the latent values
    integrated out: a multivariate t proposal about the mode, with the precision there."""
    mode, precision, present = _mode(parameters, scores, steps)
    k = len(mode)
    lower = np.linalg.cholesky(precision)
    spread = math.sqrt(random.chisquare(PROPOSAL_DEGREES) / PROPOSAL_DEGREES)
    proposed = mode + np.linalg.solve(lower.T, random.standard_normal(k)) / spread

    def proposal_log(at: np.ndarray) -> float:
        distance = (at - mode) @ precision @ (at - mode)
        return -(PROPOSAL_DEGREES + k) / 2 * math.log1p(distance / PROPOSAL_DEGREES)

    ratio = _posterior(proposed, scores, steps)[0] - present
    ratio += proposal_log(parameters) - proposal_log(proposed)
    return proposed if math.log(random.uniform()) < ratio else parameters


def draw_latent(
    scores: np.ndarray, steps: np.ndarray, cutpoints: np.ndarray, random: np.random.Generator
) -> np.ndarray:
    """Each rating's latent value: N(score, 1) truncated to its step's interval, by the inverse of the
    normal's distribution in log space (an interval above 0 is drawn mirrored below it, where the
    distribution keeps its digits)."""
    k = len(cutpoints)
    low = np.where(steps > 0, cutpoints[np.maximum(steps - 1, 0)] - scores, -np.inf)
    high = np.where(steps < k, cutpoints[np.minimum(steps, k - 1)] - scores, np.inf)
    mirrored = low > 0
    start, end = np.where(mirrored, -high, low), np.where(mirrored, -low, high)
    log_start, log_end = special.log_ndtr(start), special.log_ndtr(end)
    uniform = random.uniform(size=len(scores))
    # log(Phi(start) + u (Phi(end) - Phi(start))), as log Phi(end) + log(u + (1 - u) Phi(start) / Phi(end)).
    drawn = special.ndtri_exp(
        np.minimum(log_end + np.log(uniform + (1 - uniform) * np.exp(log_start - log_end)), 0)
    )
    drawn = np.clip(drawn, start, end)
    return scores + np.where(mirrored, -drawn, drawn)
