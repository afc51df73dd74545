"""The deployment files in infra/ hold together: they parse, refer to things that exist, keep
secrets out, and use the keys the Dagster Helm chart and the instance schema define.

Docker and Kubernetes cannot run here, so these are structural checks: YAML parses, every
reference (services, files, workspace, module, pools) resolves, the PostgreSQL instance config is
the local one with credentials from the environment, and every Helm value we set is a key of the
official chart (1.13 series).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|API_KEY|ACCESS_KEY|TOKEN")
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(:?[-?][^}]*)?\}")


def load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict:
    return load(INFRA / "compose.yaml")


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_compose_has_every_part_of_a_single_host_deployment(compose):
    services = compose["services"]
    assert {"postgres", "minio", "bucket", "codeserver", "webserver", "daemon", "query"} <= set(services)
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
    assert services["codeserver"]["build"] == {"context": "..", "dockerfile": "infra/Dockerfile"}


def test_compose_takes_every_secret_from_the_environment(compose):
    for name, service in compose["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                assert isinstance(value, str) and INTERPOLATION.fullmatch(value), \
                    f"{name}: {key} must come from the environment, not the file"
    text = (INFRA / "compose.yaml").read_text(encoding="utf-8")
    required = {m.group(1) for m in INTERPOLATION.finditer(text) if (m.group(2) or "").startswith(":?")}
    listed = {line.split("=", 1)[0] for line in (INFRA / ".env.example").read_text().splitlines()
              if line and not line.startswith("#")}
    assert required and required <= listed, f"not in infra/.env.example: {sorted(required - listed)}"
    assert all(line.endswith("=") for line in (INFRA / ".env.example").read_text().splitlines()
               if SECRET_NAME.search(line.split("=", 1)[0]) and not line.startswith("#")), "no secret values"


def test_compose_webserver_and_daemon_find_the_code_server(compose):
    services = compose["services"]
    port = flag(services["codeserver"]["command"], "--port")
    module = flag(services["codeserver"]["command"], "--module-name")
    assert module == tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["dagster"]["module_name"]
    for name in ("webserver", "daemon"):
        workspace = flag(services[name]["command"], "--workspace")
        server = load(ROOT / workspace)["load_from"][0]["grpc_server"]
        assert (server["host"], str(server["port"])) == ("codeserver", port)


def test_the_image_copies_only_what_exists_and_the_context_lets_through():
    dockerfile = (INFRA / "Dockerfile").read_text(encoding="utf-8")
    allowed = {line[1:].rstrip("/") for line in (INFRA / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")}
    sources = [part for line in dockerfile.splitlines() if line.startswith("COPY ")
               for part in line.split()[1:-1] if not part.startswith("--")]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
        assert source.rstrip("/") in allowed, f"COPY {source}: excluded by Dockerfile.dockerignore"
    assert 'torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu' in dockerfile


def test_the_postgres_instance_config_is_the_local_one_with_credentials_from_the_environment():
    """dagster.postgres.yaml differs from dagster.yaml in its storage only (dagster-postgres's, with
    a connection pool: assets/pooled_postgres.py; the local file's instance class only picks its
    SQLite storage: assets/pooled_sqlite.py), and names no secret.
    Dagster loads and migrates it against a real server in tests/assets/test_instance_on_postgres.py."""
    local, postgres = load(ROOT / "dagster.yaml"), load(ROOT / "dagster.postgres.yaml")
    assert local.pop("instance_class") == {"module": "assets.pooled_sqlite", "class": "LocalInstance"}
    storage = postgres.pop("storage")
    assert postgres == local
    assert list(storage) == ["custom"]
    custom = storage["custom"]
    assert (custom["module"], custom["class"]) == ("assets.pooled_postgres", "PooledPostgresStorage")
    assert set(custom["config"]) == {"postgres_db", "pool_size", "max_overflow"}
    database = custom["config"]["postgres_db"]
    credentials = {"hostname": "DAGSTER_PG_HOST", "port": "DAGSTER_PG_PORT", "db_name": "DAGSTER_PG_DB",
                   "username": "DAGSTER_PG_USERNAME", "password": "DAGSTER_PG_PASSWORD"}
    assert {key: database[key] for key in credentials} == {k: {"env": v} for k, v in credentials.items()}, \
        "credentials come from the environment only"
    assert set(database) - set(credentials) == {"scheme"} and database["scheme"] == "postgresql+psycopg2"


# Keys of the official chart's values (chart 1.13 series) under the sections infra/helm sets; a
# subtree named with a trailing "*" is free-form Kubernetes or Dagster config.
CHART_KEYS = {
    "global": {"postgresqlSecretName", "dagsterHome", "serviceAccountName", "celeryConfigSecretName"},
    "generatePostgresqlPasswordSecret": None,
    "postgresql": {"enabled", "image", "postgresqlHost", "postgresqlUsername", "postgresqlPassword",
                   "postgresqlDatabase", "postgresqlParams*", "postgresqlScheme", "service.port"},
    "dagster-user-deployments": {"enabled", "enableSubchart", "imagePullSecrets*"},
    "dagster-user-deployments.deployments[]": {
        "name", "image.repository", "image.tag", "image.pullPolicy", "dagsterApiGrpcArgs", "codeServerArgs",
        "port", "includeConfigInLaunchedRuns.enabled", "env*", "envConfigMaps*", "envSecrets*", "labels*",
        "volumes*", "volumeMounts*", "annotations*", "nodeSelector*", "affinity*", "tolerations*",
        "podSecurityContext*", "securityContext*", "resources*", "readinessProbe*", "livenessProbe*",
        "startupProbe*", "service*",
    },
    "runLauncher": {"type"},
    "runLauncher.config.k8sRunLauncher": {
        "imagePullPolicy", "image", "jobNamespace", "loadInclusterConfig", "kubeconfigFile", "envConfigMaps*",
        "envSecrets*", "envVars*", "volumes*", "volumeMounts*", "labels*", "resources*", "failPodOnRunFailure",
        "securityContext*", "runK8sConfig*",
    },
    "dagsterDaemon": {"enabled", "image", "heartbeatTolerance", "runCoordinator.enabled", "runCoordinator.type",
                      "runCoordinator.config.queuedRunCoordinator*", "runMonitoring*", "runRetries*", "sensors*",
                      "schedules*", "env*", "envConfigMaps*", "envSecrets*", "resources*"},
    "concurrency": {"enabled", "pools.defaultLimit", "pools.granularity", "pools.opGranularityRunBuffer",
                    "runs.maxConcurrentRuns", "runs.tagConcurrencyLimits*"},
    "telemetry": {"enabled"},
    "dagsterWebserver": {"service.type", "service.port", "service.annotations*", "env*", "envSecrets*",
                         "resources*", "replicaCount", "pathPrefix", "enableReadOnly"},
    "ingress": {"enabled", "annotations*", "labels*", "ingressClassName", "dagsterWebserver.host",
                "dagsterWebserver.path", "dagsterWebserver.pathType", "dagsterWebserver.tls.enabled",
                "dagsterWebserver.tls.secretName"},
}


def leaf_paths(node, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for key, value in node.items() for p in leaf_paths(value, f"{prefix}.{key}" if prefix else key)]
    return [prefix]


def allowed(path: str) -> bool:
    """Whether a leaf path is a chart key: looked up in the longest section that contains it."""
    for section in sorted(CHART_KEYS, key=len, reverse=True):
        if path != section and not path.startswith(section + "."):
            continue
        keys = CHART_KEYS[section]
        if keys is None:
            return path == section
        rest = path[len(section) + 1:]
        return any(rest == key[:-1] or rest.startswith(key[:-1] + ".") if key.endswith("*") else rest == key
                   for key in keys)
    return False


def test_helm_values_use_the_charts_keys_and_keep_the_store_single_writer():
    values = load(INFRA / "helm" / "values.yaml")
    deployments = values["dagster-user-deployments"]["deployments"]
    paths = [p for p in leaf_paths({k: v for k, v in values.items() if k != "dagster-user-deployments"})]
    paths += [p for p in leaf_paths({k: v for k, v in values["dagster-user-deployments"].items()
                                     if k != "deployments"}, "dagster-user-deployments")]
    paths += [p for d in deployments for p in leaf_paths(d, "dagster-user-deployments.deployments[]")]
    unknown = [p for p in paths if not allowed(p)]
    assert unknown == [], f"not keys of the Dagster chart: {unknown}"

    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    (lightfoot,) = deployments
    args = lightfoot["dagsterApiGrpcArgs"]
    assert args[args.index("--module-name") + 1] == "assets.definitions"
    assert values["concurrency"]["pools"]["defaultLimit"] == 1 and values["concurrency"]["enabled"] is True
    runs_limit = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"].get("maxConcurrentRuns")
    assert runs_limit is None, "the chart refuses maxConcurrentRuns in both the run queue and concurrency.runs"
    pools = set(re.findall(r'^STORE_POOL = "([^"]+)"', (ROOT / "assets" / "provenance.py").read_text(), re.M))
    assert pools == {"lightfoot_store"}, "the store pool the assets use falls under defaultLimit 1"
    text = (INFRA / "helm" / "values.yaml").read_text()
    assert not re.search(r"(?i)password:\s*\S", text), "no secret values in the Helm values"


# -- who can reach what ---------------------------------------------------------------------------


def serve_arguments(command: list[str]):
    """The arguments `lightfoot serve` would run with (parsed by the real command line)."""
    from lightfoot_pipeline.cli import build_parser

    assert command[:2] == ["lightfoot", "serve"], command
    return build_parser().parse_args(command[1:])


def test_compose_keeps_the_ui_on_loopback_and_the_query_service_behind_a_token(compose):
    services = compose["services"]
    published = {name: [str(p) for p in service.get("ports", [])] for name, service in services.items()}
    for name, ports in published.items():
        if name != "query":
            assert all(p.startswith("127.0.0.1:") for p in ports), f"{name} is published beyond loopback: {ports}"
    assert published["webserver"] == ["127.0.0.1:3000:3000"]
    query = services["query"]
    args = serve_arguments(query["command"])
    assert args.host == "0.0.0.0" and not args.insecure_no_auth and not args.answers
    token = query["environment"]["LIGHTFOOT_SERVE_TOKEN"]
    assert re.fullmatch(r"\$\{LIGHTFOOT_SERVE_TOKEN:\?[^}]+\}", token), "the token is required, from infra/.env"
    assert query["environment"]["LIGHTFOOT_SERVE_ANSWERS"] == "${LIGHTFOOT_SERVE_ANSWERS:-0}"
    assert [p.split(":")[-1] for p in published["query"]] == [str(args.port)]
    probe = " ".join(query["healthcheck"]["test"])
    assert f"127.0.0.1:{args.port}/health" in probe


def test_helm_keeps_the_ui_inside_the_cluster():
    values = load(INFRA / "helm" / "values.yaml")
    assert values["dagsterWebserver"]["service"]["type"] == "ClusterIP"
    assert values["ingress"]["enabled"] is False


def test_the_query_manifest_takes_its_tokens_from_a_secret():
    documents = [d for d in yaml.safe_load_all((INFRA / "helm" / "query.yaml").read_text(encoding="utf-8")) if d]
    kinds = {d["kind"]: d for d in documents}
    assert set(kinds) == {"Deployment", "Service"}
    pod = kinds["Deployment"]["spec"]["template"]
    assert kinds["Deployment"]["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    args = serve_arguments(container["command"])
    assert args.host == "0.0.0.0" and not args.insecure_no_auth and not args.answers
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (tokens_volume,) = [name for name, path in mounts.items() if args.tokens_file.startswith(path + "/")]
    assert "secretName" in volumes[tokens_volume]["secret"]
    env = {e["name"]: e for e in container["env"]}
    # reader views' files go to a disk-backed scratch volume (tmpfs would hold them in memory)
    scratch = next(name for name, path in mounts.items() if path == env["TMPDIR"]["value"])
    assert "sizeLimit" in volumes[scratch]["emptyDir"] and volumes[scratch]["emptyDir"].get("medium") != "Memory"
    for name, entry in env.items():
        if SECRET_NAME.search(name):
            assert "value" not in entry, f"{name} must come from a Secret"
    assert env["LIGHTFOOT_SERVE_ANSWERS"]["value"] == "0"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == args.port
    service = kinds["Service"]["spec"]
    assert service["type"] == "ClusterIP" and service["selector"].items() <= pod["metadata"]["labels"].items()
    values = load(INFRA / "helm" / "values.yaml")
    (code,) = values["dagster-user-deployments"]["deployments"]
    assert container["image"] == f"{code['image']['repository']}:{code['image']['tag']}"
    code_env = {e["name"]: e.get("value") for e in code["env"]}
    assert env["LIGHTFOOT_STORE"]["value"] == code_env["LIGHTFOOT_STORE"], "the service reads the store the runs write"
