"""Configuration and opening the database: local by default, aws never silently local."""

import pytest

from lib import admin
from lib.config import SETTINGS, Settings
from lib.database import create_aws_database, open_database
from lib.errors import ConfigError, StoreUnavailable


class TestSettings:
    def test_defaults_when_nothing_is_configured(self):
        settings = Settings.load(env={}, secrets={})
        assert (settings.backend, settings.table, settings.region) == ("local", "chat", "us-east-1")

    def test_environment_wins_over_secrets_which_win_over_defaults(self):
        settings = Settings.load(
            env={"CHAT_TABLE": "from-env"}, secrets={"CHAT_TABLE": "from-secrets", "CHAT_REGION": "eu-west-1"}
        )
        assert (settings.table, settings.region) == ("from-env", "eu-west-1")

    def test_an_unknown_backend_is_refused(self):
        with pytest.raises(ConfigError, match="CHAT_BACKEND"):
            Settings.load(env={"CHAT_BACKEND": "postgres"}, secrets={})

    def test_every_setting_is_documented_in_the_configuration_page(self):
        from pathlib import Path

        page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
        missing = [name for name in SETTINGS if f"`{name}`" not in page]
        assert not missing


# What an AWS deployment must set besides the backend (see lib/config.py's checks).
AWS_SERVING = {
    "CHAT_BACKEND": "aws",
    "CHAT_IDENTITY": "header",
    "CHAT_PROXY_SECRET": "proxy-secret",
    "CHAT_CURSOR_SECRET": "cursor-secret",
}


class TestAws:
    def aws(self, server, **extra):
        return Settings.load(
            env={
                **AWS_SERVING,
                "CHAT_DYNAMODB_ENDPOINT": server.endpoint_url,
                "CHAT_TABLE": "not-created-yet",
                **extra,
            },
            secrets={},
        )

    def test_a_missing_table_names_the_command_that_creates_it(self, server):
        with pytest.raises(ConfigError, match="python -m lib.admin create-table"):
            open_database(self.aws(server))

    def test_create_table_makes_a_table_the_app_then_opens(self, server, monkeypatch):
        settings = self.aws(server, CHAT_TABLE="created-by-admin")
        message = admin.create_aws_table(settings)
        assert "point-in-time recovery" in message
        database = open_database(settings)
        assert not database.local and "created-by-admin" in database.where
        described = database.client.describe_table(TableName="created-by-admin")["Table"]
        assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert described["DeletionProtectionEnabled"] is True
        ttl = database.client.describe_time_to_live(TableName="created-by-admin")["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expire_at")
        backups = database.client.describe_continuous_backups(TableName="created-by-admin")
        assert (
            backups["ContinuousBackupsDescription"]["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"]
            == "ENABLED"
        )
        assert "already exists" in admin.create_aws_table(settings)
        database.client.update_table(TableName="created-by-admin", DeletionProtectionEnabled=False)
        database.client.delete_table(TableName="created-by-admin")

    def test_create_table_is_refused_with_the_local_backend_which_makes_its_own(self):
        with pytest.raises(ConfigError, match="CHAT_BACKEND=aws"):
            admin.create_aws_table(Settings.load(env={}, secrets={}, for_operator=True))

    def test_every_client_gets_the_deadlines_and_retries_it_is_given(self, server):
        from lib import aws
        from lib.database import RETRIES

        client = create_aws_database(self.aws(server, CHAT_TABLE="not-created-yet-either")).client
        assert (client.meta.config.connect_timeout, client.meta.config.read_timeout) == (3, 10)
        assert client.meta.config.retries == RETRIES.retries == {"mode": "adaptive", "total_max_attempts": 5}
        bedrock = aws.client(
            "bedrock-runtime", region="us-east-1", config=aws.deadlines(connect_s=2, read_s=4, attempts=2)
        )
        assert (bedrock.meta.config.read_timeout, bedrock.meta.config.retries["total_max_attempts"]) == (4, 2)
        client.update_table(TableName="not-created-yet-either", DeletionProtectionEnabled=False)
        client.delete_table(TableName="not-created-yet-either")

    def test_missing_credentials_are_a_clear_error_not_a_local_fallback(self, monkeypatch, tmp_path):
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        with pytest.raises(ConfigError, match="no AWS credentials"):
            open_database(Settings.load(env={**AWS_SERVING}, secrets={}))

    def test_an_unreachable_endpoint_is_reported_not_replaced(self):
        settings = Settings.load(env={**AWS_SERVING, "CHAT_DYNAMODB_ENDPOINT": "http://127.0.0.1:9"}, secrets={})
        with pytest.raises(StoreUnavailable, match="cannot be reached"):
            open_database(settings)


class TestIdentityAndModelSettings:
    def test_dev_identity_is_the_default_only_for_the_local_backend(self):
        assert Settings.load(env={}, secrets={}).identity == "dev"
        with pytest.raises(ConfigError, match="CHAT_IDENTITY"):
            Settings.load(env={"CHAT_BACKEND": "aws"}, secrets={})

    def test_an_auth_block_in_secrets_means_oidc(self):
        assert Settings.load(env={}, secrets={"auth": {"redirect_uri": "x", "cookie_secret": "c"}}).identity == "oidc"

    def test_the_demo_model_is_the_default_without_a_key(self):
        assert Settings.load(env={}, secrets={}).model_provider == "demo"
        assert Settings.load(env={"ANTHROPIC_API_KEY": "sk-test"}, secrets={}).model_provider == "anthropic"
        with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
            Settings.load(env={"CHAT_MODEL_PROVIDER": "anthropic"}, secrets={})

    def test_secrets_never_appear_in_the_settings_repr(self):
        settings = Settings.load(
            env={"ANTHROPIC_API_KEY": "sk-very-secret", "CHAT_PROXY_SECRET": "hunter2"}, secrets={}
        )
        assert "sk-very-secret" not in repr(settings) and "hunter2" not in repr(settings)

    def test_numbers_are_parsed_and_bad_ones_named(self):
        assert Settings.load(env={"CHAT_MAX_TOKENS": "100"}, secrets={}).max_tokens == 100
        with pytest.raises(ConfigError, match="CHAT_CONTEXT_TOKENS"):
            Settings.load(env={"CHAT_CONTEXT_TOKENS": "lots"}, secrets={})
