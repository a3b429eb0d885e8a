"""A stand-in for Keystone that only hands out tokens and a catalog.

deployd does not check tokens (it serves noauth or HTTP basic), but tempest insists on
authenticating before it calls any service and finds the service in the token's catalog.
This answers Keystone v3's token requests (POST and GET /v3/auth/tokens) for any user and
password, scoped as asked (project or system), with one catalog entry: the baremetal
service at the URL given on the command line.

    python3 identity.py PORT BAREMETAL_URL
"""

import datetime
import json
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, BAREMETAL = int(sys.argv[1]), sys.argv[2]
DOMAIN = {"id": "default", "name": "Default"}


def token(request):
    """The token document for an authentication request (or a default one)."""
    identity = request.get("auth", {}).get("identity", {})
    user = identity.get("password", {}).get("user", {})
    name = user.get("name", "admin")
    scope = request.get("auth", {}).get("scope", {})
    now = datetime.datetime.now(datetime.timezone.utc)
    body = {
        "methods": ["password"],
        "user": {"id": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex, "name": name,
                 "domain": DOMAIN},
        "roles": [{"id": "admin", "name": "admin"}, {"id": "member", "name": "member"},
                  {"id": "reader", "name": "reader"}],
        "issued_at": now.isoformat().replace("+00:00", "Z"),
        "expires_at": (now + datetime.timedelta(hours=12)).isoformat().replace("+00:00", "Z"),
        "catalog": [{
            "id": "baremetal", "type": "baremetal", "name": "ironic",
            "endpoints": [{"id": f"baremetal-{i}", "interface": i, "region": "RegionOne",
                           "region_id": "RegionOne", "url": BAREMETAL}
                          for i in ("public", "internal", "admin")],
        }],
    }
    if "system" in scope:
        body["system"] = {"all": True}
    else:
        project = scope.get("project", {}).get("name", name)
        body["project"] = {"id": uuid.uuid5(uuid.NAMESPACE_DNS, "p-" + project).hex,
                           "name": project, "domain": DOMAIN}
    return {"token": body}


class Identity(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Subject-Token", uuid.uuid4().hex)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/") == "/v3/auth/tokens":
            self.answer(201, token(request))
        else:
            self.answer(404, {"error": {"code": 404, "message": self.path}})

    def do_GET(self):
        path = self.path.rstrip("/")
        if path == "/v3/auth/tokens":
            self.answer(200, token({}))
        elif path in ("", "/v3"):
            self.answer(200, {"version": {"id": "v3.14", "status": "stable",
                                          "links": [{"rel": "self",
                                                     "href": f"http://127.0.0.1:{PORT}/v3/"}]}})
        else:
            self.answer(404, {"error": {"code": 404, "message": self.path}})

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Identity).serve_forever()
