"""kde-fWGD (function-space WGD: Eq. 5 with the KDE of Eq. 20) on a small CNN of one's own, on FashionMNIST.

python examples/fmnist_cnn_fwgd.py PATH/TO/FashionMNIST/raw [steps particles]
"""

import sys

import torch
from torch import nn

import repens
from repens.data.images import read_idx

root = sys.argv[1]
steps, n = (int(a) for a in sys.argv[2:] or ["1000", "10"])


def images(prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
    read = lambda what: torch.tensor(read_idx(f"{root}/{prefix}-{what}.gz"))  # noqa: E731
    return read("images-idx3-ubyte").float().unsqueeze(1) / 255, read("labels-idx1-ubyte").long()


(x, y), (x_test, y_test) = images("train"), images("t10k")
conv = nn.Sequential(nn.Conv2d(1, 8, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2))
net = nn.Sequential(conv, nn.Flatten(), nn.Linear(16 * 4 * 4, 10))
posterior = repens.ensemble(net, likelihood="categorical", num_train=len(x), prior=0.1)
rule = repens.FunctionWGD(posterior, estimator="kde", lr=1e-3)
g = torch.Generator().manual_seed(0)
state = rule.init(posterior.sample_prior(n, g), g)
for _ in range(steps):
    batch = torch.randint(len(x), (128,), generator=g)
    state, step = rule.update(state, repens.Batch(x[batch], y[batch]))
with torch.no_grad():
    probs = posterior.predict(state.params, x_test[:2000]).softmax(-1).mean(0)
print(f"kde-fWGD, {n} CNNs, {steps} steps: test accuracy {(probs.argmax(-1) == y_test[:2000]).float().mean():.3f}")
