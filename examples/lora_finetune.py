"""LoRA fine-tuning of a tiny LLaMA with peft: AdamW on the adapters, an evaluation under no_grad after each step
and a few generated tokens (docs/script.md).

    gradflow script examples/lora_finetune.py

Built from a tiny config (transformers, nothing downloaded). peft freezes the base weights inside get_peft_model();
the adapters (lora_A, lora_B of q_proj and v_proj) train. The embedding has a padding row (pad_token_id): torch
zeroes it through a view made under no_grad while the model is built. Two classic mistakes, on request:

    gradflow script examples/lora_finetune.py -- --optimizer-first   # AdamW made before get_peft_model()
    gradflow script examples/lora_finetune.py -- --checkpointing     # reentrant gradient checkpointing
    gradflow script examples/lora_finetune.py -- --checkpointing --fix
"""
import sys
import warnings

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

STEPS = 6


def tiny_llama(checkpointing: bool):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         bos_token_id=0, eos_token_id=1, pad_token_id=2, use_cache=False)
    model = LlamaForCausalLM(config)
    if checkpointing:  # to save memory; reentrant, as older transformers releases did by default
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        # torch does warn about the trap, once, among the rest of a training log (silenced for the docs)
        warnings.filterwarnings("ignore", "None of the inputs have requires_grad")
    return model


@torch.no_grad()
def evaluate(model, ids, generate: bool):
    model.eval()
    loss = model(input_ids=ids, labels=ids).loss.item()
    tokens = model.generate(input_ids=ids[:, :4], max_new_tokens=3, do_sample=False) if generate else None
    model.train()
    return loss, tokens


def main(args):
    model = tiny_llama("--checkpointing" in args)
    if "--optimizer-first" in args:  # the mistake: the adapters do not exist yet
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                             lora_dropout=0.0))
    if "--checkpointing" in args:
        model.get_input_embeddings()._forward_hooks.clear()  # as older releases left it: no input requires grad
        if "--fix" in args:
            model.enable_input_require_grads()
    if "--optimizer-first" not in args:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(3, 64, (2, 12))
    for step in range(STEPS):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        evaluate(model, ids, generate=step == STEPS // 2)


if __name__ == "__main__":
    main(sys.argv[1:])
