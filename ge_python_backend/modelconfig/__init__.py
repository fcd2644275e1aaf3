"""The Triton model config a model needs, Triton-free: ``derive`` (from a ``ModelSpec``, for
``ge-triton generate`` and GEModel's auto-complete) and ``matching`` (a config against a model, for
``check`` and the load)."""
