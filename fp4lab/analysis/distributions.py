"""Seeded synthetic input tensors, named by spec strings ``name[:key=value[,key=value...]]``.

=================  =====================================================================  ==================
name               definition (float64 draw from ``numpy.random.default_rng(seed)``, cast  parameters
                   to float32 with RTNE)
=================  =====================================================================  ==================
``gaussian``       N(0, 1)                                                                  —
``laplace``        Laplace(0, b) with b = 1/sqrt(2) (unit variance)                         —
``student-t``      Student's t with ``nu`` degrees of freedom                               ``nu`` (3)
``lognormal``      random sign times exp(N(0, sigma^2))                                     ``sigma`` (1)
``outliers``       N(0, 1) with every ``every``-th column of the last axis scaled by ``k``  ``k`` (20),
                   (columns ``every-1, 2*every-1, ...``): outlier channels as in SwiGLU     ``every`` (97)
                   down-projection inputs
``swiglu``         silu(a) * b with a, b ~ N(0, 1): a SwiGLU MLP activation                 —
=================  =====================================================================  ==================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fp4lab.errors import InputError

DEFAULT_DISTRIBUTIONS: tuple[str, ...] = ("gaussian", "laplace", "student-t:nu=3", "lognormal:sigma=1",
                                          "outliers:k=20,every=97")
_PARAMS: dict[str, dict[str, float]] = {
    "gaussian": {}, "laplace": {}, "student-t": {"nu": 3.0}, "lognormal": {"sigma": 1.0},
    "outliers": {"k": 20.0, "every": 97.0}, "swiglu": {},
}


@dataclass(frozen=True)
class Distribution:
    """A parsed distribution spec: ``name`` and its full parameter dict (defaults filled in)."""

    name: str
    params: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """Canonical spec string, e.g. ``student-t:nu=3``."""
        if not self.params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v:g}" for k, v in self.params.items())


def parse(spec: str) -> Distribution:
    """Parse ``name[:key=value,...]``; unknown names or parameters raise ValueError naming what is allowed."""
    name, _, rest = spec.strip().partition(":")
    if name not in _PARAMS:
        raise InputError(f"distribution '{spec}': unknown name '{name}'; use one of {', '.join(_PARAMS)}")
    params = dict(_PARAMS[name])
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise InputError(f"distribution '{spec}': bad parameter '{item}'; '{name}' takes "
                             f"{', '.join(f'{k}=<number>' for k in params) or 'no parameters'}")
        try:
            params[key] = float(value)
        except ValueError:
            raise InputError(f"distribution '{spec}': parameter '{key}' must be a number, got '{value}'") from None
        if not math.isfinite(params[key]):
            raise InputError(f"distribution '{spec}': parameter '{key}' must be finite, got '{value}'")
    if name == "student-t" and params["nu"] <= 0:
        raise InputError(f"distribution '{spec}': nu must be > 0")
    if name == "outliers" and (params["every"] < 1 or params["every"] != int(params["every"])):
        raise InputError(f"distribution '{spec}': every must be a positive integer")
    return Distribution(name, params)


def sample(spec: str | Distribution, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """float32 array of ``shape`` drawn from the distribution ``spec`` with generator seed ``seed``."""
    d = parse(spec) if isinstance(spec, str) else spec
    rng = np.random.default_rng(seed)
    p = d.params
    if d.name == "gaussian":
        x = rng.standard_normal(shape)
    elif d.name == "laplace":
        x = rng.laplace(0.0, 1.0 / np.sqrt(2.0), shape)
    elif d.name == "student-t":
        x = rng.standard_t(p["nu"], shape)
    elif d.name == "lognormal":
        x = np.where(rng.random(shape) < 0.5, -1.0, 1.0) * np.exp(p["sigma"] * rng.standard_normal(shape))
    elif d.name == "outliers":
        x = rng.standard_normal(shape)
        every = int(p["every"])
        x[..., every - 1::every] *= p["k"]
    else:  # swiglu
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        x = a / (1.0 + np.exp(-a)) * b
    return x.astype(np.float32)
