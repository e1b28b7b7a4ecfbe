"""Kubernetes simulated on one machine, for the rolling-upgrade tests: the StatefulSet of
deploy/kubernetes/ run from the built image's file system, as a kubelet would run it.

- **The cluster network**: a bridge in this (the host's) network namespace with an address
  of 198.18.N.0/24 (RFC 2544's benchmarking range: no real network uses it), and a network
  namespace per pod with a veth on the bridge and an address of its own. A pod that is
  replaced gets a new address, as on Kubernetes.
- **Cluster DNS**: tests/e2e/dns_support.py on the bridge's address, port 53, named in the
  image's /etc/resolv.conf as the kubelet names the cluster's DNS. It serves what
  Kubernetes would: the headless Service's A records and its SRV records for the port
  named ``meshgate`` (every pod, ready or not: publishNotReadyAddresses), the clients'
  Service (ready pods only, as its Endpoints) and Redis.
- **A pod**: the ConfigMap's files (deploy/kubernetes/base/node-config.yaml) mounted at
  /opt/meshgate-k8s, the TLS Secret at /etc/meshgate/tls, an emptyDir at /etc/meshgate,
  its volume (a directory kept across its incarnations: the PVC) at /var/lib/meshgate,
  and the service account at /run/secrets/kubernetes.io/serviceaccount, bind-mounted in
  a mount namespace of its own; its host name is its name. The init container (render.py)
  runs first, then the node as PID 1 of a PID namespace, as the image's user 10001.
- **Deleting a pod** is the kubelet's order: out of the clients' Service, the preStop hook
  (the ConfigMap's prestop.py, which asks the API server for the StatefulSet's replicas),
  then SIGTERM, then the pod's records and network go.
- **The API server**: :class:`KubeApi` answers the one request prestop.py makes, over
  HTTPS with the service account's token and CA.

Needs root (namespaces, mounts, chroot)."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from dns_support import DnsServer
from image_support import CHROOT, IMAGE_ENV, ROOT, UNSHARE, child_pid, http_status, wait_for
from tls_support import issue

NAMESPACE = "meshgate"
STATEFULSET = "meshgate"
HEADLESS = f"meshgate-headless.{NAMESPACE}.svc.cluster.local"
CLIENTS = f"meshgate.{NAMESPACE}.svc.cluster.local"
REDIS = f"redis.{NAMESPACE}.svc.cluster.local"
ACCOUNT = "run/secrets/kubernetes.io/serviceaccount"  # /var/run is a link to /run in the image
USER = "10001:10001"  # the image's USER
PORTS = {"stomp-tls": 61614, "amqps": 5671, "meshgate": 61616, "http": 15692}
GRACE_S = 120  # terminationGracePeriodSeconds: after it the kubelet sends SIGKILL
# Shorter than the ConfigMap's timings, so a test waits seconds, not a minute, for a new pod to be found.
FAST_MESH = ("mesh.discovery.refresh_timeout_ms=500", "mesh.retry_interval_ms=200",
             "mesh.max_retry_interval_ms=1000", "mesh.check_period_ms=500", "mesh.connection_ttl_ms=3000")


def _ip(*command: str) -> None:
    subprocess.run(["ip", *command], check=True, capture_output=True, text=True)


class Network:
    """The bridge and the pods' network namespaces; ``close`` removes every one."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.subnet = 1 + secrets.randbelow(250)
        self.gateway = f"198.18.{self.subnet}.1"
        self.bridge = f"mgb{self.tag}"
        self._next_host = 10
        self._namespaces: list[str] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        try:
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except subprocess.CalledProcessError:
            _ip("link", "del", self.bridge)
            raise

    def add(self) -> tuple[str, str]:
        """A new network namespace on the bridge: (its name, its address)."""
        host = self._next_host
        self._next_host += 1
        netns, veth, address = f"mg-{self.tag}-{host}", f"mgv{self.tag}{host}", f"198.18.{self.subnet}.{host}"
        _ip("netns", "add", netns)
        self._namespaces.append(netns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.gateway)
        return netns, address

    def remove(self, netns: str) -> None:
        """The namespace and its veth pair (deleting the namespace deletes both ends)."""
        if netns in self._namespaces:
            self._namespaces.remove(netns)
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)

    def close(self) -> None:
        for netns in list(self._namespaces):
            self.remove(netns)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


