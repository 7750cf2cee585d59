#!/usr/bin/env python3
"""Captures testdata/kube-apiserver-1.36/ (or OUT_DIR) from a real kube-apiserver; see testdata/README.md.

Runs `scripts/control-plane.sh up` into a temporary directory (and `down` at the end, also on failure), creates
the state, sends each request with exactly the headers index.json lists and stores the bytes the server sent.
Usage: scripts/capture-fixtures.py [OUT_DIR]. Python 3 standard library only, plus openssl.
"""

import base64
import gzip
import hashlib
import http.client
import http.server
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
G = "internal.virtualization.deckhouse.io"
GV = f"{G}/v1"
KV = f"kubevirt.{G}"
SUB = "subresources.virtualization.deckhouse.io"
SUB_GV = f"/apis/{SUB}/v1alpha2"
ADMIN, USER1 = "admintoken", "usertoken"
JSON, TABLE = "application/json", "application/json;as=Table;g=meta.k8s.io;v=v1"
DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
PROTO_V2 = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
FINALIZER = f"{KV}/virtualMachineControllerFinalize"
READY_AT = "2021-01-20T10:00:00Z"


def vms(ns="demo", name=""):
    base = f"/apis/{GV}/namespaces/{ns}/internalvirtualizationvirtualmachines"
    return f"{base}/{name}" if name else base


def log(msg):
    print(f"[capture {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ objects
def template(name):
    return {"metadata": {"labels": {f"{KV}/domain": name}}, "spec": {
        "domain": {"cpu": {"cores": 1}, "resources": {"requests": {"memory": "1Gi"}},
                   "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
        "volumes": [{"name": "root", "containerDisk": {"image": "example.com/vm:latest"}}]}}


def vm(name, ns="demo", labels=None, annotations=None, finalizers=None, owners=None):
    meta = {"name": name, "namespace": ns,
            "labels": {"app": "demo", f"{KV}/created-by": "virt-controller",
                       "virtualization.deckhouse.io/virtual-machine-name": name, **(labels or {})},
            "annotations": {**(annotations or {}), f"{KV}/latest-observed-api-version": "v1",
                            f"{KV}/storage-observed-api-version": "v1"}}
    if finalizers:
        meta["finalizers"] = finalizers
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": GV, "kind": "InternalVirtualizationVirtualMachine", "metadata": meta,
            "spec": {"runStrategy": "Always", "template": template(name)}}


RUNNING = {"conditions": [{"lastTransitionTime": READY_AT, "status": "True", "type": "Ready"}], "created": True,
           "printableStatus": "Running", "ready": True}
STOPPED = {"conditions": [{"reason": "VMINotExists", "status": "False", "type": "Ready"}], "printableStatus": "Stopped"}

# renamed/ has no VMIM CRD: this one is trimmed to a preserve-unknown-fields schema.
VMIM = "InternalVirtualizationVirtualMachineInstanceMigration"
VMIM_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{VMIM.lower()}s.{G}"},
    "spec": {
        "group": G, "scope": "Namespaced",
        "names": {"kind": VMIM, "listKind": f"{VMIM}List", "plural": f"{VMIM.lower()}s", "singular": VMIM.lower(),
                  "shortNames": ["intvirtvmim", "intvirtvmims"], "categories": ["intvirt"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            "additionalPrinterColumns": [{"jsonPath": ".status.phase", "name": "Phase", "type": "string"},
                                         {"jsonPath": ".spec.vmiName", "name": "VMI", "type": "string"}]}]}}

# What the extension server answers for its group version (the kinds and verbs of the real one).
SUBRESOURCES = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{SUB}/v1alpha2", "resources": [
    {"name": "virtualmachines" + (f"/{sub.lower()}" if sub else ""), "singularName": "", "namespaced": True,
     "kind": f"VirtualMachine{sub}", "verbs": [verb]}
    for sub, verb in [("", "get"), ("Console", "get"), ("VNC", "get"), ("PortForward", "get"), ("AddVolume", "update"),
                      ("RemoveVolume", "update"), ("Freeze", "update"), ("Unfreeze", "update"), ("Migrate", "update")]]}


