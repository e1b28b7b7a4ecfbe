"""deploy/kubernetes/: every manifest of the base loads strictly into the official Kubernetes
client's models (an unknown field fails, as `kubectl apply --validate=strict` would), every
overlay too once rendered, and the pieces agree with each other and with Meshgate's own
configuration loader."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tomllib
import types
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml

from meshgate.admin_cli import add_commands
from meshgate.config import load_config
from meshgate.node_login import node_credentials
from meshgate.throwaway_ca import ensure

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
ROOT = KUBERNETES / "base"
OVERLAYS = KUBERNETES / "overlays"
KUSTOMIZATION = "kustomization.yaml"
EXAMPLES = {"secrets.example.yaml"}  # shown, not applied: re-applying must not reset real secrets

MODELS = {
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
}
PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                                           "datetime": (str,), "date": (str,)}


class StrictError(ValueError):
    pass


def strict(value: Any, kind: str, where: str) -> Any:
    """``value`` (parsed YAML) as the client type ``kind`` ('V1Pod', 'List[V1Container]',
    'Dict[str, str]', 'int', 'object'), refusing any key the model does not have. The
    client's own deserializer drops unknown keys silently; this one names them."""
    if value is None:
        return None
    if kind == "object":  # IntOrString and free-form fields
        return value
    if kind in PRIMITIVES:
        if not isinstance(value, PRIMITIVES[kind]) or (kind != "bool" and isinstance(value, bool)):
            raise StrictError(f"{where}: expected {kind}, got {value!r}")
        return value
    inner = re.fullmatch(r"(?:List|list)\[(.+)\]", kind)
    if inner:
        if not isinstance(value, list):
            raise StrictError(f"{where}: expected a list, got {value!r}")
        return [strict(item, inner.group(1), f"{where}[{i}]") for i, item in enumerate(value)]
    inner = re.fullmatch(r"(?:Dict\[str, (.+)\]|dict\(str, (.+)\))", kind)
    if inner:
        if not isinstance(value, dict):
            raise StrictError(f"{where}: expected a map, got {value!r}")
        item_kind = inner.group(1) or inner.group(2)
        return {key: strict(item, item_kind, f"{where}.{key}") for key, item in value.items()}
    model = getattr(kubernetes.client, kind)
    if not isinstance(value, dict):
        raise StrictError(f"{where}: expected a {kind} object, got {value!r}")
    attributes = {json_key: attribute for attribute, json_key in model.attribute_map.items()}
    unknown = sorted(set(value) - set(attributes))
    if unknown:
        raise StrictError(f"{where}: unknown field(s) {unknown} for {kind} (known: {sorted(attributes)})")
    arguments = {attributes[key]: strict(item, model.openapi_types[attributes[key]], f"{where}.{key}")
                 for key, item in value.items()}
    try:
        return model(**arguments)  # the client checks required fields and enums here
    except ValueError as error:
        raise StrictError(f"{where}: {error}") from None


def load_manifest(document: dict[str, Any], where: str) -> Any:
    key = (document.get("apiVersion"), document.get("kind"))
    if key not in MODELS:
        raise StrictError(f"{where}: no model for apiVersion/kind {key}")
    return strict(document, MODELS[key], f"{where} {key[1]}")


def manifest_files() -> list[Path]:
    return sorted(path for path in ROOT.glob("*.yaml") if path.name != KUSTOMIZATION)


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def objects() -> dict[tuple[str, str], Any]:
    """Every manifest as a client model, by (kind, name)."""
    found = {}
    for path in manifest_files():
        for i, document in enumerate(documents(path)):
            model = load_manifest(document, f"{path.name}#{i}")
            key = (document["kind"], model.metadata.name)
            assert key not in found, f"{key} defined twice"
            found[key] = model
    return found


@pytest.fixture(scope="module")
def k8s() -> dict[tuple[str, str], Any]:
    return objects()


def config_script(k8s: dict[tuple[str, str], Any], name: str) -> types.ModuleType:
    """A Python script of the meshgate-node ConfigMap as a module (not run as __main__)."""
    module = types.ModuleType(name.removesuffix(".py"))
    exec(compile(k8s["ConfigMap", "meshgate-node"].data[name], name, "exec"), module.__dict__)
    return module


# --- strict loading ---------------------------------------------------------------


@pytest.mark.parametrize("path", manifest_files(), ids=lambda path: path.name)
def test_every_manifest_loads_strictly(path: Path) -> None:
    loaded = documents(path)
    assert loaded, f"{path.name} holds no manifest"
    for i, document in enumerate(loaded):
        model = load_manifest(document, f"{path.name}#{i}")
        assert model.metadata.namespace in (None, "meshgate") or document["kind"] == "Namespace"


