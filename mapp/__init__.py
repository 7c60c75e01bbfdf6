"""mapp: see where every rank's time went in Megatron-core training, and why.

The offline toolkit (``mapp.analysis``, ``mapp.sql``, ``mapp.cli``) never imports torch;
the capture side (``mapp.capture``, ``mapp.megatron_hooks``) is the optional ``[megatron]`` extra.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
