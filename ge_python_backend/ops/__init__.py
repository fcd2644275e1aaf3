"""Running things around a model repository: the layer ``ge-triton`` composes for its verbs.

``server`` finds, starts and stops a tritonserver (loopback by default, its ports checked
first); ``loadcheck`` asks a real server to load each model
(``check --load``); ``bench`` is the load generator with its metric scrapes and reports;
``soak`` checks integrity under load; ``deploy`` writes Kubernetes manifests and an image build
context; ``ports`` tells which process holds a port.
"""