@pytest.mark.parametrize(("path", "field"), [
    (("spec",), "serviceNme"),
    (("spec", "template", "spec"), "terminationGracePeriodSecond"),
    (("spec", "template", "spec", "containers", 0, "readinessProbe", "httpGet"), "paht"),
])
def test_a_typo_is_refused(path: tuple[Any, ...], field: str) -> None:
    document = documents(ROOT / "statefulset.yaml")[0]
    node = document
    for step in path:
        node = node[step]
    node[field] = "x"
    with pytest.raises(StrictError, match=rf"unknown field\(s\) \['{field}'\]"):
        load_manifest(document, "statefulset.yaml")


def test_a_wrong_type_and_a_missing_required_field_are_refused() -> None:
    document = documents(ROOT / "statefulset.yaml")[0]
    document["spec"]["replicas"] = "3"
    with pytest.raises(StrictError, match="expected int"):
        load_manifest(document, "statefulset.yaml")
    document = documents(ROOT / "statefulset.yaml")[0]
    del document["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(StrictError, match="name"):
        load_manifest(document, "statefulset.yaml")


def test_kustomization_lists_every_manifest_but_the_examples() -> None:
    kustomization = yaml.safe_load((ROOT / KUSTOMIZATION).read_text())
    assert set(kustomization) == {"apiVersion", "kind", "namespace", "resources"}
    assert kustomization["namespace"] == "meshgate"
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    assert set(listed) == {path.name for path in manifest_files()} - EXAMPLES


def test_the_top_kustomization_is_the_base() -> None:
    assert yaml.safe_load((KUBERNETES / KUSTOMIZATION).read_text())["resources"] == ["base"]


# --- overlays -------------------------------------------------------------------


def render_overlay(name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The overlay's documents by (kind, name), rendered as kustomize renders the two patch
    forms the overlays use: a JSON 6902 list on its target, and a strategic-merge document
    ``$patch: delete`` that removes its object."""
    kustomization = yaml.safe_load((OVERLAYS / name / KUSTOMIZATION).read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "patches"}
    assert kustomization["resources"] == ["../../base"]
    rendered = {(doc["kind"], doc["metadata"]["name"]): doc for path in manifest_files()
                if path.name not in EXAMPLES for doc in documents(path)}
    for patch in kustomization["patches"]:
        body = yaml.safe_load(patch["patch"])
        if isinstance(body, list):
            target = rendered[patch["target"]["kind"], patch["target"]["name"]]
            for operation in body:
                json_patch(target, operation)
        else:
            assert body.pop("$patch") == "delete", body
            del rendered[body["kind"], body["metadata"]["name"]]
    return rendered


def json_patch(document: dict[str, Any], operation: dict[str, Any]) -> None:
    """One RFC 6902 add/replace/remove; a path that is not there fails, as kustomize fails."""
    *parents, last = [step.replace("~1", "/").replace("~0", "~") for step in operation["path"].split("/")[1:]]
    node: Any = document
    for step in parents:
        node = node[int(step)] if isinstance(node, list) else node[step]
    kind = operation["op"]
    assert kind in ("add", "replace", "remove"), operation
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        assert kind == "add" or index < len(node), operation
        if kind == "add":
            node.insert(index, operation["value"])
        elif kind == "replace":
            node[index] = operation["value"]
        else:
            del node[index]
        return
    assert kind == "add" or last in node, f"no {operation['path']} to {kind}"
    if kind == "remove":
        del node[last]
    else:
        node[last] = operation["value"]


def test_the_console_replicas_overlay_runs_two_consoles_that_share_postgresql() -> None:
    rendered = render_overlay("console-replicas")
    loaded = {key: load_manifest(doc, f"overlays/console-replicas {key}") for key, doc in rendered.items()}
    console = loaded["Deployment", "meshgate-console"]
    assert console.spec.replicas == 2
    assert console.spec.strategy.type == "RollingUpdate"
    assert (console.spec.strategy.rolling_update.max_surge, console.spec.strategy.rolling_update.max_unavailable) \
        == (1, 0)  # one new pod at a time: two migrates of a release never run together
    volumes = {volume.name: volume for volume in console.spec.template.spec.volumes}
    assert volumes["data"].empty_dir is not None and volumes["data"].persistent_volume_claim is None
    assert ("PersistentVolumeClaim", "meshgate-console") not in loaded
    pod = console.spec.template.spec
    for container in [*pod.init_containers, *pod.containers]:
        wanted = {env.name: env.value_from.secret_key_ref for env in container.env or ()
                  if env.value_from and env.value_from.secret_key_ref
                  and env.value_from.secret_key_ref.name == "meshgate-console"}
        assert set(wanted) == {"MESHGATE_CONSOLE_DATABASE_URL", "MESHGATE_CONSOLE_SECRET"}, container.name
        assert all(ref.optional is False for ref in wanted.values()), container.name
    base = {key: model for key, model in objects().items() if key[0] != "Secret"}  # Secrets: examples only
    assert set(loaded) == set(base) - {("PersistentVolumeClaim", "meshgate-console")}
    assert base["Deployment", "meshgate-console"].spec.replicas == 1  # the base keeps SQLite, one pod


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (its kustomize) is not installed")
def test_kubectl_renders_the_overlay_as_this_test_does() -> None:
    output = subprocess.run(["kubectl", "kustomize", str(OVERLAYS / "console-replicas")], capture_output=True,
                            text=True, timeout=60, check=True).stdout
    by_kubectl = {(doc["kind"], doc["metadata"]["name"]): doc for doc in yaml.safe_load_all(output)}
    ours = render_overlay("console-replicas")
    for doc in ours.values():
        if doc["kind"] != "Namespace":
            doc["metadata"]["namespace"] = "meshgate"  # the base's kustomization sets it on every object
    assert by_kubectl == ours


# --- the nodes ------------------------------------------------------------------


def node_container(k8s: dict[tuple[str, str], Any]) -> Any:
    (container,) = [c for c in k8s["StatefulSet", "meshgate"].spec.template.spec.containers if c.name == "meshgate"]
    return container


def test_statefulset_is_governed_by_the_headless_service(k8s: dict[tuple[str, str], Any]) -> None:
    statefulset = k8s["StatefulSet", "meshgate"]
    headless = k8s["Service", statefulset.spec.service_name]
    assert headless.spec.cluster_ip == "None"
    assert headless.spec.publish_not_ready_addresses is True
    assert statefulset.spec.pod_management_policy == "Parallel"
    labels = statefulset.spec.template.metadata.labels
    assert statefulset.spec.selector.match_labels.items() <= labels.items()
    assert [claim.metadata.name for claim in statefulset.spec.volume_claim_templates] == ["data"]
    assert any(mount.name == "data" and mount.mount_path == "/var/lib/meshgate"
               for mount in node_container(k8s).volume_mounts)


def test_services_select_the_nodes_and_name_their_ports(k8s: dict[tuple[str, str], Any]) -> None:
    labels = k8s["StatefulSet", "meshgate"].spec.template.metadata.labels
    ports = {port.name: port.container_port for port in node_container(k8s).ports}
    assert ports["meshgate"] == 61616
    for name in ("meshgate-headless", "meshgate"):
        service = k8s["Service", name]
        assert service.spec.selector.items() <= labels.items(), name
        for port in service.spec.ports:
            assert port.target_port in ports, f"{name}: port {port.name} targets {port.target_port}"
            assert port.port == ports[port.target_port]
    headless_ports = {port.name: port for port in k8s["Service", "meshgate-headless"].spec.ports}
    assert headless_ports["meshgate"].port == 61616  # the SRV records _meshgate._tcp.<service>
    clients = {port.name for port in k8s["Service", "meshgate"].spec.ports}
    assert clients == {"stomp-tls", "amqps", "wss"}


def test_probes_ask_the_http_endpoint(k8s: dict[tuple[str, str], Any]) -> None:
    container = node_container(k8s)
    http = [port for port in container.ports if port.name == "http"]
    assert [port.container_port for port in http] == [15692]
    probes = {"startup": container.startup_probe, "liveness": container.liveness_probe,
              "readiness": container.readiness_probe}
    for what, probe in probes.items():
        assert probe.http_get.port == "http", what
    assert probes["readiness"].http_get.path == "/readyz"
    assert probes["liveness"].http_get.path == probes["startup"].http_get.path == "/healthz"
    startup = probes["startup"]
    assert startup.period_seconds * startup.failure_threshold >= 15 * 60  # a long journal recovery


def test_pdb_takes_one_node_at_a_time(k8s: dict[tuple[str, str], Any]) -> None:
    pdb = k8s["PodDisruptionBudget", "meshgate"]
    assert pdb.spec.max_unavailable == 1
    pod_labels = k8s["StatefulSet", "meshgate"].spec.template.metadata.labels
    assert pdb.spec.selector.match_labels.items() <= pod_labels.items()


def test_prestop_may_read_the_statefulset_and_tells_scale_in_from_restart(k8s: dict[tuple[str, str], Any]) -> None:
    pod = k8s["StatefulSet", "meshgate"].spec.template.spec
    assert pod.termination_grace_period_seconds >= 120  # a scale-down's hand-over (30 s patience and more)
    assert node_container(k8s).lifecycle.pre_stop._exec.command[-1] == "/opt/meshgate-k8s/prestop.py"
    account = k8s["ServiceAccount", pod.service_account_name]
    binding = k8s["RoleBinding", "meshgate-node"]
    assert [(s.kind, s.name) for s in binding.subjects] == [("ServiceAccount", account.metadata.name)]
    (rule,) = k8s["Role", binding.role_ref.name].rules
    assert (rule.api_groups, rule.resources, rule.resource_names, rule.verbs) == (
        ["apps"], ["statefulsets"], ["meshgate"], ["get"])
    prestop = config_script(k8s, "prestop.py")
    assert prestop.removed_for_good("meshgate-3", 3)
    assert prestop.removed_for_good("meshgate-4", 3)
    assert not prestop.removed_for_good("meshgate-2", 3)
    assert not prestop.removed_for_good("meshgate-0", 1)


def test_prestop_scale_down_keeps_the_password_off_the_command_line(k8s: dict[tuple[str, str], Any],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    password = "op-pass-4c1d"
    pod_environment = {"MESHGATE_OPERATOR_PASSWORD": password, "PATH": "/usr/local/bin:/usr/bin"}
    command, environment = config_script(k8s, "prestop.py").scale_down_command(pod_environment)
    assert command[:2] == ["meshgate", "scale-down"]
    assert not any(password in word for word in command), command
    assert "--passcode" not in command and "--login" not in command, command
    assert environment["PATH"] == pod_environment["PATH"]  # the rest of the pod's environment is kept
    # What meshgate makes of that command line in that environment: the operator's login.
    parser = argparse.ArgumentParser(prog="meshgate")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(command[1:])
    for name in ("MESHGATE_LOGIN", "MESHGATE_PASSCODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert node_credentials(args) == ("operator", password)


def test_node_toml_renders_and_passes_meshgates_loader(k8s: dict[tuple[str, str], Any], tmp_path: Path) -> None:
    node = k8s["ConfigMap", "meshgate-node"]
    template = node.data["node.toml"]
    tomllib.loads(template)  # valid TOML before rendering too
    password = 'p"a\\ss \u00e9'  # quotes, a backslash and non-ASCII survive the TOML quoting
    text = config_script(k8s, "render.py").render(template, password, "operator secret")
    # The Secret's files at a place of the test's own (/etc/meshgate/tls in the pod).
    pki = ensure(tmp_path / "tls", ["node"])
    text = (text.replace("/etc/meshgate/tls/tls.crt", str(pki.nodes["node"].certificate))
                .replace("/etc/meshgate/tls/tls.key", str(pki.nodes["node"].private_key))
                .replace("/etc/meshgate/tls/ca.crt", str(pki.ca_certificate)))
    assert "/etc/meshgate/tls" not in text
    (tmp_path / "node.toml").write_text(text)
    config = load_config(tmp_path / "node.toml")

    assert config.mesh.cluster_password == password
    assert config.mesh.scale_down is False  # the preStop hook decides, per deletion
    headless = k8s["Service", k8s["StatefulSet", "meshgate"].spec.service_name]
    name, port = config.mesh.discovery.dns
    assert name == f"{headless.metadata.name}.{headless.metadata.namespace}.svc.cluster.local"
    assert port == config.mesh.bind[1] == next(p.port for p in headless.spec.ports if p.name == "meshgate")
    ports = {p.name: p.container_port for p in node_container(k8s).ports}
    assert config.http.bind == ("0.0.0.0", ports["http"])
    assert config.stomp.tls.bind == ("0.0.0.0", ports["stomp-tls"])
    assert config.amqp.tls.bind == ("0.0.0.0", ports["amqps"])
    assert config.stomp.websocket.tls.bind == ("0.0.0.0", ports["wss"])
    assert config.stomp.bind[0] == "127.0.0.1"  # the preStop hook's management port, loopback only
    assert "operator" in config.security.users
    assert config.data_dir.startswith("/var/lib/meshgate/")


def test_render_refuses_a_missing_secret(k8s: dict[tuple[str, str], Any]) -> None:
    render = config_script(k8s, "render.py").render
    with pytest.raises(SystemExit, match="must be set"):
        render(k8s["ConfigMap", "meshgate-node"].data["node.toml"], "", "x")


# --- the rest ---------------------------------------------------------------------


def test_secrets_the_pods_read_exist_with_their_keys(k8s: dict[tuple[str, str], Any]) -> None:
    secrets = {name: set(secret.string_data) for (kind, name), secret in k8s.items() if kind == "Secret"}
    for (kind, name), workload in k8s.items():
        if kind not in ("StatefulSet", "Deployment"):
            continue
        pod = workload.spec.template.spec
        for container in (pod.init_containers or []) + pod.containers:
            for variable in container.env or []:
                ref = variable.value_from and variable.value_from.secret_key_ref
                if ref:
                    assert ref.key in secrets[ref.name], f"{name}/{container.name}: {ref.name}.{ref.key}"
            for source in container.env_from or []:
                assert ("ConfigMap", source.config_map_ref.name) in k8s
        for volume in pod.volumes or []:
            if volume.secret:
                assert volume.secret.secret_name in secrets
                assert {item.key for item in volume.secret.items or []} <= secrets[volume.secret.secret_name]
            if volume.config_map:
                assert ("ConfigMap", volume.config_map.name) in k8s
            if volume.persistent_volume_claim:
                assert ("PersistentVolumeClaim", volume.persistent_volume_claim.claim_name) in k8s
    assert {"tls.crt", "tls.key", "ca.crt"} <= secrets["meshgate-tls"]


def test_every_workload_selects_its_own_pods(k8s: dict[tuple[str, str], Any]) -> None:
    for (kind, name), workload in k8s.items():
        if kind in ("StatefulSet", "Deployment"):
            assert workload.spec.selector.match_labels.items() <= workload.spec.template.metadata.labels.items(), name
            assert workload.spec.template.spec.security_context.run_as_non_root is True, name


def test_meshgate_pods_share_the_image_s_numeric_user_for_their_volumes(k8s: dict[tuple[str, str], Any]) -> None:
    """runAsNonRoot needs the image's USER numeric, and the volumes' fsGroup is its group."""
    containerfile = (KUBERNETES.parent / "container" / "Containerfile").read_text()
    (user,) = [line.split()[1] for line in containerfile.splitlines() if line.startswith("USER ")]
    uid, gid = (int(part) for part in user.split(":"))
    assert uid > 0
    for (kind, name), workload in k8s.items():
        if kind in ("StatefulSet", "Deployment") and workload.spec.template.spec.containers[0].image.startswith(
                "meshgate:"):
            assert workload.spec.template.spec.security_context.fs_group == gid, name


def test_console_and_pipeline_reach_redis_and_the_nodes(k8s: dict[tuple[str, str], Any]) -> None:
    redis = k8s["Service", "redis"]
    redis_url = f"redis://{redis.metadata.name}.{redis.metadata.namespace}.svc.cluster.local:6379/0"
    console = k8s["ConfigMap", "meshgate-console"].data
    assert console["MESHGATE_REDIS_URL"] == redis_url
    client = k8s["Service", "meshgate"]
    assert console["MESHGATE_CONSOLE_STOMP"] == (
        f"stomp+ssl://{client.metadata.name}.{client.metadata.namespace}.svc.cluster.local:61614")
    assert tomllib.loads(k8s["ConfigMap", "meshgate-node"].data["node.toml"])["metrics"]["redis_url"] == redis_url
    (pipeline,) = k8s["Deployment", "meshgate-pipeline"].spec.template.spec.containers
    assert pipeline.command[:2] == ["meshgate", "pipeline"]
    assert pipeline.command[pipeline.command.index("--redis") + 1] == redis_url
    assert k8s["Deployment", "meshgate-pipeline"].spec.replicas == 1
    assert k8s["Deployment", "meshgate-pipeline"].spec.strategy.type == "Recreate"


def test_prometheus_scrapes_every_node_by_srv(k8s: dict[tuple[str, str], Any]) -> None:
    scrape = yaml.safe_load(k8s["ConfigMap", "meshgate-prometheus-scrape"].data["scrape-config.yaml"])
    (job,) = scrape["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    (sd,) = job["dns_sd_configs"]
    headless = k8s["Service", "meshgate-headless"]
    assert sd["type"] == "SRV"
    assert sd["names"] == [f"_http._tcp.{headless.metadata.name}.{headless.metadata.namespace}.svc.cluster.local"]
    assert "http" in {port.name for port in headless.spec.ports}
