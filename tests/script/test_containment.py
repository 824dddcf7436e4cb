"""`gradflow script` runs the user's script as python does: what the recorder reads must never change what the
script's own code does, even where torch refuses to answer (a view made under no_grad, then written in place:
its grad_fn and is_leaf raise; nn.Embedding's padding row is one, so is any LLaMA built with a pad_token_id).

The oracle is plain_grads.py (it does not import gradflow): the script run by itself, with what each backward()
added to each named leaf's .grad.
"""
import json
from pathlib import Path

import torch

from .plain_grads import grads_per_backward

SCRIPT = Path(__file__).parent / "scripts" / "no_grad_view.py"


def test_views_made_under_no_grad_and_written_in_place_run_as_under_python(cli):
    plain = grads_per_backward(str(SCRIPT))
    assert len(plain) == 1 and set(plain[0]) == {"emb.weight", "w"}
    res = cli("script", str(SCRIPT), "--json")
    assert res.exit_code == 0, res.output
    (call,) = [json.loads(line) for line in res.stdout.splitlines()]
    for name, want in plain[0].items():
        assert torch.allclose(torch.tensor(call["added"][name]), want), name
    # the written view is left out of the table (torch will not say what it is); everything else is there
    assert [t["name"] for t in call["tensors"]] == ["emb.weight", "w", "ids", "loss"]
    assert call["tensors"][1]["value"][0] == [1.0, 1.0, 1.0]  # w's first row, as the script wrote it


def test_a_loop_over_a_padding_embedding_records_its_later_steps_too(tmp_path, cli):
    path = tmp_path / "train.py"
    path.write_text(
        "import torch\n"
        "torch.manual_seed(0)\n"
        "emb = torch.nn.Embedding(8, 4, padding_idx=1)\n"
        "opt = torch.optim.SGD(emb.parameters(), lr=0.1)\n"
        "for step in range(4):\n"
        "    loss = emb(torch.tensor([1, 3, 5])).pow(2).sum()\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    with torch.no_grad():\n"
        "        emb.weight[1].fill_(0)  # the padding row kept at zero by hand, as some scripts do\n")
    plain = grads_per_backward(str(path))
    res = cli("script", str(path), "--json")
    assert res.exit_code == 0, res.output
    calls = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(calls) == len(plain) == 4
    for call, want in zip(calls, plain):
        assert torch.allclose(torch.tensor(call["added"]["emb.weight"]), want["emb.weight"])
