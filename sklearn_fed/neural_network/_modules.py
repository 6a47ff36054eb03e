"""Torch modules for FedMPDD: a default MLP for tabular data and the paper's LeNet."""

import torch
from torch import nn

__all__ = ["LeNet", "MLP"]


class MLP(nn.Module):
    """A small multilayer perceptron returning logits.

    :class:`~sklearn_fed.neural_network.FedMPDDClassifier` fills ``n_features``
    and ``n_classes`` from the data at the first fit unless given as
    ``module__n_features`` / ``module__n_classes``.

    Parameters
    ----------
    n_features : int
        Input width.
    n_classes : int
        Number of outputs (logits).
    hidden_units : int or tuple of int, default=(32,)
        Width of each hidden layer; ``()`` gives multinomial logistic regression.
    activation : {"relu", "tanh", "sigmoid"}, default="relu"

    Examples
    --------
    >>> import torch
    >>> MLP(4, 3, hidden_units=8)(torch.zeros(2, 4)).shape
    torch.Size([2, 3])
    """

    def __init__(self, n_features, n_classes, hidden_units=(32,), activation="relu"):
        super().__init__()
        if isinstance(hidden_units, int):
            hidden_units = (hidden_units,)
        act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[activation]
        layers, width = [], int(n_features)
        for h in hidden_units:
            layers += [nn.Linear(width, int(h)), act()]
            width = int(h)
        layers.append(nn.Linear(width, int(n_classes)))
        self.net = nn.Sequential(*layers)

    def forward(self, X):
        return self.net(X)


class LeNet(nn.Module):
    """The LeNet of the FedMPDD paper (Table 1), d = 13,426 parameters for 28x28 input.

    Three 5x5 convolutions with 12 channels and sigmoid activations (strides 2,
    2, 1; padding 2), then one linear layer to the logits. Accepts ``(n, 784)``
    or ``(n, 1, 28, 28)`` input.

    Parameters
    ----------
    n_classes : int, default=10
    side : int, default=28
        Height and width of the square input image.
    channels : int, default=12
    init : {"uniform", "torch"}, default="uniform"
        ``"uniform"`` draws every weight and bias from U(-0.5, 0.5), the
        initialization of the DLG code this LeNet comes from (the paper's
        gradient-inversion reference). ``"torch"`` keeps PyTorch's default,
        under which the three sigmoid layers pass almost no gradient: on MNIST
        with lr 0.1, FedSGD stays at chance for hundreds of rounds.

    Examples
    --------
    >>> sum(p.numel() for p in LeNet().parameters())
    13426
    """

    def __init__(self, n_classes=10, side=28, channels=12, init="uniform"):
        super().__init__()
        if init not in ("uniform", "torch"):
            raise ValueError(f"init must be 'uniform' or 'torch', got {init!r}")
        self.side = int(side)
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 5, stride=2, padding=2), nn.Sigmoid(),
            nn.Conv2d(channels, channels, 5, stride=2, padding=2), nn.Sigmoid(),
            nn.Conv2d(channels, channels, 5, stride=1, padding=2), nn.Sigmoid(),
        )
        out = (self.side + 1) // 2
        out = (out + 1) // 2
        self.fc = nn.Linear(channels * out * out, int(n_classes))
        if init == "uniform":
            for parameter in self.parameters():
                nn.init.uniform_(parameter, -0.5, 0.5)

    def forward(self, X):
        X = X.reshape(-1, 1, self.side, self.side)
        return self.fc(torch.flatten(self.features(X), 1))
