"""The kernel engine: find modules, generate Triton candidates, verify and time them."""
