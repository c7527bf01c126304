"""The `cutover` command line: one module per verb, registered in cutover/cli/main.py."""
