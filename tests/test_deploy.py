"""Deployment as code: deploy/chat.yaml lints clean; its table and roles, created by moto's CloudFormation, carry
the app (the store runs on that table); the task role allows exactly the DynamoDB actions the code uses."""

from __future__ import annotations

import ast
import json
import re
import shutil
import socket
import subprocess
import sys
import time

import boto3
import pytest

from lib.config import Settings
from lib.database import open_database
from lib.ops.invariants import check_user
from lib.storage import keys
from lib.storage.schema import table_exists
from lib.usage.ledger import Ledger
from tests.deploy_helpers import (
    ROOT,
    TEMPLATE,
    TRANSACTION_ITEM_ACTIONS,
    _operations,
    app_dynamodb_actions,
    app_s3_actions,
    load_template,
)

CFN_LINT = shutil.which("cfn-lint")
REGION = "eu-west-1"


@pytest.fixture(scope="module")
def template() -> dict:
    return load_template()


def resource(template, name):
    return template["Resources"][name]["Properties"]


def table_statement(template) -> dict:
    policy = resource(template, "TaskRole")["Policies"][0]["PolicyDocument"]
    return next(s for s in policy["Statement"] if isinstance(s, dict) and s.get("Sid") == "ChatTable")


class TestTheTemplate:
    @pytest.mark.skipif(
        CFN_LINT is None, reason="cfn-lint is not installed: pip install -r requirements-dev.txt (.ci/run does)"
    )
    def test_cfn_lint_finds_nothing(self):
        result = subprocess.run([CFN_LINT, str(TEMPLATE)], capture_output=True, text=True, timeout=300)
        assert (result.returncode, result.stdout + result.stderr) == (0, "")

    def test_the_table_is_on_demand_recoverable_protected_encrypted_with_ttl_and_kept_when_the_stack_goes(
        self, template
    ):
        table = resource(template, "ChatTable")
        assert table["BillingMode"] == "PAY_PER_REQUEST"
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert table["DeletionProtectionEnabled"] is True
        assert table["SSESpecification"] == {"SSEEnabled": True}
        assert table["TimeToLiveSpecification"] == {"AttributeName": "expire_at", "Enabled": True}
        assert [k["AttributeName"] for k in table["KeySchema"]] == ["pk", "sk"]
        assert (
            template["Resources"]["ChatTable"]["DeletionPolicy"],
            template["Resources"]["ChatTable"]["UpdateReplacePolicy"],
        ) == ("Retain", "Retain")

    def test_the_https_listener_signs_users_in_before_forwarding(self, template):
        listener = resource(template, "HttpsListener")
        assert (listener["Protocol"], listener["Port"]) == ("HTTPS", 443)
        assert listener["Certificates"] == [{"CertificateArn": {"Ref": "CertificateArn"}}]
        sign_in, forward = sorted(listener["DefaultActions"], key=lambda a: a["Order"])
        assert (sign_in["Type"], forward["Type"]) == ("authenticate-oidc", "forward")
        config = sign_in["AuthenticateOidcConfig"]
        assert config["OnUnauthenticatedRequest"] == "authenticate" and "email" in config["Scope"].split()
        # The client secret comes from Secrets Manager, never from a template parameter's value.
        assert config["ClientSecret"] == {"Fn::Sub": "{{resolve:secretsmanager:${OidcClientSecretArn}:SecretString}}"}
        plain_http = resource(template, "HttpListener")["DefaultActions"]
        assert [a["Type"] for a in plain_http] == ["redirect"]

    def test_the_load_balancer_keeps_websockets_sessions_and_draining_answers(self, template):
        attributes = {a["Key"]: a["Value"] for a in resource(template, "LoadBalancer")["LoadBalancerAttributes"]}
        assert int(attributes["idle_timeout.timeout_seconds"]) >= 300
        group = resource(template, "TargetGroup")
        assert group["HealthCheckPath"] == "/_stcore/health"
        target = {a["Key"]: a["Value"] for a in group["TargetGroupAttributes"]}
        assert (target["stickiness.enabled"], target["stickiness.type"]) == ("true", "lb_cookie")
        assert int(target["deregistration_delay.timeout_seconds"]) >= 60
        container = resource(template, "TaskDefinition")["ContainerDefinitions"][0]
        assert container["StopTimeout"] >= 30  # SIGTERM, then the ledger's flush, before SIGKILL

    def test_only_the_load_balancer_reaches_the_tasks(self, template):
        ingress = resource(template, "AppSecurityGroup")["SecurityGroupIngress"]
        assert [(r["FromPort"], r["SourceSecurityGroupId"]) for r in ingress] == [
            (8501, {"Ref": "LoadBalancerSecurityGroup"})
        ]
        assert all("CidrIp" not in r for r in ingress)

    def test_the_tasks_configuration_passes_the_apps_own_checks(self, template):
        container = resource(template, "TaskDefinition")["ContainerDefinitions"][0]
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        assert (env["CHAT_BACKEND"], env["CHAT_IDENTITY"], env["CHAT_ALB_ARN"]) == (
            "aws",
            "alb",
            {"Ref": "LoadBalancer"},
        )
        secrets = container["Secrets"]["Fn::If"]
        for branch in secrets[1:]:
            assert {"Name": "CHAT_CURSOR_SECRET", "ValueFrom": {"Ref": "CursorSecret"}} in branch
        # What the tasks get once CloudFormation fills in the references:
        resolved = {
            "CHAT_TABLE": "chat",
            "CHAT_REGION": REGION,
            "CHAT_MODEL_PROVIDER": "bedrock",
            "CHAT_MODEL": "claude-sonnet-4-6",
            "CHAT_BEDROCK_MODEL": "eu.anthropic.claude-sonnet-4-6-v1:0",
            "CHAT_ALB_ARN": f"arn:aws:elasticloadbalancing:{REGION}:123456789012:loadbalancer/app/chat/1",
            "CHAT_CURSOR_SECRET": "from-secrets-manager",
        }
        settings = Settings.load(env={**{k: v for k, v in env.items() if isinstance(v, str)}, **resolved}, secrets={})
        assert (settings.backend, settings.identity, settings.table) == ("aws", "alb", "chat")

    def test_ecs_reads_the_cursor_secret_and_the_api_key_only_when_the_anthropic_api_is_used(self, template):
        (statement,) = resource(template, "ExecutionRole")["Policies"][0]["PolicyDocument"]["Statement"]
        assert statement["Action"] == "secretsmanager:GetSecretValue"
        condition, with_anthropic, without = statement["Resource"]["Fn::If"]
        assert condition == "UseAnthropic" and without == [{"Ref": "CursorSecret"}]
        assert (
            with_anthropic[0] == {"Ref": "CursorSecret"}
            and "${AnthropicApiKeySecretName}-??????" in with_anthropic[1]["Fn::Sub"]
        )

    def test_a_template_parameter_never_carries_a_secret_value(self, template):
        for name in template["Parameters"]:
            if "Secret" in name:
                assert name.endswith(("SecretArn", "SecretName")), name


