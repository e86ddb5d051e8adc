"""A real moto EC2 server on a loopback port for the cloud tests, with test credentials in the
environment while it runs (the variables as they were come back afterwards)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


@contextlib.contextmanager
def moto_server(key_id: str, secret: str, region: str = "us-east-1") -> Iterator[str]:
    """Yields the server's URL."""
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in _VARS}
    os.environ.update(AWS_ACCESS_KEY_ID=key_id, AWS_SECRET_ACCESS_KEY=secret, AWS_DEFAULT_REGION=region)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
