"""Deployment: container images, Kubernetes manifests, the SLURM launcher, the guide.

Nothing here builds an image or talks to a cluster (neither exists on a test
machine). The manifests are rendered with the real `kubectl kustomize` and every
object is validated offline against the Kubernetes OpenAPI schema; the checks
after that are the properties an operator relies on: GPUs only on workers, gRPC
probes on the master, no credential in the rendered output, pinned non-root
images, and command lines the real `aiperf` CLI accepts.
"""

from __future__ import annotations

import ast
import configparser
import functools
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: cannot render k8s/")

# The deployments an operator applies (docs/deploy.md names each of them).
DEPLOYMENTS = ["base", "overlays/external-db", "overlays/smoke", "overlays/monitoring"]
JOBS = ["jobs/start-run", "jobs/scoreboard", "jobs/audit", "jobs/node-audit"]
GPU_DEPLOYMENTS = ["base", "overlays/external-db", "overlays/monitoring"]
# Kustomize Components: not rendered alone, only through an overlay that uses them.
COMPONENTS = ["components/monitoring"]
# Prometheus-operator kinds: no schema ships with kubernetes-validate; checked
# structurally (and every metric they use against master/observability/metrics.py) below.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}

# The Secrets the manifests use and docs/deploy.md tells the operator to create.
SECRETS = {"aiperf-tokens": {"worker-token", "admin-token"}, "aiperf-db": {"url", "postgres-password"}}
IMAGE_UID = 10001

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
SECRETISH = re.compile(r"TOKEN|PASSW|SECRET|CREDENTIAL|PRIVATE|API_?KEY|DB_URL|DATABASE_URL", re.I)
URL_WITH_PASSWORD = re.compile(r"[a-z+]+://[^\s:/@]+:[^\s@/]+@")


# --------------------------------------------------------------------------- helpers


def kustomizations() -> list[str]:
    return sorted(
        str(p.parent.relative_to(K8S)) for p in K8S.rglob("kustomization.yaml")
    )


@functools.lru_cache(maxsize=None)
def render(target: str) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run(
        [KUBECTL, "kustomize", str(K8S / target)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"kubectl kustomize k8s/{target} failed:\n{proc.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def find(objs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind}/{name}, found {len(hits)}"
    return hits[0]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def workloads(objs: tuple[dict[str, Any], ...]) -> Iterator[dict[str, Any]]:
    return (o for o in objs if o["kind"] in WORKLOAD_KINDS)


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    return spec.get("initContainers", []) + spec["containers"]


def gpu_limit(container: dict[str, Any]) -> Any:
    resources = container.get("resources", {})
    return resources.get("limits", {}).get("nvidia.com/gpu") or resources.get("requests", {}).get(
        "nvidia.com/gpu"
    )


def walk_strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from walk_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_strings(item)
    elif isinstance(node, str):
        yield node


def option_value(args: list[str], option: str) -> str:
    assert option in args, f"{option} missing from {args}"
    return args[args.index(option) + 1]


def package_version() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    return cfg["metadata"]["version"]


# --------------------------------------------------------------------------- rendering


@needs_kubectl
def test_every_kustomization_is_covered() -> None:
    # A new overlay must be added to the lists above (and so to every check below).
    assert kustomizations() == sorted(DEPLOYMENTS + JOBS + COMPONENTS)


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS + JOBS)
def test_renders_and_validates_against_kubernetes_schema(target: str) -> None:
    import kubernetes_validate

    objs = render(target)
    assert objs, f"k8s/{target} rendered nothing"
    # The oldest Kubernetes we support (native gRPC probes are GA from 1.27) and
    # the newest schema shipped with kubernetes-validate, unknown fields rejected.
    for version in ("1.30", kubernetes_validate.latest_version()):
        for obj in objs:
            if obj["kind"] in OPERATOR_KINDS:
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(
                    f"k8s/{target}: {obj['kind']}/{obj['metadata']['name']} is invalid "
                    f"for Kubernetes {version}: {exc.message}"
                )
        for obj in objs:
            if obj["kind"] != "Namespace":
                assert obj["metadata"].get("namespace") == "aiperf", obj["metadata"]


# --------------------------------------------------------------------------- GPUs


@needs_kubectl
@pytest.mark.parametrize("target", GPU_DEPLOYMENTS)
def test_workers_get_whole_gpu_nodes_one_per_node(target: str) -> None:
    objs = render(target)
    worker = find(objs, "DaemonSet", "aiperf-worker")
    spec = pod_spec(worker)
    (container,) = spec["containers"]
    gpus = container["resources"]["limits"]["nvidia.com/gpu"]
    assert isinstance(gpus, int) and gpus >= 1
    assert spec["nodeSelector"] == {"aiperf/worker": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])


def _worker_grace_s() -> int:
    worker = yaml.safe_load((K8S / "base" / "worker.yaml").read_text())
    return int(pod_spec(worker)["terminationGracePeriodSeconds"])


def test_worker_grace_period_covers_its_stop_and_last_report() -> None:
    # On SIGTERM the worker stops within a batch, then the outbox flushes its last
    # report for at most Outbox.close's timeout: the grace must cover that, plus a batch.
    import inspect

    from worker.agent import Outbox

    flush_s = inspect.signature(Outbox.close).parameters["timeout_s"].default
    assert _worker_grace_s() >= flush_s + 30


