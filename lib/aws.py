"""The one place that makes boto3 clients: DynamoDB (lib/database.py) and Bedrock for embeddings
(lib/search/embedders.py). Every client gets its own botocore session (boto3's default session is not
thread-safe, and Streamlit runs each browser session in its own thread) and the deadlines and retries the caller
decides, so no request can wait forever on a hung endpoint."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config


def deadlines(*, connect_s: float, read_s: float, attempts: int, mode: str = "standard") -> Config:
    """A client Config: connect and read deadlines per attempt, and at most `attempts` attempts in botocore's
    retry `mode` ("standard", or "adaptive", which also slows down when throttled)."""
    return Config(
        retries={"mode": mode, "total_max_attempts": attempts}, connect_timeout=connect_s, read_timeout=read_s
    )


def client(
    service: str,
    *,
    region: str | None,
    config: Config,
    endpoint_url: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
) -> Any:
    """A boto3 client of `service` with this Config; credentials from the usual chain unless given (the embedded
    server's placeholder keys). `endpoint_url` empty or None: AWS's own endpoint for the region."""
    return boto3.session.Session().client(
        service,
        region_name=region,
        endpoint_url=endpoint_url or None,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=config,
    )


def s3_config(config: Config, *, endpoint_url: str | None) -> Config:
    """`config` (the same deadlines and retries as DynamoDB's) for an S3 client: path-style addressing when the
    endpoint is overridden (a VPC endpoint, a local emulator), where a bucket name cannot be a host name."""
    return config.merge(Config(s3={"addressing_style": "path"})) if endpoint_url else config
