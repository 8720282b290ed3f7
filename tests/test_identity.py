"""Who is signed in: unsafe configurations refused with the fix, and an identity header given twice refused."""

import pytest
from streamlit.runtime.context import StreamlitHeaders

from lib.config import Settings
from lib.errors import ConfigError, NotAuthenticated
from lib.web.identity import resolve

AUTH = {
    "redirect_uri": "https://chat.example.com/oauth2callback",
    "cookie_secret": "c" * 32,
    "client_id": "chat",
    "client_secret": "s",
    "server_metadata_url": "https://login.example.com/.well-known/openid-configuration",
}
AWS = {"CHAT_BACKEND": "aws", "CHAT_CURSOR_SECRET": "cursor-secret"}


def load(secrets=None, **env):
    return Settings.load(env=env, secrets=secrets or {})


class TestUnsafeConfigurationsAreRefused:
    def test_dev_identity_chosen_explicitly_is_refused_on_aws(self):
        with pytest.raises(ConfigError, match="CHAT_IDENTITY=dev is refused with CHAT_BACKEND=aws"):
            load(**AWS, CHAT_IDENTITY="dev")

    def test_dev_identity_by_default_is_refused_on_aws_and_names_the_choices(self):
        with pytest.raises(ConfigError, match="'alb', 'header' or 'oidc'"):
            load(**AWS)

    def test_header_identity_on_aws_without_a_proxy_secret_is_refused(self):
        with pytest.raises(ConfigError, match="CHAT_PROXY_SECRET.*or CHAT_TRUST_NETWORK=1"):
            load(**AWS, CHAT_IDENTITY="header")

    def test_header_identity_on_aws_is_accepted_with_a_proxy_secret_or_a_trusted_network(self):
        assert load(**AWS, CHAT_IDENTITY="header", CHAT_PROXY_SECRET="p").identity == "header"
        trusted = load(**AWS, CHAT_IDENTITY="header", CHAT_TRUST_NETWORK="1")
        assert trusted.identity == "header" and trusted.trusts_network

    def test_header_identity_without_a_proxy_secret_stays_allowed_locally(self):
        assert load(CHAT_IDENTITY="header").identity == "header"

    def test_trust_network_takes_only_one_or_unset(self):
        with pytest.raises(ConfigError, match="CHAT_TRUST_NETWORK must be '1' or unset, not 'yes'"):
            load(CHAT_TRUST_NETWORK="yes")

    def test_oidc_without_an_auth_block_says_where_to_put_one(self):
        with pytest.raises(ConfigError, match=r"needs an \[auth\] block in .streamlit/secrets.toml.*\.example"):
            load(CHAT_IDENTITY="oidc")

    def test_oidc_without_a_cookie_secret_is_refused_because_replicas_must_share_it(self):
        with pytest.raises(ConfigError, match="cookie_secret.*the same on every replica"):
            load({"auth": {**AUTH, "cookie_secret": ""}}, CHAT_IDENTITY="oidc")

    def test_oidc_with_an_auth_block_is_accepted(self):
        assert load({"auth": AUTH}, **AWS, CHAT_IDENTITY="oidc").identity == "oidc"

    def test_aws_without_a_cursor_secret_is_refused(self):
        with pytest.raises(ConfigError, match="CHAT_BACKEND=aws needs CHAT_CURSOR_SECRET.*every replica"):
            load(CHAT_BACKEND="aws", CHAT_IDENTITY="header", CHAT_PROXY_SECRET="p")

    def test_the_local_backend_needs_no_cursor_secret(self):
        assert load().cursor_secret == ""

    def test_alb_identity_needs_the_load_balancer_arn(self):
        with pytest.raises(ConfigError, match="CHAT_IDENTITY=alb needs CHAT_ALB_ARN"):
            load(**AWS, CHAT_IDENTITY="alb")

    def test_an_unknown_identity_is_refused(self):
        with pytest.raises(ConfigError, match="'dev', 'header', 'alb' or 'oidc', not 'saml'"):
            load(CHAT_IDENTITY="saml")

    def test_operator_commands_need_no_sign_in_settings(self):
        settings = Settings.load(env={"CHAT_BACKEND": "aws"}, secrets={}, for_operator=True)
        assert settings.backend == "aws"


