"""`gradflow script FILE.py`: run a whole script, record each backward(), write the `gradflow eval` program that
reproduces it, and show it."""
