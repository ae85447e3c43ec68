"""The CRC-32C an S3 store should report for an object, and how a reported one is compared."""

from __future__ import annotations

import dataclasses

import pytest

from rlm.errors import ConfigError
from rlm.storage.payload import crc32c_update
from rlm.storage.s3_config import S3Config
from rlm.storage.s3_multipart import crc32c_matches, expected_crc32c, s3_crc32c

PARTS = [b"a" * 10, b"b" * 10, b"c"]
WHOLE = crc32c_update(b"".join(PARTS))
PART_CRCS = [crc32c_update(part) for part in PARTS]


def test_s3_form_is_base64_of_the_big_endian_bytes() -> None:
    assert crc32c_update(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert s3_crc32c(0xE3069283) == "4waSgw=="


def test_a_single_put_and_a_full_object_upload_report_the_whole_crc32c() -> None:
    assert expected_crc32c(WHOLE, None, "COMPOSITE") == s3_crc32c(WHOLE) == "qEhzGw=="
    assert expected_crc32c(WHOLE, PART_CRCS, "FULL_OBJECT") == "qEhzGw=="


def test_a_composite_upload_reports_the_crc32c_of_the_part_crc32cs_and_the_part_count() -> None:
    # The value S3 (and moto) computes for these three parts.
    assert expected_crc32c(WHOLE, PART_CRCS, "COMPOSITE") == "3eIVcw==-3"
    assert expected_crc32c(WHOLE, PART_CRCS[::-1], "COMPOSITE") != "3eIVcw==-3"  # order counts


@pytest.mark.parametrize(
    ("reported", "expected", "matches"),
    [
        ("qEhzGw==", "qEhzGw==", True),
        ("qEhzGw==", "4waSgw==", False),
        ("3eIVcw==-3", "3eIVcw==-3", True),  # S3's form
        ("3eIVcw==", "3eIVcw==-3", True),  # moto's HEAD leaves the part count out
        ("3eIVcw==-4", "3eIVcw==-3", False),  # another number of parts
        ("4waSgw==", "3eIVcw==-3", False),
        ("3eIVcw==-3", "3eIVcw==", False),  # a composite where the whole object's was expected
        ("qEhzGw==-1", "qEhzGw==", False),
    ],
)
def test_a_reported_crc32c_matches_only_the_expected_one(reported: str, expected: str, matches: bool) -> None:
    assert crc32c_matches(reported, expected) is matches


def test_the_multipart_checksum_type_is_composite_or_full_object() -> None:
    assert S3Config().multipart_checksum_type == "COMPOSITE"
    assert S3Config(multipart_checksum_type="FULL_OBJECT").multipart_checksum_type == "FULL_OBJECT"
    with pytest.raises(ConfigError, match="multipart_checksum_type"):
        dataclasses.replace(S3Config(), multipart_checksum_type="SHA256")  # type: ignore[arg-type]
