"""Stands in for Ray's two per-node agents in a local run that `curation.ray_session` starts; run as a script.

Ray's raylet starts a dashboard agent and a runtime-env agent, waits for the ports each writes into the session folder,
and stops when either exits. In a local curation run neither has work: metrics need packages `ray[default]` adds, and
no task has a runtime environment. Each is a Python process that imports Ray (~1 s of start-up on the raylet's path,
~80-100 MiB each); this script writes the same port files within milliseconds and waits for the raylet to go.
The dashboard agent's ports are written as -1, Ray's own "not available". The runtime-env agent's port answers every
request with an error that says why, so a task given a runtime environment fails instead of waiting.

Invoked as `python -u ray_agent_standin.py <the agent's script> <the agent's arguments>`.
"""

import http.server
import os
import socket
import socketserver
import sys
import threading
import time

DASHBOARD_PORTS = ("metrics_agent_port", "metrics_export_port", "dashboard_agent_listen_port")
REFUSAL = b"curate's local Ray runs no runtime-env agent: give --ray-address of a Ray started with `ray start`"


class _Refuse(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the name http.server calls)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))  # read, so closing sends no reset
        self.send_response(501)
        self.send_header("Content-Length", str(len(REFUSAL)))
        self.end_headers()
        self.wfile.write(REFUSAL)

    do_GET = do_POST

    def log_message(self, *_):
        """Nothing to log."""


def _persist(session_dir: str, node_id: str, name: str, port: int) -> None:
    """As Ray's persist_port: `<session>/<name>_<node id>`, renamed into place so the raylet never reads half."""
    path = os.path.join(session_dir, f"{name}_{node_id}")
    with open(f"{path}.tmp", "w") as file:
        file.write(str(port))
    os.replace(f"{path}.tmp", path)


def main(argv: list[str]) -> None:
    raylet = os.getppid()
    agent, options = argv[0], dict(arg[2:].split("=", 1) for arg in argv[1:] if arg.startswith("--") and "=" in arg)
    session_dir, node_id = options["session-dir"], options["node-id"]
    if "runtime_env" in agent:
        address = options["node-ip-address"]
        server_class = type("Server", (http.server.HTTPServer,), {  # no reverse DNS lookup of our own address either
            "address_family": socket.getaddrinfo(address, 0)[0][0], "server_bind": socketserver.TCPServer.server_bind})
        server = server_class((address, int(options.get("runtime-env-agent-port") or 0)), _Refuse)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _persist(session_dir, node_id, "runtime_env_agent_port", server.server_address[1])
    else:
        for name in DASHBOARD_PORTS:
            _persist(session_dir, node_id, name, -1)
    while os.getppid() == raylet != 1:  # the raylet stops us at its shutdown; if it is killed, we notice within a second
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
