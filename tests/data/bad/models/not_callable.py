import math

import torch
from torch import nn


make = 42
