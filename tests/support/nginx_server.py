"""A throwaway nginx serving a directory of published logs (C2SP tlog-tiles), for the tests.

Debian's ``nginx-light`` binary (``/usr/sbin/nginx``) run with its own configuration, prefix, pid
file and error log in a temporary directory, on a free port of 127.0.0.1, in the foreground of
a child process (``daemon off``), one worker. The configuration is the one ``docs/service.md``
recommends for a static host: ``checkpoint`` as ``text/plain; charset=utf-8`` and not cached,
tiles and blobs as ``application/octet-stream`` and immutable, entry bundles gzip-compressed, no
directory listing, nothing else. As root (CI's containers) the worker runs as root too: the
pytest folders it serves are closed to ``nobody``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

NGINX = "/usr/sbin/nginx"

CONFIG = """\
daemon off;
worker_processes 1;
pid {base}/nginx.pid;
error_log {base}/error.log warn;
{user}
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {base}/tmp/body;
    proxy_temp_path {base}/tmp/proxy;
    fastcgi_temp_path {base}/tmp/fastcgi;
    uwsgi_temp_path {base}/tmp/uwsgi;
    scgi_temp_path {base}/tmp/scgi;
    types {{ }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        autoindex off;
        location ~ (^|/)checkpoint$ {{
            default_type "text/plain; charset=utf-8";
            add_header Cache-Control "no-cache";
        }}
        location ~ /tile/entries/ {{
            gzip on;
            gzip_types application/octet-stream;
            add_header Cache-Control "public, max-age=31536000, immutable";
        }}
        location ~ (^|/)(tile|blob)/ {{
            add_header Cache-Control "public, max-age=31536000, immutable";
        }}
        location / {{ return 404; }}
    }}
}}
"""


def available() -> bool:
    """True when the nginx binary is installed."""
    return Path(NGINX).exists() or shutil.which("nginx") is not None


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Nginx:
    """nginx serving ``root`` on a free port; ``with Nginx(base, root) as n: n.url``."""

    def __init__(self, base: Path, root: Path) -> None:
        """Prepare (not start) a server with its files under ``base``, serving ``root``."""
        self.base = base
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        """Write the configuration, test it with ``nginx -t``, start, and wait for the port."""
        (self.base / "tmp").mkdir(parents=True, exist_ok=True)
        user = "user root root;" if os.geteuid() == 0 else ""
        conf = self.base / "nginx.conf"
        conf.write_text(
            CONFIG.format(base=self.base, port=self.port, root=self.root, user=user), "utf-8"
        )
        binary = NGINX if Path(NGINX).exists() else str(shutil.which("nginx"))
        args = [binary, "-p", str(self.base), "-c", str(conf), "-e", str(self.base / "error.log")]
        subprocess.run([*args, "-t"], check=True, capture_output=True)
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.proc.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start listening within 20 s")

    def stop(self) -> None:
        """Stop nginx (SIGQUIT: graceful) and wait for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
