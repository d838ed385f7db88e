"""The methods' steps: update rules, step sizes, optimizers, minibatches."""
