"""The numba twin of ``fp4lab.numerics``: the same bits, parallel and fast on the CPU."""