HEADER = {"CHAT_IDENTITY": "header", "CHAT_PROXY_SECRET": "s3cret"}


class TestRepeatedIdentityHeaders:
    """A proxy that appends X-Forwarded-Email instead of replacing it lets the client's own copy come first."""

    def test_one_identity_header_and_one_secret_sign_in(self):
        headers = StreamlitHeaders([("X-Forwarded-Email", "Bob@Example.com"), ("X-Proxy-Secret", "s3cret")])
        assert resolve(load(**HEADER), headers, {}).user_id == "bob@example.com"

    def test_an_identity_header_given_twice_is_refused(self):
        headers = StreamlitHeaders(
            [
                ("X-Forwarded-Email", "alice@example.com"),
                ("X-Proxy-Secret", "s3cret"),
                ("x-forwarded-email", "bob@example.com"),
            ]
        )
        with pytest.raises(NotAuthenticated, match="X-Forwarded-Email more than once"):
            resolve(load(**HEADER), headers, {})

    def test_a_proxy_secret_header_given_twice_is_refused(self):
        headers = StreamlitHeaders(
            [("X-Forwarded-Email", "bob@example.com"), ("X-Proxy-Secret", "guess"), ("X-Proxy-Secret", "s3cret")]
        )
        with pytest.raises(NotAuthenticated, match="X-Proxy-Secret more than once"):
            resolve(load(**HEADER), headers, {})

    def test_a_plain_mapping_with_the_header_in_two_spellings_is_refused(self):
        headers = {
            "X-Forwarded-Email": "alice@example.com",
            "x-forwarded-email": "bob@example.com",
            "X-Proxy-Secret": "s3cret",
        }
        with pytest.raises(NotAuthenticated, match="more than once"):
            resolve(load(**HEADER), headers, {})

    def test_the_alb_token_header_given_twice_is_refused_before_any_key_is_fetched(self):
        settings = load(
            CHAT_IDENTITY="alb",
            CHAT_ALB_ARN="arn:aws:elasticloadbalancing:eu-west-1:1:loadbalancer/app/a",
            CHAT_ALB_KEY_URL="http://127.0.0.1:9",
        )
        headers = StreamlitHeaders([("x-amzn-oidc-data", "a.b.c"), ("X-Amzn-Oidc-Data", "d.e.f")])
        with pytest.raises(NotAuthenticated, match="x-amzn-oidc-data more than once"):
            resolve(settings, headers, {})


class TestTheSettingsTables:
    @staticmethod
    def rows(name: str) -> dict[str, tuple[str, str]]:
        import re
        from pathlib import Path

        from lib.config import SETTINGS

        rows: dict[str, tuple[str, str]] = {}
        for line in (Path(__file__).resolve().parents[1] / name).read_text().splitlines():
            match = re.match(r"^\| `([A-Z_]+)` \| (.*?) \| (.*) \|$", line)
            if match and match.group(1) in SETTINGS:
                rows.setdefault(match.group(1), (match.group(2), match.group(3)))  # the configuration table's
        return rows

    @staticmethod
    def expected(name: str) -> tuple[str, str]:
        from lib.config import SETTINGS

        default, meaning = SETTINGS[name]
        return f"`{default}`" if default else "(unset)", meaning

    def test_every_setting_has_a_row_with_its_default_and_meaning_on_the_configuration_page(self):
        from lib.config import SETTINGS

        rows = self.rows("docs/configuration.md")
        assert {n: rows.get(n) for n in SETTINGS if rows.get(n) != self.expected(n)} == {}

    def test_the_readme_lists_the_common_settings_with_the_same_words(self):
        rows = self.rows("README.md")
        assert len(rows) >= 10 and {n: r for n, r in rows.items() if r != self.expected(n)} == {}
