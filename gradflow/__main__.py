from gradflow.cli.app import run

run()
