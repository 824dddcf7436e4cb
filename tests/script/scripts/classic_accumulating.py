# The classic example, three backward calls, .grad left to add up.
import torch
from torch.autograd import Variable

xvar = Variable(torch.Tensor([1]), requires_grad=True)
y1 = Variable(torch.Tensor([2]), requires_grad=False)
y2 = Variable(torch.Tensor([7]), requires_grad=False)
out1 = xvar * y1
out2 = xvar * y2
L = (out1 - out2) ** 2
L.backward()
out1 = (xvar * y1).detach()
out2 = xvar * y2
L = (out1 - out2) ** 2
L.backward(retain_graph=True)
out1 = xvar * y1
out2 = out2.detach()
L = (out1 - out2) ** 2
torch.autograd.backward(L)
