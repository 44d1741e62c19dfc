"""Machine proof of the rules (issue 7): the rule soundness suite, the differential
fuzzer and the robustness runs. One command runs them all: ``python -m soundness``.

Not part of the installed package: it imports the engine, the runtime and mypy
side by side, runs real gloo ranks, and prints what it checked.
"""
