"""A server's address as people paste it: an OpenAI client's base URL (…/v1) included."""

from __future__ import annotations

import pytest

from agentworld.errors import ConfigError
from agentworld.server_url import server_base


@pytest.mark.parametrize(
    "url",
    ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"],
)
def test_a_trailing_v1_or_slash_is_dropped(url: str) -> None:
    assert server_base(url, "--x") == "http://h:8000"


def test_a_path_prefix_is_kept() -> None:
    assert server_base("https://gw.example/aw/v1", "--x") == "https://gw.example/aw"


@pytest.mark.parametrize("url", ["localhost:8000", "h:8000/v1", "ftp://h", "http://", ""])
def test_an_address_without_scheme_or_host_is_refused_naming_where(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^--serve-url: .* is not an http\(s\) URL; .* e\.g\."):
        server_base(url, "--serve-url")
