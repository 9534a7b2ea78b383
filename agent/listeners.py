"""Kafka's listener model, parsed: `listeners`, `advertised.listeners` and
`listener.security.protocol.map` (the `agent` section's values) into `Listener`s.

A listener is `NAME://HOST:PORT`; its name maps to a security protocol (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) through the protocol map, whose default maps each of the four to
itself, as Kafka's does. A bare `HOST:PORT` (the single-port setting siltstream had before
listeners had names) is the PLAINTEXT listener. `advertised.listeners` names, per listener,
the address Metadata gives clients that came in on it; a listener it does not name (or all,
when it is empty) advertises its listen address, which must then not be a wildcard. A bare
`HOST:PORT` there advertises the first listener. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from settings import parse_host_port

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
_NAME = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True, slots=True)
class Listener:
    """One named listener: where it binds and what it speaks."""

    name: str  # upper case, as Kafka normalises listener names
    protocol: str  # one of PROTOCOLS
    host: str
    port: int  # 0: any free port (tests), the bound one advertised

    @property
    def tls(self) -> bool:
        """Whether connections start with a TLS handshake."""
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        """Whether connections must authenticate with SASL before any other request."""
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)


def is_wildcard(host: str) -> bool:
    """Whether `host` is the unspecified address (0.0.0.0, ::): one to listen on, never one
    a client can connect to."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a host name
        return False


def parse_protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; ValueError if malformed."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _NAME.fullmatch(name) or protocol not in PROTOCOLS:
            raise ValueError(f"{item!r} is not NAME:PROTOCOL (PROTOCOL one of"
                             f" {', '.join(PROTOCOLS)})")
        if name in out:
            raise ValueError(f"listener name {name} mapped twice")
        out[name] = protocol
    return out


def parse_endpoint(item: str) -> tuple[str | None, str, int]:
    """(NAME or None for a bare address, host, port) of `NAME://HOST:PORT` or `HOST:PORT`."""
    name, sep, address = item.partition("://")
    if not sep:
        name, address = "", item
    elif not _NAME.fullmatch(name):
        raise ValueError(f"{item!r}: a listener name is letters, digits and _")
    host_port = parse_host_port(address)
    if host_port is None:
        raise ValueError(f"{item!r} is not NAME://HOST:PORT")
    return (name.upper() or None), *host_port


def listener_names(value: str) -> list[str]:
    """The names a `listeners` or `advertised.listeners` value uses, in order (a bare
    address: ""); ValueError if an entry is malformed."""
    return [parse_endpoint(item)[0] or ""
            for item in filter(None, (part.strip() for part in value.split(",")))]


def parse_listeners(value: str, protocol_map: str = DEFAULT_PROTOCOL_MAP) -> tuple[Listener, ...]:
    """The listeners of a `listeners` value, in order; ValueError says what is wrong (an
    unmapped name, a name or port used twice, nothing at all)."""
    protocols = parse_protocol_map(protocol_map)
    out: list[Listener] = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, host, port = parse_endpoint(item)
        name = name or PLAINTEXT
        if name not in protocols:
            raise ValueError(f"listener {name} has no security protocol in"
                             f" listener.security.protocol.map")
        if any(other.name == name for other in out):
            raise ValueError(f"listener name {name} used twice")
        if port and any(other.port == port and other.host == host for other in out):
            raise ValueError(f"{host}:{port} used by two listeners")
        out.append(Listener(name, protocols[name], host, port))
    if not out:
        raise ValueError("no listener")
    return tuple(out)


def parse_advertised(value: str, listeners: Sequence[Listener]) -> dict[str, tuple[str, int]]:
    """Listener name -> the address Metadata gives its clients: `advertised.listeners`' entry
    for it, else its listen address. ValueError for a name that is no listener, or an
    advertised wildcard."""
    given: dict[str, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, host, port = parse_endpoint(item)
        name = name or listeners[0].name
        if all(lst.name != name for lst in listeners):
            raise ValueError(f"{name} is not one of the listeners")
        given[name] = (host, port)
    out = {lst.name: given.get(lst.name, (lst.host, lst.port)) for lst in listeners}
    for name, (host, _) in out.items():
        if is_wildcard(host):
            raise ValueError(f"listener {name} would advertise the wildcard address {host}:"
                             " give it an address clients can reach")
    return out


def endpoints_text(endpoints: Mapping[str, tuple[str, int]]) -> str:
    """`NAME://host:port,...` of advertised endpoints (log lines)."""
    return ",".join(f"{name}://{host}:{port}" for name, (host, port) in endpoints.items())
