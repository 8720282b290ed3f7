"""`alb` identity: the load balancer's signed x-amzn-oidc-data token, verified against a locally generated key
served by a local key server (the same HTTP shape as public-keys.auth.elb.<region>.amazonaws.com/<kid>)."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from lib.config import Settings
from lib.errors import NotAuthenticated
from lib.web import alb_token
from lib.web.alb_token import AlbVerifier
from lib.web.identity import resolve

ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/chat/50dc6c495c0c9188"
OTHER_ARN = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/app/other/0123456789abcdef"
KID = "5e5a2b4c-1f0e-4f4d-9a43-2d2a6c0e7b11"


def b64(data: bytes, *, padded: bool) -> str:
    text = base64.urlsafe_b64encode(data).decode()
    return text if padded else text.rstrip("=")


def sign(
    key: ec.EllipticCurvePrivateKey,
    *,
    signer: str = ARN,
    kid: str = KID,
    exp: float | None = None,
    claims: dict | None = None,
    padded: bool = True,
) -> str:
    """A token as the ALB makes it: ES256, raw r||s signature, base64url *with* padding."""
    header = {
        "alg": "ES256",
        "kid": kid,
        "signer": signer,
        "iss": "https://login.example.com",
        "client": "chat",
        "exp": int(time.time() + 120) if exp is None else exp,
    }
    payload = {
        "sub": "7f3a",
        "email": "Alice@Example.com",
        "name": "Alice",
        "exp": header["exp"],
        "iss": "https://login.example.com",
        **(claims or {}),
    }
    encoded = [b64(json.dumps(part).encode(), padded=padded) for part in (header, payload)]
    signing_input = ".".join(encoded)
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'), padded=padded)}"


class KeyServer:
    """Serves PEM public keys by kid and counts requests; can be made to hang."""

    def __init__(self, keys: dict[str, ec.EllipticCurvePublicKey]):
        self.keys = keys
        self.hits: list[str] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.hung_up = threading.Event()  # a hanging request gave up waiting
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                owner.hits.append(self.path)
                if owner.hang.is_set():
                    owner.release.wait(300)
                    owner.hung_up.set()
                    return
                key = owner.keys.get(self.path.lstrip("/"))
                if key is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
                self.send_response(200)
                self.send_header("Content-Length", str(len(pem)))
                self.end_headers()
                self.wfile.write(pem)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def key():
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def keys(key):
    server = KeyServer({KID: key.public_key()})
    yield server
    server.close()


@pytest.fixture
def verifier(keys):
    return AlbVerifier(ARN, keys.url, timeout_s=1.0)


def refused(verifier, token):
    with pytest.raises(NotAuthenticated) as info:
        verifier.verify(token)
    return str(info.value)


class TestTheAlbToken:
    def test_a_valid_token_gives_the_identity_providers_claims(self, verifier, key):
        claims = verifier.verify(sign(key))
        assert (claims["email"], claims["sub"]) == ("Alice@Example.com", "7f3a")

    def test_unpadded_base64url_is_accepted_too(self, verifier, key):
        assert verifier.verify(sign(key, padded=False))["sub"] == "7f3a"

    def test_an_expired_token_is_refused_with_a_way_back(self, verifier, key):
        assert "reload the page to sign in again" in refused(verifier, sign(key, exp=time.time() - 1))

    def test_a_token_signed_by_another_load_balancer_is_refused_without_fetching_a_key(self, verifier, key, keys):
        refused(verifier, sign(key, signer=OTHER_ARN))
        assert keys.hits == []

    def test_a_tampered_payload_is_refused(self, verifier, key):
        header, payload, signature = sign(key).split(".")
        forged = json.loads(base64.urlsafe_b64decode(payload))
        forged["email"] = "mallory@example.com"
        refused(verifier, ".".join([header, b64(json.dumps(forged).encode(), padded=True), signature]))

    def test_a_token_signed_by_another_key_under_the_same_kid_is_refused(self, verifier):
        refused(verifier, sign(ec.generate_private_key(ec.SECP256R1())))

    def test_a_token_naming_an_unknown_key_is_refused(self, verifier, key):
        refused(verifier, sign(key, kid="0000-unknown"))

    def test_a_kid_that_would_change_the_key_url_is_refused_before_any_request(self, verifier, key, keys):
        refused(verifier, sign(key, kid="../../evil"))
        refused(verifier, sign(key, kid="x?y=1"))
        assert keys.hits == []

    @pytest.mark.parametrize("token", ["", "not-a-jwt", "a.b", "a.b.c", "e30=.e30=.AAAA"])
    def test_malformed_tokens_are_refused(self, verifier, token):
        refused(verifier, token)

    def test_the_public_key_is_fetched_once_per_kid(self, verifier, key, keys):
        for _ in range(3):
            verifier.verify(sign(key))
        assert keys.hits == [f"/{KID}"]

    def test_a_key_server_that_does_not_answer_is_a_clear_error_within_the_deadline(self, verifier, key, keys):
        keys.hang.set()
        message = refused(verifier, sign(key))
        assert "did not answer within 1 s" in message and "reload the page" in message
        # The server still holds the request (it would for 30 s): the verifier's own deadline ended the wait.
        assert keys.hits == [f"/{KID}"] and not keys.hung_up.is_set()

    def test_a_key_server_that_is_down_is_a_clear_error(self, key):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # nothing listens here once closed
        assert "key server did not answer" in refused(AlbVerifier(ARN, f"http://127.0.0.1:{port}"), sign(key))

    def test_a_redirect_from_the_key_server_is_refused_and_not_followed(self, key, keys):
        class Redirect(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(302)
                self.send_header("Location", f"{keys.url}{self.path}")  # another host, serving a valid key
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        try:
            message = refused(
                AlbVerifier(ARN, f"http://127.0.0.1:{server.server_address[1]}", timeout_s=1.0), sign(key)
            )
        finally:
            server.shutdown()
            server.server_close()
        assert "could not be verified" in message
        assert keys.hits == []  # the host it pointed to was never asked

    def test_the_default_key_url_is_the_regions_endpoint(self):
        assert AlbVerifier(ARN).key_url == "https://public-keys.auth.elb.eu-west-1.amazonaws.com"


class TestAlbIdentity:
    @pytest.fixture
    def settings(self, keys):
        alb_token._verifiers.clear()  # a fresh key cache per test
        return Settings.load(
            env={"CHAT_IDENTITY": "alb", "CHAT_ALB_ARN": ARN, "CHAT_ALB_KEY_URL": keys.url}, secrets={}
        )

    def test_the_user_is_the_tokens_email(self, settings, key):
        found = resolve(settings, {"X-Amzn-Oidc-Data": sign(key)}, {})
        assert (found.user_id, found.display, found.mode) == ("alice@example.com", "Alice", "alb")

    def test_without_an_email_claim_the_user_is_the_subject(self, settings, key):
        assert resolve(settings, {"x-amzn-oidc-data": sign(key, claims={"email": None})}, {}).user_id == "7f3a"

    def test_a_missing_token_is_refused(self, settings):
        with pytest.raises(NotAuthenticated, match="company sign-in"):
            resolve(settings, {"X-Forwarded-Email": "alice@example.com"}, {})

    def test_a_plain_identity_header_is_not_trusted_in_alb_mode(self, settings, key):
        found = resolve(
            settings,
            {"x-amzn-oidc-data": sign(key), "x-amzn-oidc-identity": "bob", "X-Forwarded-Email": "bob@example.com"},
            {},
        )
        assert found.user_id == "alice@example.com"

    def test_a_browser_session_keeps_its_sign_in_after_the_token_expires_but_a_new_one_does_not(
        self, settings, key, monkeypatch
    ):
        token = sign(key, exp=time.time() + 60)
        session: dict = {}
        assert resolve(settings, {"x-amzn-oidc-data": token}, {}, session=session).user_id == "alice@example.com"
        later = time.time() + 3600
        monkeypatch.setattr(alb_token.time, "time", lambda: later)
        monkeypatch.setattr(alb_token.verifier(ARN, settings.alb_key_url), "_clock", lambda: later)
        # the same connection's reruns: verified when it connected
        assert resolve(settings, {"x-amzn-oidc-data": token}, {}, session=session).user_id == "alice@example.com"
        with pytest.raises(NotAuthenticated):  # the same token replayed on a new connection
            resolve(settings, {"x-amzn-oidc-data": token}, {}, session={})

    def test_a_session_shown_a_different_token_verifies_it(self, settings, key):
        session: dict = {}
        resolve(settings, {"x-amzn-oidc-data": sign(key)}, {}, session=session)
        with pytest.raises(NotAuthenticated):
            resolve(settings, {"x-amzn-oidc-data": sign(key, signer=OTHER_ARN)}, {}, session=session)


@pytest.mark.usefixtures("app_env")
class TestTheChatPageBehindTheAlb:
    @pytest.fixture
    def alb_env(self, monkeypatch, keys):
        alb_token._verifiers.clear()
        monkeypatch.setenv("CHAT_IDENTITY", "alb")
        monkeypatch.setenv("CHAT_ALB_ARN", ARN)
        monkeypatch.setenv("CHAT_ALB_KEY_URL", keys.url)

    def test_a_verified_token_signs_the_user_in(self, alb_env, key, monkeypatch):
        from lib.web import ui
        from tests.pages import new_browser, send, services

        monkeypatch.setattr(ui, "request_headers", lambda: {"X-Amzn-Oidc-Data": sign(key)})
        at = new_browser()
        assert not at.exception and at.chat_input
        assert any("Signed in as **Alice**" in c.value for c in at.sidebar.caption)
        send(at, "hello from behind the load balancer")
        assert not at.exception
        sessions = services().store.list_sessions("alice@example.com").items
        assert [s.title for s in sessions] == ["Hello from behind the load balancer"]

    def test_a_forged_token_gets_the_sign_in_error_and_no_chat(self, alb_env, key, monkeypatch):
        from lib.web import ui
        from tests.pages import new_browser

        monkeypatch.setattr(
            ui, "request_headers", lambda: {"X-Amzn-Oidc-Data": sign(ec.generate_private_key(ec.SECP256R1()))}
        )
        at = new_browser()
        assert not at.exception and not at.chat_input
        assert "could not be verified" in at.error[0].value
