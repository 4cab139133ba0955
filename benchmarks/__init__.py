"""capa-py's benchmarks (``make bench``): each module is a script printing figures, run as
``python -m benchmarks.<name>`` from the repository's root (or by its path); tests import them as modules."""
