"""The cluster configs in clusters/, checked as far as a machine without cloud access allows.

- Cluster-launcher YAMLs (aws, gcp): validated against the JSON schema that ships inside the installed Ray
  (the real ray/autoscaler/ray-schema.json), then through the same prepare/validate steps `ray up` runs before
  it contacts a cloud; plus what fedsweep needs from them (CPU head, GPU workers from 0, token auth, the
  package installed on every node, the MLflow store where job drivers write it).
- KubeRay manifests: parsed, checked for the fields KubeRay requires, and fed to the Ray autoscaler's own
  RayCluster -> autoscaling-config translation; the RayJob entrypoint must name a real search space.
- Search spaces: every file's per-trial `resources` validate; fractional GPUs pass, CPU shares <= 0 fail.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml

from platform.config.experiment import ResourcesConfig
from platform.errors import ConfigError
from platform.config.schema import build
from platform.config.search_space import load_search_space

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = REPO / "clusters"
KUBERAY = CLUSTERS / "kuberay"
LAUNCHER_CONFIGS = ["aws.yaml", "gcp.yaml"]
SEARCH_SPACES = sorted(p.stem for p in (REPO / "search_spaces").glob("*.yaml"))

# GPUs per instance for the machine types the configs may name (resources must agree with the hardware).
AWS_GPUS = {"g4dn.xlarge": 1, "g4dn.2xlarge": 1, "g4dn.12xlarge": 4, "g5.xlarge": 1, "g5.2xlarge": 1,
            "g5.4xlarge": 1, "g5.12xlarge": 4, "g5.24xlarge": 4, "g5.48xlarge": 8, "g6.xlarge": 1,
            "g6.12xlarge": 4, "p3.8xlarge": 4, "p3.16xlarge": 8, "p4d.24xlarge": 8, "p5.48xlarge": 8}
GCP_A2_GPUS = {"a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8}


def load(path: Path):
    with open(path) as f:
        return yaml.safe_load(f)


def load_all(path: Path) -> list:
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def ray_schema() -> dict:
    import ray.autoscaler

    path = os.path.join(os.path.dirname(ray.autoscaler.__file__), "ray-schema.json")
    assert os.path.isfile(path), f"the installed ray has no {path}"
    with open(path) as f:
        return json.load(f)


def workers(config: dict) -> dict:
    return {name: t for name, t in config["available_node_types"].items() if name != config["head_node_type"]}


def gpus(node_type: dict) -> float:
    return node_type.get("resources", {}).get("GPU", 0)


def start_commands(config: dict) -> list[str]:
    return config["head_start_ray_commands"] + config["worker_start_ray_commands"]


def ray_pins(text: str) -> set[str]:
    return set(re.findall(r"ray\[[a-z,]+\]==([0-9][0-9.]*[0-9])", text))


# --- cluster launcher ----------------------------------------------------------------------------------------

@pytest.fixture(params=LAUNCHER_CONFIGS)
def launcher(request):
    return request.param, load(CLUSTERS / request.param)


def test_launcher_config_validates_against_the_schema_ray_ships(launcher):
    name, config = launcher
    schema = ray_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(config, schema)


def test_launcher_config_passes_the_checks_ray_up_runs_before_the_cloud(launcher):
    from ray.autoscaler._private.util import prepare_config, validate_config

    name, config = launcher
    prepared = prepare_config(copy.deepcopy(config))  # merges ray/autoscaler/<provider>/defaults.yaml
    validate_config(prepared)
    assert prepared["provider"]["type"] == name.split(".")[0]
    assert set(prepared["available_node_types"]) == set(config["available_node_types"])


def test_head_is_cpu_only_and_runs_no_trials(launcher):
    name, config = launcher
    head = config["available_node_types"][config["head_node_type"]]
    assert gpus(head) == 0
    assert head["resources"].get("CPU") == 0, "trials must not be scheduled on the head"
    assert "guestAccelerators" not in head["node_config"]
    instance = head["node_config"].get("InstanceType", "")
    assert not instance.startswith(("g4", "g5", "g6", "p3", "p4", "p5")), instance


def test_gpu_worker_types_scale_from_zero(launcher):
    name, config = launcher
    types = workers(config)
    assert types, "no worker node types"
    for type_name, node_type in types.items():
        assert node_type["min_workers"] == 0, f"{type_name}: min_workers must be 0"
        assert 1 <= node_type["max_workers"] <= config["max_workers"], type_name
    gpu_counts = sorted(gpus(t) for t in types.values() if gpus(t))
    assert 1 in gpu_counts, "needs a small worker type with 1 GPU"
    assert any(4 <= n <= 8 for n in gpu_counts), "needs a large worker type with 4-8 GPUs"
    assert config["max_workers"] >= 2


def test_declared_gpus_match_the_hardware(launcher):
    name, config = launcher
    for type_name, node_type in workers(config).items():
        node = node_type["node_config"]
        if name == "aws.yaml":
            instance = node["InstanceType"]
            expected = AWS_GPUS.get(instance, 0)
            assert instance in AWS_GPUS or gpus(node_type) == 0, f"{type_name}: unknown GPU instance {instance}"
        else:
            expected = sum(a["acceleratorCount"] for a in node.get("guestAccelerators", []))
            if node["machineType"] in GCP_A2_GPUS:
                assert expected == GCP_A2_GPUS[node["machineType"]], type_name
            if expected:
                assert node["scheduling"]["onHostMaintenance"] == "TERMINATE", type_name
        assert gpus(node_type) == expected, f"{type_name}: resources.GPU {gpus(node_type)} != {expected} GPUs"


def test_idle_timeout_is_set(launcher):
    name, config = launcher
    assert isinstance(config.get("idle_timeout_minutes"), (int, float)) and config["idle_timeout_minutes"] > 0


def test_every_ray_start_and_stop_runs_with_token_auth(launcher):
    name, config = launcher
    calls = 0
    for command in start_commands(config):
        for match in re.finditer(r"\bray (start|stop)\b", command):
            calls += 1
            assert command[:match.start()].endswith("RAY_AUTH_MODE=token "), command
    assert calls >= 4
    assert any("--head" in c and "RAY_AUTH_MODE=token ray start" in c for c in config["head_start_ray_commands"])
    assert any("RAY_AUTH_MODE=token ray start" in c for c in config["worker_start_ray_commands"])


def test_the_local_token_is_mounted_on_every_node(launcher):
    name, config = launcher
    # Ray 2.60's launcher neither creates nor copies the token; `ray start` fails without one.
    assert config["file_mounts"].get("~/.ray/auth_token") == "~/.ray/auth_token"
    assert any("export RAY_AUTH_MODE=token" in c for c in config["setup_commands"]), "for ray status etc. on nodes"


def test_head_runs_the_autoscaler_and_workers_join_it(launcher):
    name, config = launcher
    assert any("--autoscaling-config=~/ray_bootstrap_config.yaml" in c for c in config["head_start_ray_commands"])
    assert all("--address=$RAY_HEAD_IP:6379" in c for c in config["worker_start_ray_commands"] if "ray start" in c)


def test_setup_commands_install_the_package_from_the_mounted_checkout(launcher):
    name, config = launcher
    install = [c for c in config["setup_commands"] if re.search(r"pip install -e \.(\s|$)", c)]
    assert install, "setup_commands must pip install -e . the package"
    src = re.match(r"cd (\S+) &&", install[0]).group(1)
    mounts = config["file_mounts"]
    mounted = {remote[len(src) + 1:]: local for remote, local in mounts.items() if remote.startswith(src + "/")}
    try:
        import tomllib
    except ImportError:  # Python 3.10
        pytest.skip("tomllib needs Python 3.11")
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", project["project"]["readme"], *wheel["packages"]}
    needed |= {p.split("/")[0] for p in wheel.get("force-include", {})}
    missing = needed - set(mounted)
    assert not missing, f"{name}: file_mounts lack {sorted(missing)} under {src}"
    for rel, local in mounted.items():
        assert os.path.normpath(local) == rel, f"{rel} mounted from {local}"
        assert (REPO / local).exists(), local
    # Workers the head launches get the same mounts; they install with the same setup_commands.
    assert not config.get("worker_setup_commands")


def test_head_serves_the_mlflow_store_that_job_drivers_write(launcher, monkeypatch, tmp_path):
    """Under `ray job submit` the driver (on the head) writes sqlite:///~/fedsweep/mlflow.db by default."""
    from platform.results.tracking import resolve_tracking_uri

    name, config = launcher
    server = [c for c in config["head_start_ray_commands"] if "mlflow server" in c]
    assert len(server) == 1
    args = shlex.split(server[0].split("mlflow server", 1)[1].split(">")[0])
    opts = dict(zip(args[::2], args[1::2]))
    assert opts["--host"] == "127.0.0.1", "no auth on MLflow: reach it through SSH only"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")
    monkeypatch.delenv("FEDSWEEP_HOME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert opts["--backend-store-uri"].replace("$HOME", str(tmp_path)) == resolve_tracking_uri()
    assert opts["--port"] == "5000"


def test_one_image_for_every_node_type(launcher):
    """The account-specific image is edited in one place (a YAML anchor), so node types can't drift apart."""
    name, config = launcher
    nodes = [t["node_config"] for t in config["available_node_types"].values()]
    if name == "aws.yaml":
        images = {n["ImageId"] for n in nodes}
    else:
        images = {d["initializeParams"]["sourceImage"] for n in nodes for d in n["disks"] if d.get("boot")}
    assert len(images) == 1, images


def _bucket_uri(value: str, scheme: str) -> str:
    """A storage URI the sweep accepts: ``<scheme>://<bucket>/<prefix>``, its bucket still to be named."""
    import urllib.parse

    parsed = urllib.parse.urlparse(value)
    assert parsed.scheme == scheme and parsed.hostname and parsed.path.strip("/"), value
    assert "REPLACE_ME" in parsed.netloc, f"{value}: the bucket is the user's to name (REPLACE_ME)"
    assert not parsed.username and not parsed.password, "no credentials in a storage URI"
    return value


def test_every_node_gets_bucket_storage_for_tune_and_the_cache(launcher):
    """FEDSWEEP_STORAGE and FEDSWEEP_CACHE, exported on every node before Ray starts (the driver and the trials
    read them), point into one bucket of the provider's object store."""
    name, config = launcher
    scheme = {"aws.yaml": "s3", "gcp.yaml": "gs"}[name]
    exported = {}
    for command in config["setup_commands"]:
        match = re.search(r"echo 'export (FEDSWEEP_(?:STORAGE|CACHE))=(\S+)' >> ~/.bashrc", command)
        if match:
            exported[match.group(1)] = _bucket_uri(match.group(2), scheme)
    assert set(exported) == {"FEDSWEEP_STORAGE", "FEDSWEEP_CACHE"}
    assert exported["FEDSWEEP_STORAGE"].split("/")[2] == exported["FEDSWEEP_CACHE"].split("/")[2]  # one bucket
    assert exported["FEDSWEEP_STORAGE"] != exported["FEDSWEEP_CACHE"]
    assert any("sed -i" in c and "FEDSWEEP_" in c for c in config["setup_commands"]), \
        "a re-run of `ray up` must replace the exports, not add a second copy"


def test_every_node_has_the_identity_that_reaches_the_bucket(launcher):
    """No keys on the nodes: each node type runs with an IAM instance profile (AWS) or a service account with the
    cloud-platform scope (GCP); workers share one identity."""
    name, config = launcher
    identities = {}
    for node, node_type in config["available_node_types"].items():
        node_config = node_type["node_config"]
        if name == "aws.yaml":
            arn = node_config["IamInstanceProfile"]["Arn"]
            assert re.fullmatch(r"arn:aws:iam::REPLACE_ME-account-id:instance-profile/[\w+=,.@-]+", arn), arn
            identities[node] = arn
        else:
            (account,) = node_config["serviceAccounts"]
            assert account["email"].endswith("@REPLACE_ME-project-id.iam.gserviceaccount.com")
            assert "https://www.googleapis.com/auth/cloud-platform" in account["scopes"]
            identities[node] = account["email"]
    assert len({identities[w] for w in workers(config)}) == 1


# --- KubeRay -------------------------------------------------------------------------------------------------

def ray_cluster_specs() -> list[tuple[str, dict]]:
    (cluster,) = load_all(KUBERAY / "raycluster.yaml")
    (job,) = load_all(KUBERAY / "rayjob.yaml")
    return [("RayCluster", cluster["spec"]), ("RayJob.rayClusterSpec", job["spec"]["rayClusterSpec"])]


SPECS = [pytest.param(spec, id=where) for where, spec in ray_cluster_specs()]


def ray_containers(spec: dict) -> list[dict]:
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    return [g["template"]["spec"]["containers"][0] for g in groups]


def env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def mlflow_docs() -> dict:
    return {doc["kind"]: doc for doc in load_all(KUBERAY / "mlflow.yaml")}


@pytest.mark.parametrize("manifest,kinds", [("raycluster.yaml", ["RayCluster"]), ("rayjob.yaml", ["RayJob"]),
                                            ("mlflow.yaml", ["PersistentVolumeClaim", "Deployment", "Service"])])
def test_kuberay_manifests_parse(manifest, kinds):
    docs = load_all(KUBERAY / manifest)
    assert [d["kind"] for d in docs] == kinds
    api = {"RayCluster": "ray.io/v1", "RayJob": "ray.io/v1", "PersistentVolumeClaim": "v1", "Deployment": "apps/v1",
           "Service": "v1"}
    for doc in docs:
        assert doc["apiVersion"] == api[doc["kind"]]
        assert doc["metadata"]["name"] and "namespace" not in doc["metadata"]  # kubectl -n chooses


@pytest.mark.parametrize("spec", SPECS)
def test_ray_cluster_spec_has_what_kuberay_requires(spec):
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["autoscalerOptions"]["idleTimeoutSeconds"] > 0
    head = spec["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict)
    assert head["rayStartParams"].get("num-cpus") == "0", "trials must not run on the head"
    assert spec["workerGroupSpecs"]
    for group in [head, *spec["workerGroupSpecs"]]:
        assert isinstance(group["rayStartParams"], dict)
        containers = group["template"]["spec"]["containers"]
        assert containers and containers[0]["image"]
        resources = containers[0]["resources"]
        assert resources["limits"]["cpu"] and resources["limits"]["memory"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    gpu_groups = {}
    for group in spec["workerGroupSpecs"]:
        assert group["groupName"]
        assert group["minReplicas"] == 0, group["groupName"]
        assert group["maxReplicas"] >= 1, group["groupName"]
        assert group.get("replicas", 0) == 0
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        if "nvidia.com/gpu" in limits:
            gpu_groups[group["groupName"]] = int(limits["nvidia.com/gpu"])
    assert 1 in gpu_groups.values(), "needs a 1-GPU worker group"
    assert any(4 <= n <= 8 for n in gpu_groups.values()), "needs a 4-8 GPU worker group"


@pytest.mark.parametrize("spec", SPECS)
def test_ray_cluster_spec_keeps_token_auth_and_points_at_mlflow(spec):
    assert spec["authOptions"] == {"mode": "token"}
    service = mlflow_docs()["Service"]
    port = service["spec"]["ports"][0]["port"]
    for container in ray_containers(spec):
        variables = env(container)
        assert variables["RAY_AUTH_MODE"] == "token"
        assert variables["MLFLOW_TRACKING_URI"] == f"http://{service['metadata']['name']}:{port}"
        home = variables["FEDSWEEP_HOME"]
        assert home in {m["mountPath"] for m in container["volumeMounts"]}, "FEDSWEEP_HOME must be a volume"


@pytest.mark.parametrize("spec", SPECS)
def test_every_pod_keeps_tune_storage_and_the_cache_in_a_bucket_through_its_service_account(spec):
    (account,) = load_all(KUBERAY / "serviceaccount.yaml")
    assert account["kind"] == "ServiceAccount" and account["apiVersion"] == "v1"
    annotations = account["metadata"]["annotations"]
    assert "REPLACE_ME" in annotations["eks.amazonaws.com/role-arn"]  # IRSA on EKS
    assert "REPLACE_ME" in annotations["iam.gke.io/gcp-service-account"]  # Workload Identity on GKE
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        assert group["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    for container in ray_containers(spec):
        variables = env(container)
        storage = _bucket_uri(variables["FEDSWEEP_STORAGE"], "s3")
        cache = _bucket_uri(variables["FEDSWEEP_CACHE"], "s3")
        assert storage.split("/")[2] == cache.split("/")[2] and storage != cache


def test_rayjob_runs_the_same_cluster_as_raycluster():
    (_, cluster), (_, job) = ray_cluster_specs()
    assert job == cluster


def test_ray_versions_agree_everywhere():
    versions = set()
    for name, spec in ray_cluster_specs():
        versions.add(spec["rayVersion"])
    for name in LAUNCHER_CONFIGS:
        versions |= ray_pins("\n".join(load(CLUSTERS / name)["setup_commands"]))
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    versions |= ray_pins(dockerfile)
    versions |= set(re.findall(r"rayproject/ray:([0-9.]+)-", dockerfile))
    assert len(versions) == 1, f"Ray versions differ across clusters/: {sorted(versions)}"
    (version,) = versions
    assert tuple(map(int, version.split("."))) >= (2, 52), "token auth needs Ray >= 2.52"


def test_dockerfile_installs_the_package_on_the_ray_image():
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    assert re.search(r"^ARG RAY_IMAGE=rayproject/ray:\S+-gpu$", dockerfile, re.M)
    assert re.search(r"pip install .*-e \.", dockerfile)
    for path in ("pyproject.toml", "README.md", "platform", "algorithms", "search_spaces"):
        assert re.search(rf"^COPY .*\b{re.escape(path)}\b", dockerfile, re.M), path
    assert ".venv" in (KUBERAY / "Dockerfile.dockerignore").read_text().split()


@pytest.mark.parametrize("spec", SPECS)
def test_ray_autoscaler_reads_gpu_groups_from_the_spec(spec):
    """The translation the in-tree autoscaler of this Ray version applies to a RayCluster (it validates too)."""
    try:
        from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr
    except ImportError:
        pytest.skip("this Ray version moved its KubeRay autoscaling-config module")
    config = _derive_autoscaling_config_from_ray_cr(
        {"metadata": {"name": "fedsweep", "namespace": "default"}, "spec": copy.deepcopy(spec)})
    types = config["available_node_types"]
    assert types["headgroup"]["resources"]["CPU"] == 0
    gpu_types = {n: t["resources"].get("GPU", 0) for n, t in types.items() if t["resources"].get("GPU")}
    assert 1 in gpu_types.values() and any(4 <= g <= 8 for g in gpu_types.values())
    assert all(t["min_workers"] == 0 for n, t in types.items())
    assert config["idle_timeout_minutes"] == spec["autoscalerOptions"]["idleTimeoutSeconds"] / 60


def test_rayjob_entrypoint_names_an_existing_search_space():
    (job,) = load_all(KUBERAY / "rayjob.yaml")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "platform.sweep"], argv
    positional = [a for a in argv[3:] if not a.startswith("-")]
    assert positional, f"no search space in {job['spec']['entrypoint']!r}"
    name = positional[0]
    assert (REPO / "search_spaces" / f"{name}.yaml").is_file(), f"search_spaces/{name}.yaml does not exist"
    assert name == "fedkp_bandwidth"
    load_search_space(name)


def test_mlflow_service_serves_a_persistent_store():
    docs = mlflow_docs()
    pod = docs["Deployment"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["mlflow", "server"]
    args = dict(a.split("=", 1) for a in container["args"])
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    assert set(claims.values()) == {docs["PersistentVolumeClaim"]["metadata"]["name"]}
    (volume,) = claims
    assert args["--backend-store-uri"].startswith(f"sqlite:///{mounts[volume]}/")
    assert args["--artifacts-destination"].startswith(mounts[volume] + "/")
    assert args["--host"] == "0.0.0.0"
    service = docs["Service"]["spec"]
    assert service["selector"].items() <= pod["metadata"]["labels"].items()
    assert service.get("type", "ClusterIP") == "ClusterIP"
    assert str(service["ports"][0]["port"]) == args["--port"]


def test_mlflow_accepts_the_host_names_ray_pods_and_port_forwards_use():
    try:
        from mlflow.server.security_utils import is_allowed_host_header
    except ImportError:
        pytest.skip("this MLflow has no Host-header validation")
    container = mlflow_docs()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    allowed = dict(a.split("=", 1) for a in container["args"])["--allowed-hosts"].split(",")
    for host in ("fedsweep-mlflow:5000", "fedsweep-mlflow.default.svc.cluster.local:5000", "localhost:5000",
                 "127.0.0.1:5000"):
        assert is_allowed_host_header(allowed, host), host
    assert not is_allowed_host_header(allowed, "attacker.example.com")


# --- search-space resources -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SEARCH_SPACES)
def test_every_search_space_has_valid_resources(name):
    space = load_search_space(name)
    resources = space.trial_config({}).resources
    assert isinstance(resources, ResourcesConfig)
    assert resources.cpu > 0 and resources.gpu >= 0


def test_fractional_gpus_are_allowed():
    resources = build(ResourcesConfig, {"cpu": 1, "gpu": 0.25}, "resources")
    assert resources.gpu == 0.25 and resources.cpu == 1


@pytest.mark.parametrize("cpu", [0, -1, -0.5])
def test_a_cpu_share_of_zero_or_less_is_rejected(cpu):
    with pytest.raises(ConfigError) as err:
        build(ResourcesConfig, {"cpu": cpu, "gpu": 0.25}, "resources")
    assert err.value.field == "resources.cpu"
    assert str(err.value).startswith("resources.cpu: must be > 0")


def test_a_search_space_file_with_zero_cpus_fails_to_load(tmp_path):
    path = tmp_path / "zero_cpu.yaml"
    path.write_text("resources: {cpu: 0}\n")
    with pytest.raises(ConfigError) as err:
        load_search_space(str(path))
    assert err.value.field == "resources.cpu"
    assert "resources.cpu" in str(err.value)


def test_a_search_space_file_asks_for_a_fractional_gpu(tmp_path):
    path = tmp_path / "quarter_gpu.yaml"
    path.write_text("resources: {cpu: 1, gpu: 0.25}\n")
    assert load_search_space(str(path)).trial_config({}).resources.gpu == 0.25
    assert load_search_space("smoke", {"resources.gpu": 0.25}).trial_config({}).resources.gpu == 0.25  # --set


# ---- clusters/local.md: two nodes on one machine ----

RAY_DEFAULT_PORTS = {"--port": "6379", "--dashboard-port": "8265", "--ray-client-server-port": "10001"}


def test_the_one_machine_recipe_has_ports_of_its_own_and_an_agent_port_per_node():
    """clusters/local.md works as written on a machine where another Ray may run: the head's ports are not
    Ray's defaults, each node's dashboard agent gets a port of its own, the second node joins at the head's port and
    `ray job submit` / `ray status` talk to the head's dashboard and GCS."""
    from tests import cluster_recipe

    head_args, worker_args = cluster_recipe.ray_starts()
    head, worker = cluster_recipe.flags(head_args), cluster_recipe.flags(worker_args)
    for flag, default in RAY_DEFAULT_PORTS.items():
        assert head.get(flag) not in (None, default), (flag, head.get(flag))
        assert not 10002 <= int(head[flag]) <= 19999, (flag, "in Ray's worker-port range: ray start refuses it")
    assert head["--dashboard-agent-listen-port"] == worker["--dashboard-agent-listen-port"] == "0"
    assert worker["--address"] == f"127.0.0.1:{head['--port']}"
    assert head["--dashboard-host"] == "127.0.0.1" and "--head" in head
    commands = cluster_recipe.commands()
    submit = next(c for c in commands if c[:3] == ["ray", "job", "submit"])
    assert submit[submit.index("--address") + 1] == f"http://127.0.0.1:{head['--dashboard-port']}"
    status = next(c for c in commands if c[:2] == ["ray", "status"])
    assert cluster_recipe.flags(status[2:])["--address"] == worker["--address"]
    assert submit[-4:] == ["python", "-m", "platform.sweep", "smoke"]


def test_the_e2e_cluster_runs_the_documented_recipe():
    """tests/e2e/conftest.py starts its nodes with clusters/local.md's `ray start` arguments (only the documented
    ports swapped for free ones), so the tested recipe is the documented one."""
    from tests import cluster_recipe
    from tests.e2e import conftest

    assert (conftest.HEAD_ARGS, conftest.WORKER_ARGS) == cluster_recipe.ray_starts()
    swapped = cluster_recipe.replaced(conftest.HEAD_ARGS, {flag: 1 for flag in cluster_recipe.PORT_FLAGS})
    assert [a for a in swapped if a.partition("=")[0] not in cluster_recipe.PORT_FLAGS] == [
        a for a in conftest.HEAD_ARGS if a.partition("=")[0] not in cluster_recipe.PORT_FLAGS]
    assert {f"{flag}=1" for flag in cluster_recipe.PORT_FLAGS} <= set(swapped)


def test_the_readme_shows_the_same_one_machine_recipe():
    from tests import cluster_recipe

    text = (REPO / "docs" / "how-to" / "clusters.md").read_text()
    head_args, worker_args = cluster_recipe.ray_starts()
    assert shlex.join(["ray", "start", *head_args]) in text and shlex.join(["ray", "start", *worker_args]) in text
    port = cluster_recipe.flags(head_args)["--dashboard-port"]
    assert f"ray job submit --address http://127.0.0.1:{port} " in text
