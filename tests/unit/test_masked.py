"""The test bed's masked credentials: hidden from reprs, intact for everything else."""

from __future__ import annotations

import json

from tests.testbed.masked import Secret, masked


def test_credentials_at_any_depth_are_hidden_from_repr_and_equal_otherwise() -> None:
    stored = {
        "vim-1": {
            "vimType": "kubernetes",
            "interfaceInfo": {"endpoint": "https://10.0.0.5:6443", "ssl_ca_cert": "PEM"},
            "accessInfo": {"bearer_token": "tok-123", "username": "u", "password": "pw"},
        },
        "list": [{"client_secret": "cs"}, "plain"],
        "bearer_token": 7,  # not a string: left as it is
    }
    shown = masked(stored)
    assert shown == stored and json.dumps(shown) == json.dumps(stored)
    for value in ("tok-123", "pw", "cs"):
        assert value not in repr(shown)
    assert "https://10.0.0.5:6443" in repr(shown) and "'u'" in repr(shown)
    assert isinstance(shown["vim-1"]["accessInfo"]["bearer_token"], Secret)
    assert f"{shown['vim-1']['accessInfo']['bearer_token']}" == "tok-123"
