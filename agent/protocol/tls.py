"""TLS for the SSL and SASL_SSL listeners: a server context from PEM files, reloaded when the
files change, and the mTLS principal of a client certificate.

The context is built from `ssl.certificate.location` (the certificate chain, PEM; it may hold
the key too), `ssl.key.location` (the private key, PEM, unencrypted) and `ssl.ca.location`
(the CAs client certificates must chain to), with TLS 1.2 as the lowest version (as Kafka's
default `ssl.enabled.protocols`) and `ssl.client.auth` none | requested | required. Each
connection's handshake takes the context current when it was accepted (the server starts
it itself, through tlsconn.py, so a failed handshake is counted and closes only that
connection). `Tls.reload_if_changed` rebuilds the context when any file's modification time
or size changed: the server checks every `ssl.reload.interval.ms` and on SIGHUP; a context
that fails to build (a half-written file) is logged and the old one kept, so renewing a
certificate needs no restart. Connections already open keep their session.

The principal of a client certificate is Kafka's: its subject as an RFC 2253 distinguished
name (cryptography's RFC 4514 string: the same order and escaping for the usual attributes),
mapped by `ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper: `DEFAULT` keeps the
name, `RULE:pattern/replacement/[LU]` matches the whole name and rewrites it, optionally
lower- or upper-cased; the first rule that matches wins, and a name no rule matches fails
the connection). No certificate: `User:ANONYMOUS`.
"""

from __future__ import annotations

import logging
import os
import ssl

from cryptography import x509

from agent.config import SSL_CERTIFICATE_LOCATION, AgentConfig
from agent.principals import PrincipalMapper
from settings import SettingError

from .session import ANONYMOUS

log = logging.getLogger(__name__)

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}


def subject_name(der: bytes) -> str:
    """A DER certificate's subject as RFC 2253/4514 text (most specific RDN first)."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def certificate_principal(ssl_object: ssl.SSLObject | None, mapper: PrincipalMapper) -> str:
    """The principal of the client certificate of a finished handshake (User:ANONYMOUS
    without one); NoMatchingRule if the mapping rules refuse its subject."""
    der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
    if not der:
        return ANONYMOUS
    return "User:" + mapper.name(subject_name(der))


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class Tls:
    """The TLS listeners' server context, rebuilt from its files when they change."""

    def __init__(self, config: AgentConfig) -> None:
        self.certificate = config.ssl_certificate_location
        self.key = config.ssl_key_location or None
        self.ca = config.ssl_ca_location or None
        self.client_auth = CLIENT_AUTH[config.ssl_client_auth]
        self.mapper = PrincipalMapper(config.ssl_principal_mapping_rules)
        self._stamps = self._files_stamps()
        try:
            self.context = self._build()
        except (OSError, ValueError) as exc:  # unreadable files or keys: stop at start-up
            raise SettingError(f"cannot load the TLS files ({SSL_CERTIFICATE_LOCATION}"
                               f" {self.certificate}): {exc}") from None

    def _files(self) -> list[str]:
        return [p for p in (self.certificate, self.key, self.ca) if p]

    def _files_stamps(self) -> list[tuple[int, int] | None]:
        return [_stamp(p) for p in self._files()]

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certificate, self.key)
        context.verify_mode = self.client_auth
        if self.ca:
            context.load_verify_locations(cafile=self.ca)
        return context

    def reload_if_changed(self) -> bool:
        """Rebuild the context if a file changed since the last build; whether it did. A
        build that fails keeps the old context (logged; tried again at the next check)."""
        stamps = self._files_stamps()
        if stamps == self._stamps:
            return False
        try:
            context = self._build()
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            log.warning("TLS files changed but do not load (%s): keeping the previous"
                        " certificate", exc)
            return False
        self.context, self._stamps = context, stamps
        log.warning("TLS certificate reloaded from %s", ", ".join(self._files()))
        return True
