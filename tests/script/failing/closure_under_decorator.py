# An optimizer whose step() is decorated with @torch.no_grad() runs the closure with gradients off.
import torch


class Plain(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure):
        loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"])
        return loss


w = torch.tensor([1.0, 2.0], requires_grad=True)
x = torch.tensor([3.0, 4.0])
opt = Plain([w], lr=0.1)


def closure():
    opt.zero_grad()
    loss = ((w * x).sum() - 1) ** 2  # cut here
    loss.backward()
    return loss


opt.step(closure)
