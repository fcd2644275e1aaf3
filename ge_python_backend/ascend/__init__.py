"""Ascend vocabulary and file formats, with no runtime: what CANN's headers, docs and files say.

``constants`` holds pyACL's codes and types, ``layout`` a model's inputs, outputs and gears as
pyACL reports them, ``om`` the offline ``.om`` reader, ``simom`` the simulated ``.om`` format,
``aipp`` and ``atcflags`` ATC's AIPP configuration and option syntax, ``acljson`` the keys
``acl.init`` reads, ``limits`` and ``resources`` each SoC's streams and events and what a model
takes of them. Every rule here cites CANN's source (docs/fidelity.md).
"""
