"""The ``s3.*`` settings: spellings, errors, and the S3 store the composition root opens from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rlm.bootstrap import open_remote_storage
from rlm.config import load_settings
from rlm.errors import ConfigError
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_config import S3Config


def test_an_s3_compatible_store_is_configured_in_yaml(tmp_path: Path) -> None:
    config = tmp_path / "rlm.yaml"
    # YAML reads bare on/off as booleans: both spellings must work.
    config.write_text(
        "remote.url: s3://tiered/prod\n"
        "s3.endpoint.url: https://s3.eu-central-003.backblazeb2.com\n"
        "s3.region: eu-central-003\n"
        "s3.addressing.style: path\n"
        "s3.checksums: off\n"
        "s3.content.md5: on\n"
        "s3.multipart.checksum.type: full_object\n"
        "s3.verify.after.put: read-back\n"
    )
    settings = load_settings(config, env={})
    assert (settings.s3_checksums, settings.s3_content_md5) == ("off", "on")
    assert settings.s3_multipart_checksum_type == "FULL_OBJECT"
    store = open_remote_storage(settings)
    try:
        assert isinstance(store, S3Storage)
        assert store.config == S3Config(
            endpoint_url="https://s3.eu-central-003.backblazeb2.com",
            region="eu-central-003",
            addressing_style="path",
            checksums="off",
            content_md5=True,
            multipart_checksum_type="FULL_OBJECT",
            verify_after_put="read-back",
        )
    finally:
        store.close()


def test_the_defaults_are_aws_s3s() -> None:
    settings = load_settings(env={"RLM_REMOTE_URL": "s3://tiered"})
    store = open_remote_storage(settings, region="us-east-1")
    try:
        assert isinstance(store, S3Storage)
        assert store.config == S3Config(region="us-east-1")
        assert store.config.delete_content_md5 is False
    finally:
        store.close()


@pytest.mark.parametrize(
    ("raw", "checksums"),
    [
        ("on", "crc32c"),
        ("true", "crc32c"),
        ("CRC32C", "crc32c"),
        ("md5", "md5"),
        ("false", "off"),
        ("0", "off"),
    ],
)
def test_checksum_spellings_from_the_environment(raw: str, checksums: str) -> None:
    assert load_settings(env={"RLM_S3_CHECKSUMS": raw}).s3_checksums == checksums


def test_content_md5_follows_the_checksums_unless_set() -> None:
    assert S3Config(checksums="crc32c").delete_content_md5 is False
    assert S3Config(checksums="md5").delete_content_md5 is True
    assert S3Config(checksums="off").delete_content_md5 is True
    assert S3Config(checksums="off", content_md5=False).delete_content_md5 is False
    assert S3Config(checksums="crc32c", content_md5=True).delete_content_md5 is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RLM_S3_CHECKSUMS": "sha256"}, "s3.checksums must be one of crc32c, md5, off, not 'sha256'"),
        ({"RLM_S3_VERIFY_AFTER_PUT": "get"}, "s3.verify.after.put must be one of head, read-back, off"),
        ({"RLM_S3_ADDRESSING_STYLE": "host"}, "s3.addressing.style must be one of auto, path, virtual"),
        ({"RLM_S3_CONTENT_MD5": "maybe"}, "s3.content.md5 must be one of auto, on, off"),
        ({"RLM_S3_MULTIPART_CHECKSUM_TYPE": "CRC"}, "s3.multipart.checksum.type must be one of COMPOSITE"),
    ],
)
def test_bad_s3_values_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env=env)


def test_a_query_string_in_the_url_points_at_the_settings() -> None:
    settings = load_settings(env={"RLM_REMOTE_URL": "s3://tiered/prod?region=eu-west-1"})
    with pytest.raises(
        ConfigError, match=r"must not have a query or fragment: S3 options are settings.*s3.region"
    ):
        open_remote_storage(settings)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"RLM_S3_ENDPOINT_URL": "https://under_score.example.com"},
            "bad S3 endpoint URL 'https://under_score",
        ),
        ({"RLM_S3_REGION": "eu west"}, "region 'eu west'"),
    ],
)
def test_an_unusable_endpoint_or_region_is_a_config_error(env: dict[str, str], message: str) -> None:
    settings = load_settings(env={"RLM_REMOTE_URL": "s3://tiered", **env})
    with pytest.raises(ConfigError, match=message):
        open_remote_storage(settings)


def test_s3_settings_do_not_reach_a_filesystem_store(tmp_path: Path) -> None:
    settings = load_settings(
        env={"RLM_REMOTE_URL": (tmp_path / "remote").as_uri(), "RLM_S3_CHECKSUMS": "off"}
    )
    store = open_remote_storage(settings)
    store.close()


README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_presets() -> list[str]:
    """The YAML documents of the README's per-store presets."""
    text = README.read_text()
    block = re.search(r"```yaml\n(# AWS S3.*?)```", text, re.S)
    assert block is not None, "the README lost its per-store presets"
    return block.group(1).split("---\n")


def test_every_preset_in_the_readme_is_valid_settings(tmp_path: Path) -> None:
    presets = _readme_presets()
    stores = [re.split("[:,]", preset.splitlines()[0])[0] for preset in presets]
    assert stores == [
        "# AWS S3", "# MinIO", "# Ceph RGW", "# Cloudflare R2", "# Google Cloud Storage", "# Backblaze B2"
    ]  # fmt: skip
    for number, preset in enumerate(presets):
        config = tmp_path / f"preset-{number}.yaml"
        config.write_text(f"remote.url: s3://tiered/prod\n{preset}")
        settings = load_settings(config, env={})
        store = open_remote_storage(settings)
        store.close()
