"""Optional OIDC / JWT bearer tokens from a team's identity provider, beside Spillway's own.

A bearer token that is not a Spillway token (``spw_...``) is read as a JWT when an issuer is
configured: its signature is checked against the provider's JWKS (a file, or a URL fetched and
cached), then its issuer, audience, expiry and not-before (PyJWT, as FastAPI's and Airflow's
JWT auth do). Asymmetric algorithms only: an ``HS256`` token "signed" with a public key, or an
unsigned ``none`` one, is refused.

The token's Spillway scope comes from a claim (``scope`` by default, a space-separated string
or a list) holding ``spillway:read``, ``spillway:submit`` or ``spillway:admin``; the highest
one counts. Its owner is ``oidc:<sub>``, so its jobs and pipelines are its own as a Spillway
token's are.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from spillway.service.oidc_settings import OidcSettings
from spillway.service.tokens import Scope, TokenIdentity, Unauthenticated

#: Asymmetric signature algorithms only: with an HMAC one, a public key would become a shared secret.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_SCOPE_PREFIX = "spillway:"
#: The owner column holds 100 characters; a longer subject is kept as a digest.
_OWNER_MAX = 100


class OidcVerifier:
    """Checks JWT bearer tokens against one issuer's keys.

    Parameters
    ----------
    settings
        A complete :class:`OidcSettings` (issuer set).

    Raises
    ------
    RuntimeError
        Without PyJWT (the oidc extra).
    jwt.PyJWKSetError
        When the JWKS file holds no key PyJWT can use: raised by ``create_app``, so the service does not start.
    """

    def __init__(self, settings: OidcSettings) -> None:
        try:
            import jwt
        except ImportError as exc:
            raise RuntimeError("OIDC tokens need PyJWT: install the oidc extra, pip install 'spillway[oidc]'") from exc

        self.settings = settings
        self._jwt = jwt
        self._keys: dict[str | None, Any] = {}
        self._client: Any = None
        if settings.jwks_file is not None:
            key_set = jwt.PyJWKSet.from_dict(json.loads(settings.jwks_file.read_text()))
            self._keys = {key.key_id: key for key in key_set.keys}
        else:
            self._client = jwt.PyJWKClient(settings.jwks_url or "", cache_keys=True, lifespan=300)

    def _key(self, token: str) -> Any:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"the bearer token is not a valid JWT: {exc}") from exc
        if header.get("alg") not in ALGORITHMS:
            raise Unauthenticated(f"the bearer token's algorithm '{header.get('alg')}' is not accepted (asymmetric signatures only)")
        if self._client is not None:
            try:
                return self._client.get_signing_key_from_jwt(token)
            except jwt.PyJWKClientError as exc:
                raise Unauthenticated(f"the bearer token's signing key is not the issuer's: {exc}") from exc
        kid = header.get("kid")
        key = self._keys.get(kid) or (next(iter(self._keys.values())) if kid is None and len(self._keys) == 1 else None)
        if key is None:
            raise Unauthenticated(f"the bearer token's signing key (kid '{kid}') is not in the issuer's key set")
        return key

    def check(self, token: str) -> TokenIdentity:
        """The identity of a JWT the issuer signed for this service.

        Raises
        ------
        Unauthenticated
            For a bad signature, issuer or audience, an expired or not-yet-valid token, and
            a token without a subject or without any Spillway scope.
        """
        jwt = self._jwt
        key = self._key(token)
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=list(ALGORITHMS),
                audience=self.settings.audience,
                issuer=self.settings.issuer,
                leeway=self.settings.leeway_s,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("the bearer token (JWT) has expired") from exc
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"the bearer token (JWT) is not valid: {exc}") from exc
        scope = _scope(claims.get(self.settings.scope_claim))
        if scope is None:
            raise Unauthenticated(
                f"the bearer token (JWT) grants no Spillway scope: its '{self.settings.scope_claim}' claim holds none of "
                "spillway:read, spillway:submit, spillway:admin"
            )
        return TokenIdentity(id=None, owner=_owner(str(claims["sub"])), scope=scope)


def _scope(claim: Any) -> Scope | None:
    """The highest Spillway scope a claim grants (a space-separated string or a list), if any."""
    granted = claim.split() if isinstance(claim, str) else claim if isinstance(claim, list) else []
    names = {value.removeprefix(_SCOPE_PREFIX) for value in granted if isinstance(value, str) and value.startswith(_SCOPE_PREFIX)}
    return next((scope for scope in (Scope.ADMIN, Scope.SUBMIT, Scope.READ) if scope.value in names), None)


def _owner(subject: str) -> str:
    owner = f"oidc:{subject}"
    if len(owner) <= _OWNER_MAX:
        return owner
    return "oidc:sha256:" + hashlib.sha256(subject.encode()).hexdigest()
