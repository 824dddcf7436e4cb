"""Questions answered with several evaluations: whatif, compare, modes, numeric check, Hessian, sweeps, the graph
picture."""
