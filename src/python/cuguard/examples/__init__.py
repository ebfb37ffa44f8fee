"""Example programs: run them under the shim, e.g. on the simulated driver (no GPU needed):

    cuguard run --driver sim -- python -m cuguard.examples.leaks
"""
