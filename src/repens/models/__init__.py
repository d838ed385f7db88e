"""What is modelled: networks, particle stacks, target densities, posteriors and their
kernels and score estimators."""
