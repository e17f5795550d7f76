"""The S3 server (versitygw with its posix backend) on loopback. Buckets are folders under one data
directory, so stopping and starting it on the same port keeps every object."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from tests.testenv.binaries import component
from tests.testenv.network import LOOPBACK, free_port, healthy, wait_ready
from tests.testenv.processes import ManagedProcess

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

READY_TIMEOUT = 60.0
HEALTH_PATH = "/health"


class S3Server:
    def __init__(
        self,
        run_dir: Path,
        region: str = "us-east-1",
        port: int | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        detached: bool = False,
        host: str = LOOPBACK,
    ) -> None:
        self.run_dir = run_dir
        # Loopback, or the node's bridge address, where pods reach it (tests/testenv/node.py).
        self.host = host
        self.data_dir = run_dir / "s3.data"
        self.region = region
        self.port = port or free_port()
        self.access_key = access_key or "belay-" + secrets.token_hex(6)
        self.secret_key = secret_key or secrets.token_hex(20)
        self.process = ManagedProcess(
            "versitygw",
            [
                component("s3").path("versitygw"),
                f"--port={host}:{self.port}",
                f"--region={self.region}",
                f"--health={HEALTH_PATH}",
                "posix",
                self.data_dir,
            ],
            run_dir / "s3.log",
            # Credentials through the environment keep them out of `ps` output.
            env={"ROOT_ACCESS_KEY": self.access_key, "ROOT_SECRET_KEY": self.secret_key},
            detached=detached,
        )

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def is_healthy(self) -> bool:
        return healthy(f"{self.endpoint_url}{HEALTH_PATH}")

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process.start()
        wait_ready(
            self.is_healthy,
            f"S3 server at {self.endpoint_url}",
            READY_TIMEOUT,
            still_starting=self.process.running,
            describe_failure=self.process.log_tail,
        )

    def stop(self) -> None:
        self.process.stop()

    def client(self) -> S3Client:
        """A boto3 S3 client for this server: path-style addressing (no bucket DNS on loopback),
        SigV4, few retries so a stopped server shows up quickly as an error."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                signature_version="s3v4",
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=5,
                read_timeout=30,
            ),
        )
