"""deploy/kubernetes: kubeconform validates every manifest strictly against the Kubernetes API's JSON
schemas, and the manifests agree with each other and with the image (ports, labels, grace periods).

No network is needed: the schemas come from the kubernetes-validate package (a test dependency),
whose per-version "local" schemas refer to one shared definitions file; ``standalone_schemas`` writes
them out in the layout kubeconform reads. kubeconform itself is a Go module that `make deps` installs.
ServiceMonitor is a Prometheus Operator CRD with no schema there: kubeconform skips that kind
(`-skip ServiceMonitor`), and ``test_manifests_agree`` checks it against the Service it selects.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from grpc_servers import ROOT

MANIFESTS = ROOT / "deploy" / "kubernetes"
DOCKERFILE = ROOT / "deploy" / "container" / "Dockerfile"
KUBERNETES_VERSION = "1.33.0"
NO_SCHEMA = "ServiceMonitor"


def kubeconform_binary() -> str:
    for candidate in (ROOT / ".tools" / "bin" / "kubeconform", shutil.which("kubeconform")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("kubeconform is not installed: run `make deps` (or .ci/setup)", pytrace=False)


def documents() -> list[dict]:
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc)
    return docs


def schema_name(doc: dict) -> str:
    """kubeconform's file name for a kind: kind, then group and version (``deployment-apps-v1``)."""
    group, _, version = doc["apiVersion"].rpartition("/")
    parts = [doc["kind"].lower(), *([group.split(".")[0]] if group else []), version]
    return "-".join(parts)


@pytest.fixture(scope="module")
def schemas(tmp_path_factory) -> Path:
    import kubernetes_validate

    bundled = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    source = bundled / f"v{KUBERNETES_VERSION}-local-strict"
    root = tmp_path_factory.mktemp("schemas")
    target = root / f"v{KUBERNETES_VERSION}-standalone-strict"
    target.mkdir()
    shared = '"/api/_definitions.json#/'
    definitions = json.loads((source / "_definitions.json").read_text().replace(shared, '"#/'))["$defs"]
    for doc in documents():
        if doc["kind"] == NO_SCHEMA:
            continue
        name = schema_name(doc)
        schema = json.loads((source / f"{name}.json").read_text().replace(shared, '"#/'))
        schema["$defs"] = definitions
        (target / f"{name}.json").write_text(json.dumps(schema))
    return root


def kubeconform(schemas: Path, *paths: Path) -> tuple[int, dict]:
    location = str(schemas) + "/{{ .NormalizedKubernetesVersion }}-standalone{{ .StrictSuffix }}/"
    location += "{{ .ResourceKind }}{{ .KindSuffix }}.json"
    argv = [kubeconform_binary(), "-strict", "-summary", "-output", "json"]
    argv += ["-kubernetes-version", KUBERNETES_VERSION, "-schema-location", location, "-skip", NO_SCHEMA]
    done = subprocess.run([*argv, *map(str, paths)], capture_output=True, text=True, timeout=120, check=False)
    return done.returncode, json.loads(done.stdout)


def test_manifests_validate(schemas):
    code, report = kubeconform(schemas, MANIFESTS)
    assert code == 0, json.dumps(report, indent=2)
    summary = report["summary"]
    kinds = [doc["kind"] for doc in documents()]
    assert summary["valid"] == len(kinds) - kinds.count(NO_SCHEMA) and summary["skipped"] == 1, summary
    expected = {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", NO_SCHEMA}
    assert expected <= set(kinds)


def test_kubeconform_rejects_a_misspelt_field(schemas, tmp_path):
    """The validation is live: a field the API does not have fails it (strict mode)."""
    text = (MANIFESTS / "deployment.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "deployment.yaml"
    bad.write_text(text.replace("terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"))
    code, report = kubeconform(schemas, bad)
    assert code != 0 and report["summary"]["invalid"] == 1, report


def _by_kind(kind: str) -> list[dict]:
    return [doc for doc in documents() if doc["kind"] == kind]


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_manifests_agree():
    (deployment,) = _by_kind("Deployment")
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9090}

    # The drain fits inside the kubelet's grace: preStop sleep + --grace + the settle and the
    # transport's stop grace after the last session.
    from parsetier.service.server import STOP_GRACE, STOP_SETTLE

    grace = float(_flag(container["args"], "--grace"))
    pre_stop = float(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert pod["spec"]["terminationGracePeriodSeconds"] > pre_stop + grace + STOP_SETTLE + STOP_GRACE
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == ports["grpc"], probe
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > grace, "liveness would kill a drain"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    services = {s["metadata"]["name"]: s for s in _by_kind("Service")}
    assert services["parsetier-headless"]["spec"]["clusterIP"] == "None"
    assert services["parsetier"]["spec"]["type"] == "ClusterIP"
    for service in services.values():
        assert service["spec"]["selector"].items() <= pod_labels.items()
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports

    (monitor,) = _by_kind(NO_SCHEMA)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    (scraped,) = [s for s in services.values() if wanted <= s["metadata"]["labels"].items()]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in scraped["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"

    (budget,) = _by_kind("PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (autoscaler,) = _by_kind("HorizontalPodAutoscaler")
    assert autoscaler["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert autoscaler["spec"]["minReplicas"] > budget["spec"]["maxUnavailable"]


def test_image_matches_the_manifests():
    """The Dockerfile listens where the Deployment expects, as the user the pod runs as."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.*)$", text, re.MULTILINE).group(1))
    assert _flag(entrypoint, "--host") == "0.0.0.0"
    assert _flag(entrypoint, "--port") == "50051" and _flag(entrypoint, "--metrics-port") == "9090"
    (deployment,) = _by_kind("Deployment")
    user = re.search(r"^USER (\d+):(\d+)$", text, re.MULTILINE)
    assert user and user.group(1) != "0"
    assert int(user.group(1)) == deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
