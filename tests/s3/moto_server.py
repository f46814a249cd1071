"""An S3-compatible test server (moto, pinned in tests/s3/requirements.txt) on a free loopback port.

Prints its URL on the first line of stdout, then serves until its stdin closes: the process that
started it (scripts/test, or a Rust test) owns it through that pipe, so it never outlives its owner.
"""

import sys

from moto.server import ThreadedMotoServer

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()
server.stop()
