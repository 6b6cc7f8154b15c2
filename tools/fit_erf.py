#!/usr/bin/python3
"""Fits the rational approximation of math::erf (core/math.hpp) and prints its coefficients.

    erf(x) ~ x P(x^2) / Q(x^2),  |x| <= 3.92,  P of degree 5, Q of degree 5 with Q(0) = 1

by linearised least squares (x P(z) - erf(x) (Q(z) - 1) = erf(x) on Chebyshev and uniform
points), reweighted toward equal errors (a cheap approach to minimax). Beyond 3.92, erf rounds to
+-1 in float. Prints the largest error in double and of a float evaluation (numpy float32 Horner),
then the coefficients, lowest degree first. Needs Debian's python3-numpy and python3-scipy.

    /usr/bin/python3 tools/fit_erf.py
"""
import numpy as np
from scipy.special import erf

LIMIT = 3.92


def fit(p_degree, q_degree, iterations=30):
    x = np.concatenate([np.cos(np.linspace(0, np.pi, 6000)) * LIMIT / 2 + LIMIT / 2,
                        np.linspace(1e-4, LIMIT, 6000)])
    y = erf(x)
    z = x * x
    weights = np.ones_like(x)
    for _ in range(iterations):
        a = np.hstack([x[:, None] * z[:, None] ** np.arange(p_degree + 1),
                       -y[:, None] * z[:, None] ** np.arange(1, q_degree + 1)])
        c, *_ = np.linalg.lstsq(a * weights[:, None], y * weights, rcond=None)
        p, q = c[:p_degree + 1], np.concatenate([[1.0], c[p_degree + 1:]])
        error = np.abs(x * np.polyval(p[::-1], z) / np.polyval(q[::-1], z) - y)
        weights = weights * (error / error.max() + 0.3)
        weights /= weights.mean()
    return p, q, error.max()


def float_evaluation(p, q, x):
    x = x.astype(np.float32)
    z = x * x
    numerator, denominator = np.float32(p[-1]), np.float32(q[-1])
    for c in p[-2::-1]:
        numerator = np.float32(numerator * z + np.float32(c))
    for c in q[-2::-1]:
        denominator = np.float32(denominator * z + np.float32(c))
    return np.minimum(np.float32(x * numerator / denominator), np.float32(1))


p, q, double_error = fit(5, 5)
xs = np.linspace(0, LIMIT, 2000001)
float_error = np.max(np.abs(float_evaluation(p, q, xs).astype(np.float64) -
                            erf(xs.astype(np.float32).astype(np.float64))))
print("largest error: %.2e evaluated in double, %.2e in float" % (double_error, float_error))
print("P:", ", ".join("%.9e" % c for c in p))
print("Q:", ", ".join("%.9e" % c for c in q))
