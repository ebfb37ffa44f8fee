"""A stand-in for jaxlib: its extension ``jaxlib._jax`` (_jax.py) keeps XLA's BFC allocator as
JAX 0.11's GPU out-of-memory path shows it."""

version = __version__ = "0.11.0+standin"