def test_worker_liveness_probe_reaches_its_health_endpoint() -> None:
    from worker.health import HEALTH_PATH

    worker = yaml.safe_load((K8S / "base" / "worker.yaml").read_text())
    (container,) = pod_spec(worker)["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert int(env["AIPERF_WORKER_HEALTH_PORT"]) == ports["health"]  # what `aiperf worker` serves on
    probe = container["livenessProbe"]
    assert probe["httpGet"] == {"path": HEALTH_PATH, "port": "health"}
    # the worker answers 503 after 60 s without a heartbeat-loop turn; the kubelet restarts it only
    # after failing longer than that, so one slow turn does not restart it
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 60
    assert probe["timeoutSeconds"] < probe["periodSeconds"]


@needs_kubectl
@pytest.mark.parametrize("target", GPU_DEPLOYMENTS)
def test_workers_are_never_restarted_by_a_rollout_and_have_bounded_resources(target: str) -> None:
    worker = find(render(target), "DaemonSet", "aiperf-worker")
    # A RollingUpdate restarts every worker, each cutting the model it trains.
    assert worker["spec"]["updateStrategy"] == {"type": "OnDelete"}
    (container,) = pod_spec(worker)["containers"]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert {"cpu", "memory"} <= set(requests) and {"cpu", "memory"} <= set(limits)
    # Memory limit = request: never OOM-killed for memory the scheduler did not reserve.
    assert limits["memory"] == requests["memory"]
    assert int(limits["cpu"]) >= int(requests["cpu"])


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS + JOBS)
def test_nothing_but_workers_requests_gpus(target: str) -> None:
    for obj in workloads(render(target)):
        for c in containers(obj):
            if obj["metadata"]["name"] == "aiperf-worker" and target in GPU_DEPLOYMENTS:
                continue
            if target in ("jobs/audit", "jobs/node-audit"):  # one GPU: the audits time training steps there
                assert str(gpu_limit(c)) == "1", f"k8s/{target}: {gpu_limit(c)}"
                continue
            assert gpu_limit(c) is None, f"k8s/{target}: {obj['metadata']['name']} requests GPUs"


