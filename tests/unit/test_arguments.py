"""The one parser of integers and timestamps every API shares (rlm.arguments, rlm.timestamps)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm import cli
from rlm.arguments import INT32_MAX, INT64_MAX, INT64_MIN, check_int, check_range, parse_int
from rlm.config import load_settings
from rlm.errors import ConfigError, InvalidArgumentError
from rlm.timestamps import InvalidTimestampError, SpecialTimestamp, parse_timestamp


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("42", 42),
        ("-1", -1),
        ("007", 7),
        ("9223372036854775807", INT64_MAX),
        ("-9223372036854775808", INT64_MIN),
        ("0" * 5000 + "7", 7),  # beyond int()'s 4300 digits, but for the zeros
        ("-" + "0" * 5000 + "9223372036854775808", INT64_MIN),
        ("0" * 5000, 0),
    ],
)
def test_integers_are_ascii_digits_after_an_optional_minus(text: str, value: int) -> None:
    assert parse_int(text, "x") == value


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("+5", "'+5' is not an integer"),
        (" 5", "' 5' is not an integer"),
        ("5 ", "'5 ' is not an integer"),
        ("\uff15", "is not an integer"),  # a fullwidth five
        ("\u0665", "is not an integer"),  # an Arabic-Indic five
        ("5_000", "'5_000' is not an integer"),
        ("0x10", "is not an integer"),
        ("1e3", "is not an integer"),
        ("5.0", "is not an integer"),
        ("", "'' is not an integer"),
        ("-", "'-' is not an integer"),
        ("--5", "is not an integer"),
        ("true", "'true' is not an integer"),
        ("9" * 5000, "a number of 5000 digits is out of range"),
        ("9223372036854775808", "must be from -9223372036854775808 to 9223372036854775807"),
    ],
)
def test_anything_else_is_refused_saying_what_was_wrong(text: str, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(words)) as refused:
        parse_int(text, "query.offset")
    assert refused.value.name == "query.offset"
    assert str(refused.value).startswith("query.offset: ")
    assert "Exceeds the limit" not in str(refused.value) and len(str(refused.value)) < 200


def test_a_range_is_checked_and_given_in_the_message() -> None:
    assert parse_int("3", "partition", 0, INT32_MAX) == 3
    with pytest.raises(InvalidArgumentError, match="must be from 0 to 2147483647, not 2147483648"):
        parse_int("2147483648", "partition", 0, INT32_MAX)
    with pytest.raises(InvalidArgumentError, match="must be from 1 to 256, not a number of 301 bits"):
        check_range(2**300, "threads", 1, 256)


@pytest.mark.parametrize(
    ("value", "words"),
    [(True, "true is not an integer"), (False, "false is not an integer"), (5.0, "5.0 is not an integer"),
     ("5", "the string '5' is not an integer"), (None, "null is not an integer"), ([5], "a list is not")],
)  # fmt: skip
def test_values_of_json_or_protobuf_must_be_integers(value: object, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        check_int(value, "remote_log_offset_reader_threads")
    assert check_int(5, "x") == 5


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=30))
def test_text_is_accepted_exactly_when_it_is_ascii_digits_in_range(text: str) -> None:
    digits = text.removeprefix("-")
    plain = digits != "" and all("0" <= c <= "9" for c in digits)
    try:
        value = parse_int(text, "x")
    except InvalidArgumentError:
        assert not plain or not INT64_MIN <= int(text) <= INT64_MAX
    else:
        assert plain and value == int(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("0", 0),
        ("latest", SpecialTimestamp.LATEST),
        ("LATEST", SpecialTimestamp.LATEST),
        ("-3", SpecialTimestamp.MAX_TIMESTAMP),
        ("latest-tiered", SpecialTimestamp.LATEST_TIERED),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000),
        ("9223372036854775807", INT64_MAX),
    ],
)
def test_timestamps_as_users_write_them(text: str, value: int) -> None:
    assert parse_timestamp(text) == value


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (" latest", "spaces around"),
        ("latest ", "spaces around"),
        ("+5", "'+5' is not epoch milliseconds"),
        ("\uff15", "other than ASCII"),
        ("\uff4c\uff41\uff54\uff45\uff53\uff54", "other than ASCII"),  # a fullwidth "latest"
        ("1_000", "is not epoch milliseconds"),
        ("9223372036854775808", "must be from"),
        ("9" * 40, "a number of 40 digits is out of range"),
        ("9" * 5000, "longer than 64 characters"),
        ("-6", "use milliseconds ≥ 0 or a special value -1 to -5"),
        ("1969-12-31T23:59:59Z", "before 1970"),
        ("yesterday", "is not epoch milliseconds, ISO-8601, or one of latest"),
    ],
)
def test_timestamps_are_parsed_strictly(text: str, words: str) -> None:
    with pytest.raises(InvalidTimestampError, match=re.escape(words)) as refused:
        parse_timestamp(text, "query.timestamp")
    assert str(refused.value).startswith("query.timestamp: ")
    assert isinstance(refused.value, InvalidArgumentError)


@pytest.mark.parametrize("raw", ["true", "+5", "\uff15", "5_000"])
def test_settings_from_the_environment_are_integers_strictly(raw: str) -> None:
    with pytest.raises(ConfigError, match="remote.log.offset.reader.threads"):
        load_settings(env={"RLM_REMOTE_LOG_OFFSET_READER_THREADS": raw})
    assert (
        load_settings(env={"RLM_REMOTE_LOG_OFFSET_READER_THREADS": " 8 "}).remote_log_offset_reader_threads
        == 8
    )


def test_a_yaml_true_is_not_one_thread(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    config.write_text("remote.log.offset.reader.threads: true\n")
    with pytest.raises(ConfigError, match="remote.log.offset.reader.threads: true is not an integer"):
        load_settings(config, env={})


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["lookup", "orders", "+5", "--timestamp", "0"], "argument partition: '+5' is not an integer"),
        (["lookup", "orders", "2147483648", "--timestamp", "0"], "must be from 0 to 2147483647"),
        (
            ["lookup", "orders", "0", "--timestamp", "0", "--timeout-ms", "\uff15"],
            "--timeout-ms: '\uff15' is not",
        ),
    ],
)
def test_rlm_lookup_parses_its_integers_as_the_apis_do(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    assert words in capsys.readouterr().err
