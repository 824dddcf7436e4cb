"""A rank that never comes back: rank 1 waits for data that never arrives. gradflow reports it as hung once the
other ranks have waited --timeout seconds for it, stops every rank and exits 7.

    gradflow ddp examples/ddp_hang.py:main --timeout 5
"""
import time

import torch
from torch import nn


def main(rank, world_size):
    model = nn.Linear(4, 1)
    if rank == 1:
        time.sleep(3600)  # a stuck data loader, say
    return model, lambda m: m(torch.ones(2, 4)).sum()
