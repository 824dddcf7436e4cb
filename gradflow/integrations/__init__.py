"""gradflow inside the training frameworks users already run: a Hugging Face `TrainerCallback`
(integrations/huggingface.py) and a Lightning `Callback` (integrations/lightning.py), both thin adapters over
integrations/step_check.py, which traces the first optimizer step and says which parameters got no gradient
(an FSDP2 model's by the unsharded tensors its forward used; under torchrun, the ranks' own backwards compared
once, at the first step).

Importing this package imports neither torch nor a framework; each adapter module imports its own framework.
"""
