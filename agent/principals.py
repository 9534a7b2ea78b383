"""Kafka's `ssl.principal.mapping.rules` (SslPrincipalMapper): a client certificate's
distinguished name to a principal name. Pure: the settings check it, the TLS listeners
apply it (agent/protocol/tls.py).

`DEFAULT` keeps the name; `RULE:pattern/replacement/[LU]` applies when the pattern matches
the WHOLE name, rewrites it (Java's replaceAll: `$1` back references) and optionally lower-
or upper-cases it. Rules are comma-separated and tried in order; the first that applies
wins; a name none applies to is refused (NoMatchingRule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Kafka's SslPrincipalMapper.RULE_PATTERN, in Python's syntax (the same regular expression).
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No `ssl.principal.mapping.rules` rule applies to a certificate's subject."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        out = self.pattern.sub(_java_replacement(self.replacement, self.pattern.groups), name)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def _java_replacement(text: str, groups: int) -> str:
    """A Java replaceAll replacement (`$1`; a reference past the groups is shortened as
    Kafka does, then literal) as a Python one."""
    out, last = [], 0
    for m in _BACK_REFERENCE.finditer(text):
        out.append(text[last:m.start()].replace("\\", "\\\\"))
        digits = m.group(1)
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        out.append(f"\\g<{index}>" if 0 < index <= groups and not digits.startswith("0")
                   else m.group(0))
        last = m.end()
    out.append(text[last:].replace("\\", "\\\\"))
    return "".join(out)


class PrincipalMapper:
    """`ssl.principal.mapping.rules`, parsed (ValueError for an invalid rule, as Kafka
    refuses it at start-up)."""

    def __init__(self, rules: str) -> None:
        self.rules: list[_Rule] = []
        for m in _SPLITTER.finditer(rules.strip()):
            rule = m.group(1)
            if not rule and m.end() >= len(rules.strip()):
                break
            parsed = _PARSER.match(rule)
            if parsed is None or parsed.end() != len(rule):
                raise ValueError(f"invalid rule: {rule!r}")
            if parsed.group(1):
                self.rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ValueError(f"invalid rule {rule!r}: {exc}") from None
                self.rules.append(_Rule(pattern, parsed.group(3), parsed.group(4)))
            elif parsed.group(5):
                raise ValueError(f"invalid rule: {rule!r}")

    def name(self, distinguished_name: str) -> str:
        """The principal name of a certificate subject; NoMatchingRule if no rule applies."""
        for rule in self.rules:
            out = rule.apply(distinguished_name)
            if out is not None:
                return out
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to"
                             f" {distinguished_name!r}")


