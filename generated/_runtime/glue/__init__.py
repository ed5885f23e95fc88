# Copied by `layoutc compile` from layoutc/runtime/glue/__init__.py. DO NOT EDIT: it is the
# shared runtime of every module in this package; edit layoutc's source.
"""One module per kernel: its declared INTERFACE and the code that calls the kernel."""
