"""Every long option of every command (without --), and the commands that have it.

A run builds only the command it runs (cli/app.py), yet no name may be silently a variable in one command and
an option in another (`--seed 3`), so the names of all commands' options are kept here as data: reading them
from the full app would build all eight commands on every run (~10 ms). It is `cli.app.option_table()`
written out: tests/cli/test_scripting.py fails when a command's options changed and this was not updated, and
prints the new table to paste here.
"""
from __future__ import annotations

OWNERS: dict[str, tuple[str, ...]] = {
 'allow': ('ddp', 'inspect'),
 'arg': ('inspect',),
 'brief': ('batch', 'eval'),
 'check': ('eval',),
 'debug': ('batch', 'compare', 'ddp', 'eval', 'graph', 'inspect', 'script', 'whatif'),
 'depth': ('inspect',),
 'device': ('batch', 'compare', 'eval', 'graph', 'whatif'),
 'dtype': ('batch', 'compare', 'eval', 'graph', 'whatif'),
 'expand': ('inspect',),
 'fail-on': ('ddp', 'inspect'),
 'file': ('eval', 'graph', 'whatif'),
 'first-line': ('batch',),
 'flows': ('eval',),
 'format': ('graph',),
 'full': ('batch', 'eval'),
 'graph': ('eval', 'inspect'),
 'health': ('inspect',),
 'html': ('eval', 'inspect', 'script'),
 'jobs': ('batch',),
 'json': ('compare', 'ddp', 'eval', 'inspect', 'ops', 'script', 'whatif'),
 'library-lines': ('inspect',),
 'limit': ('batch', 'compare', 'eval', 'script', 'whatif'),
 'modes': ('compare',),
 'nproc': ('ddp',),
 'only-problems': ('inspect',),
 'order': ('eval',),
 'output': ('graph', 'inspect'),
 'plot': ('eval', 'inspect'),
 'seed': ('batch', 'eval'),
 'strict': ('batch', 'compare', 'eval', 'graph', 'whatif'),
 'summary': ('batch', 'compare', 'eval', 'script', 'whatif'),
 'text': ('batch',),
 'timeout': ('ddp',),
 'var': ('batch', 'compare', 'eval', 'graph', 'whatif'),
 'wrt': ('batch', 'compare', 'eval', 'graph', 'whatif'),
}

