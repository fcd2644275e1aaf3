"""Which of tritonserver's APIs a client may call: restricted API groups and the operator key.

tritonserver 2.51 restricts API groups per protocol with ``--http-restricted-api=GROUPS:HEADER=VALUE``
and ``--grpc-restricted-protocol=GROUPS:HEADER=VALUE`` (server r24.10 ``src/command_line_parser.cc``
``ParseRestrictedFeatureOption``: a group may appear in one restriction only). A restricted call
without the header is refused before its body is read: HTTP 403 "This API is restricted, expecting
header 'HEADER'" (``src/http_server.cc`` ``RespondIfRestricted``), gRPC UNAVAILABLE "This protocol
is restricted, expecting header 'triton-grpc-protocol-HEADER'" (``src/grpc/grpc_server.cc``
``ExecutePrecondition``; gRPC prefixes the header, ``grpc_server.h`` ``kRestrictedProtocolHeaderTemplate``).

``serve``, ``check --load`` and ``deploy`` restrict ``OPERATOR_APIS`` with one operator key: the
APIs that load code (the repository API in explicit mode), map the server's memory (shared
memory), change its logging and tracing, or show the operator's config. Health and metadata stay
open (probes, clients). docs/security.md has the threat model.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.errors import ConfigError
from ge_python_backend.params import Choice


class Api(Choice):
    """tritonserver's restrictable API groups (server r24.10 ``src/restricted_features.h``)."""

    HEALTH = "health"  # /v2/health/*, /v2/models/<m>/ready
    METADATA = "metadata"  # /v2, /v2/models/<m>
    INFERENCE = "inference"  # infer, generate
    SHARED_MEMORY = "shared-memory"  # register system / CUDA shared memory regions
    MODEL_CONFIG = "model-config"  # /v2/models/<m>/config
    MODEL_REPOSITORY = "model-repository"  # index, load (with uploaded files), unload
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


#: Restricted by default with the operator key.
OPERATOR_APIS = (Api.MODEL_REPOSITORY, Api.MODEL_CONFIG, Api.SHARED_MEMORY, Api.TRACE, Api.LOGGING)
#: The HTTP header of the operator key; gRPC clients send it as metadata with GRPC_HEADER_PREFIX.
API_KEY_HEADER = "ge-triton-key"
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
#: Where serve and the deployed pods take the operator key from (random when unset in serve).
API_KEY_ENV = "GE_TRITON_API_KEY"
#: Header that HTTP inference demands when it is off; its value is random and never shown, and the
#: 403 answer names the header, telling the client what to do.
HTTP_INFERENCE_OFF_HEADER = "ge-http-inference-off-use-grpc"
_MIN_KEY_LENGTH = 16


def random_value() -> str:
    return secrets.token_hex(16)


def check_key(value: str, where: str) -> str:
    """An operator key: at least 16 printable ASCII characters without spaces (an HTTP header value)."""
    if len(value) < _MIN_KEY_LENGTH or not all(33 <= ord(c) < 127 for c in value):
        raise ConfigError(
            f"{where}: expected an operator key of at least {_MIN_KEY_LENGTH} printable ASCII characters "
            "without spaces (e.g. `openssl rand -hex 16`)"
        )
    return value


def operator_key(environ: Mapping[str, str] = os.environ) -> str:
    """The key from $GE_TRITON_API_KEY, else a random one."""
    given = environ.get(API_KEY_ENV, "")
    return check_key(given, f"${API_KEY_ENV}") if given else random_value()


