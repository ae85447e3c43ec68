"""``rlm spark export --from/--to`` read a time as every API reads a timestamp."""

from __future__ import annotations

import pytest

from rlm.cli import main
from rlm.cli.spark import _timestamp_ms


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000),  # UTC when no zone is named
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
        # A fraction of a millisecond rounds up, exactly: the first record at or after the time
        # has a timestamp of the next millisecond (a float cut .0005 down to .000, before it).
        ("2023-11-14T22:13:20.0005Z", 1_700_000_000_001),
        ("2023-11-14T22:13:20.0000001Z", 1_700_000_000_001),
        ("2023-11-14T22:13:20.123Z", 1_700_000_000_123),
    ],
)
def test_a_time_is_read_exactly(text: str, ms: int) -> None:
    assert _timestamp_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1969-12-31T23:59:59.9999Z", "before 1970"),  # was taken as 0
        ("latest", "special value"),
        ("-2", "special value"),
        ("-7", "invalid"),
        ("99999999999999999999", "out of range"),
        ("yesterday", "not epoch milliseconds"),
    ],
)
def test_a_time_that_names_no_moment_is_refused_naming_the_option(
    text: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["spark", "export", "--output", "/nonexistent", "--from", text])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --from" in err and says in err, err
