"""A real S3-compatible service for the tests: ``moto_server`` on 127.0.0.1, a subprocess.

``MotoServer`` starts it on a free port; ``new_bucket()`` gives each test its own bucket
with the URL (in the repository's ``s3://host:port/bucket/prefix`` form) and the AWS_*
variables (dummy credentials) that reach it. Nothing leaves 127.0.0.1: the region is set,
so no AWS SDK asks the EC2 metadata service for one, and that service is disabled anyway.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.helpers import free_port

# Distinctive, so a test can assert that it appears in no log and no answer.
SECRET_ACCESS_KEY = "embedgate-test-secret-" + secrets.token_hex(8)
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "embedgate-test-key",
    "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class S3Bucket:
    name: str
    # s3://127.0.0.1:<port>/<bucket>/<prefix>: what EMBEDGATE_MODEL_REPOSITORY gets.
    url: str
    prefix: str
    endpoint_url: str
    env: dict[str, str]

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}),
        )

    def keys(self, under: str = "") -> list[str]:
        """Every object key under ``<prefix>/<under>``, relative to the prefix, sorted."""
        start = f"{self.prefix}/{under}" if under else f"{self.prefix}/"
        paginator = self.client().get_paginator("list_objects_v2")
        keys = [item["Key"] for page in paginator.paginate(Bucket=self.name, Prefix=start) for item in page.get("Contents", [])]
        return sorted(key[len(self.prefix) + 1:] for key in keys)


class MotoServer:
    # The port is found free, then moto_server binds it: another server of the tests may take
    # it between the two (one on an ephemeral port, in the other test process).
    PORT_TRIES = 3

    def __init__(self, log_path: Path):
        self._log = open(log_path, "wb")
        for _ in range(self.PORT_TRIES):
            self.port = free_port()
            self.endpoint_url = f"http://127.0.0.1:{self.port}"
            self.process = subprocess.Popen(
                [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=self._log, stderr=subprocess.STDOUT,
            )
            if self._wait_until_it_answers():
                return
        raise RuntimeError(f"moto_server found no free port in {self.PORT_TRIES} tries")

    def _wait_until_it_answers(self, timeout_s: float = 30.0) -> bool:
        """Whether it answers; False where it exited (its port taken)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                # Moto's own page: another server on the port answers something else.
                if httpx.get(f"{self.endpoint_url}/moto-api/", timeout=1).status_code == 200:
                    return self.process.poll() is None
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer in {timeout_s}s")

    def new_bucket(self, prefix: str = "models") -> S3Bucket:
        name = f"embedgate-{secrets.token_hex(4)}"
        bucket = S3Bucket(
            name=name,
            url=f"s3://127.0.0.1:{self.port}/{name}/{prefix}",
            prefix=prefix,
            endpoint_url=self.endpoint_url,
            env=dict(S3_ENV),
        )
        bucket.client().create_bucket(Bucket=name)
        return bucket

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
