"""The bench's DDP model: examples/transformer_block.py's TinyLM (5.2M parameters), one step per rank.

    gradflow ddp bench/ddp_model.py:main --nproc 2
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from transformer_block import TinyLM, lm_loss  # noqa: E402


def main(rank, world_size):
    torch.manual_seed(0)
    model = TinyLM(4000, 512)

    def step(model):
        torch.manual_seed(rank)
        return lm_loss(model, torch.randint(0, 4000, (8, 65)))

    return model, step
