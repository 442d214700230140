import math

import torch
from torch import nn


class Take(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x[:, : self.n]


def make(shape, n):
    return Take(n)
