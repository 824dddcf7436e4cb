# The classic example, one statement a line:
#   gradflow eval --file examples/blog.gf --x 1 --y1 2 --y2 7
out1 = x*y1
out2 = x*y2
L = (detach(out1) - out2)^2
