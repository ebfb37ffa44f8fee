"""``jax.errors``: ``JaxRuntimeError`` is jaxlib's (``jaxlib._jax.JaxRuntimeError``), the same class."""

from jaxlib._jax import JaxRuntimeError  # noqa: F401
