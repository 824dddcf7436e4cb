"""A sparse tensor (an nn.Embedding(sparse=True)'s gradient) is shown as the dense tensor it stands for: in
JSON, in summaries and in `gradflow script`'s records. It was an internal error ("reshape is not implemented
for sparse tensors", "Cannot access data pointer of Tensor that doesn't have storage")."""
import json
import textwrap

import torch

from gradflow.values.jsonable import summary, to_jsonable

SCRIPT = """
import torch
torch.manual_seed(0)
emb = torch.nn.Embedding(10, 3, sparse=True)
head = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=0.1)
for step in range(2):
    loss = head(emb(torch.tensor([1, 5, 5]))).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_sparse_tensor_is_its_dense_numbers():
    sparse = torch.sparse_coo_tensor([[0, 2], [1, 0]], [4.0, -1.0], (3, 2), check_invariants=True)
    assert to_jsonable(sparse) == [[0.0, 4.0], [0.0, 0.0], [-1.0, 0.0]]  # written out by hand
    assert summary(sparse) == {"shape": [3, 2], "dtype": "float32", "mean": 0.5, "min": -1.0, "max": 4.0,
                               "norm": 17 ** 0.5}


def test_script_records_a_sparse_gradient(cli, tmp_path):
    path = tmp_path / "sparse.py"
    path.write_text(textwrap.dedent(SCRIPT))
    res = cli("script", str(path), "--json")
    assert res.exit_code == 0, res.stderr
    first = json.loads(res.stdout.splitlines()[0])
    torch.manual_seed(0)  # the script's first step, in plain torch
    emb, head = torch.nn.Embedding(10, 3, sparse=True), torch.nn.Linear(3, 1)
    head(emb(torch.tensor([1, 5, 5]))).pow(2).mean().backward()
    grads = first["grads"]
    assert torch.allclose(torch.tensor(grads["emb.weight"]), emb.weight.grad.to_dense())
    assert torch.allclose(torch.tensor(grads["head.weight"]), head.weight.grad)
