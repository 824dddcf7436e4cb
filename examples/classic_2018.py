# The classic example as it was written in 2018: L = (x*y1 - x*y2)^2 at x=1, y1=2, y2=7.
# Which variables send gradient back to x? Nothing detached, then out1 detached, then out2 detached.
#   python examples/classic_2018.py
#   gradflow script examples/classic_2018.py
import torch
from torch.autograd import Variable

xvar = Variable(torch.Tensor([1]), requires_grad=True)
y1 = Variable(torch.Tensor([2]), requires_grad=False)
y2 = Variable(torch.Tensor([7]), requires_grad=False)

# 1. nothing detached: dL/dx = 2(x*y1 - x*y2)(y1 - y2) = 50
out1 = xvar * y1
out2 = xvar * y2
L = (out1 - out2) ** 2
print("out1 requires grad:", out1.requires_grad, "  out2 requires grad:", out2.requires_grad)
L.backward()
print("xvar.grad:", xvar.grad.data)
xvar.grad.data.zero_()

# 2. out1 detached: dL/dx = -2(x*y1 - x*y2)*y2 = 70
out1 = xvar * y1
out1 = out1.detach()
out2 = xvar * y2
L = (out1 - out2) ** 2
print("out1 requires grad:", out1.requires_grad, "  out2 requires grad:", out2.requires_grad)
L.backward()
print("xvar.grad:", xvar.grad.data)
xvar.grad.data.zero_()

# 3. out2 detached: dL/dx = 2(x*y1 - x*y2)*y1 = -20
out1 = xvar * y1
out2 = xvar * y2
out2 = out2.detach()
L = (out1 - out2) ** 2
print("out1 requires grad:", out1.requires_grad, "  out2 requires grad:", out2.requires_grad)
L.backward()
print("xvar.grad:", xvar.grad.data)
