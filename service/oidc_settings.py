"""The settings of OIDC / JWT bearer tokens (``SPILLWAY_OIDC__*``); the checking is in service/oidc.py.

Kept apart so that reading the settings needs neither PyJWT nor the store.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OidcSettings(BaseModel):
    """JWT bearer tokens from an identity provider (``SPILLWAY_OIDC__*``); off without an issuer."""

    model_config = ConfigDict(extra="forbid")

    issuer: str | None = Field(default=None, description="The provider's issuer (the tokens' iss claim). Unset: OIDC tokens are not accepted.")
    audience: str | None = Field(default=None, description="The audience the tokens must name (their aud claim): this service's client id.")
    jwks_file: Path | None = Field(default=None, description="A JSON Web Key Set file holding the provider's public keys.")
    jwks_url: str | None = Field(default=None, description="The provider's JWKS URL (jwks_uri), fetched and cached; instead of jwks_file.")
    scope_claim: str = Field(default="scope", description="The claim holding spillway:read, spillway:submit or spillway:admin.")
    leeway_s: float = Field(default=30.0, ge=0, le=300, description="Clock skew allowed on exp and nbf, in seconds.")

    @model_validator(mode="after")
    def _complete(self) -> OidcSettings:
        if self.issuer is None:
            return self
        if not self.audience:
            raise ValueError("oidc.audience is required with oidc.issuer: the tokens' aud claim must name this service")
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("give exactly one of oidc.jwks_file and oidc.jwks_url: where the provider's public keys are")
        if self.jwks_file is not None:
            try:
                keys = json.loads(self.jwks_file.read_text())["keys"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"oidc.jwks_file {self.jwks_file} is not a readable JWKS ({{\"keys\": [...]}}): {exc}") from exc
            if not isinstance(keys, list) or not keys:
                raise ValueError(f"oidc.jwks_file {self.jwks_file} holds no keys")
        return self

    @property
    def enabled(self) -> bool:
        """Whether JWT bearer tokens are accepted."""
        return self.issuer is not None
