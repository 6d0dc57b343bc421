"""Gaussian process regression over architectures, given their distances.

The kernel is k(a, b) = exp(-d(a, b)²) on the architecture edit distance
(`aiperf.distance`). An edit distance is not Euclidean, so the kernel matrix
need not be positive semi-definite (on morphs of ResNet-50 its smallest
eigenvalues reach about -0.4): it is projected onto the PSD cone (negative
eigenvalues clipped to 0, which is the nearest PSD matrix in Frobenius norm)
before the observation noise is added. Auto-Keras reached the same end with a
Bourgain embedding.
Targets are standardised (mean and spread of the observed accuracies), so the
prior says "an unrelated architecture scores like the average one, give or
take the observed spread".
"""

from __future__ import annotations

import numpy as np

from aiperf.distance import CUTOFF, kernel

# Accuracy spread assumed when all observations are (nearly) equal.
MIN_SCALE = 0.01


class GaussianProcess:
    """Exact GP on a precomputed distance matrix."""

    def __init__(self, noise: float = 1e-2, cutoff: float = CUTOFF) -> None:
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.noise = noise
        self.cutoff = cutoff
        self._alpha: np.ndarray | None = None
        self._kinv: np.ndarray | None = None
        self._mean = 0.0
        self._scale = 1.0

    @property
    def fitted(self) -> bool:
        return self._alpha is not None

    def fit(self, distances: np.ndarray, y: np.ndarray) -> "GaussianProcess":
        """Fit on the N×N distance matrix of the observed architectures and their N accuracies."""
        y = np.asarray(y, np.float64)
        n = len(y)
        if distances.shape != (n, n) or n == 0:
            raise ValueError(f"need a non-empty square distance matrix matching {n} targets, "
                             f"got shape {distances.shape}")
        self._mean = float(y.mean())
        self._scale = max(float(y.std()), MIN_SCALE)
        z = (y - self._mean) / self._scale
        k = kernel(distances, self.cutoff)
        lam, vec = np.linalg.eigh(0.5 * (k + k.T))
        lam = np.clip(lam, 0.0, None)
        # (K_psd + noise I)^-1 straight from the eigendecomposition.
        self._kinv = (vec / (lam + max(self.noise, 1e-9))) @ vec.T
        self._alpha = self._kinv @ z
        return self

    def predict(self, distances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation (accuracy units) for M candidates given
        their M×N distances to the observed architectures."""
        if self._alpha is None or self._kinv is None:
            raise RuntimeError("fit the GaussianProcess before predicting")
        k = kernel(np.atleast_2d(distances), self.cutoff)
        mean = np.empty(len(k))
        var = np.empty(len(k))
        for n, row in enumerate(k):
            nz = np.flatnonzero(row)  # the kernel is local: most entries are exactly 0
            kr = row[nz]
            mean[n] = kr @ self._alpha[nz]
            var[n] = 1.0 - kr @ self._kinv[np.ix_(nz, nz)] @ kr
        std = np.sqrt(np.clip(var, 0.0, None))
        return self._mean + self._scale * mean, self._scale * std
