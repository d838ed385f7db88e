"""sge-WGD (Eq. 13 with the SGE of Eq. 16) on a 1-D regression with heavy-tailed noise: a
Student-t likelihood of one's own, written as a plain function.

    python examples/regression_sge_wgd.py [steps particles]
"""

import sys

import torch
from torch import nn

import repens

steps, n = (int(a) for a in sys.argv[1:] or ["2000", "20"])
torch.manual_seed(0)
x = torch.cat([torch.rand(100, 1) * 2 - 3, torch.rand(100, 1) * 2 + 1])  # two clusters, a gap in [-1, 1]
y = torch.sin(2 * x).squeeze(-1) + 0.1 * torch.distributions.StudentT(2.0).sample((200,))


def student_t(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # log p(y_b | f_b), (..., n, B)
    return torch.distributions.StudentT(3.0, f.squeeze(-1), 0.1).log_prob(y)


net = nn.Sequential(nn.Linear(1, 50), nn.ReLU(), nn.Linear(50, 50), nn.ReLU(), nn.Linear(50, 1))
posterior = repens.ensemble(net, likelihood=student_t, num_train=len(x), prior=1.0)
rule = repens.WGD(posterior, estimator="sge", eta=0.01, lr=1e-3)
g = torch.Generator().manual_seed(0)
state = rule.init(posterior.sample_prior(n, g), g)
for _ in range(steps):
    state, step = rule.update(state, repens.Batch(x, y))
grid = torch.linspace(-3, 3, 61).unsqueeze(-1)
with torch.no_grad():
    f = posterior.predict(state.params, grid).squeeze(-1)  # (n, 61)
rmse = (f.mean(0) - torch.sin(2 * grid).squeeze(-1))[grid.squeeze(-1).abs() > 1].pow(2).mean().sqrt()
gap = grid.squeeze(-1).abs() < 0.5
print(f"sge-WGD, {n} networks, {steps} steps: RMSE {rmse:.3f} on the data's range; "
      f"spread {f.std(0)[~gap].mean():.3f} there, {f.std(0)[gap].mean():.3f} in the gap")  # fmt: skip
