"""OIDC / JWT bearer tokens: locally signed tokens checked against a JWKS file or URL, and on a
live service beside Spillway's own tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

jwt = pytest.importorskip("jwt", reason="OIDC tokens need PyJWT (the oidc extra)")
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: E402
from jwt.algorithms import RSAAlgorithm  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from spillway.service.config import Settings  # noqa: E402
from spillway.service.oidc import OidcVerifier  # noqa: E402
from spillway.service.oidc_settings import OidcSettings  # noqa: E402
from spillway.service.tokens import Scope, Unauthenticated  # noqa: E402
from tests.conftest import start_service  # noqa: E402

ISSUER = "https://idp.example.test/realms/etl"
AUDIENCE = "spillway"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


KEY, OTHER_KEY = _key(), _key()


def _jwks(*pairs: tuple[str, rsa.RSAPrivateKey]) -> dict[str, Any]:
    return {"keys": [{**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig", "alg": "RS256"} for kid, key in pairs]}


def sign(claims: dict[str, Any] | None = None, *, key: Any = KEY, kid: str | None = "k1", alg: str = "RS256", **extra: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 600, "scope": "openid spillway:submit", **(claims or {}), **extra}
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(body, key, algorithm=alg, headers={"kid": kid} if kid else None)


def _hs256_with_the_public_key() -> str:
    """The key-confusion attack: HMAC "signed" with the issuer's public key (PyJWT will not make one)."""
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    header = part(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    payload = part(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 600, "scope": "spillway:admin"}).encode())
    public = KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    signature = part(hmac.new(public, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


@pytest.fixture(scope="module")
def jwks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("oidc") / "jwks.json"
    path.write_text(json.dumps(_jwks(("k1", KEY))))
    return path


@pytest.fixture(scope="module")
def verifier(jwks_file: Path) -> OidcVerifier:
    return OidcVerifier(OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_file=jwks_file))


def test_a_signed_token_is_accepted_with_its_subject_and_scope(verifier: OidcVerifier) -> None:
    identity = verifier.check(sign())
    assert (identity.owner, identity.scope) == ("oidc:alice", Scope.SUBMIT)
    assert verifier.check(sign(scope=["spillway:read", "spillway:admin"])).scope is Scope.ADMIN, "a list claim; the highest scope counts"
    assert verifier.check(sign(sub="x" * 200)).owner.startswith("oidc:sha256:"), "a subject too long for the owner column is digested"


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (lambda: sign(aud="another-service"), "audience"),
        (lambda: sign(iss="https://evil.example.test"), "issuer"),
        (lambda: sign(exp=int(time.time()) - 120), "has expired"),
        (lambda: sign(nbf=int(time.time()) + 600), "not yet valid"),
        (lambda: sign(sub=None), "sub"),
        (lambda: sign(exp=None), "exp"),
        (lambda: sign(scope="openid profile"), "grants no Spillway scope"),
        (lambda: sign(scope="spillway:root"), "grants no Spillway scope"),
        (lambda: sign(key=OTHER_KEY), "not valid"),
        (lambda: sign(kid="k9"), "kid 'k9'"),
        (lambda: jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 600, "scope": "spillway:admin"}, None, algorithm="none"), "algorithm 'none'"),
        (lambda: _hs256_with_the_public_key(), "algorithm 'HS256'"),
        (lambda: "not.a.jwt", "not a valid JWT"),
    ],
)
def test_bad_tokens_are_refused(verifier: OidcVerifier, token: Any, says: str) -> None:
    with pytest.raises(Unauthenticated, match=f"(?i){says}"):
        verifier.check(token())


def test_the_settings_are_checked_before_anything_starts(tmp_path: Path, jwks_file: Path) -> None:
    assert not OidcSettings().enabled
    for fields, says in (
        ({"issuer": ISSUER, "jwks_file": jwks_file}, "audience is required"),
        ({"issuer": ISSUER, "audience": AUDIENCE}, "exactly one of"),
        ({"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": jwks_file, "jwks_url": "http://x"}, "exactly one of"),
        ({"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": tmp_path / "missing.json"}, "not a readable JWKS"),
    ):
        with pytest.raises(ValidationError, match=says):
            Settings(oidc=fields)
    empty = tmp_path / "empty.json"
    empty.write_text('{"keys": []}')
    with pytest.raises(ValidationError, match="holds no keys"):
        Settings(oidc={"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": empty})


@pytest.fixture()
def jwks_server() -> Iterator[str]:
    body = json.dumps(_jwks(("k1", KEY), ("k2", OTHER_KEY))).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/certs"
    server.shutdown()
    server.server_close()


def test_keys_from_the_providers_jwks_url(jwks_server: str) -> None:
    verifier = OidcVerifier(OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url=jwks_server))
    assert verifier.check(sign()).owner == "oidc:alice"
    assert verifier.check(sign(key=OTHER_KEY, kid="k2", sub="bob")).owner == "oidc:bob", "either key of the set"
    with pytest.raises(Unauthenticated, match="signing key"):
        verifier.check(sign(kid="k9"))


def test_jwts_on_a_live_service(tmp_path: Path, jwks_file: Path, sample_data: dict[str, Path]) -> None:
    service = start_service(
        tmp_path / "svc",
        extra_env={"SPILLWAY_AUTH": "on", "SPILLWAY_OIDC__ISSUER": ISSUER, "SPILLWAY_OIDC__AUDIENCE": AUDIENCE, "SPILLWAY_OIDC__JWKS_FILE": str(jwks_file)},
    )
    try:
        with httpx.Client(base_url=service.url, timeout=30) as http_client:

            def call(method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
                return http_client.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)

            spec = {"source": {"format": "parquet", "path": str(sample_data["sales"])}, "steps": [{"op": "limit", "n": 3}], "sink": {"path": str(tmp_path / "out")}}
            submitted = call("POST", "/jobs", sign(), json=spec)
            assert submitted.status_code == 202, submitted.text
            job_id = submitted.json()["id"]
            assert call("GET", f"/jobs/{job_id}", sign()).json()["owner"] == "oidc:alice"
            assert call("GET", f"/jobs/{job_id}", sign(sub="bob")).status_code == 404, "another subject's job is not found"
            assert call("GET", f"/jobs/{job_id}", sign(sub="ops", scope="spillway:admin")).status_code == 200

            reader = call("POST", "/jobs", sign(scope="spillway:read"), json=spec)
            assert reader.status_code == 403 and reader.json()["error"]["code"] == "forbidden"
            for bad in (sign(exp=int(time.time()) - 120), sign(aud="other"), sign(key=OTHER_KEY), "spw_not-a-token"):
                refused = call("GET", "/jobs", bad)
                assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated", refused.text
    finally:
        service.stop()