def key_headers(key: str, protocol: str) -> dict[str, str]:
    """What a client sends with the operator key: an HTTP header, or gRPC metadata (prefixed)."""
    if not key:
        return {}
    return {(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + API_KEY_HEADER: key}


def parse_apis(text: str) -> tuple[Api, ...]:
    """``"model-config,trace"`` -> the groups; ``"none"`` -> no group; ConfigError for an unknown one."""
    if text.strip() == "none":
        return ()
    names = [n.strip() for n in text.split(",")]
    known = {api.value: api for api in Api}
    for name in names:
        if name not in known:
            raise ConfigError(
                f"--restricted-apis {text!r}: {name!r} is not a tritonserver API group; expected 'none' or a "
                "comma-separated list of " + ", ".join(known)
            )
    return tuple(dict.fromkeys(known[n] for n in names))


@dataclass(frozen=True)
class Restriction:
    """One restriction: API groups that need ``header: value`` on a protocol."""

    apis: tuple[Api, ...]
    header: str
    value: str

    def http_arg(self) -> str:
        return f"--http-restricted-api={','.join(self.apis)}:{self.header}={self.value}"

    def grpc_arg(self) -> str:
        return f"--grpc-restricted-protocol={','.join(self.apis)}:{self.header}={self.value}"


def parse_restriction(text: str) -> Restriction | None:
    """A restriction as tritonserver reads its argument (``GROUPS:HEADER=VALUE``); None if malformed."""
    groups, colon, rest = text.partition(":")
    header, equals, value = rest.partition("=")
    if not (colon and equals and groups and header and value):
        return None
    known = {api.value: api for api in Api}
    apis = tuple(known[g] for g in groups.split(",") if g in known)
    return Restriction(apis, header, value)


@dataclass(frozen=True)
class Access:
    """The restrictions of one tritonserver command line, per protocol, as tritonserver applies them."""

    http: Mapping[Api, Restriction]
    grpc: Mapping[Api, Restriction]

    @classmethod
    def of(cls, http: Iterable[str], grpc: Iterable[str]) -> Access:
        """From the values of every --http-restricted-api and --grpc-restricted-protocol argument."""

        def by_api(texts: Iterable[str]) -> dict[Api, Restriction]:
            found: dict[Api, Restriction] = {}
            for text in texts:
                restriction = parse_restriction(text)
                if restriction is not None:
                    found.update(dict.fromkeys(restriction.apis, restriction))
            return found

        return cls(by_api(http), by_api(grpc))

    def http_headers(self, api: Api) -> dict[str, str]:
        """What an HTTP call to ``api`` must carry (nothing when the group is open)."""
        restriction = self.http.get(api)
        return {restriction.header: restriction.value} if restriction else {}


def restriction_args(
    restricted: Sequence[Api],
    key: str,
    *,
    http_inference: bool,
    taken: Access | None = None,
    off_value: str | None = None,
) -> list[str]:
    """tritonserver arguments restricting ``restricted`` with the operator key on HTTP and gRPC, and
    HTTP inference when it is off, in header HTTP_INFERENCE_OFF_HEADER with ``off_value`` (default:
    a random value nobody learns); groups ``taken`` restricts already are left to it (tritonserver
    refuses a group in two restrictions)."""
    taken = taken or Access({}, {})
    args: list[str] = []
    http = tuple(api for api in restricted if api not in taken.http)
    grpc = tuple(api for api in restricted if api not in taken.grpc)
    if http:
        args.append(Restriction(http, API_KEY_HEADER, key).http_arg())
    if grpc:
        args.append(Restriction(grpc, API_KEY_HEADER, key).grpc_arg())
    if not http_inference and Api.INFERENCE not in taken.http and Api.INFERENCE not in restricted:
        # tritonserver 2.51 has no bound on what an HTTP JSON input may declare: a tiny request
        # with shape [1,3,100000,100000] makes it allocate 120 GB and abort (std::bad_alloc,
        # server r24.10 src/http_server.cc:2752 ParseJsonTritonIO; --http-max-input-size came in
        # r25.06, commit af8bb93). A restricted call is refused before its body is parsed.
        args.append(Restriction((Api.INFERENCE,), HTTP_INFERENCE_OFF_HEADER, off_value or random_value()).http_arg())
    return args


def command_lines_hidden(mounts: Path = Path("/proc/mounts")) -> bool:
    """Whether /proc hides other users' processes (``hidepid``): else any local user reads the
    operator key on tritonserver's command line (tritonserver takes restrictions nowhere else)."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return False
    options = [line.split()[3] for line in lines if len(line.split()) > 3 and line.split()[1] == "/proc"]
    return bool(options) and any(
        o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off") for o in options[-1].split(",")
    )
