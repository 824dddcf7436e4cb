# no_grad, exp, sum, mean, pow both ways, rsub, div, max(a, b), relu, neg, sigmoid, tanh, abs, min, @, a 0-d
# constant, several outputs, a gradient argument, a dtype change.
import torch

x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
w = torch.tensor(0.5, requires_grad=True)
c = torch.tensor(3.0)

def loss_of(x, w):
    h = x * w
    with torch.no_grad():
        g = h * 2
    z = torch.exp(h).sum() + (g * x).mean() - c * w ** 2 + 2 ** w + torch.max(x, h).sum() + (-h).relu().sum()
    return z - (1 - x / (w * 4)).sum() + torch.tensor(2.0) * x.sigmoid().tanh().mean() - abs(x).min()

z = loss_of(x, w)
z.backward(retain_graph=True)
x.grad, w.grad = None, None
q = x @ x + torch.sigmoid(w) / w.tanh()
q2 = q * 1
torch.autograd.backward([q, q2 * 3])
x.grad, w.grad = None, None
v = x.clone().to(torch.float32).float() * 2
v.backward(torch.tensor([1.0, 0.0, 2.0]))
x.grad = None
x.double().sum().backward()
