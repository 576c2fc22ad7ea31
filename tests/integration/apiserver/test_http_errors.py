"""What the embedded API server prints when a request fails below HTTP: a client that drops its
kept-alive connection is routine (the official client does it whenever it closes a pool) and
prints nothing; any other failure still prints its traceback, as socketserver does."""

from __future__ import annotations

import pytest

from localcluster.http import Server
from localcluster.storage import Store
from tests.integration.apiserver.test_store import TYPES

# The embedded server's own HTTP error handling: nothing upstream to compare.
pytestmark = pytest.mark.embedded_only


@pytest.fixture
def http_server() -> Server:
    made = Server(("127.0.0.1", 0), Store(TYPES), bookmark_interval_s=60.0)
    made.server_close()  # only its error handling is used here
    return made


@pytest.mark.parametrize("error", [ConnectionResetError, BrokenPipeError])
def test_a_client_that_went_away_prints_nothing(
    http_server: Server, error: type[Exception], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        raise error(104, "Connection reset by peer")
    except error:
        http_server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""


def test_any_other_failure_still_prints_its_traceback(
    http_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        raise ValueError("a broken handler")
    except ValueError:
        http_server.handle_error(None, ("127.0.0.1", 1))
    err = capsys.readouterr().err
    assert "ValueError: a broken handler" in err
    assert "('127.0.0.1', 1)" in err
