import math

import torch
from torch import nn


def make(shape, n):
    return {'weights': [1, 2, 3]}
