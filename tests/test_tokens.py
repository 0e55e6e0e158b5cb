"""Token lifecycle: expiry, last use (written at most once a minute), revoke and rotate, from the
store (SQLite and PostgreSQL), over REST on a live service, and with `spillway token ...`."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from spillway.jobs.errors import InvalidTransition
from spillway.service.client import ApiError, SpillwayClient
from spillway.service.store import JobStore
from spillway.service.tokens import LAST_USED_EVERY, Scope, TokenNotFound, TokenStore, Unauthenticated, parse_duration
from tests.conftest import ROOT, ServiceProcess, start_service

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture()
def tokens(database_url: str) -> Any:
    clock = Clock(T0)
    store = JobStore(database_url)
    yield TokenStore(store.engine, clock=clock), clock
    store.close()


@pytest.mark.parametrize(("text", "seconds"), [("30d", 30 * 86_400), ("12h", 43_200), ("1w2d", 9 * 86_400), ("90m", 5400), ("45s", 45), (" 2D ", 172_800)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(("text", "says"), [("", "not a duration"), ("30", "not a duration"), ("3x", "not a duration"), ("-1d", "not a duration"), ("1d 2h", "not a duration"), ("0d", "no time at all"), ("3651d", "over 3650 days")])
def test_bad_durations_are_refused(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_duration(text)


def test_an_expired_token_is_refused_at_once(tokens: Any) -> None:
    store, clock = tokens
    issued = store.create("ci", Scope.SUBMIT, expires_in=timedelta(hours=1))
    assert issued.info.expires_at == T0 + timedelta(hours=1) and issued.info.state == "active"
    clock.now = T0 + timedelta(minutes=59, seconds=59)
    assert store.check(issued.token).owner == f"ci#{issued.info.id}"
    clock.now = T0 + timedelta(hours=1)
    with pytest.raises(Unauthenticated, match="expired at 2026-12-01T13:00:00"):
        store.check(issued.token)
    assert store.get(issued.info.id).state == "expired"


def test_a_revoked_token_is_refused_at_once(tokens: Any) -> None:
    store, clock = tokens
    issued = store.create("alice", Scope.ADMIN)
    assert store.check(issued.token).scope is Scope.ADMIN
    clock.now = T0 + timedelta(seconds=1)
    revoked = store.revoke(issued.info.id)
    assert revoked.state == "revoked" and revoked.revoked_at == T0 + timedelta(seconds=1)
    with pytest.raises(Unauthenticated, match="revoked"):
        store.check(issued.token)
    clock.now = T0 + timedelta(hours=1)
    assert store.revoke(issued.info.id).revoked_at == T0 + timedelta(seconds=1), "revoking again changes nothing"
    with pytest.raises(InvalidTransition, match="is revoked"):
        store.rotate(issued.info.id)
    with pytest.raises(TokenNotFound):
        store.revoke(issued.info.id + 100)


def test_rotation_replaces_the_secret_and_keeps_the_owner(tokens: Any) -> None:
    store, clock = tokens
    old = store.create("bob", Scope.SUBMIT, expires_in=timedelta(days=30))
    clock.now = T0 + timedelta(days=1)
    new = store.rotate(old.info.id)
    assert new.token != old.token and new.info.owner == old.info.owner == f"bob#{old.info.id}"
    assert new.info.expires_at == old.info.expires_at, "the expiry stays unless a new one is given"
    assert new.info.rotated_at == T0 + timedelta(days=1)
    with pytest.raises(Unauthenticated, match="unknown, or replaced by a rotation"):
        store.check(old.token)
    assert store.check(new.token).owner == old.info.owner

    clock.now = T0 + timedelta(days=31)
    with pytest.raises(Unauthenticated, match="expired"):
        store.check(new.token)
    with pytest.raises(InvalidTransition, match="has expired"):
        store.rotate(old.info.id)
    renewed = store.rotate(old.info.id, expires_in=timedelta(days=7))
    assert renewed.info.state == "active" and renewed.info.expires_at == T0 + timedelta(days=38)
    assert store.check(renewed.token).id == old.info.id


def test_last_use_is_written_at_most_once_a_minute_per_token(tokens: Any) -> None:
    store, clock = tokens
    issued = store.create("busy", Scope.READ)
    updates: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE SPILLWAY_TOKENS"):
            updates.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        assert store.get(issued.info.id).last_used_at is None
        for second in range(0, 60, 5):  # twelve requests within the first minute: one write
            clock.now = T0 + timedelta(seconds=second)
            store.check(issued.token)
        assert len(updates) == 1 and store.get(issued.info.id).last_used_at == T0

        # Another replica (its own TokenStore) finds the stored time recent and writes nothing.
        replica = TokenStore(store.engine, clock=clock)
        replica.check(issued.token)
        assert len(updates) == 1

        clock.now = T0 + LAST_USED_EVERY
        store.check(issued.token)
        assert len(updates) == 2 and store.get(issued.info.id).last_used_at == T0 + LAST_USED_EVERY
    finally:
        event.remove(store.engine, "before_cursor_execute", count)


def test_list_shows_every_token_and_never_a_secret(tokens: Any) -> None:
    store, clock = tokens
    a = store.create("a", Scope.READ)
    b = store.create("b", Scope.SUBMIT, expires_in=timedelta(minutes=5))
    c = store.create("c", Scope.ADMIN)
    store.revoke(c.info.id)
    clock.now = T0 + timedelta(minutes=5)
    listed = store.list()
    assert [(t.owner, t.scope, t.state) for t in listed] == [
        (f"a#{a.info.id}", Scope.READ, "active"),
        (f"b#{b.info.id}", Scope.SUBMIT, "expired"),
        (f"c#{c.info.id}", Scope.ADMIN, "revoked"),
    ]
    dumped = str([t.model_dump() for t in listed])
    assert all(issued.token not in dumped for issued in (a, b, c))


# --- on a live service: REST (admin scope) and the CLI ---


def _cli(service: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spillway", "token", *args], cwd=ROOT, env={**service.env, "COLUMNS": "200"}, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Any:
    service = start_service(tmp_path_factory.mktemp("tokens"), extra_env={"SPILLWAY_AUTH": "on"})
    created = _cli(service, "create", "--scope", "admin", "--name", "root", "--expires-in", "30d")
    assert created.returncode == 0, created.stderr
    yield service, created.stdout.strip()
    service.stop()


def _call(service: ServiceProcess, method: str, path: str, token: str | None, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=service.url, timeout=30) as http:
        return http.request(method, path, headers=headers, **kwargs)


def test_rest_token_admin(live: Any) -> None:
    service, admin = live
    made = _call(service, "POST", "/tokens", admin, json={"name": "ci", "scope": "submit", "expires_in": "1h"})
    assert made.status_code == 201, made.text
    ci, ci_info = made.json()["token"], made.json()["info"]
    assert ci_info["scope"] == "submit" and ci_info["state"] == "active" and ci_info["expires_at"] is not None
    assert _call(service, "GET", "/jobs", ci).status_code == 200

    listed = _call(service, "GET", "/tokens", admin)
    assert listed.status_code == 200
    assert {t["owner"] for t in listed.json()} >= {ci_info["owner"]} and ci not in listed.text and admin not in listed.text
    seen = _call(service, "GET", f"/tokens/{ci_info['id']}", admin).json()
    assert seen["last_used_at"] is not None, "the request above was recorded"

    assert _call(service, "GET", "/tokens", ci).status_code == 403, "token admin needs the admin scope"
    assert _call(service, "GET", "/tokens", None).status_code == 401

    rotated = _call(service, "POST", f"/tokens/{ci_info['id']}/rotate", admin, json={"expires_in": "2h"})
    assert rotated.status_code == 200, rotated.text
    new_ci = rotated.json()["token"]
    assert rotated.json()["info"]["owner"] == ci_info["owner"]
    refused = _call(service, "GET", "/jobs", ci)
    assert refused.status_code == 401 and "replaced by a rotation" in refused.json()["error"]["message"]
    assert _call(service, "GET", "/jobs", new_ci).status_code == 200

    revoked = _call(service, "POST", f"/tokens/{ci_info['id']}/revoke", admin)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    gone = _call(service, "GET", "/jobs", new_ci)
    assert gone.status_code == 401 and gone.json()["error"] == {"code": "unauthenticated", "message": "the bearer token was revoked"}
    again = _call(service, "POST", f"/tokens/{ci_info['id']}/rotate", admin)
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_transition"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("POST", "/tokens", {"name": "x", "expires_in": "3x"}, 422, "expires_in"),
        ("POST", "/tokens", {"name": "x", "scope": "root"}, 422, "scope"),
        ("POST", "/tokens", {"name": ""}, 422, "name"),
        ("POST", "/tokens", {"name": "a\u0000b"}, 422, "name"),
        ("POST", "/tokens", {"name": "x" * 101}, 422, "name"),
        ("POST", "/tokens", {"name": "x", "owner": "y"}, 422, "owner"),
        ("POST", "/tokens/0/revoke", None, 422, "token_id"),
        ("POST", "/tokens/99999999999999999999/revoke", None, 422, "token_id"),
        ("POST", "/tokens/abc/rotate", None, 422, "token_id"),
        ("POST", "/tokens/4242/revoke", None, 404, "id"),
        ("GET", "/tokens/4242", None, 404, "id"),
        ("POST", "/tokens/1/rotate", {"expires_in": "0s"}, 422, "expires_in"),
    ],
)
def test_rest_bad_input_is_a_4xx_naming_the_field(live: Any, method: str, path: str, body: Any, status: int, field: str) -> None:
    service, admin = live
    response = _call(service, method, path, admin, json=body)
    assert response.status_code == status, response.text
    assert field in response.json()["error"].get("field", "")


def test_an_expired_token_gets_401_on_the_service(live: Any) -> None:
    service, _ = live
    url = service.env["SPILLWAY_DATABASE_URL"]
    store = JobStore(url)
    try:
        past = TokenStore(store.engine, clock=lambda: datetime.now(timezone.utc) - timedelta(hours=2))
        expired = past.create("old", Scope.READ, expires_in=timedelta(hours=1)).token
    finally:
        store.close()
    response = _call(service, "GET", "/jobs", expired)
    assert response.status_code == 401 and "expired at" in response.json()["error"]["message"]


def test_cli_list_revoke_rotate(live: Any) -> None:
    service, admin = live
    made = _cli(service, "create", "--scope", "read", "--name", "dash")
    assert made.returncode == 0, made.stderr
    dash = made.stdout.strip()
    owner = made.stderr.split("token ", 1)[1].split(" ")[0]
    assert owner.startswith("dash#") and "does not expire" in made.stderr
    assert _call(service, "GET", "/jobs", dash).status_code == 200

    listing = _cli(service, "list")
    assert listing.returncode == 0 and owner in listing.stdout and dash not in listing.stdout
    as_json = _cli(service, "list", "--json")
    assert any(t["owner"] == owner and t["state"] == "active" for t in json.loads(as_json.stdout))

    rotated = _cli(service, "rotate", owner, "--expires-in", "1d")
    assert rotated.returncode == 0, rotated.stderr
    assert _call(service, "GET", "/jobs", dash).status_code == 401
    new = rotated.stdout.strip()
    assert _call(service, "GET", "/jobs", new).status_code == 200

    revoked = _cli(service, "revoke", owner.split("#")[1])
    assert revoked.returncode == 0 and f"revoked {owner}" in revoked.stdout
    assert _call(service, "GET", "/jobs", new).status_code == 401, "refused at once"

    for args, says in ((["revoke", "nope"], "is not a token id"), (["revoke", "4242"], "no token with id 4242"), (["create", "--expires-in", "soon"], "--expires-in"), (["create", "--name", "a\tb"], "--name"), (["rotate", owner], "is revoked")):
        failed = _cli(service, *args)
        assert failed.returncode != 0 and says in failed.stderr, (args, failed.stderr)
    assert _call(service, "GET", "/tokens", admin).status_code == 200, "the admin token still works"


def test_the_sdk_manages_tokens(live: Any) -> None:
    service, admin = live
    with SpillwayClient(service.url, token=admin) as client:
        issued = client.create_token("sdk", "read", expires_in="2h")
        assert issued.info.scope is Scope.READ and issued.info.expires_at is not None
        assert issued.info.owner in {t.owner for t in client.tokens()}
        with SpillwayClient(service.url, token=issued.token) as reader:
            assert reader.list().total >= 0
            with pytest.raises(ApiError) as denied:
                reader.tokens()
            assert denied.value.status == 403
        rotated = client.rotate_token(issued.info.id)
        assert rotated.info.owner == issued.info.owner and rotated.token != issued.token
        assert client.revoke_token(issued.info.id).state == "revoked"
        with pytest.raises(ApiError) as missing:
            client.revoke_token(424242)
        assert missing.value.status == 404 and missing.value.detail.code == "token_not_found"
    with SpillwayClient(service.url, token=rotated.token) as revoked, pytest.raises(ApiError) as refused:
        revoked.list()
    assert refused.value.status == 401


def test_with_auth_off_tokens_are_not_managed_over_rest(service: ServiceProcess) -> None:
    """Else anyone reaching a loopback service could mint an admin token that stays good once auth is on."""
    for method, path, body in (("GET", "/tokens", None), ("POST", "/tokens", {"name": "sneaky", "scope": "admin"}), ("POST", "/tokens/1/revoke", None)):
        response = _call(service, method, path, None, json=body)
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "forbidden" and "spillway token" in response.json()["error"]["message"]
