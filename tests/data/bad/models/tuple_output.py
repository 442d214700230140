import math

import torch
from torch import nn


class Two(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n)

    def forward(self, x):
        return self.fc(x), x


def make(shape, n):
    return Two(math.prod(shape), n)
