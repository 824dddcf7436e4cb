# Lazy, sparse, meta and complex tensors in scope are left out of the table.
import torch

lazy = torch.nn.LazyLinear(2)
sp = torch.eye(2).to_sparse()
meta = torch.ones(2, device="meta")
z = torch.ones(2, dtype=torch.complex64)
x = torch.ones(2, requires_grad=True)
(x * 2).sum().backward()
