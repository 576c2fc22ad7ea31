"""Name formats, with the messages of `k8s.io/apimachinery/pkg/util/validation`
(`IsDNS1123Subdomain`, `IsDNS1123Label`, `IsQualifiedName`, `IsValidLabelValue`).

Each check returns the list of messages upstream returns (empty when the name is fine); the
callers attach them to a field as "Invalid value" errors, as upstream's `ValidateObjectMeta` and
friends do.
"""

from __future__ import annotations

import re

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_QUALIFIED_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = f"({_QUALIFIED_FMT})?"

_LABEL_RE = re.compile(_LABEL_FMT)
_SUBDOMAIN_RE = re.compile(_SUBDOMAIN_FMT)
_QUALIFIED_RE = re.compile(_QUALIFIED_FMT)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE_FMT)

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63


def _regex_error(what: str, fmt: str, *examples: str) -> str:
    """Upstream's `RegexError`: the rule, examples, and the expression used."""
    shown = ",  or ".join(f"'{e}'" for e in examples)
    return f"{what} (e.g. {shown}, regex used for validation is '{fmt}')"


_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)


def dns1123_label(value: str) -> list[str]:
    problems = []
    if len(value) > DNS1123_LABEL_MAX:
        problems.append(f"must be no more than {DNS1123_LABEL_MAX} characters")
    if not _LABEL_RE.fullmatch(value):
        problems.append(_regex_error(_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return problems


def dns1123_subdomain(value: str) -> list[str]:
    problems = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        problems.append(f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters")
    if not _SUBDOMAIN_RE.fullmatch(value):
        problems.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return problems


def qualified_name(value: str) -> list[str]:
    """An optional DNS-subdomain prefix and '/', then a name part (label keys, resource names,
    scheduling gates)."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        problems: list[str] = []
    elif len(parts) == 2:
        prefix, name = parts
        problems = []
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems.extend(f"prefix part {p}" for p in dns1123_subdomain(prefix))
    else:
        return [
            _regex_error(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character",
                _QUALIFIED_FMT,
                "MyName",
                "my.name",
                "123-abc",
            )
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        problems.append(f"name part must be no more than {QUALIFIED_NAME_MAX} characters")
    if not _QUALIFIED_RE.fullmatch(name):
        problems.append(
            _regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc")
        )
    return problems


def label_value(value: str) -> list[str]:
    problems = []
    if len(value) > LABEL_VALUE_MAX:
        problems.append(f"must be no more than {LABEL_VALUE_MAX} characters")
    if not _LABEL_VALUE_RE.fullmatch(value):
        problems.append(
            _regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return problems