@needs_kubectl
@pytest.mark.parametrize("target", ["base", "overlays/external-db"])
def test_master_and_database_stay_off_gpu_nodes(target: str) -> None:
    objs = render(target)
    placed = [find(objs, "Deployment", "aiperf-master")]
    placed += [o for o in objs if o["kind"] == "StatefulSet"]
    for obj in placed:
        terms = pod_spec(obj)["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        # Every term (they are ORed) must exclude worker nodes.
        for term in terms:
            exprs = {(e["key"], e["operator"]) for e in term["matchExpressions"]}
            assert ("aiperf/worker", "DoesNotExist") in exprs
            assert ("nvidia.com/gpu.present", "DoesNotExist") in exprs


# --------------------------------------------------------------------------- master


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS)
def test_master_is_single_with_grpc_probes_and_service(target: str) -> None:
    objs = render(target)
    master = find(objs, "Deployment", "aiperf-master")
    # Two masters on one database would both hand out work.
    assert master["spec"]["replicas"] == 1
    assert master["spec"]["strategy"]["type"] == "Recreate"
    (container,) = pod_spec(master)["containers"]
    args = container["args"]
    assert args[:2] == ["master", "serve"]
    grpc_port = int(option_value(args, "--port"))
    metrics_port = int(option_value(args, "--metrics-port"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": grpc_port, "metrics": metrics_port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc_port, probe

    service = find(objs, "Service", "aiperf-master")
    labels = master["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert master["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service_ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert service_ports == {"grpc": (grpc_port, "grpc"), "metrics": (metrics_port, "metrics")}
    annotations = master["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(metrics_port)


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS)
def test_master_address_in_config_reaches_the_master_service(target: str) -> None:
    objs = render(target)
    config = find(objs, "ConfigMap", "aiperf-config")["data"]
    host, port = config["AIPERF_MASTER"].rsplit(":", 1)
    service = find(objs, "Service", "aiperf-master")
    assert host == service["metadata"]["name"]
    assert int(port) in {p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc"}


@needs_kubectl
@pytest.mark.parametrize("target", ["base", "overlays/smoke"])
def test_in_cluster_postgres_has_storage_probes_and_matching_url(target: str) -> None:
    objs = render(target)
    db = find(objs, "StatefulSet", "aiperf-postgres")
    (container,) = pod_spec(db)["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"][0] == "pg_isready"
    (claim,) = db["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = {e["name"]: e for e in container["env"]}
    assert env["PGDATA"]["value"].startswith(mounts[claim["metadata"]["name"]] + "/")
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "aiperf-db",
        "key": "postgres-password",
    }
    # The URL the docs tell the operator to store must point at this service and user.
    service = find(objs, "Service", "aiperf-postgres")
    assert service["spec"]["ports"][0]["port"] == 5432
    doc = (ROOT / "docs" / "deploy.md").read_text()
    expected = (
        f"postgresql+psycopg://{env['POSTGRES_USER']['value']}:${{DB_PASSWORD}}"
        f"@{service['metadata']['name']}:5432/{env['POSTGRES_DB']['value']}"
    )
    assert expected in doc
    policy = find(objs, "NetworkPolicy", "aiperf-postgres")
    assert policy["spec"]["podSelector"]["matchLabels"] == db["spec"]["selector"]["matchLabels"]


@needs_kubectl
def test_external_db_overlay_has_no_database_but_the_master_url() -> None:
    objs = render("overlays/external-db")
    assert not [o for o in objs if "postgres" in o["metadata"]["name"]]
    master = find(objs, "Deployment", "aiperf-master")
    (container,) = pod_spec(master)["containers"]
    env = {e["name"]: e for e in container["env"]}
    # The URL holds the password: from the Secret, through the environment only.
    assert "--db" not in container["args"]
    assert env["AIPERF_DB"]["valueFrom"]["secretKeyRef"] == {"name": "aiperf-db", "key": "url"}


# --------------------------------------------------------------------------- workers


@needs_kubectl
@pytest.mark.parametrize("target", GPU_DEPLOYMENTS)
def test_worker_mounts_dataset_read_only_and_trains_on_it(target: str) -> None:
    objs = render(target)
    worker = find(objs, "DaemonSet", "aiperf-worker")
    spec = pod_spec(worker)
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "dataset"]
    assert mount["readOnly"] is True
    assert volumes["dataset"]["persistentVolumeClaim"]["readOnly"] is True
    config = find(objs, "ConfigMap", "aiperf-config")["data"]
    assert config["AIPERF_DATASET"].startswith(mount["mountPath"] + "/")
    assert config["AIPERF_DATASET_FORMAT"] == "imagenet-tfrecord"
    assert config["AIPERF_RUN_PROFILE"] == "official"
    assert option_value(container["args"], "--dataset") == "$(AIPERF_DATASET)"
    # A restarted pod comes back as the same worker: named after its node.
    name = {e["name"]: e for e in container["env"]}["AIPERF_WORKER_NAME"]
    assert name["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # NCCL between local GPUs needs a /dev/shm larger than the runtime default.
    shm = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert shm and volumes[shm[0]["name"]]["emptyDir"]["medium"] == "Memory"


@needs_kubectl
@pytest.mark.parametrize("target", GPU_DEPLOYMENTS)
def test_workers_share_one_read_write_many_checkpoint_store(target: str) -> None:
    objs = render(target)
    claim = find(objs, "PersistentVolumeClaim", "aiperf-checkpoints")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # every worker node mounts it read-write
    spec = pod_spec(find(objs, "DaemonSet", "aiperf-worker"))
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "checkpoints"]
    assert not mount.get("readOnly") and volumes["checkpoints"]["persistentVolumeClaim"] == {
        "claimName": "aiperf-checkpoints"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AIPERF_CHECKPOINTS"] == mount["mountPath"]  # `aiperf worker --checkpoints` reads it


@needs_kubectl
def test_smoke_workers_keep_their_checkpoints_in_the_pod() -> None:
    objs = render("overlays/smoke")
    assert not [o for o in objs if o["kind"] == "PersistentVolumeClaim"]  # kind/minikube have no RWX storage
    spec = pod_spec(find(objs, "DaemonSet", "aiperf-worker"))
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["checkpoints"] == {"name": "checkpoints", "emptyDir": {}}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {m["mountPath"] for m in container["volumeMounts"] if m["name"] == "checkpoints"} == {
        env["AIPERF_CHECKPOINTS"]}


@needs_kubectl
def test_smoke_overlay_is_cpu_only_on_the_builtin_dataset() -> None:
    objs = render("overlays/smoke")
    config = find(objs, "ConfigMap", "aiperf-config")["data"]
    assert config["AIPERF_RUN_PROFILE"] == "smoke"
    assert config["AIPERF_DATASET_FORMAT"] == "digits"
    worker = find(objs, "DaemonSet", "aiperf-worker")
    spec = pod_spec(worker)
    (container,) = spec["containers"]
    assert gpu_limit(container) is None
    assert "tolerations" not in spec
    assert "--dataset" not in container["args"]
    assert option_value(container["args"], "--dataset-format") == "$(AIPERF_DATASET_FORMAT)"
    assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert all(m["mountPath"] != "/data" for m in container["volumeMounts"])
    # A one-node cluster must be able to hold master, database and a worker.
    for obj in workloads(objs):
        assert "affinity" not in pod_spec(obj), obj["metadata"]["name"]


# --------------------------------------------------------------------------- wiring


def _job_config() -> dict[str, str]:
    return find(render("base"), "ConfigMap", "aiperf-config")["data"]


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS + JOBS)
def test_every_reference_resolves(target: str) -> None:
    objs = render(target)
    configs = {o["metadata"]["name"]: o["data"] for o in objs if o["kind"] == "ConfigMap"}
    if target in JOBS:
        # Jobs run against a deployment applied before them.
        configs = {"aiperf-config": _job_config()}
    claims = {o["metadata"]["name"] for o in objs if o["kind"] == "PersistentVolumeClaim"}
    if target in JOBS:  # ... and may mount the claims that deployment creates (the checkpoints')
        claims |= {o["metadata"]["name"] for o in render("base") if o["kind"] == "PersistentVolumeClaim"}
    for obj in workloads(objs):
        spec = pod_spec(obj)
        volume_names = {v["name"] for v in spec.get("volumes", [])}
        volume_names |= {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        for c in containers(obj):
            where = f"k8s/{target}: {obj['metadata']['name']}/{c['name']}"
            env = c.get("env", [])
            defined = {e["name"] for e in env}
            for e in env:
                ref = e.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    assert r["key"] in configs[r["name"]], f"{where}: {r}"
                if "secretKeyRef" in ref:
                    r = ref["secretKeyRef"]
                    assert r["key"] in SECRETS.get(r["name"], set()), f"{where}: {r}"
            # Kubernetes leaves an undefined $(VAR) in args as literal text.
            for arg in c.get("args", []) + c.get("command", []):
                for var in re.findall(r"\$\((\w+)\)", arg):
                    assert var in defined, f"{where}: $({var}) is not defined"
            for m in c.get("volumeMounts", []):
                assert m["name"] in volume_names, f"{where}: volume {m['name']}"
        for v in spec.get("volumes", []):
            claim = v.get("persistentVolumeClaim", {}).get("claimName")
            # The dataset claim is the operator's (docs/deploy.md shows how).
            assert claim is None or claim in claims or claim == "aiperf-dataset", claim


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS + JOBS)
def test_no_plaintext_secrets_in_rendered_output(target: str) -> None:
    objs = render(target)
    assert not [o for o in objs if o["kind"] == "Secret"], "Secrets are created out of band"
    for obj in objs:
        for text in walk_strings(obj):
            assert not URL_WITH_PASSWORD.search(text), f"credential in {obj['kind']}: {text}"
        if obj["kind"] == "ConfigMap":
            assert not [k for k in obj["data"] if SECRETISH.search(k)]
    for obj in workloads(objs):
        for c in containers(obj):
            for e in c.get("env", []):
                if SECRETISH.search(e["name"]):
                    assert "value" not in e and "secretKeyRef" in e["valueFrom"], e
            # A token on a command line shows in `ps` and in the pod spec.
            assert "--token" not in c.get("args", []) + c.get("command", [])


@needs_kubectl
@pytest.mark.parametrize("target", DEPLOYMENTS + JOBS)
def test_images_pinned_and_pods_non_root(target: str) -> None:
    version = package_version()
    for obj in workloads(render(target)):
        spec = pod_spec(obj)
        pod_sc = spec.get("securityContext", {})
        assert spec.get("automountServiceAccountToken") is False
        for c in containers(obj):
            where = f"k8s/{target}: {obj['metadata']['name']}/{c['name']}"
            name, _, tag = c["image"].rpartition(":")
            assert name and tag and tag != "latest" and "/" not in tag, f"{where}: {c['image']}"
            if name in ("aiperf-master", "aiperf-worker"):
                assert tag == version, f"{where}: image tag {tag} != package version {version}"
            sc = {**pod_sc, **c.get("securityContext", {})}
            assert sc.get("runAsNonRoot") is True, where
            assert sc.get("runAsUser", 0) > 0, where
            if name.startswith("aiperf-"):
                assert sc["runAsUser"] == IMAGE_UID, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where


@needs_kubectl
@pytest.mark.parametrize("target", JOBS)
def test_jobs_run_the_control_commands_once(target: str) -> None:
    (job,) = render(target)
    assert job["kind"] == "Job"
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["AIPERF_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "admin-token"
    assert env["AIPERF_MASTER"]["valueFrom"]["configMapKeyRef"]["key"] == "AIPERF_MASTER"
    if target == "jobs/start-run":
        assert container["args"][0] == "start"
        assert option_value(container["args"], "--duration") == "$(AIPERF_RUN_DURATION)"
        assert option_value(container["args"], "--profile") == "$(AIPERF_RUN_PROFILE)"
        assert option_value(container["args"], "--min-workers") == "$(AIPERF_RUN_MIN_WORKERS)"
        assert option_value(container["args"], "--precision") == "$(AIPERF_RUN_PRECISION)"
        config = _job_config()
        assert config["AIPERF_RUN_DURATION"] == "1h" and config["AIPERF_RUN_PRECISION"] == "mixed_fp16"
    elif target == "jobs/audit":
        # the worker image (TensorFlow), the workers' dataset and checkpoint store, read-only, on a
        # worker node (one GPU, checked above)
        assert container["args"][0] == "audit" and container["image"].startswith("aiperf-worker")
        assert option_value(container["args"], "--dataset") == "$(AIPERF_DATASET)"
        assert option_value(container["args"], "--dataset-format") == "$(AIPERF_DATASET_FORMAT)"
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "dataset"]
        assert mount["readOnly"] is True and _job_config()["AIPERF_DATASET"].startswith(mount["mountPath"] + "/")
        worker = find(render("base"), "DaemonSet", "aiperf-worker")
        (wc,) = pod_spec(worker)["containers"]
        store = {e["name"]: e.get("value") for e in wc["env"]}["AIPERF_CHECKPOINTS"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "checkpoints"]
        assert mount["mountPath"] == store and mount["readOnly"] is True
        (volume,) = [v for v in spec["volumes"] if v["name"] == "checkpoints"]
        assert volume["persistentVolumeClaim"]["claimName"] == "aiperf-checkpoints"
        assert spec["nodeSelector"] == pod_spec(worker)["nodeSelector"]
    elif target == "jobs/node-audit":
        # one pod per worker node, naming the node its worker registered under (the worker's name)
        assert container["args"][:3] == ["audit", "--node", "$(AIPERF_NODE_NAME)"]
        assert env["AIPERF_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        worker = find(render("base"), "DaemonSet", "aiperf-worker")
        (wc,) = pod_spec(worker)["containers"]
        names = {e["name"]: e for e in wc["env"]}
        assert names["AIPERF_WORKER_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert spec["nodeSelector"] == pod_spec(worker)["nodeSelector"]
        assert job["spec"]["completionMode"] == "Indexed"
        assert job["spec"]["completions"] == job["spec"]["parallelism"]
        (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"].items() <= spec_labels(job).items()
    else:
        # waits for the run's end, writes the report to the workers' shared claim, prints the scoreboard
        assert container["args"][:2] == ["wait", "--scoreboard"]
        (mount,) = container["volumeMounts"]
        assert option_value(container["args"], "--report") == mount["mountPath"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == "aiperf-checkpoints"
        from aiperf_cli.options import ExitCode

        # an invalid run (5) and a timeout (6) are answers, not failures to retry
        assert failure_action(job, container["name"], ExitCode.INVALID) == "FailJob"
        assert failure_action(job, container["name"], ExitCode.TIMEOUT) == "FailJob"
    # By the CLI's exit codes: a master that is not up yet (3) is retried; bad input (2)
    # and a refusal (4: "a run is already going") are final, so no second run starts.
    from aiperf_cli.options import ExitCode

    assert failure_action(job, container["name"], ExitCode.UNAVAILABLE) == "Count"
    assert failure_action(job, container["name"], ExitCode.BAD_INPUT) == "FailJob"
    assert failure_action(job, container["name"], ExitCode.REFUSED) == "FailJob"
    assert job["spec"]["backoffLimit"] >= 3
    drained = [r for r in job["spec"]["podFailurePolicy"]["rules"] if "onPodConditions" in r]
    assert drained == [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]


def spec_labels(job: dict[str, Any]) -> dict[str, str]:
    return job["spec"]["template"]["metadata"]["labels"]


def failure_action(job: dict[str, Any], container: str, exit_code: int) -> str:
    """What a Job's podFailurePolicy does with a pod whose `container` exited with
    `exit_code`: the first matching exit-code rule's action (Kubernetes' order), else
    Count (the default: retried until backoffLimit)."""
    for rule in job["spec"].get("podFailurePolicy", {}).get("rules", []):
        match = rule.get("onExitCodes")
        if match is None or match.get("containerName", container) != container:
            continue
        inside = int(exit_code) in match["values"]
        if inside == (match["operator"] == "In"):
            return rule["action"]
    return "Count"


def test_failure_action_follows_kubernetes_rule_order() -> None:
    job = {"spec": {"podFailurePolicy": {"rules": [
        {"action": "Ignore", "onExitCodes": {"containerName": "other", "operator": "In", "values": [5]}},
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [3, 5]}},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [1]}},
    ]}}}
    assert failure_action(job, "start", 1) == "FailJob"  # the first match wins
    assert failure_action(job, "start", 3) == "Count"    # no rule: the default
    assert failure_action(job, "start", 5) == "Count"    # the Ignore rule is another container's
    assert failure_action(job, "other", 5) == "Ignore"


# --------------------------------------------------------------------------- CLI


def _cli_commands() -> dict[str, Any]:
    """The real (click) commands of `aiperf`, by their command path."""
    import typer

    from aiperf_cli.main import app

    root = typer.main.get_command(app)
    found: dict[str, Any] = {}

    # Typer vendors click in recent releases: groups are recognised by shape.
    def visit(cmd: Any, path: tuple[str, ...]) -> None:
        found[" ".join(path)] = cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            visit(sub, path + (name,))

    visit(root, ())
    return found


# Read by the master's own code (master/rpc/tokens.py), not through a CLI option.
MASTER_ENV = {"AIPERF_TOKEN", "AIPERF_ADMIN_TOKEN"}


def _assert_cli_accepts(
    commands: dict[str, Any], args: list[str], where: str, env: set[str] = frozenset()
) -> None:
    words = []
    for arg in args:
        if arg.startswith("-") or " ".join(words + [arg]) not in commands:
            break
        words.append(arg)
    path = " ".join(words)
    cmd = commands.get(path)
    assert path and cmd is not None and not hasattr(cmd, "commands"), (
        f"{where}: `aiperf {' '.join(args)}` names no aiperf command"
    )
    known = {opt for p in cmd.params for opt in p.opts + p.secondary_opts}
    for arg in args[len(words):]:
        if arg.startswith("--"):
            assert arg.split("=", 1)[0] in known, f"{where}: `aiperf {path}` has no option {arg}"
    # Every AIPERF_* variable given to the command must be read by it: an option's
    # envvar, a $(VAR) of the arguments, or the master's token variables.
    envvars = set()
    for p in cmd.params:
        envvars |= {p.envvar} if isinstance(p.envvar, str) else set(p.envvar or ())
    substituted = {v for a in args for v in re.findall(r"\$\((\w+)\)", a)}
    auth_source = (ROOT / "master" / "rpc" / "tokens.py").read_text()
    for name in sorted(v for v in env if v.startswith("AIPERF_")):
        if name in envvars or name in substituted:
            continue
        assert path == "master serve" and name in MASTER_ENV and f'"{name}"' in auth_source, (
            f"{where}: `aiperf {path}` never reads {name}"
        )


def test_manifests_and_launcher_run_real_cli_commands() -> None:
    commands = _cli_commands()
    invocations: list[tuple[str, list[str]]] = []
    if KUBECTL is not None:
        for target in DEPLOYMENTS + JOBS:
            for obj in workloads(render(target)):
                for c in containers(obj):
                    if c["image"].startswith("aiperf-"):
                        env = {e["name"] for e in c.get("env", [])}
                        invocations.append((f"k8s/{target}: {obj['metadata']['name']}", c["args"], env))
    sbatch_env = _sbatch_env(dataset=True) | {"AIPERF_TOKEN": "t"}
    sbatch_args = _run_sbatch(sbatch_env)[1]
    invocations.append(("slurm/aiperf-workers.sbatch", sbatch_args, set(sbatch_env)))
    for where, args, env in invocations:
        _assert_cli_accepts(commands, args, where, env)


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """What the kubelet does with $(VAR) in a container's args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def _container_env(container: dict[str, Any], config: dict[str, str], secrets: dict[str, str]) -> dict[str, str]:
    env = {}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {})
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "configMapKeyRef" in ref:
            env[e["name"]] = config[ref["configMapKeyRef"]["key"]]
        elif "secretKeyRef" in ref:
            env[e["name"]] = secrets[ref["secretKeyRef"]["key"]]
    return env


@needs_kubectl
@pytest.mark.slow
def test_deployed_commands_serve_health_metrics_and_control_runs(tmp_path: Path) -> None:
    """The master and the two Jobs, run with their manifests' exact environment and
    arguments (ports and data directory remapped to this machine), work together:
    the unauthenticated gRPC health check the probes use answers SERVING, metrics
    are served, the start Job against a master not up yet exits 3 (which the
    Job's failure policy retries), then starts a run; a second start is refused
    with exit code 4 (which the policy treats as final), and the scoreboard Job
    prints the run."""
    import urllib.request

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    secrets = {
        "worker-token": "w-" + os.urandom(8).hex(),
        "admin-token": "a-" + os.urandom(8).hex(),
        "url": f"sqlite:///{tmp_path / 'master.db'}",
        "postgres-password": "unused",
    }
    objs = render("base")
    config = dict(find(objs, "ConfigMap", "aiperf-config")["data"])
    (master,) = pod_spec(find(objs, "Deployment", "aiperf-master"))["containers"]
    grpc_port, metrics_port = free_port(), free_port()
    args = _expand(master["args"], _container_env(master, config, secrets))
    args[args.index("--port") + 1] = str(grpc_port)
    args[args.index("--metrics-port") + 1] = str(metrics_port)
    args[args.index("--data-dir") + 1] = str(tmp_path / "data")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AIPERF_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiperf_cli", *args],
        env=base_env | _container_env(master, config, secrets),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            status = None
            for _ in range(120):
                assert proc.poll() is None, proc.stdout.read()
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1).status
                    break
                except grpc.RpcError:
                    import time

                    time.sleep(0.25)
            assert status == health_pb2.HealthCheckResponse.SERVING
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            assert resp.status == 200 and b"aiperf_workers_alive" in resp.read()

        config["AIPERF_MASTER"] = f"127.0.0.1:{grpc_port}"

        def job(target: str) -> subprocess.CompletedProcess:
            (container,) = pod_spec(render(target)[0])["containers"]
            env = _container_env(container, config, secrets)
            args = _expand(container["args"], env)
            if "--report" in args:  # the claim's mount, here
                args[args.index("--report") + 1] = str(tmp_path)
            return subprocess.run(
                [sys.executable, "-m", "aiperf_cli", *args],
                env=base_env | env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
            )

        start_job = render("jobs/start-run")[0]
        config["AIPERF_MASTER"] = f"127.0.0.1:{free_port()}"  # the master not up yet: retried
        early = job("jobs/start-run")
        assert early.returncode == 3 and "unreachable" in early.stderr, early.stderr
        assert failure_action(start_job, "start", early.returncode) == "Count"
        config["AIPERF_MASTER"] = f"127.0.0.1:{grpc_port}"
        first = job("jobs/start-run")
        assert first.returncode == 0, first.stderr
        assert "official" in first.stdout
        again = job("jobs/start-run")  # refused by the master: final
        assert again.returncode == 4 and again.stderr.startswith("aiperf: error:"), again.stderr
        assert "active" in again.stderr and failure_action(start_job, "start", again.returncode) == "FailJob"
        stop = subprocess.run([sys.executable, "-m", "aiperf_cli", "stop", "--abort"], capture_output=True,
                              env=base_env | {"AIPERF_MASTER": config["AIPERF_MASTER"],
                                              "AIPERF_ADMIN_TOKEN": secrets["admin-token"]}, timeout=60)
        assert stop.returncode == 0, stop.stderr
        board = job("jobs/scoreboard")  # waits for the run's end: aborted at once, invalid
        assert board.returncode == 5 and "run 1 aborted and is not valid" in board.stderr, board.stderr
        # the headline names the precision: the base config's official mixed_fp16, with XLA
        assert "run 1 (official, mixed_fp16, XLA)" in board.stdout and "Validity checklist" in board.stdout
        assert (tmp_path / "aiperf-run-1.html").read_text().startswith("<!DOCTYPE html>")
        assert board.stdout.strip().splitlines()[-1].startswith("AIPERF_RESULT run_id=1 ")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


# --------------------------------------------------------------------------- images


def dockerfile(path: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (ROOT / path).read_text()
    logical, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{path}: dangling line continuation"
    out = []
    for line in logical:
        instruction, _, rest = line.strip().partition(" ")
        out.append((instruction.upper(), rest.strip()))
    return out


DOCKERFILES = ["master/Dockerfile", "worker/Dockerfile"]
INSTALL_SCRIPT = ROOT / "docker" / "install.sh"  # the build steps both images share


def install_target(path: str) -> str:
    """What the Dockerfile's one run of docker/install.sh hands to `pip install`."""
    (run,) = [rest for ins, rest in dockerfile(path) if ins == "RUN"]
    command = shlex.split(run)
    assert command[:2] == ["sh", "install.sh"] and len(command) == 3, f"{path}: RUN {run}"
    return command[2]


def test_shared_install_script_installs_its_argument() -> None:
    text = INSTALL_SCRIPT.read_text()
    assert subprocess.run(["sh", "-n", str(INSTALL_SCRIPT)], capture_output=True).returncode == 0
    assert 'target="$1"' in text and re.search(r'pip install --constraint "\$constraints" "\$target"$', text, re.M)
    assert "--uid 10001" in text and text.rstrip().endswith('rm -rf /src "$constraints"')


@pytest.mark.parametrize("path", DOCKERFILES)
def test_dockerfile_base_image_pinned(path: str) -> None:
    froms = [rest.split()[0] for ins, rest in dockerfile(path) if ins == "FROM"]
    assert froms
    for image in froms:
        assert "$" not in image, f"{path}: base image from a build argument: {image}"
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert name and tag and tag != "latest" and "/" not in tag, f"{path}: unpinned {image}"


def test_master_image_is_slim_and_worker_image_has_tensorflow_gpu() -> None:
    master = dockerfile("master/Dockerfile")
    (master_base,) = [rest.split()[0] for ins, rest in master if ins == "FROM"]
    assert master_base.startswith("python:") and "slim" in master_base
    assert install_target("master/Dockerfile") == "."  # base install: no TensorFlow

    worker = dockerfile("worker/Dockerfile")
    (worker_base,) = [rest.split()[0] for ins, rest in worker if ins == "FROM"]
    name, _, tag = worker_base.rpartition(":")
    assert name == "tensorflow/tensorflow" and tag.endswith("-gpu")
    assert install_target("worker/Dockerfile") == ".[worker]"
    # The base image's TensorFlow must satisfy the worker extra, or pip replaces it
    # with a build that does not match the image's CUDA.
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    (bound,) = re.findall(r"^tensorflow>=([\d.]+)$", cfg["options.extras_require"]["worker"], re.M)
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(tag.removesuffix("-gpu")) >= as_tuple(bound)


@pytest.mark.parametrize("path", DOCKERFILES)
def test_dockerfile_entrypoint_is_the_aiperf_console_script(path: str) -> None:
    (entrypoint,) = [rest for ins, rest in dockerfile(path) if ins == "ENTRYPOINT"]
    assert yaml.safe_load(entrypoint) == ["aiperf"]  # exec form: signals reach aiperf
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    scripts = dict(
        line.split("=", 1) for line in cfg["options.entry_points"]["console_scripts"].split("\n") if line
    )
    scripts = {k.strip(): v.strip() for k, v in scripts.items()}
    module, _, func = scripts["aiperf"].partition(":")
    source = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(source.read_text())
    assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("path", DOCKERFILES)
def test_dockerfile_runs_as_numeric_non_root_user(path: str) -> None:
    instructions = dockerfile(path)
    users = [i for i, (ins, _) in enumerate(instructions) if ins == "USER"]
    assert users, f"{path}: no USER"
    # Kubernetes' runAsNonRoot can only verify a numeric UID.
    uid = instructions[users[-1]][1].split(":")[0]
    assert uid.isdigit() and int(uid) == IMAGE_UID
    assert [ins for ins, _ in instructions[users[-1]:] if ins in ("RUN", "COPY", "ADD")] == []


@pytest.mark.parametrize("path", DOCKERFILES)
def test_dockerfile_bakes_in_no_secrets(path: str) -> None:
    instructions = dockerfile(path)
    for ins, rest in instructions:
        if ins in ("ENV", "ARG"):
            names = re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)(?==|\s|$)", rest)
            assert names, rest
            assert not [n for n in names if SECRETISH.search(n)], f"{path}: {ins} {rest}"
        if ins in ("COPY", "ADD"):
            sources = [s for s in rest.split()[:-1] if not s.startswith("--")]
            for src in sources:
                # Only named package sources, never the whole context.
                assert src not in (".", "./", "*"), f"{path}: copies the whole build context"
                assert (ROOT / src).exists(), f"{path}: COPY source {src} does not exist"
                assert not SECRETISH.search(src) and not src.endswith((".pem", ".key", ".env"))
    ignored = (ROOT / ".dockerignore").read_text().split()
    for pattern in (".git", ".venv", "**/*.db", "**/.env", "**/*.pem", "**/*.key"):
        assert pattern in ignored


@pytest.mark.parametrize("path", DOCKERFILES)
def test_image_build_context_installs_a_complete_package(path: str, tmp_path: Path) -> None:
    """`pip install .` on exactly what the Dockerfile copies yields every module.

    The development install is editable, so a module or data file missing from
    the package would only show inside the images.
    """
    src = tmp_path / "src"
    src.mkdir()
    copied: list[Path] = []
    for ins, rest in dockerfile(path):
        if ins != "COPY":
            continue
        *sources, dest = [s for s in rest.split() if not s.startswith("--")]
        for source in sources:
            target = src / dest / Path(source).name if dest.endswith("/") else src / dest
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / source, target)
            copied.append(target)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheel"), str(src)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert re.search(r"^aiperf = aiperf_cli\.main:main$", entry_points, re.M)
    assert any(n.endswith("LICENSE") and ".dist-info/" in n for n in names), f"{path}: no LICENSE in the wheel"
    for package in ("aiperf", "aiperf_cli", "master", "worker"):
        files = [
            p.relative_to(src).as_posix()
            for p in (src / package).rglob("*")
            if p.is_file() and p.name != "Dockerfile" and "__pycache__" not in p.parts
        ]
        assert f"{package}/__init__.py" in files
        assert not sorted(set(files) - names), f"{path}: the image would lack these files"


def test_master_image_exposes_the_ports_the_manifests_use() -> None:
    exposed = {
        int(p) for ins, rest in dockerfile("master/Dockerfile") if ins == "EXPOSE" for p in rest.split()
    }
    if KUBECTL is None:
        pytest.skip("kubectl is not installed: cannot render k8s/")
    master = find(render("base"), "Deployment", "aiperf-master")
    (container,) = pod_spec(master)["containers"]
    assert exposed == {p["containerPort"] for p in container["ports"]}


# --------------------------------------------------------------------------- SLURM

SBATCH = ROOT / "slurm" / "aiperf-workers.sbatch"
FAKE_SRUN = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/srun.args"
while [[ "$1" == -* ]]; do shift; done
exec "$@"
"""
FAKE_AIPERF = """#!/bin/bash
printf '%s\\n' "$@" > "$FAKE_LOG/aiperf.args"
printf '%s\\n' "master=$AIPERF_MASTER" "token=${AIPERF_TOKEN:-}" > "$FAKE_LOG/aiperf.env"
"""


def test_sbatch_script_parses_and_starts_one_worker_per_node() -> None:
    text = SBATCH.read_text()
    assert subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True).returncode == 0
    assert "#SBATCH --ntasks-per-node=1" in text
    assert os.stat(SBATCH).st_mode & stat.S_IXUSR
    srun_lines = [line for line in text.replace("\\\n", " ").splitlines() if line.strip().startswith("srun ")]
    (srun,) = srun_lines
    assert "--ntasks-per-node=1" in srun.split()
    assert re.search(r"\baiperf \"\$\{worker_args\[@\]\}\"", srun)
    # SIGTERM reaches the workers (not only the batch shell: no "B:") before the limit,
    # with at least the time the worker needs to stop and report (the k8s grace period).
    (signal_line,) = re.findall(r"^#SBATCH --signal=(\S+)$", text, re.M)
    match = re.fullmatch(r"TERM@(\d+)", signal_line)
    assert match and int(match.group(1)) >= _worker_grace_s()


def _sbatch_env(dataset: bool) -> dict[str, str]:
    env = {"PATH": os.environ["PATH"], "AIPERF_MASTER": "master.example:50051", "SLURM_JOB_ID": "77",
           "HOME": "/home/tester"}
    if dataset:
        env |= {"AIPERF_DATASET": "/scratch/imagenet", "AIPERF_DATASET_FORMAT": "imagenet-folder"}
    return env


def _run_sbatch(
    env: dict[str, str], tmp_path: Path | None = None
) -> tuple[subprocess.CompletedProcess, list[str], list[str], str]:
    """Run the script with stand-ins for srun and aiperf that record what they got."""
    import tempfile

    tmp = Path(tempfile.mkdtemp()) if tmp_path is None else tmp_path
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("srun", FAKE_SRUN), ("aiperf", FAKE_AIPERF)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}", "FAKE_LOG": str(tmp)}
    proc = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, timeout=30)
    read = lambda n: (tmp / n).read_text().splitlines() if (tmp / n).exists() else []  # noqa: E731
    return proc, read("aiperf.args"), read("srun.args"), "\n".join(read("aiperf.env"))


def test_sbatch_starts_workers_against_the_master_with_token_from_file(tmp_path: Path) -> None:
    token_file = tmp_path / "worker-token"
    token_file.write_text("s3cret-worker-token\n")
    env = _sbatch_env(dataset=True) | {"AIPERF_TOKEN_FILE": str(token_file), "SLURM_JOB_NUM_NODES": "4",
                                       "AIPERF_CHECKPOINTS": "/shared/ckpt"}
    proc, args, srun_args, seen_env = _run_sbatch(env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--ntasks-per-node=1" in srun_args and "--nodes=4" in srun_args
    assert args == [
        "worker", "--master", "master.example:50051", "--exit-when-done", "--checkpoints", "/shared/ckpt",
        "--dataset", "/scratch/imagenet", "--dataset-format", "imagenet-folder",
    ]
    # The token reaches the worker through its environment, not its command line.
    assert "token=s3cret-worker-token" in seen_env.splitlines()
    assert not [a for a in args + srun_args if "s3cret" in a]


def test_sbatch_without_dataset_lets_the_worker_choose_and_uses_launcher(tmp_path: Path) -> None:
    env = _sbatch_env(dataset=False) | {"AIPERF_TOKEN": "tok", "AIPERF_LAUNCHER": "env"}
    proc, args, srun_args, seen_env = _run_sbatch(env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert srun_args[-len(args) - 2:] == ["env", "aiperf", *args]
    assert "--dataset" not in args and "--dataset-format" not in args
    assert "token=tok" in seen_env.splitlines()
    # no AIPERF_CHECKPOINTS: the store is in the (shared) home directory
    assert option_value(args, "--checkpoints") == "/home/tester/.aiperf/checkpoints"


@pytest.mark.parametrize(
    "missing, named",
    [("AIPERF_MASTER", "AIPERF_MASTER"), ("AIPERF_DATASET_FORMAT", "AIPERF_DATASET_FORMAT")],
)
def test_sbatch_refuses_to_start_on_incomplete_settings(missing: str, named: str, tmp_path: Path) -> None:
    # Checked before srun: a mistake costs seconds, not a whole allocation.
    env = _sbatch_env(dataset=True)
    del env[missing]
    proc, args, srun_args, _ = _run_sbatch(env, tmp_path)
    assert proc.returncode == 2
    assert named in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert srun_args == [] and args == []


# --------------------------------------------------------------------------- guide


def test_guide_covers_every_deployment_and_creates_the_secrets() -> None:
    doc = (ROOT / "docs" / "deploy.md").read_text()
    for target in DEPLOYMENTS + JOBS:
        assert f"k8s/{target}" in doc, target
    assert "slurm/aiperf-workers.sbatch" in doc
    for secret, keys in SECRETS.items():
        commands = [
            block
            for block in re.findall(r"kubectl[^\n]*create secret generic " + secret + r"(?:[^\n]*\\\n)*[^\n]*", doc)
        ]
        assert commands, f"docs/deploy.md never creates the Secret {secret}"
        created = set(re.findall(r"--from-(?:literal|file)=([\w-]+)=", " ".join(commands)))
        assert keys <= created, f"{secret}: docs create {created}, manifests need {keys}"
    assert "kubectl label node" in doc and "aiperf/worker=true" in doc
    assert "benchmarks/master_bench.py" in doc


# --------------------------------------------------------------------------- monitoring


def _exported_metric_names() -> set[str]:
    """Every series name the master's /metrics serves (counters with their _total)."""
    from master.observability.metrics import MasterMetrics

    names: set[str] = set()
    for family in MasterMetrics().registry.collect():
        names |= {sample.name for sample in family.samples}
        if family.type == "gauge":  # a labelled gauge has no sample until a label set is used
            names.add(family.name)
    return names


PROMQL_WORDS = {
    "max", "sum", "min", "avg", "count", "rate", "increase", "and", "or", "unless", "by", "without",
    "on", "ignoring", "up", "humanize", "humanize1024", "value", "job", "state", "run_id", "profile",
}


def _metric_names(expr: str) -> set[str]:
    """Identifiers in a PromQL expression that are not functions, keywords or labels."""
    expr = re.sub(r'\{[^}]*\}', "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr) if w not in PROMQL_WORDS}


@needs_kubectl
def test_monitoring_objects_are_well_formed_and_use_only_exported_metrics() -> None:
    objs = render("overlays/monitoring")
    base = {(o["kind"], o["metadata"]["name"]) for o in render("base")}
    added = [o for o in objs if (o["kind"], o["metadata"]["name"]) not in base]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in added) == [
        ("ConfigMap", "aiperf-grafana-dashboard"), ("PrometheusRule", "aiperf"), ("ServiceMonitor", "aiperf-master"),
    ]
    exported = _exported_metric_names()

    monitor = find(objs, "ServiceMonitor", "aiperf-master")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = find(objs, "Service", "aiperf-master")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"

    rule = find(objs, "PrometheusRule", "aiperf")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"AIPerfMasterDown", "AIPerfWorkerLost", "AIPerfNoProgress", "AIPerfFlopsMismatch", "AIPerfDatabaseErrors",
            "AIPerfRunInvalid"} <= set(alerts)
    for name, alert in alerts.items():
        assert set(alert) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert alert["labels"]["severity"] in {"warning", "critical"} and alert["annotations"]["summary"]
        if "for" in alert:
            assert re.fullmatch(r"\d+[smh]", alert["for"]), name
        unknown = _metric_names(alert["expr"]) - exported
        assert not unknown, f"{name} uses {unknown}, which master/observability/metrics.py does not export"

    import json

    dashboard = json.loads(find(objs, "ConfigMap", "aiperf-grafana-dashboard")["data"]["aiperf.json"])
    assert find(objs, "ConfigMap", "aiperf-grafana-dashboard")["metadata"]["labels"]["grafana_dashboard"] == "1"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs and len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for expr in exprs:
        unknown = _metric_names(expr) - exported
        assert not unknown, f"dashboard query {expr!r} uses {unknown}, which master/observability/metrics.py does not export"
    assert {"aiperf_run_flops", "aiperf_workers_alive"} <= {n for e in exprs for n in _metric_names(e)}


def test_promql_name_extraction_finds_an_unknown_metric() -> None:
    # The check above is only as good as this extraction.
    assert _metric_names('max(aiperf_run_running) == 1 and sum(increase(aiperf_nope_total{job="x"}[10m])) == 0') == {
        "aiperf_run_running", "aiperf_nope_total",
    }


# --------------------------------------------------------------------------- license


def test_license_file_is_the_apache_2_text_setup_cfg_declares() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["license"] == "Apache-2.0"
    assert cfg["metadata"]["license_files"].split() == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[:3] == ["Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/"]
    # all nine sections of the terms, then the appendix: the whole text, not an excerpt
    for n, title in enumerate(["Definitions.", "Grant of Copyright License.", "Grant of Patent License.",
                               "Redistribution.", "Submission of Contributions.", "Trademarks.",
                               "Disclaimer of Warranty.", "Limitation of Liability.",
                               "Accepting Warranty or Additional Liability."], start=1):
        assert f"{n}. {title}" in text, title
    assert "END OF TERMS AND CONDITIONS" in text and lines[-1] == "limitations under the License."
