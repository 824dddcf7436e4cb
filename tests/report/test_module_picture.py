"""inspect's module picture: no cycle (no two nodes pointing at each other), and parameters of different
status never merged into one box. Models are plain torch / transformers from tiny configs."""
from __future__ import annotations

import pytest
import torch

import gradflow
from gradflow.report.module_picture import build_picture

from .test_real_models import gpt2, lm_loss


def _acyclic(edges) -> bool:
    out: dict[str, list[str]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
    state: dict[str, int] = {}

    def visit(n: str) -> bool:
        state[n] = 1
        for m in out.get(n, ()):
            if state.get(m) == 1 or (m not in state and not visit(m)):
                return False
        state[n] = 2
        return True

    return all(visit(n) for n in list(out) if n not in state)


def test_gpt2_picture_has_no_two_way_edge_nor_cycle():
    model = gpt2()
    with gradflow.trace() as t:
        loss = lm_loss(model)
    pic = build_picture(t.explain(loss, params=model))
    assert not [(a, b) for a, b in pic.edges if (b, a) in pic.edges]
    assert _acyclic(pic.edges)
    assert any(label.endswith("(continued)") for label in pic.labels.values())  # transformer after wte


class Half(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 1)})

    def forward(self, x):
        return self.block["b"](self.block["a"](x).detach()).sum()


def test_a_module_of_mixed_status_gets_a_box_per_status():
    model = Half()
    with gradflow.trace() as t:
        loss = model(torch.randn(4, 3))
    report = t.explain(loss, params=model)
    assert {p.status for p in report.params} == {"cut", "live"}  # plain torch agrees: only b.* gets a grad
    loss.backward()
    assert model.block["a"].weight.grad is None and model.block["b"].weight.grad is not None
    labels = build_picture(report, depth=1).labels
    assert labels["m:block [cut]"] == "block [cut]\n2 params: 2 cut"
    assert labels["m:block [live]"] == "block [live]\n2 params: 2 live"
    assert "m:block" not in labels or not labels["m:block"].startswith("block\n4 params")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="module")
def lora_llama():
    torch.manual_seed(0)
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0,
                         eos_token_id=1, pad_token_id=1)
    base = LlamaForCausalLM(config)
    plain_boxes = {".".join(n.rsplit(".", 1)[0].split(".")[:2]) for n, _ in base.named_parameters()}  # torch's
    with gradflow.trace() as t:  # built inside the trace, as a user's main() does: its rotary set-up is traced
        model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                lora_dropout=0.0))
        ids = torch.randint(0, 64, (2, 8))
        loss = model(input_ids=ids, labels=ids).loss
    return t.explain(loss, params=model), plain_boxes


def _reaches(edges, start, goal) -> bool:
    todo, seen = [start], {start}
    while todo:
        for a, b in edges:
            if a == todo[-1] and b not in seen:
                seen.add(b)
                todo.insert(0, b)
        todo.pop()
    return goal in seen


@pytest.mark.slow
def test_a_peft_lora_model_is_drawn_as_the_model_it_wraps(lora_llama):
    report, plain_boxes = lora_llama
    pic = build_picture(report)
    boxes = {k[2:].split(" [")[0] for k, kind in pic.kinds.items() if k.startswith("m:") and kind not in ("op",)}
    assert boxes == plain_boxes == {"model.embed_tokens", "model.layers", "model.norm", "lm_head"}
    assert {k for k in pic.labels if k.startswith("m:model.layers")} >= {"m:model.layers [frozen]",
                                                                        "m:model.layers [live]"}
    # the data's way: embeddings -> the layers' ops -> norm -> lm_head -> loss; no set-up op drawn
    assert _reaches(pic.edges, "m:model.embed_tokens", "m:model.layers")
    assert _reaches(pic.edges, "m:model.layers", "m:model.norm") and _reaches(pic.edges, "m:lm_head", "loss")
    assert not [k for k in pic.labels if k.startswith("op")], pic.labels
    assert not any("base_model" in label for label in pic.labels.values())


@pytest.mark.slow
def test_module_picture_mermaid_greys_frozen_boxes_as_dot_does(lora_llama):
    from gradflow.report.module_picture import to_dot, to_mermaid

    report, _ = lora_llama
    frozen = [k for k, kind in build_picture(report).kinds.items() if kind == "frozen"]
    assert frozen
    assert ('label="model.embed_tokens\\n1 param: 1 frozen", fillcolor="#e0e0e0", color="#9e9e9e", '
            'fontcolor="#616161"') in to_dot(report)
    lines = to_mermaid(report).splitlines()
    assert "  classDef frozen fill:#e0e0e0,stroke:#9e9e9e,color:#616161" in lines
    (members,) = [line.split()[1] for line in lines if line.startswith("  class ") and line.endswith(" frozen")]
    assert len(members.split(",")) == len(frozen)
