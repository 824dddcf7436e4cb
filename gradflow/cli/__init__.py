"""The `gradflow` command: app.py registers one module per command; process plumbing; start-up tricks."""
