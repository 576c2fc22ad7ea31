"""The one error type of the CDI package.

It derives from `ValueError` because every failure here is bad input (a name, a field, a file's
content), and callers that already catch `ValueError` for claim configuration keep working.
"""

from __future__ import annotations


class CdiError(ValueError):
    """A CDI name, spec or file is invalid; the message names the field or value at fault."""
