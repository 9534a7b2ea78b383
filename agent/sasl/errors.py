"""What goes wrong in a SASL exchange or a credential change (rows of
agent/protocol/errors.py `CODES`)."""

from __future__ import annotations


class AuthenticationFailed(Exception):
    """The client did not prove who it is (SASL_AUTHENTICATION_FAILED). The message goes to
    the client: it never says whether the user exists, nor anything of the secret."""

    retriable = False


class UnacceptableCredential(ValueError):
    """A SCRAM credential Kafka would refuse: too few or too many iterations, an empty user
    name (UNACCEPTABLE_CREDENTIAL)."""

    retriable = False


class UnsupportedMechanism(ValueError):
    """A SASL or SCRAM mechanism this agent does not serve (UNSUPPORTED_SASL_MECHANISM)."""

    retriable = False