# ------------------------------------------------------------------ extension server
class Backend:
    """The aggregated API server of subresources.virtualization.deckhouse.io on 127.0.0.1."""

    def __init__(self, workdir, client_ca):
        crt, key = workdir / "backend.crt", workdir / "backend.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(key),
                        "-out", str(crt), "-subj", "/CN=virtualization-api",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # kube-apiserver presents --proxy-client-cert-file
        self.upstream = []
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                self.request.do_handshake()
                super().setup()

            def log_message(self, *_):
                pass  # quiet

            def reply(self, code, body, ctype="application/json"):
                self.send_response(code)
                for k, v in [("Content-Type", ctype), ("Content-Length", str(len(body)))]:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)  # a keep-alive connection: the whole request first
                path = self.path.split("?")[0]
                if path == SUB_GV:
                    self.reply(200, json.dumps(SUBRESOURCES).encode())
                elif path.endswith("/console") and self.headers.get("Upgrade", "").lower() == "websocket":
                    self.upgrade()
                else:
                    self.reply(404, b"404 page not found\n", "text/plain; charset=utf-8")

            do_PUT = do_POST = do_GET

            def upgrade(self):
                cert = self.request.getpeercert() or {}
                subject = ",".join(f"{k}={v}" for rdn in cert.get("subject", ()) for k, v in rdn)
                backend.upstream.append({"method": self.command, "path": self.path, "peer_cert_subject": subject,
                                         "headers": [[k, v] for k, v in self.headers.items()]})
                key = self.headers["Sec-WebSocket-Key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
                self.send_response(101, "Switching Protocols")
                for k, v in [("Upgrade", "websocket"), ("Connection", "Upgrade"),
                             ("Sec-WebSocket-Accept", base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()),
                             ("Sec-WebSocket-Protocol", self.headers["Sec-WebSocket-Protocol"])]:
                    self.send_header(k, v)
                self.end_headers()
                msg = b"hello from ext server"
                self.wfile.write(bytes([0x82, len(msg)]) + msg)  # one unmasked binary frame
                self.wfile.flush()
                time.sleep(0.5)
                self.close_connection = True

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                log(f"backend: error on a connection from {client_address}: {sys.exc_info()[1]!r}")

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


# ------------------------------------------------------------------ HTTP to kube-apiserver
class Api:
    def __init__(self, env):
        self.port = int(env["APISERVER_PORT"])
        self.host = f"127.0.0.1:{self.port}"
        self.ctx = ssl.create_default_context(cafile=env["KUBE_CA_FILE"])

    def headers(self, token=ADMIN, accept=JSON, body=None, ctype=JSON, extra=()):
        h = [("Host", self.host), ("Authorization", f"Bearer {token}")] + ([("Accept", accept)] if accept else [])
        h += list(extra)
        if body is not None:
            h += [("Content-Type", ctype), ("Content-Length", str(len(body)))]
        return h

    def exchange(self, method, path, headers, body=None, timeout=90):
        """One request with exactly `headers` (http.client adds none); the de-chunked body."""
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)
        try:
            c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                c.putheader(k, v)
            c.endheaders(body)
            r = c.getresponse()
            return r.status, r.reason, r.getheaders(), r.read()
        finally:
            c.close()

    def call(self, method, path, obj=None, ctype=JSON, want=(200, 201), token=ADMIN):
        body = None if obj is None else (obj if isinstance(obj, bytes) else json.dumps(obj).encode())
        status, _, _, data = self.exchange(method, path, self.headers(token, JSON, body, ctype), body)
        if status not in want:
            raise RuntimeError(f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data) if data[:1] == b"{" else data

    def body(self, path, accept=JSON):
        return self.exchange("GET", path, self.headers(accept=accept))[3]

    def raw(self, request, done):
        """Raw TLS exchange: the bytes read until `done(buffer)` or the server closes."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        sock = self.ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        buf, part = b"", b"-"
        try:
            sock.sendall(request)
            while part and not done(buf):
                part = sock.recv(65536)
                buf += part
        except TimeoutError:
            pass  # what came so far
        finally:
            sock.close()
        return buf

    def wait(self, what, check, timeout=90):
        end = time.time() + timeout
        while True:
            try:
                if check():
                    return
            except (RuntimeError, OSError, ValueError, KeyError):
                pass  # not there yet
            if time.time() > end:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.5)


def chunked_complete(buf):
    """True once `buf` holds a whole HTTP/1.1 response with a chunked body (framing parsed)."""
    p = buf.find(b"\r\n\r\n") + 4
    while p >= 4:
        eol = buf.find(b"\r\n", p)
        if eol < 0:
            return False
        size = int(buf[p:eol].split(b";")[0], 16)
        if size == 0:
            return buf.find(b"\r\n\r\n", eol) == eol
        p = eol + 2 + size + 2
        if p > len(buf):
            return False
    return False


def threaded(fn):
    """Runs fn() on a thread; the returned function waits for it and gives its result."""
    box = {}
    t = threading.Thread(target=lambda: box.update(r=fn()))
    t.start()
    return lambda: (t.join(), box["r"])[1]


def request_bytes(path, headers):
    return (f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode()


def parse_head(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    _, code, reason = lines[0].split(" ", 2)
    hdrs = [tuple(line.split(": ", 1)) for line in lines[1:]]
    return int(code), reason, hdrs, body


# ------------------------------------------------------------------ the recorder
class Recorder:
    def __init__(self, api, out):
        self.api, self.out, self.index = api, out, []

    def record(self, file, method, path, headers, result, desc, req_file=None):
        status, reason, resp_headers, data = result
        if any(k.lower() == "content-encoding" for k, _ in resp_headers) != file.endswith(".gz"):
            raise RuntimeError(f"{file}: the name does not say what Content-Encoding the body has")
        (self.out / file).write_bytes(data)
        e = {"file": file, "method": method, "path": path, "request_headers": [list(h) for h in headers],
             "status": status, "reason": reason, "response_headers": [list(h) for h in resp_headers],
             "body_bytes": len(data), "description": desc}
        if req_file:
            e["request_body_file"] = req_file
        if "watch=" in path and status == 200:  # the events as they came
            events = re.findall(rb'(?:^|\n){"type":"(\w+)"', data)
            e["description"] += ". Received: " + ", ".join(t.decode() for t in events)
        self.index.append(e)
        log(f"{file}: {status} {reason}, {len(data)} bytes")
        return data

    def req(self, file, method, path, desc, body=None, ctype=JSON, req_file=None, token=ADMIN, accept=JSON,
            extra=(), want=None):
        if body is not None:
            body = body if isinstance(body, bytes) else json.dumps(body).encode()
            req_file = req_file or file.removesuffix(".json") + ".request.json"
            (self.out / req_file).write_bytes(body)
        h = self.api.headers(token, accept, body, ctype, extra)
        result = self.api.exchange(method, path, h, body)
        if want is not None and result[0] != want:
            raise RuntimeError(f"{file}: {result[0]} {result[3][:300]!r}")
        return self.record(file, method, path, h, result, desc, req_file)

    def get(self, file, path, desc, **kw):
        return self.req(file, "GET", path, desc, **kw)

    def send(self, file, method, path, body, desc, ctype=JSON, req_file=None, **kw):
        return self.req(file, method, path, desc, body, ctype, req_file, **kw)

    def save_index(self):
        with open(self.out / "index.json", "w") as f:
            json.dump(self.index, f, indent=1)
            f.write("\n")


# ------------------------------------------------------------------ state
def obj(api_version, kind, name, ns=None, meta=None, **rest):
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, **({"namespace": ns} if ns else {}), **(meta or {})}, **rest}


def setup(api, env):
    kubectl = Path(env["KUBE_BIN_DIR"]) / "kubectl"
    for ns in ("demo", "bulk", "watchdemo", "d8-virtualization"):
        api.call("POST", "/api/v1/namespaces", obj("v1", "Namespace", ns))
    for f in sorted((ROOT / "testdata/kubevirt-crds/renamed").glob("*.yaml")):
        subprocess.run([str(kubectl), "--kubeconfig", env["KUBECONFIG"], "create", "-f", str(f)],
                       check=True, stdout=subprocess.DEVNULL)
    api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", VMIM_CRD)
    plurals = {f"internalvirtualization{k}s" for k in ("virtualmachine", "virtualmachineinstance", "kubevirt")}
    plurals.add(f"{VMIM.lower()}s")
    api.wait("the renamed group's discovery",
             lambda: plurals <= {r["name"] for r in api.call("GET", f"/apis/{GV}")["resources"]})
    api.wait("the CRDs' storage", lambda: api.call("GET", vms()) is not None)
    rbac, rbac_v1 = "/apis/rbac.authorization.k8s.io/v1/namespaces/demo", "rbac.authorization.k8s.io/v1"
    api.call("POST", f"{rbac}/roles", obj(rbac_v1, "Role", "intvirt-vm-reader", "demo", rules=[
        {"apiGroups": [G], "verbs": ["get", "list", "watch"],
         "resources": ["internalvirtualizationvirtualmachines", "internalvirtualizationvirtualmachineinstances"]},
        {"apiGroups": [G], "resources": ["internalvirtualizationvirtualmachines/status"], "verbs": ["get"]}]))
    api.call("POST", f"{rbac}/rolebindings", obj(
        rbac_v1, "RoleBinding", "intvirt-vm-reader", "demo",
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "intvirt-vm-reader"},
        subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "user1"}]))

    owner = {"apiVersion": "virtualization.deckhouse.io/v1alpha2", "kind": "VirtualMachine", "name": "vm1",
             "uid": "2f1b6d3e-8c1a-4a57-9a0e-1d2c3b4a5f60", "controller": True, "blockOwnerDeletion": True}
    uid = api.call("POST", vms(), vm("vm1", finalizers=[FINALIZER], owners=[owner]))["metadata"]["uid"]
    api.call("POST", vms(), vm("vm2", labels={"tier": "backend"}))
    stale_vm3 = api.call("POST", vms(), vm("vm3"))
    for name, st in (("vm1", RUNNING), ("vm2", RUNNING), ("vm3", STOPPED)):
        api.call("PATCH", vms("demo", name) + "/status", {"status": st}, "application/merge-patch+json")
    ns = f"/apis/{GV}/namespaces"
    api.call("POST", f"{ns}/demo/internalvirtualizationvirtualmachineinstances", obj(
        GV, "InternalVirtualizationVirtualMachineInstance", "vm1", "demo", {
            "labels": {f"{KV}/created-by": uid, f"{KV}/nodeName": "node-1"},
            "finalizers": [FINALIZER, "foregroundDeleteVirtualMachine"],
            "ownerReferences": [{"apiVersion": GV, "kind": "InternalVirtualizationVirtualMachine", "name": "vm1",
                                 "uid": uid, "controller": True, "blockOwnerDeletion": True}]},
        spec=template("vm1")["spec"],
        status={"conditions": [{"status": "True", "type": "Ready"}, {"status": "True", "type": "LiveMigratable"}],
                "interfaces": [{"ipAddress": "10.66.0.5", "name": "default"}], "nodeName": "node-1",
                "phase": "Running"}))
    api.call("POST", f"{ns}/demo/{VMIM.lower()}s", obj(GV, VMIM, "vm1-migration", "demo", {
        "labels": {f"{KV}/vmi-name": "vm1"}}, spec={"vmiName": "vm1"}))
    api.call("POST", f"{ns}/d8-virtualization/internalvirtualizationkubevirts", obj(
        GV, "InternalVirtualizationKubeVirt", "config", "d8-virtualization", {"finalizers": [
            "foregroundDeleteKubeVirt"]},
        spec={"configuration": {"developerConfiguration": {"featureGates": ["HotplugVolumes", "Snapshot"]}}}))
    return {"stale_vm3": stale_vm3}


def aggregate(api, port):
    """The APIService, then waits until discovery and OpenAPI show every group."""
    svc = {"name": "virtualization-api", "namespace": "d8-virtualization"}
    api.call("POST", "/api/v1/namespaces/d8-virtualization/services", obj("v1", "Service", *svc.values(), spec={
        "type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": port, "protocol": "TCP"}]}))
    name = f"v1alpha2.{SUB}"
    api.call("POST", "/apis/apiregistration.k8s.io/v1/apiservices", obj(
        "apiregistration.k8s.io/v1", "APIService", name, spec={
            "group": SUB, "version": "v1alpha2", "insecureSkipTLSVerify": True, "groupPriorityMinimum": 999,
            "versionPriority": 15, "service": {**svc, "port": port}}))

    def available():
        s = api.call("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        return any(c["type"] == "Available" and c["status"] == "True" for c in s["status"]["conditions"])

    api.wait("the APIService to be Available", available)
    api.wait("/apis to list the aggregated group", lambda: SUB.encode() in api.body("/apis"))
    api.wait("aggregated discovery of the aggregated group", lambda: SUB.encode() in api.body("/apis", DISCOVERY_V2))
    kinds = [f"InternalVirtualization{k}".encode() for k in ("VirtualMachineInstance", "KubeVirt", "VirtualMachine")]
    kinds.append(VMIM.encode())
    api.wait("/openapi/v2 with the renamed kinds", lambda: all(k in api.body("/openapi/v2") for k in kinds))
    api.wait("/openapi/v3 with the renamed group", lambda: f"apis/{GV}" in api.call("GET", "/openapi/v3")["paths"])


# ------------------------------------------------------------------ captures
NO_V1ALPHA3 = ("the renamed CRDs of testdata/kubevirt-crds/renamed/ define only v1, so the served, deprecated "
               "v1alpha3 the 1.20 capture had does not exist: this is the current server's answer for it")


def capture_reads(rec):
    demo, vm1, crds = vms(), vms("demo", "vm1"), "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    crd, ns = f"internalvirtualizationvirtualmachines.{G}", f"/apis/{GV}/namespaces"
    kubectl = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
               "application/json")
    for file, path, accept, desc in [
        ("discovery-api.json", "/api", JSON, "Core API versions (APIVersions)"),
        ("discovery-api-v1.json", "/api/v1", JSON, "Core v1 APIResourceList"),
        ("discovery-apis.json", "/apis", JSON, f"APIGroupList incl. {G} and the aggregated {SUB} (APIService, "
         "served by the HTTPS server inside scripts/capture-fixtures.py)"),
        ("discovery-apis-internal-virtualization.json", f"/apis/{G}", JSON, "APIGroup for the renamed KubeVirt group "
         "(version v1 only)"),
        ("discovery-apis-internal-virtualization-v1.json", f"/apis/{GV}", JSON, "APIResourceList of renamed KubeVirt "
         "group v1: kinds InternalVirtualization*, shortNames intvirt*, categories [intvirt], status subresources "
         "(not for VMIs: KubeVirt's VMI CRD has none)"),
        ("discovery-apis-internal-virtualization-v1alpha3.json", f"/apis/{G}/v1alpha3", JSON,
         f"GET of the group version v1alpha3: 404; {NO_V1ALPHA3}"),
        ("discovery-apis-apiextensions-v1.json", "/apis/apiextensions.k8s.io/v1", JSON,
         "APIResourceList of apiextensions.k8s.io/v1"),
        ("discovery-apis-subresources-v1alpha2.json", SUB_GV, JSON, "Aggregated APIService discovery proxied by "
         "kube-apiserver to the script's HTTPS server (body is that server's, headers are relayed)"),
        ("version.json", "/version", JSON, "Server version (built from Go modules by scripts/go-build.sh)"),
        ("crd-get-virtualmachines.json", f"{crds}/{crd}", JSON, "GET of the renamed VM CRD (KubeVirt's full schema, "
         "as testdata/kubevirt-crds/renamed/ ships it)"),
        ("crd-list-fieldselector.json", f"{crds}?fieldSelector=metadata.name%3D{crd}", JSON,
         "CRD LIST filtered by fieldSelector=metadata.name=<renamed VM CRD>"),
        ("crd-list-all.json", crds, JSON, "LIST of all CRDs (the 4 renamed KubeVirt CRDs: VM, VMI and KubeVirt with "
         "full schemas, VMIM trimmed to x-kubernetes-preserve-unknown-fields)"),
        ("vm-list.json", demo, JSON, "LIST of VMs in namespace demo as JSON"),
        ("vm-list-table.json", demo, TABLE, "LIST of VMs as meta.k8s.io/v1 Table (includeObject default=Metadata: "
         "rows carry PartialObjectMetadata)"),
        ("vm-list-table-kubectl-accept.json", f"{demo}?limit=500", kubectl,
         "LIST as Table with the Accept header kubectl 1.32 sends for `kubectl get`"),
        ("vm-list-table-includeobject-object.json", f"{demo}?includeObject=Object", TABLE,
         "LIST as Table with includeObject=Object (rows carry full objects)"),
        ("vm-list-partialobjectmetadata.json", demo, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
         "LIST as meta.k8s.io/v1 PartialObjectMetadataList"),
        ("vm-list-all-namespaces.json", f"/apis/{GV}/internalvirtualizationvirtualmachines", JSON,
         "Cluster-wide LIST of VMs (all namespaces; only demo has VMs at this point)"),
        ("vm-list-labelselector.json", f"{demo}?labelSelector={KV}%2Fcreated-by%3Dvirt-controller%2Ctier%3Dbackend",
         JSON, "LIST with labelSelector on a renamed label key"),
        ("vm-list-limit.json", f"{demo}?limit=2", JSON, "Paginated LIST (limit=2) -> metadata.continue and "
         "remainingItemCount"),
        ("vm-list-protobuf-accept.json", demo, "application/vnd.kubernetes.protobuf, application/json",
         "LIST with protobuf-first Accept (as client-go sends): CRs have no protobuf, server answers JSON"),
        ("vm-get.json", vm1, JSON, "GET of a single VM with renamed labels/annotations/finalizer and ownerReference"),
        ("vm-get-table.json", vm1, TABLE, "GET of a single VM as Table"),
        ("vm-get-v1alpha3-deprecated.json", vm1.replace("/v1/", "/v1alpha3/"), JSON,
         f"GET of a VM via v1alpha3: 404; {NO_V1ALPHA3}"),
        ("vm-status-get.json", f"{vm1}/status", JSON, "GET of the status subresource"),
        ("vmi-get.json", f"{ns}/demo/internalvirtualizationvirtualmachineinstances/vm1", JSON,
         "GET of a VMI with ownerReference to InternalVirtualizationVirtualMachine"),
        ("vmi-list-table.json", f"{ns}/demo/internalvirtualizationvirtualmachineinstances", TABLE,
         "VMI LIST as Table (printer columns Phase/IP/NodeName/Ready, priority 1: Live-Migratable/Paused)"),
        ("vmim-list.json", f"{ns}/demo/{VMIM.lower()}s", JSON, "VMIM LIST"),
        ("kubevirt-get.json", f"{ns}/d8-virtualization/internalvirtualizationkubevirts/config", JSON,
         "GET of the KubeVirt CR"),
    ]:
        rec.get(file, path, desc, accept=accept)
    version = json.loads((rec.out / "version.json").read_bytes())["gitVersion"]
    next(e for e in rec.index if e["file"] == "version.json")["description"] += f": {version}"


def capture_errors(rec, state):
    demo = vms()
    rec.get("vm-get-404.json", vms("demo", "does-not-exist"),
            "GET of a missing VM: 404 Status NotFound (details.group/kind use renamed group and plural)", want=404)
    rec.get("vm-unknown-resource-404.json", f"/apis/{GV}/namespaces/demo/nosuchresources",
            "GET of an unknown resource in the renamed group: 404", want=404)
    rec.send("vm-create-409-alreadyexists.json", "POST", demo, vm("vm2"), "POST of an existing VM: 409 AlreadyExists",
             want=409)
    stale = state["stale_vm3"]
    stale["metadata"]["annotations"]["note"] = "plain annotation"
    rec.send("vm-update-409-conflict.json", "PUT", vms("demo", "vm3"), stale,
             "PUT with a stale resourceVersion (the object as created, before its status was set): 409 Conflict "
             "('the object has been modified')", want=409)
    rec.send("vm-create-422-invalid.json", "POST", demo, vm("Bad_Name"),
             "POST with an invalid metadata.name: 422 Invalid (details.causes)", want=422)
    rec.get("vm-list-403-forbidden.json", vms("bulk"), "LIST as user1 in namespace bulk (no RBAC there): 403 "
            "Forbidden naming the renamed resource and group", token=USER1, want=403)
    rec.get("vm-list-user1-allowed.json", demo, "LIST as user1 in namespace demo, allowed by the Role "
            "intvirt-vm-reader", token=USER1, want=200)
    rec.get("vm-list-401-unauthorized.json", demo, "Bad bearer token: 401 Unauthorized", token="wrongtoken", want=401)


def capture_writes(rec):
    demo, patch = vms(), vms("demo", "vm-patch")
    rec.send("vm-create-201.json", "POST", demo, vm("vm-patch", labels={f"{KV}/schedulable": "true"}),
             "POST create: 201 Created", want=201)
    rec.send("vm-patch-json.json", "PATCH", patch, [
        {"op": "add", "path": f"/metadata/labels/{KV}~1paused", "value": "true"},
        {"op": "replace", "path": f"/metadata/annotations/{KV}~1latest-observed-api-version", "value": "v1alpha3"},
        {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        {"op": "replace", "path": "/spec/runStrategy", "value": "Manual"},
    ], "JSON patch (RFC 6902) on renamed label/annotation/finalizer paths (~1-escaped)",
        "application/json-patch+json", want=200)
    rec.send("vm-patch-merge.json", "PATCH", patch, {
        "metadata": {"labels": {f"{KV}/paused": None, "env": "test"},
                     "annotations": {f"{KV}/restart-required": "true"}},
        "spec": {"runStrategy": "Always"},
    }, "JSON merge patch (RFC 7386): set/remove labels, change spec", "application/merge-patch+json", want=200)
    rec.send("vm-patch-merge-status.json", "PATCH", patch + "/status",
             {"status": {"printableStatus": "Starting", "conditions": [{"type": "Ready", "status": "False"}]}},
             "Merge patch on the status subresource", "application/merge-patch+json", want=200)
    apply = vms("demo", "vm-apply")
    mine = f"{apply}?fieldManager=fixture-capture&force=true"
    yaml = f"""apiVersion: {GV}
