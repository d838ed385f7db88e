"""Training and sampling loops built from the methods: the training loop, fitting
with burn-in and searches, HMC, checkpoints and attempts."""
