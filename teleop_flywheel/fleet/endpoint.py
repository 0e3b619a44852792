"""Where a session serves its metrics: the address (loopback unless asked) and the HTTP server.

Light on purpose (prometheus_client's server only): the session graph checks a `metrics:=` address
before anything starts, without importing the metrics model.
"""
from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.registry import Collector

from teleop_flywheel.fleet.errors import AddressError

DEFAULT_ADDRESS = "127.0.0.1:9464"  # 9464: the port OpenTelemetry's Prometheus exporter registered
OFF = ("", "off", "false", "none", "0")


def parse_address(text: str) -> tuple[str, int] | None:
    """`127.0.0.1:9464`, `[::1]:9464` or `localhost:9464` → (host, port); empty or `off` → None
    (no endpoint). AddressError for anything else: without a host nothing silently binds 0.0.0.0."""
    text = text.strip()
    if text.lower() in OFF:
        return None
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(f"metrics address {text!r}: expected HOST:PORT (e.g. {DEFAULT_ADDRESS}) or off")
    return host, int(port)


class MetricsServer:
    """prometheus_client's HTTP server for `collector` on host:port (port 0: any free one); `close()` stops it.
    OSError when the address cannot be bound (in use, not this host's)."""

    def __init__(self, collector: Collector, host: str, port: int) -> None:
        self._server: WSGIServer
        self._server, self._thread = start_http_server(port, host, registry=collector)
        self.address = f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