kind: InternalVirtualizationVirtualMachine
metadata:
  name: vm-apply
  namespace: demo
  labels:
    {KV}/created-by: virt-controller
  annotations:
    {KV}/latest-observed-api-version: v1
  finalizers:
  - {FINALIZER}
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        devices: {{}}
        resources:
          requests:
            memory: 512Mi
"""
    rec.send("vm-apply-create.json", "PATCH", mine, yaml.encode(),
             "Server-side apply (application/apply-patch+yaml) creating a new object; response has managedFields "
             "with renamed keys (the full schema requires spec.template.spec.domain.devices, hence `devices: {}`)",
             "application/apply-patch+yaml", "vm-apply-create.request.yaml", want=201)
    rec.send("vm-apply-update.json", "PATCH", mine, {
        "apiVersion": GV, "kind": "InternalVirtualizationVirtualMachine",
        "metadata": {"name": "vm-apply", "namespace": "demo",
                     "labels": {f"{KV}/created-by": "virt-controller", "env": "prod"}},
        "spec": {"runStrategy": "Always",
                 "template": {"spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "512Mi"}}}}}},
    }, "Server-side apply with a JSON body updating the existing object: the annotation and finalizer dropped from "
       "the applied config are removed (spec.template stays: the full schema requires it)",
        "application/apply-patch+yaml", want=200)
    rec.send("vm-apply-conflict-409.json", "PATCH", f"{apply}?fieldManager=other-manager", {
        "apiVersion": GV, "kind": "InternalVirtualizationVirtualMachine",
        "metadata": {"name": "vm-apply", "namespace": "demo"}, "spec": {"runStrategy": "Manual"},
    }, "Server-side apply by another manager without force: 409 Conflict listing conflicting fields",
        "application/apply-patch+yaml", want=409)
    rec.req("vm-delete-with-finalizer.json", "DELETE", patch,
            "DELETE of an object with a finalizer: 200 with the object (deletionTimestamp set)", want=200)
    rec.send("vm-patch-json-remove-finalizer.json", "PATCH", patch, [{"op": "remove", "path": "/metadata/finalizers"}],
             "JSON patch removing finalizers of a terminating object (object is then gone)",
             "application/json-patch+json", want=200)
    body = rec.req("vm-delete-status.json", "DELETE", vms("demo", "vm3"), "DELETE of an object without finalizers",
                   want=200)
    what = "a Status Success" if json.loads(body).get("kind") == "Status" else "the deleted object"
    rec.index[-1]["description"] += f": 200 with {what}"
    rec.req("vm-delete-404.json", "DELETE", vms("demo", "vm3"), "DELETE of a missing object: 404", want=404)


def capture_watches(rec, api, env):
    w = vms("watchdemo")
    rv = api.call("GET", w)["metadata"]["resourceVersion"]
    path = f"{w}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=25"
    join = threaded(lambda: rec.get("watch-vm-events.json", path, "WATCH (de-chunked NDJSON) from the LIST "
                                    "resourceVersion while vm-w1 (finalizer) and vm-w2 are created, vm-w1's labels "
                                    "and status patched, vm-w2 deleted, vm-w1 deleted (MODIFIED, deletionTimestamp) "
                                    "and its finalizer removed (DELETED)"))
    time.sleep(1)
    merge, jp = "application/merge-patch+json", "application/json-patch+json"
    api.call("POST", w, vm("vm-w1", "watchdemo", finalizers=[FINALIZER]))
    api.call("POST", w, vm("vm-w2", "watchdemo"))
    api.call("PATCH", vms("watchdemo", "vm-w1"), {"metadata": {"labels": {"tier": "frontend"}}}, merge)
    api.call("PATCH", vms("watchdemo", "vm-w1") + "/status", {"status": {"conditions": [
        {"status": "True", "type": "Ready"}], "printableStatus": "Running"}}, merge)
    for name in ("vm-w2", "vm-w1"):
        api.call("DELETE", vms("watchdemo", name))
    api.call("PATCH", vms("watchdemo", "vm-w1"), [{"op": "remove", "path": "/metadata/finalizers"}], jp)
    join()
    rec.get("watch-vm-events-table.json", path, f"Same watch, requested as Table (Accept: {TABLE}): each event "
            "object is a meta.k8s.io/v1 Table with one row", accept=TABLE)
    d = vms()
    rec.get("watch-vm-initial-state.json", f"{d}?watch=true&timeoutSeconds=3",
            "WATCH without resourceVersion on namespace demo: synthetic ADDED events for all existing objects, "
            "then closes after timeoutSeconds=3")
    rec.get("watch-vm-410-gone.json", f"{d}?watch=true&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=10",
            "WATCH with resourceVersion=1 (older than the watch cache window): HTTP 200 with a single ERROR event "
            "carrying a 410 Expired Status")
    rec.get("watch-vm-streaming-list.json", f"{d}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
            "&allowWatchBookmarks=true&timeoutSeconds=5",
            "Streaming LIST (WatchList): ADDED for every VM in demo, then a BOOKMARK annotated "
            "k8s.io/initial-events-end=true, then whatever the server sends until timeoutSeconds=5")

    rv = api.call("GET", w)["metadata"]["resourceVersion"]
    path = f"{w}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=6"
    h = [("Host", api.host), ("User-Agent", "curl/7.88.1"), ("Authorization", f"Bearer {ADMIN}"), ("Accept", JSON)]
    req = request_bytes(path, h)
    join = threaded(lambda: api.raw(req, chunked_complete))
    time.sleep(1)
    api.call("POST", w, vm("vm-c1", "watchdemo"))
    api.call("PATCH", vms("watchdemo", "vm-c1"), {"metadata": {"labels": {"tier": "frontend"}}}, merge)
    api.call("DELETE", vms("watchdemo", "vm-c1"))
    rec.record("watch-vm-events.chunked.raw", "GET", path, h, parse_head(join()), "WATCH over HTTP/1.1 on a raw "
               "TLS socket (the 1.20 capture's request headers, which curl --http1.1 --raw sent): the body keeps its "
               "chunked framing (hex size CRLF data CRLF ... 0 CRLF CRLF) while vm-c1 is created, labelled, deleted")

    revision = int(api.call("GET", d)["metadata"]["resourceVersion"])
    etcd = http.client.HTTPConnection("127.0.0.1", int(env["ETCD_CLIENT_PORT"]), timeout=60)
    etcd.request("POST", "/v3/kv/compaction", json.dumps({"revision": revision, "physical": True}))
    if etcd.getresponse().status != 200:
        raise RuntimeError("etcd compaction failed")
    etcd.close()
    rec.get("list-vm-410-gone.json", f"{d}?resourceVersion=10&resourceVersionMatch=Exact",
            f"LIST with resourceVersion=10&resourceVersionMatch=Exact after etcd was compacted (at revision "
            f"{revision}, through etcd's /v3/kv/compaction): 410 Gone Status (reason Expired)", want=410)
    rec.get("list-vm-continue-410-gone.json",
            f"{d}?limit=1&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0Ijoidm0xXHUwMDAwIn0",
            "LIST with a continue token whose resourceVersion (10) was compacted: 410 Gone (Expired), "
            "metadata.continue carries a fresh token for an inconsistent continuation", want=410)


def capture_bulk(rec, api):
    pad = ("lorem-ipsum-" * 60)[:700]
    for i in range(300):
        api.call("POST", vms("bulk"), vm(f"bulk-vm-{i:03}", "bulk", annotations={"example.com/padding": pad},
                                         finalizers=[FINALIZER]))
    gz = [("Accept-Encoding", "gzip")]
    packed = rec.get("vm-list-bulk-gzip.json.gz", vms("bulk"),
                     "LIST of 300 VMs with Accept-Encoding: gzip: server answers Content-Encoding: gzip; body kept "
                     "compressed as received", extra=gz)
    plain = rec.get("vm-list-bulk-plain.json", vms("bulk"), "The same LIST without Accept-Encoding (identity)")
    same = "" if gzip.decompress(packed) == plain else "not "
    rec.index[-1]["description"] += f"; the gzip body above, decompressed, is {same}byte-identical to it"
    small = rec.get("vm-list-small-gzip-not-compressed.json", vms(), "Small LIST with Accept-Encoding: gzip", extra=gz)
    rec.index[-1]["description"] += f" ({len(small)} bytes): server does not compress (no Content-Encoding)"
    rec.get("vm-list-bulk-table-gzip.json.gz", vms("bulk"), "LIST of 300 VMs as Table with Accept-Encoding: gzip",
            accept=TABLE, extra=gz)


def capture_others(rec, api):
    iv, rbac = "internalvirtualization", "/apis/rbac.authorization.k8s.io/v1"
    rec.send("rbac-clusterrole-create.json", "POST", f"{rbac}/clusterroles", obj(
        "rbac.authorization.k8s.io/v1", "ClusterRole", "kubevirt-internal-virtualization-controller",
        meta={"labels": {KV: ""}}, rules=[
            {"apiGroups": [G], "resources": [f"{iv}virtualmachines", f"{iv}virtualmachineinstances",
                                             f"{iv}virtualmachineinstancemigrations"],
             "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": [G], "resources": [f"{iv}virtualmachines/status", f"{iv}virtualmachineinstances/status"],
             "verbs": ["update", "patch"]},
            {"apiGroups": [G], "resources": [f"{iv}kubevirts"], "resourceNames": ["config"], "verbs": ["get"]},
            {"apiGroups": [SUB], "resources": ["virtualmachines/console", "virtualmachines/vnc"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]),
        "ClusterRole with rules for the renamed group (resources, subresources, resourceNames), as kubevirt's "
        "virt-controller-like role", want=201)
    rec.get("rbac-clusterrole-get.json", f"{rbac}/clusterroles/kubevirt-internal-virtualization-controller",
            "GET of that ClusterRole")
    rec.get("rbac-role-get.json", f"{rbac}/namespaces/demo/roles/intvirt-vm-reader",
            "GET of a Role (namespace demo) granting user1 read on renamed resources")
    rec.get("rbac-role-list.json", f"{rbac}/namespaces/demo/roles", "LIST of Roles in demo")
    rec.send("rbac-selfsubjectaccessreview.json", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {
            "namespace": "demo", "verb": "list", "group": G, "resource": f"{iv}virtualmachines"}},
    }, "SelfSubjectAccessReview as user1 for list on the renamed VM resource: allowed via RBAC Role", token=USER1,
        want=201)
    vm1 = api.call("GET", vms("demo", "vm1"))["metadata"]
    rec.send("event-create.json", "POST", "/api/v1/namespaces/demo/events", obj(
        "v1", "Event", "vm1.16b9f3a1c2d4e5f6", "demo",
        involvedObject={"apiVersion": GV, "kind": "InternalVirtualizationVirtualMachine", "name": "vm1",
                        "namespace": "demo", "uid": vm1["uid"], "resourceVersion": vm1["resourceVersion"]},
        reason="SuccessfulCreate",
        message="Started the virtual machine by creating the new virtual machine instance vm1",
        source={"component": "virtualmachine-controller"}, type="Normal", count=1, firstTimestamp=READY_AT,
        lastTimestamp=READY_AT, reportingComponent="", reportingInstance=""),
        f"core/v1 Event whose involvedObject is a renamed VM (apiVersion {GV}, kind "
        "InternalVirtualizationVirtualMachine)", want=201)
    rec.get("event-list-fieldselector.json", "/api/v1/namespaces/demo/events?fieldSelector=involvedObject.kind%3D"
            "InternalVirtualizationVirtualMachine%2CinvolvedObject.name%3Dvm1",
            "Event LIST filtered by involvedObject.kind=InternalVirtualizationVirtualMachine,involvedObject.name=vm1 "
            "(as kubectl describe does)")
    rec.get("event-list-table.json", "/api/v1/namespaces/demo/events", "Event LIST as Table", accept=TABLE)


def capture_current(rec):
    rec.get("discovery-api-aggregated-v2.json", "/api", "Aggregated discovery of the core group "
            "(apidiscovery.k8s.io/v2 APIGroupDiscoveryList)", accept=DISCOVERY_V2, want=200)
    rec.get("discovery-apis-aggregated-v2.json", "/apis", "Aggregated discovery of all groups (apidiscovery.k8s.io/v2 "
            f"APIGroupDiscoveryList) incl. {G} and the aggregated {SUB}", accept=DISCOVERY_V2, want=200)
    index = rec.get("openapi-v3-index.json", "/openapi/v3", "OpenAPI v3 index (paths -> serverRelativeURL with ?hash=)",
                    want=200)
    url = json.loads(index)["paths"][f"apis/{GV}"]["serverRelativeURL"]
    rec.get("openapi-v3-internal-virtualization-v1.json", url,
            f"OpenAPI v3 document of {GV}, at the URL the index gives (hash included)", want=200)
    gz = [("Accept-Encoding", "gzip")]
    rec.get("openapi-v2-kubevirt.json.gz", "/openapi/v2", "OpenAPI v2 as JSON with the renamed CRDs installed (VM, "
            "VMI, KubeVirt with KubeVirt's full schemas); Content-Encoding: gzip kept", extra=gz, want=200)
    rec.get("openapi-v2-kubevirt.pb.gz", "/openapi/v2", "The same OpenAPI v2 as the gnostic protobuf kubectl asks "
            "for; Content-Encoding: gzip kept", accept=PROTO_V2, extra=gz, want=200)


def capture_aggregation(rec, api, backend):
    svc = {"name": "virt-api", "namespace": "d8-virtualization"}
    rec.send("vwc-create.json", "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", obj(
        "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "virt-api-validator",
        meta={"labels": {KV: "virt-api-validator"}}, webhooks=[
            {"name": f"virtualmachine-validator.{G}", "admissionReviewVersions": ["v1", "v1beta1"],
             "sideEffects": "None", "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 10,
             "clientConfig": {"service": {**svc, "path": "/virtualmachines-validate", "port": 443}},
             "rules": [{"apiGroups": [G], "apiVersions": ["v1", "v1alpha3"], "operations": ["CREATE", "UPDATE"],
                        "resources": ["internalvirtualizationvirtualmachines"], "scope": "*"}]},
            {"name": f"migration-create-validator.{G}", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "failurePolicy": "Fail", "clientConfig": {"service": {**svc, "path": "/migration-validate-create"}},
             "rules": [{"apiGroups": [G], "apiVersions": ["*"], "operations": ["CREATE"],
                        "resources": [f"{VMIM.lower()}s"]}]}]),
        "ValidatingWebhookConfiguration with rules for the renamed group/resources (kubevirt virt-api style, service "
        "reference; the service does not exist and no VM is written after it, so it is never called)", want=201)
    rec.get("vwc-get.json", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/virt-api-validator",
            "GET of that ValidatingWebhookConfiguration (defaults filled in)")
    path = f"{SUB_GV}/namespaces/demo/virtualmachines/vm1/console"
    h = [("Host", api.host), ("Authorization", f"Bearer {ADMIN}"), ("Upgrade", "websocket"), ("Connection", "Upgrade"),
         ("Sec-WebSocket-Key", "dVmj7sQIrD+FSlByayMtQQ=="), ("Sec-WebSocket-Version", "13"),
         ("Sec-WebSocket-Protocol", "plain.kubevirt.io")]
    req = request_bytes(path, h)
    (rec.out / "aggregated-console-101.request.raw").write_bytes(req)
    frame = 2 + len(b"hello from ext server")
    got = api.raw(req, lambda b: b.find(b"\r\n\r\n") >= 0 and len(b) >= b.find(b"\r\n\r\n") + 4 + frame)
    if parse_head(got)[0] != 101:
        raise RuntimeError(f"console upgrade: {got[:300]!r}")
    (rec.out / "aggregated-console-101.raw").write_bytes(got)
    rec.index.append({
        "file": "aggregated-console-101.raw", "method": "GET", "path": path,
        "request_file": "aggregated-console-101.request.raw", "request_headers": [list(x) for x in h], "status": 101,
        "description": f"WebSocket upgrade through the kube-aggregator to the APIService {SUB}/v1alpha2 (ExternalName "
                       "Service -> the HTTPS server inside scripts/capture-fixtures.py on 127.0.0.1). File = raw "
                       "bytes read from the client socket after TLS: the relayed 101 response head plus the first "
                       "(unmasked binary) WebSocket frame sent by that server. The 101 head is that server's, "
                       "relayed unchanged."})
    log(f"aggregated-console-101.raw: 101, {len(got)} bytes")
    up = backend.upstream[-1]
    (rec.out / "aggregated-console-upstream-request.json").write_text(json.dumps(up, indent=1) + "\n")
    sent = {k.lower() for k, _ in h}
    added = "/".join(sorted({k for k, _ in up["headers"] if k.lower() not in sent and k != "User-Agent"}))
    rec.index.append({
        "file": "aggregated-console-upstream-request.json", "method": "GET", "path": path, "status": None,
        "description": f"What the extension server received for the request above (logged by it): headers as seen "
                       f"upstream ({added} added, Authorization removed, Host = the ExternalName address) and the "
                       "subject of the TLS client certificate kube-apiserver presented (--proxy-client-cert-file)."})
    rec.get("aggregated-console-403-forbidden.json", path, "Same console path as user1 (no RBAC for it): "
            "kube-apiserver authorizes 'get virtualmachines/console' before proxying and answers 403 itself; nothing "
            "reaches the extension server.", token=USER1, want=403)


# ------------------------------------------------------------------ main
def load_env(path):
    out = subprocess.run(["bash", "-c", 'set -a; source "$1"; env -0', "_", str(path)],
                         env={"PATH": os.environ["PATH"]}, capture_output=True, check=True).stdout
    return dict(kv.split("=", 1) for kv in out.decode().split("\0") if "=" in kv)


def main():
    out = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "testdata/kube-apiserver-1.36"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="kar-capture-"))
    cp, staging, script = work / "control-plane", work / "out", str(ROOT / "scripts/control-plane.sh")
    staging.mkdir()
    try:
        subprocess.run([script, "up", str(cp)], check=True)
        env = load_env(cp / "env")
        api, backend = Api(env), Backend(work, env["FRONT_PROXY_CA_FILE"])
        state = setup(api, env)
        aggregate(api, backend.port)
        rec = Recorder(api, staging)
        capture_reads(rec)
        capture_errors(rec, state)
        capture_writes(rec)
        capture_watches(rec, api, env)
        capture_bulk(rec, api)
        capture_others(rec, api)
        capture_current(rec)
        capture_aggregation(rec, api, backend)
        rec.save_index()
    except BaseException:
        subprocess.run([script, "down", str(cp)], check=False)
        log(f"failed; the control plane's logs are in {cp}")
        raise
    subprocess.run([script, "down", str(cp)], check=False)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(staging, out)
    shutil.rmtree(work)
    log(f"{len(list(out.iterdir()))} files in {out}")


if __name__ == "__main__":
    main()
