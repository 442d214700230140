import math

import torch
from torch import nn


def make(shape, n):
    raise RuntimeError('boom: cannot build')
