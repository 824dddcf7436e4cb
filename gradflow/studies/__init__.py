"""Questions answered with several evaluations: whatif, compare, modes, numeric check, Hessian, sweeps,
batch, the graph picture."""
