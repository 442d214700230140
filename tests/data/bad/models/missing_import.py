import math

import torch
from torch import nn


import no_such_module_for_traindesk


def make(shape, n):
    return nn.Linear(4, n)
