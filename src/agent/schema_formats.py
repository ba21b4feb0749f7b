"""The formats argument validation asserts, checked with the standard library only.

``date``, ``time``, ``date-time`` (RFC 3339), ``email``, ``ipv4``, ``ipv6``, ``uuid`` (hyphenated) and ``uri``
(absolute, RFC 3986 characters): so the outcome never depends on which optional extras a validator library has
installed. `FORMATS` maps each name to its checker (what `agent.schema` hands the validator); `FORMAT_CHECKER` is the
same set as a jsonschema `FormatChecker` (the reference validator in tests uses it); `FORMAT_HINTS` says in words
what each expects, for error reasons. Other formats are not checked.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable
from datetime import date
from typing import Final

from jsonschema import FormatChecker

__all__ = ["FORMATS", "FORMAT_CHECKER", "FORMAT_HINTS"]

FORMAT_CHECKER: Final = FormatChecker(formats=())
"""The format checker validation uses; exactly the formats listed in the module docstring."""

_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})\Z")
_TIME_RE = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))\Z")
_EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+\Z")
_UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z")
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*\Z")

FORMAT_HINTS: Final = {
    "date": "a date YYYY-MM-DD",
    "time": "a time HH:MM:SS with a UTC offset, e.g. 14:30:00Z",
    "date-time": "a date-time, e.g. 2026-10-03T14:30:00Z",
    "email": "an email address",
    "ipv4": "an IPv4 address, e.g. 192.0.2.1",
    "ipv6": "an IPv6 address",
    "uuid": "a UUID, e.g. 123e4567-e89b-12d3-a456-426614174000",
    "uri": "an absolute URI, e.g. https://example.com/x",
}


@FORMAT_CHECKER.checks("date")
def _is_date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    m = _DATE_RE.match(value)
    if m is None:
        return False
    try:
        date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("time")
def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    m = _TIME_RE.match(value)
    if m is None:
        return False
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if hour > 23 or minute > 59 or second > 60:
        return False
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return True


@FORMAT_CHECKER.checks("date-time")
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if len(value) < 11 or value[10] not in "Tt ":
        return False
    return _is_date(value[:10]) and _is_time(value[11:])


@FORMAT_CHECKER.checks("email")
def _is_email(value: object) -> bool:
    return not isinstance(value, str) or _EMAIL_RE.match(value) is not None


@FORMAT_CHECKER.checks("ipv4")
def _is_ipv4(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not value.isascii():
        return False
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("ipv6")
def _is_ipv6(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not value.isascii() or "%" in value:
        return False
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


@FORMAT_CHECKER.checks("uuid")
def _is_uuid(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if _UUID_RE.match(value) is None:
        return False
    uuid.UUID(value)
    return True


@FORMAT_CHECKER.checks("uri")
def _is_uri(value: object) -> bool:
    return not isinstance(value, str) or _URI_RE.match(value) is not None


FORMATS: Final[dict[str, Callable[[str], bool]]] = {name: checker for name, (checker, _) in
                                                    FORMAT_CHECKER.checkers.items()}
"""Format name → checker (True when the string conforms)."""
