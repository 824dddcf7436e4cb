"""A tiny LLaMA with peft LoRA on q_proj and v_proj, and its truth in plain torch: no gradflow here.

`main()` is what `gradflow inspect tests/render/plain_peft.py:main` traces; `truth()` runs the same step with a
plain backward and says, per parameter name (torch's own `named_parameters()`), "frozen" (requires_grad=False),
"zero" (a gradient of exactly zero: lora_A at step 0, as lora_B starts at zero) or "live".
Not collected by pytest (no test_ prefix).
"""
import torch

IDS = torch.tensor([[3, 5, 7, 9, 11, 2]])


def build():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=32, max_position_embeddings=16, bos_token_id=0,
                         eos_token_id=1, pad_token_id=0)
    return get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                               lora_dropout=0.0))


def main():
    model = build()
    return model(input_ids=IDS, labels=IDS).loss


def truth() -> dict[str, str]:
    model = build()
    model(input_ids=IDS, labels=IDS).loss.backward()
    return {name: "frozen" if not p.requires_grad else "zero" if not p.grad.any() else "live"
            for name, p in model.named_parameters()}
