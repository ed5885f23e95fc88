"""One module per kernel: its declared INTERFACE and the code that calls the kernel."""
