"""A script of 30 random expressions, one backward each, for the script tests (test_script.py checks each
program against the grads the recorder saw, test_programs.py against plain torch)."""
import random


def _random_expr(rng, depth: int) -> str:
    """A random Python/torch expression over x, y (0-d) and w (a vector), safe to evaluate anywhere."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(["x", "y", "w", "c"])
    a, b = _random_expr(rng, depth - 1), _random_expr(rng, depth - 1)
    return rng.choice([
        f"({a} + {b})", f"({a} - {b})", f"({a} * {b})", f"({a} / (1 + {b} ** 2))", f"(-{a})", f"({a}) ** 2",
        f"torch.exp(torch.tanh({a}))", f"torch.sin({a})", f"({a}).sigmoid()", f"torch.relu({a})", f"abs({a})",
        f"({a}).detach()", f"(2 - {a})", f"(1.5 * {a})", f"torch.maximum({a}, {b})", f"torch.tanh({a}).sum()",
    ])


def generated_script(seed: int = 20180101, count: int = 30) -> str:
    """Operators with Python's precedence, methods, reversed operands and detach over x, y, w and a constant."""
    rng = random.Random(seed)
    lines = ["import torch", "x = torch.tensor(0.7, requires_grad=True)", "y = torch.tensor(-1.3, requires_grad=True)",
             "w = torch.tensor([0.5, -0.25], requires_grad=True)", "c = torch.tensor([2.0, -1.0])"]
    for _ in range(count):
        lines += [f"L = ({_random_expr(rng, 4)} + x * y * w).sum()", "L.backward()",
                  "x.grad = y.grad = w.grad = None"]
    return "\n".join(lines) + "\n"
