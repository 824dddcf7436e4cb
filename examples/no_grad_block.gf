# The classic example as PyTorch code writes it, with a `with torch.no_grad():` block:
#   gradflow eval --file examples/no_grad_block.gf --x 1 --y1 2 --y2 7
out1 = x*y1
with torch.no_grad():
    out2 = x*y2    # computed untracked: a constant to backward
L = (out1 - out2)**2