def bucket_statement(template) -> dict:
    policy = resource(template, "TaskRole")["Policies"][0]["PolicyDocument"]
    return next(s for s in policy["Statement"] if isinstance(s, dict) and s.get("Sid") == "BodiesBucket")


class TestTheBodiesBucket:
    def test_it_is_encrypted_private_kept_and_aborts_stale_multipart_uploads(self, template):
        bucket = resource(template, "BodiesBucket")
        (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")
        assert bucket["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert bucket["VersioningConfiguration"] == {"Status": "Suspended"}  # docs/objects.md says why
        (lifecycle,) = bucket["LifecycleConfiguration"]["Rules"]
        assert lifecycle["Status"] == "Enabled" and lifecycle["AbortIncompleteMultipartUpload"] == {
            "DaysAfterInitiation": 1
        }
        assert (
            template["Resources"]["BodiesBucket"]["DeletionPolicy"],
            template["Resources"]["BodiesBucket"]["UpdateReplacePolicy"],
        ) == ("Retain", "Retain")

    def test_its_policy_refuses_every_request_without_tls(self, template):
        policy = resource(template, "BodiesBucketPolicy")
        assert policy["Bucket"] == {"Ref": "BodiesBucket"}
        (statement,) = policy["PolicyDocument"]["Statement"]
        assert (statement["Effect"], statement["Principal"], statement["Action"]) == ("Deny", "*", "s3:*")
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert statement["Resource"] == [{"Fn::GetAtt": ["BodiesBucket", "Arn"]}, {"Fn::Sub": "${BodiesBucket.Arn}/*"}]

    def test_the_tasks_are_told_the_bucket(self, template):
        container = resource(template, "TaskDefinition")["ContainerDefinitions"][0]
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        assert env["CHAT_BUCKET"] == {"Ref": "BodiesBucket"}

    def test_the_task_role_allows_exactly_the_s3_actions_the_deployed_code_uses_under_users(self, template):
        needed = app_s3_actions()
        statement = bucket_statement(template)
        policy = resource(template, "TaskRole")["Policies"][0]["PolicyDocument"]
        archive = next(s for s in policy["Statement"] if isinstance(s, dict) and s.get("Sid") == "ArchiveObjects")
        assert set(statement["Action"]) | set(archive["Action"]) == set(needed), needed
        # a restore deletes its chat's archive object (docs/archive.md); check and repair (list, delete of bodies)
        # are the operator's
        assert set(needed) == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
        assert statement["Resource"] == [{"Fn::Sub": "${BodiesBucket.Arn}/users/*"}]
        assert (archive["Action"], archive["Resource"]) == (
            ["s3:DeleteObject"],
            [{"Fn::Sub": "${BodiesBucket.Arn}/users/*/archive/*"}],
        )


class TestTheTaskRole:
    def test_it_allows_exactly_the_dynamodb_actions_the_deployed_code_uses(self, template):
        needed = app_dynamodb_actions()
        allowed = {action.removeprefix("dynamodb:") for action in table_statement(template)["Action"]}
        missing = {action: sorted(where) for action, where in needed.items() if action not in allowed}
        unused = allowed - set(needed)
        assert not missing, f"the code needs these, the task role does not allow them: {missing}"
        assert not unused, f"the task role allows these, no code of the app uses them: {sorted(unused)}"

    def test_the_dynamodb_statement_names_only_the_table_and_its_indexes(self, template):
        assert table_statement(template)["Resource"] == [
            {"Fn::GetAtt": ["ChatTable", "Arn"]},
            {"Fn::Sub": "${ChatTable.Arn}/index/*"},
        ]

    def test_bedrock_is_allowed_only_with_bedrock_and_only_for_the_configured_models(self, template):
        policy = resource(template, "TaskRole")["Policies"][0]["PolicyDocument"]
        condition, statement, otherwise = policy["Statement"][1]["Fn::If"]
        assert (condition, otherwise) == ("UseBedrock", {"Ref": "AWS::NoValue"})
        assert statement["Action"] == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
        assert all("${Bedrock" in r["Fn::Sub"] for r in statement["Resource"])
        # Models added to the picker (CHAT_MODELS) get a statement of their own, with nothing by default.
        condition, statement, otherwise = policy["Statement"][2]["Fn::If"]
        assert (condition, otherwise, statement["Resource"]) == (
            "UseExtraBedrockModels",
            {"Ref": "AWS::NoValue"},
            {"Ref": "ExtraBedrockModelArns"},
        )
        assert template["Conditions"]["UseExtraBedrockModels"]["Fn::And"][0] == {"Condition": "UseBedrock"}
        assert template["Parameters"]["ExtraBedrockModelArns"]["Default"] == ""

    def test_the_derivation_sees_every_way_the_code_names_an_operation(self):
        client_methods = boto3.client("dynamodb", region_name="us-east-1").meta.method_to_api_mapping
        code = ast.parse(
            "def f(self, client):\n"
            "    self._call('query', Key=1)\n"
            "    gateway.call('batch_get_item')\n"
            "    query_all(functools.partial(self._call, 'get_item'))\n"
            "    client.update_item(Key=1)\n"
            "    read(self._client.describe_table)\n"
            "    self._call('transact_write_items', TransactItems=[{'Put': {}}, {'Delete': {}}])\n"
            "    if kind == 'Update': pass\n"  # a comparison, not a transaction item
            "    text = 'client.scan(TableName=1)'\n"
        )  # a string, not a call
        assert _operations(code, client_methods) == {
            "Query",
            "BatchGetItem",
            "GetItem",
            "UpdateItem",
            "DescribeTable",
            "TransactWriteItems",
            "item:Put",
            "item:Delete",
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto_server():
    """Stock moto in its own process (its CloudFormation, IAM and DynamoDB), so nothing is shared with the
    embedded server the other tests use."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "moto's server did not start"
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=20)


def moto_client(service: str, url: str):
    """A client of the moto server (explicit fake credentials: module fixtures run before the per-test environment)."""
    return boto3.client(
        service, region_name=REGION, endpoint_url=url, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


# The parts of the template moto's CloudFormation can create (moto has no ALB authenticate action or Fargate).
MOTO_PARTS = [
    "ChatTable",
    "BodiesBucket",
    "BodiesBucketPolicy",
    "CursorSecret",
    "LogGroup",
    "TaskRole",
    "ExecutionRole",
]


def _refs(value) -> set[str]:
    text = json.dumps(value)
    return set(re.findall(r'"Ref": "(\w+)"', text)) | set(re.findall(r"\$\{(\w+)[.}]", text))


@pytest.fixture(scope="module")
def stack(moto_server, template):
    part = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Conditions": template["Conditions"],
        "Resources": {name: template["Resources"][name] for name in MOTO_PARTS},
    }
    part["Parameters"] = {k: v for k, v in template["Parameters"].items() if k in _refs(part)}
    cloudformation = moto_client("cloudformation", moto_server)
    cloudformation.create_stack(
        StackName="chat",
        TemplateBody=json.dumps(part),
        Capabilities=["CAPABILITY_IAM"],
        Parameters=[
            {"ParameterKey": "TableName", "ParameterValue": "chat-from-stack"},
            {"ParameterKey": "ModelProvider", "ParameterValue": "bedrock"},
            {"ParameterKey": "BedrockModelId", "ParameterValue": "eu.anthropic.claude-sonnet-4-6-v1:0"},
            {"ParameterKey": "BedrockFoundationModelId", "ParameterValue": "anthropic.claude-sonnet-4-6-v1:0"},
            {"ParameterKey": "ExtraBedrockModelArns", "ParameterValue": ",".join(EXTRA_MODEL_ARNS)},
        ],
    )
    described = cloudformation.describe_stacks(StackName="chat")["Stacks"][0]
    assert described["StackStatus"] == "CREATE_COMPLETE", described.get("StackStatusReason")
    resources = cloudformation.describe_stack_resources(StackName="chat")["StackResources"]
    return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources if "LogicalResourceId" in r}


# A second pickable model (CHAT_MODELS): its inference profile and the foundation model behind it.
EXTRA_MODEL_ARNS = [
    f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/eu.anthropic.claude-haiku-4-5-v1:0",
    "arn:aws:bedrock:*::foundation-model/anthropic.claude-haiku-4-5-v1:0",
]


def role_policy(moto_server, role_name: str) -> dict:
    iam = moto_client("iam", moto_server)
    (name,) = iam.list_role_policies(RoleName=role_name)["PolicyNames"]
    document = iam.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"]
    if isinstance(document, str):  # moto returns the document as a Python literal, not JSON
        document = ast.literal_eval(document)
    return document


class TestInMotosCloudFormation:
    def test_the_stack_makes_an_on_demand_pk_sk_table_with_deletion_protection(self, moto_server, stack):
        client = moto_client("dynamodb", moto_server)
        table = client.describe_table(TableName=stack["ChatTable"])["Table"]
        assert stack["ChatTable"] == "chat-from-stack"
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert table["DeletionProtectionEnabled"] is True
        assert [(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]] == [("pk", "HASH"), ("sk", "RANGE")]
        # moto's CloudFormation does not apply TTL, PITR or SSE; TestTheTemplate checks the template declares them.

    def test_the_task_roles_policy_names_the_tables_arn_and_the_chosen_models(self, moto_server, stack):
        statements = role_policy(moto_server, stack["TaskRole"])["Statement"]
        table_arn = f"arn:aws:dynamodb:{REGION}:123456789012:table/chat-from-stack"
        assert statements[0]["Resource"] == [table_arn, f"{table_arn}/index/*"]
        assert statements[1]["Resource"] == [
            f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/eu.anthropic.claude-sonnet-4-6-v1:0",
            "arn:aws:bedrock:*::foundation-model/anthropic.claude-sonnet-4-6-v1:0",
        ]
        # The models ChatModels adds may be invoked too, and only those the operator listed.
        assert statements[2]["Sid"] == "PickableModels" and statements[2]["Resource"] == EXTRA_MODEL_ARNS
        assert statements[2]["Action"] == statements[1]["Action"]

    def test_the_store_runs_on_the_stacks_table_using_only_actions_the_task_role_allows(self, moto_server, stack):
        settings = Settings.load(
            env={
                "CHAT_BACKEND": "aws",
                "CHAT_TABLE": stack["ChatTable"],
                "CHAT_REGION": REGION,
                "CHAT_DYNAMODB_ENDPOINT": moto_server,
                "CHAT_BUCKET": stack["BodiesBucket"],
                "CHAT_BUCKET_ENDPOINT": moto_server,
            },
            secrets={},
            for_operator=True,
        )
        database = open_database(settings)
        s3_used: set[str] = set()
        database.objects.backend.client.meta.events.register(
            "before-parameter-build.s3", lambda params, model, **_: s3_used.add(model.name)
        )
        used: set[str] = set()

        def record(params, model, **_):
            if model.name == "TransactWriteItems":
                used.update(TRANSACTION_ITEM_ACTIONS[kind] for item in params["TransactItems"] for kind in item)
            else:
                used.add(model.name)

        database.client.meta.events.register("before-parameter-build.dynamodb", record)
        store = database.store("cursor-secret")
        ledger = Ledger(database.client, database.table, database.meter, flush_interval_s=300)
        user = "alice@example.com"
        session, first = store.create_session(user, "How do I deploy this?", system_prompt_id="default-v1")
        store.finish_message(
            user,
            first,
            output_body="With the template.",
            input_token=5,
            output_token=4,
            response_start_time=keys.now(),
            response_end_time=keys.now(),
        )
        session = store.get_session(user, session.session_id)
        session, second = store.send_message(user, session, "And the index?", system_prompt_id="default-v1")
        store.fail_message(user, second, output_body="", error="model unavailable")
        store.rename_session(user, store.get_session(user, session.session_id), "Deploying")
        session, third = store.send_message(
            user, store.get_session(user, session.session_id), "the logs:\n" * 10_000, system_prompt_id="default-v1"
        )  # over 16 KB: into the stack's bucket first
        store.fail_message(user, third, output_body="", error="model unavailable")
        view = store.open_session(user, session.session_id)
        assert [m.status for m in view.messages] == ["done", "failed", "failed"]
        assert store.bodies.text(user, view.messages[-1], "input", action="open") == "the logs:\n" * 10_000
        bucket_allowed = set(role_policy(moto_server, stack["TaskRole"])["Statement"][-1]["Action"])
        assert {f"s3:{name}" for name in s3_used} == bucket_allowed == {"s3:PutObject", "s3:GetObject"}
        assert [s.title for s in store.list_sessions(user).items] == ["Deploying"]
        assert table_exists(database.client, database.table)  # what open_database asks before serving
        ledger.flush(final=True)
        (bucket,) = ledger.read([keys.day_of(keys.now())], user=user, include_unflushed=False)
        assert (bucket.counters["n.create"], bucket.counters["n.send"], bucket.counters["n.rename"]) == (1, 2, 1)
        assert (bucket.counters["s3p.send"], bucket.counters["s3b.send"], bucket.counters["s3g.open"]) == (
            1,
            len("the logs:\n" * 10_000),
            1,
        )
        report = check_user(database.client, database.table, user)
        assert report.ok and (report.sessions, report.messages) == (1, 3)
        statement = role_policy(moto_server, stack["TaskRole"])["Statement"][0]
        allowed = {action.removeprefix("dynamodb:") for action in statement["Action"]}
        assert used - allowed == set()
        assert used <= set(app_dynamodb_actions())  # what ran is within what the code derivation found
        assert {"PutItem", "UpdateItem", "DeleteItem", "Query", "GetItem", "DescribeTable", "BatchGetItem"} <= used


class TestTheImage:
    """The Dockerfile is checked as text: this machine has no Docker daemon to build it."""

    @pytest.fixture(scope="class")
    def dockerfile(self) -> list[str]:
        """The instructions, continuation lines joined, comments left out."""
        text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
        return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]

    def test_it_starts_from_the_slim_python_311_image(self, dockerfile):
        assert dockerfile[0].startswith("FROM python:3.11-slim")

    def test_it_installs_the_runtime_requirements_only(self, dockerfile):
        text = "\n".join(dockerfile)
        assert "pip install --no-cache-dir -r requirements.txt" in text and "requirements-dev" not in text
        assert "COPY . " not in text  # only what the app runs is copied (see .dockerignore too)

    def test_it_runs_as_a_user_other_than_root(self, dockerfile):
        users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
        assert users and users[-1] not in ("root", "0")

    def test_it_checks_health_and_listens_on_every_interface_for_the_load_balancer(self, dockerfile):
        (health,) = [line for line in dockerfile if line.startswith("HEALTHCHECK")]
        assert "http://127.0.0.1:8501/_stcore/health" in health
        command = json.loads(next(line for line in dockerfile if line.startswith("CMD"))[3:])
        assert command[:3] == ["streamlit", "run", "app.py"]
        assert command[command.index("--server.address") + 1] == "0.0.0.0"

    def test_secrets_and_local_data_never_enter_the_image(self):
        ignored = (ROOT / ".dockerignore").read_text().splitlines()
        for path in (".streamlit/secrets.toml", ".chat-data", ".git", "tests", "requirements-dev.txt"):
            assert path in ignored, path
