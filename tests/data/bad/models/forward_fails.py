import math

import torch
from torch import nn


def make(shape, n):
    return nn.Linear(7, n)
