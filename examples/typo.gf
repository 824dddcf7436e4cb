# A program with a syntax error on line 6 (docs/language.md shows the message).
out1 = x*y1
out2 = (x *
        y2)
# the next line has a stray '*'
L = (detach(out1) -* out2)^2
