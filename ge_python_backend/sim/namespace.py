"""The base of the ``acl`` stand-in's namespaces (``acl``, ``acl.rt``, ``acl.mdl``, ``acl.util``).

Apart from ``api.py`` so that ``api.py`` can name the ``api_rt`` and ``api_mdl`` namespaces
(``TopApi`` declares them) while those build on this base, without an import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ge_python_backend.sim.signature import Signature

if TYPE_CHECKING:
    from ge_python_backend.sim.state import SimState


class Namespace:
    """A group of simulated functions bound to one simulator."""

    _prefix = "acl"

    def __init__(self, sim: SimState) -> None:
        self._sim = sim

    def _call(self, short: str, qualified: str, signature: Signature, body) -> Any:
        return self._sim.call(short, qualified, signature, body)

    def __repr__(self) -> str:
        return f"<simulated {self._prefix} module>"
