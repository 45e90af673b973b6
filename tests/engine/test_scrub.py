"""Credential scrubbing of tool output (E14)."""

from __future__ import annotations

import pytest

from agents.engine.scrub import REDACTED, scrub_credentials

SECRETS = {
    "openai": "sk-proj-" + "a1B2" * 10,
    "anthropic": "sk-ant-api03-" + "x9Y_" * 20,
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_" + "A1b2" * 9,
    "gitlab": "glpat-" + "abcDEF123_" * 2,
    "slack": "xoxb-1234567890-abcdefghij",
    "google": "AIza" + "B" * 35,
    "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "huggingface": "hf_" + "q" * 34,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9",
}


@pytest.mark.parametrize(("kind", "secret"), sorted(SECRETS.items()))
def test_e14_it_redacts_vendor_api_keys(kind: str, secret: str) -> None:
    out = scrub_credentials(f"found {secret} in config")
    assert secret not in out
    assert out == f"found {REDACTED} in config"


def test_e14_it_redacts_key_value_pairs_and_keeps_the_key() -> None:
    text = (
        "DB_PASSWORD=hunter2222\napi_key: abcdef123456\n"
        '{"client_secret": "s3cr3t-value", "token": \'tok-abcdefg\'}'
    )
    out = scrub_credentials(text)
    assert "hunter2222" not in out
    assert "abcdef123456" not in out
    assert "s3cr3t-value" not in out
    assert "tok-abcdefg" not in out
    assert f"DB_PASSWORD={REDACTED}" in out
    assert f"api_key: {REDACTED}" in out
    assert f'"client_secret": "{REDACTED}"' in out
    assert f"'{REDACTED}'" in out


def test_e14_it_redacts_bearer_and_basic_authorization_headers() -> None:
    out = scrub_credentials(
        "Authorization: Bearer abc.def-ghi_jkl123\nAuthorization: Basic dXNlcjpwYXNzd29yZA=="
    )
    assert out == f"Authorization: Bearer {REDACTED}\nAuthorization: Basic {REDACTED}"


def test_e14_it_redacts_the_password_of_a_connection_string() -> None:
    out = scrub_credentials("DATABASE_URL postgres://app:Sup3rS3cret@db.internal:5432/app")
    assert out == f"DATABASE_URL postgres://app:{REDACTED}@db.internal:5432/app"


def test_e14_it_redacts_private_keys_even_when_cut_short() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA\n-----END RSA PRIVATE KEY-----"
    assert scrub_credentials(f"key:\n{pem}\ndone") == f"key:\n{REDACTED}\ndone"
    cut = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAA"
    assert "b3BlbnNz" not in scrub_credentials(cut)


def test_e14_it_leaves_ordinary_output_alone() -> None:
    text = (
        '{"max_tokens": 1024, "monkey": "bananas", "tokens_used": 12}\n'
        "PWD=/home/user\nOLDPWD=/tmp\nhttps://example.com:8443/path?q=1\n"
        "Total: 3 files, key findings below."
    )
    assert scrub_credentials(text) == text


def test_e14_it_is_idempotent() -> None:
    once = scrub_credentials("password=hunter2222 and sk-" + "z" * 30)
    assert scrub_credentials(once) == once


def test_e14_it_handles_a_megabyte_of_output() -> None:
    filler = "lorem ipsum dolor sit amet, key points: none. " * 22_000
    text = filler + " token=abcdefghijkl " + filler
    out = scrub_credentials(text)
    assert "abcdefghijkl" not in out
    assert len(out) == len(text) - len("abcdefghijkl") + len(REDACTED)


def test_e14_it_copes_with_text_that_changes_length_when_lower_cased() -> None:
    out = scrub_credentials("İİ secret=abcdefgh İ")
    assert out == f"İİ secret={REDACTED} İ"