class KubeApi:
    """``GET /apis/apps/v1/namespaces/meshgate/statefulsets/meshgate`` over HTTPS, answering
    ``spec.replicas`` (set ``replicas``) to a request with the service account's token."""

    def __init__(self, host: str, directory: Path, ca, token: str) -> None:
        self.replicas = 3
        self.asked = 0
        _, _, cert, key = issue(directory, "apiserver", "kubernetes", issuer=ca, names=(host,))
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{STATEFULSET}"
                if self.headers.get("Authorization") != f"Bearer {token}":
                    self.send_error(401)
                    return
                if self.path != path:
                    self.send_error(404)
                    return
                api.asked += 1
                body = json.dumps({"kind": "StatefulSet", "spec": {"replicas": api.replicas}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.host, self.port = host, self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Pod:
    """One incarnation of a StatefulSet pod: its name and volume outlive it, not its address."""

    def __init__(self, name: str, netns: str, address: str, volume: Path, config: Path, log: Path) -> None:
        self.name, self.netns, self.address = name, netns, address
        self.volume, self.config, self.log = volume, config, log
        self.process: subprocess.Popen | None = None
        self.stopped_with: int | None = None

    @property
    def ordinal(self) -> int:
        return int(self.name.rsplit("-", 1)[1])

    def url(self, port: str) -> str:
        return f"{self.address}:{PORTS[port]}"

    def ready(self) -> bool:
        return http_status(f"http://{self.url('http')}/readyz") == 200

    def node_pid(self) -> int:
        assert self.process is not None
        pid = child_pid(self.process.pid)  # unshare's child, PID 1 of the pod's PID namespace: the node
        assert pid is not None, f"{self.name}: no node process"
        return pid


class Cluster:
    """The StatefulSet's pods on :class:`Network`, named by :class:`DnsServer`, with the
    ConfigMap, Secrets and service account of deploy/kubernetes/ (placeholders rendered by
    the init container from ``cluster_password`` and ``operator_password``)."""

    def __init__(self, root: Path, directory: Path, cluster_password: str, operator_password: str) -> None:
        self.root, self.directory = root, directory
        self.cluster_password, self.operator_password = cluster_password, operator_password
        self.pods: dict[str, Pod] = {}
        self._ready: set[str] = set()
        self._lock = threading.RLock()  # pods may be deleted in parallel (podManagementPolicy Parallel)
        self.network = Network()
        self._closers = [self.network.close]
        try:
            self._set_up()
        except BaseException:
            self.close()
            raise

    def _set_up(self) -> None:
        gateway = self.network.gateway
        secrets_dir = self.directory / "secrets"
        secrets_dir.mkdir()
        ca_cert, ca_key, self.ca_file, _ = issue(secrets_dir, "ca", "meshgate test CA", ca=True)
        ca = (ca_cert, ca_key)
        self.tls = self._dir("tls")  # the Secret meshgate-tls: tls.crt, tls.key, ca.crt
        addresses = tuple(f"198.18.{self.network.subnet}.{host}" for host in range(10, 60))
        issue(self.tls, "tls", "meshgate", issuer=ca, server=True, client=True,
              names=(CLIENTS, HEADLESS, f"*.{HEADLESS}", *addresses))
        (self.tls / "ca.crt").write_bytes(self.ca_file.read_bytes())
        for name in ("tls.crt", "tls.key", "ca.crt"):
            os.chown(self.tls / name, 0, 10001)  # defaultMode 0440 with the pod's fsGroup 10001
            (self.tls / name).chmod(0o440)

        self.account = self._dir("serviceaccount")
        token = secrets.token_urlsafe(24)
        (self.account / "token").write_text(token)
        (self.account / "namespace").write_text(NAMESPACE)
        (self.account / "ca.crt").write_bytes(self.ca_file.read_bytes())
        self.api = KubeApi(gateway, secrets_dir, ca, token)
        self._closers.append(self.api.close)

        self.configmap = self._dir("configmap")
        document = yaml.safe_load((ROOT / "deploy/kubernetes/base/node-config.yaml").read_text())
        for name, text in document["data"].items():
            (self.configmap / name).write_text(text)

        self.redis = subprocess.Popen(
            ["redis-server", "--bind", gateway, "--port", "6379", "--protected-mode", "no", "--save", "",
             "--appendonly", "no",
             "--dir", str(self._dir("redis"))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._closers.append(lambda: _stop(self.redis))
        self.dns = DnsServer(self._dir("dns"), host=gateway, port=53)
        self._closers.append(self.dns.stop)
        (self.root / "etc/resolv.conf").write_text(f"nameserver {gateway}\noptions ndots:1 timeout:1\n")
        for mountpoint in ("opt/meshgate-k8s", ACCOUNT, "etc/meshgate", "var/lib/meshgate"):
            (self.root / mountpoint).mkdir(parents=True, exist_ok=True)
        self._publish()

    def _dir(self, name: str, owner: bool = False) -> Path:
        path = self.directory / name
        path.mkdir(parents=True, exist_ok=True)
        if owner:
            os.chown(path, 10001, 10001)
        return path

    # -- DNS, as Kubernetes would answer ---------------------------------------------------

    def _publish(self) -> None:
        with self._lock:
            self._publish_locked()

    def _publish_locked(self) -> None:
        a: dict[str, list[str]] = {REDIS: [self.network.gateway]}
        live = sorted(self.pods.values(), key=lambda pod: pod.ordinal)
        for pod in live:
            a[f"{pod.name}.{HEADLESS}"] = [pod.address]
        a[HEADLESS] = [pod.address for pod in live]
        a[CLIENTS] = [pod.address for pod in live if pod.name in self._ready]
        srv = {f"_meshgate._tcp.{HEADLESS}": [(f"{pod.name}.{HEADLESS}", PORTS["meshgate"]) for pod in live]}
        self.dns.set(a=a, srv=srv)

    # -- pods ------------------------------------------------------------------------------

    def create(self, ordinal: int) -> Pod:
        """Schedule pod ``meshgate-<ordinal>``: its network, the init container, the node."""
        name = f"{STATEFULSET}-{ordinal}"
        assert name not in self.pods, f"{name} exists"
        netns, address = self.network.add()
        incarnation = sum(1 for _ in self.directory.glob(f"{name}-*.log"))
        pod = Pod(name, netns, address, volume=self._dir(f"volumes/data-{name}", owner=True),
                  config=self._dir(f"emptydir/{name}-{incarnation}", owner=True),
                  log=self.directory / f"{name}-{incarnation}.log")
        (pod.config / "tls").mkdir()
        self.pods[name] = pod
        self._publish()  # a pod's address is published before it is ready (publishNotReadyAddresses)
        init = self._run(pod, ["python3", "/opt/meshgate-k8s/render.py", "/opt/meshgate-k8s/node.toml",
                               "/etc/meshgate/node.toml"],
                         {"MESHGATE_CLUSTER_PASSWORD": self.cluster_password,
                          "MESHGATE_OPERATOR_PASSWORD": self.operator_password})
        assert init.returncode == 0, f"{name}: the init container exited {init.returncode}: {init.stderr[-2000:]}"
        command = ["meshgate", "broker", "--config", "/etc/meshgate/node.toml"]
        for setting in FAST_MESH:
            command += ["--set", setting]
        with pod.log.open("ab") as out:
            pod.process = subprocess.Popen(self._in_pod(pod, command, pid_namespace=True), stdout=out,
                                           stderr=subprocess.STDOUT, env={**IMAGE_ENV, **self._pod_env(pod)})
        return pod

    def wait_ready(self, pod: Pod, timeout: float = 90) -> None:
        """Until its readiness probe passes; then it joins the clients' Service."""
        assert pod.process is not None
        wait_for(pod.ready, f"{pod.name} ready (/readyz 200)", timeout, pod.process, pod.log)
        self._ready.add(pod.name)
        self._publish()

    def delete(self, pod: Pod) -> subprocess.CompletedProcess:
        """The kubelet's deletion: out of the Service, the preStop hook, SIGTERM (SIGKILL after
        the grace period), then the pod's records and network go. The hook's run."""
        assert pod.process is not None
        self._ready.discard(pod.name)
        self._publish()
        hook = self._run(pod, ["python3", "/opt/meshgate-k8s/prestop.py"], self._pod_env(pod), timeout=GRACE_S)
        if pod.process.poll() is None:
            os.kill(pod.node_pid(), signal.SIGTERM)
        try:
            pod.stopped_with = pod.process.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pod.process.kill()
            pod.stopped_with = pod.process.wait(timeout=10)
        with self._lock:
            del self.pods[pod.name]
            self._publish()
            self.network.remove(pod.netns)
        return hook

    def _pod_env(self, pod: Pod) -> dict[str, str]:
        return {"POD_NAME": pod.name, "STATEFULSET": STATEFULSET, "MESHGATE_OPERATOR_PASSWORD": self.operator_password,
                "KUBERNETES_SERVICE_HOST": self.api.host, "KUBERNETES_SERVICE_PORT": str(self.api.port),
                "SCALE_DOWN_WAIT_S": "90"}

    def _run(self, pod: Pod, command: list[str], env: dict[str, str], timeout: float = 60):
        return subprocess.run(self._in_pod(pod, command), capture_output=True, text=True, timeout=timeout,
                              env={**IMAGE_ENV, **env})

    def _in_pod(self, pod: Pod, command: list[str], pid_namespace: bool = False) -> list[str]:
        """``command`` in the pod's network namespace, in a mount namespace with its volumes, under its
        host name, chrooted into the image as its user."""
        mounts = [(pod.volume, "var/lib/meshgate"), (pod.config, "etc/meshgate"), (self.tls, "etc/meshgate/tls"),
                  (self.configmap, "opt/meshgate-k8s"), (self.account, ACCOUNT)]
        script = "set -e\n" + "".join(f"mount --bind {shlex.quote(str(source))} "
                                      f"{shlex.quote(str(self.root / target))}\n" for source, target in mounts)
        script += f"hostname {shlex.quote(pod.name)}\n"
        script += f'exec {CHROOT} --userspec={USER} --groups= {shlex.quote(str(self.root))} "$@"\n'
        namespaces = ["--mount", "--uts"] + (["--pid", "--fork", "--kill-child"] if pid_namespace else [])
        return ["ip", "netns", "exec", pod.netns, UNSHARE, *namespaces, "sh", "-c", script, "sh", *command]

    def close(self) -> None:
        for pod in list(self.pods.values()):
            if pod.process is not None and pod.process.poll() is None:
                pod.process.kill()  # unshare --kill-child: the node goes with it
                pod.process.wait(10)
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # noqa: BLE001 - clean up the rest regardless
                pass


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(10)
