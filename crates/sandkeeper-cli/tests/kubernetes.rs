//! Issue 30 ("Where CI runs"), on Kubernetes: `contrib/kubernetes`
//! (docs/integrations.md), proven offline:
//!
//! - every manifest validates against the Kubernetes JSON schemas, strictly
//!   (an unknown field is an error), for the oldest version the manifests
//!   support (1.30: `appArmorProfile`) and the newest the validator knows;
//!   a manifest broken on purpose fails, so the validator is not a no-op;
//!   and the kustomization applies every manifest of the directory;
//! - the ConfigMap's `config.toml`, laid out as the kubelet mounts it
//!   (a link into `..data`), passes `sandkeeper watch --check` with the
//!   real binary;
//! - the DaemonSet runs `watch` on that file, writes its metrics into the
//!   textfile collector's hostPath directory, shares the node's pid
//!   namespace, and mounts every root of the config read-write at its own
//!   path with HostToContainer propagation, and nothing else of the node;
//! - it has exactly the privileges the docs list, each with its comment,
//!   and the image is `sandkeeper:<version>` everywhere, with no registry.
//!
//! The validator is `kubernetes-validate` from PyPI (it carries the
//! schemas; PyYAML, which reads the manifests here, comes with it), in a
//! venv outside the checkout: `$SANDKEEPER_K8S_VENV`, by default
//! `~/.cache/sandkeeper-k8s/venv`, where `.ci/run` installs it. Without it
//! the tests that need it skip, and the binary says so after its `test
//! result:` line; with `CI` set they fail instead.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandkeeper_testkit::scratch;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The oldest Kubernetes the manifests are for: `appArmorProfile` in a
/// pod's security context is 1.30's.
const OLDEST: &str = "1.30.0";

/// What `.ci/run` installs (and what to run by hand).
const INSTALL: &str = "python3 -m venv ~/.cache/sandkeeper-k8s/venv && ~/.cache/sandkeeper-k8s/venv/bin/pip install kubernetes-validate==1.37.0";

/// node_exporter's textfile directory on the node, as the docs assume it.
const TEXTFILE_DIR: &str = "/var/lib/node-exporter/textfile";

/// The capabilities the container adds, as the docs and the comments
/// explain them (without the `CAP_` prefix: the API refuses
/// `CAP_SYS_ADMIN` next to `allowPrivilegeEscalation: false`).
const CAPABILITIES: [&str; 7] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "SYS_ADMIN",
    "SYS_CHROOT",
    "SYS_PTRACE",
];

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn contrib() -> PathBuf {
    top().join("contrib/kubernetes")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The manifests: every `*.yaml` of `contrib/kubernetes` but the
/// kustomization (which is no Kubernetes resource), by name.
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(contrib())
        .unwrap()
        .map(|d| d.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", contrib().display());
    files
}

// --- the validator's venv, or a skip that is said ---

/// The venv's programs.
struct Tools {
    validate: PathBuf,
    python: PathBuf,
}

fn venv() -> PathBuf {
    if let Some(dir) = std::env::var_os("SANDKEEPER_K8S_VENV") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    Path::new(&home).join(".cache/sandkeeper-k8s/venv")
}

/// The venv with kubernetes-validate and PyYAML; `None` (said, and listed
/// at the end of the run) when it is missing, unless `CI` is set.
fn tools(test: &str) -> Option<Tools> {
    let dir = venv();
    let tools = Tools {
        validate: dir.join("bin/kubernetes-validate"),
        python: dir.join("bin/python"),
    };
    let works = tools.validate.is_file()
        && Command::new(&tools.python)
            .args(["-c", "import kubernetes_validate, yaml"])
            .output()
            .is_ok_and(|o| o.status.success());
    if works {
        return Some(tools);
    }
    let why = format!(
        "no kubernetes-validate in {} (install it: {INSTALL})",
        dir.display()
    );
    sandkeeper_testkit::skips::unless_ci(test, &why);
    None
}

// --- reading the manifests ---

/// Every YAML document of `file`, as JSON, read by PyYAML.
fn documents(tools: &Tools, file: &Path) -> Vec<Value> {
    let out = Command::new(&tools.python)
        .args([
            "-c",
            "import json, sys, yaml\n\
             with open(sys.argv[1]) as f:\n    \
                 json.dump([d for d in yaml.safe_load_all(f) if d is not None], sys.stdout)",
        ])
        .arg(file)
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "{}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).unwrap() {
        Value::Array(docs) => docs,
        other => panic!("{}: {other}", file.display()),
    }
}

/// Every resource of every manifest.
fn resources(tools: &Tools) -> Vec<Value> {
    manifests()
        .iter()
        .flat_map(|f| documents(tools, f))
        .collect()
}

/// The one resource of `kind`.
fn one<'a>(resources: &'a [Value], kind: &str) -> &'a Value {
    let mut of_kind = resources.iter().filter(|r| r["kind"] == kind);
    let found = of_kind.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(of_kind.next().is_none(), "more than one {kind}");
    found
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v}"))
}

/// The config file the ConfigMap holds, read from the manifest's text
/// (its block scalar under `config.toml: |`), without a YAML library:
/// this test runs without the venv.
fn config_from_configmap() -> String {
    let text = read(&contrib().join("configmap.yaml"));
    let mut lines = text.lines().skip_while(|l| l.trim() != "config.toml: |");
    let key = lines
        .next()
        .expect("a `config.toml: |` key in configmap.yaml");
    let key_indent = key.len() - key.trim_start().len();
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > key_indent)
        .collect();
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .expect("a config in configmap.yaml");
    let mut config: String = body
        .iter()
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or("")))
        .collect();
    // `|` keeps one final newline and drops trailing blank lines.
    while config.ends_with("\n\n") {
        config.pop();
    }
    config
}

/// The paths of the config's roots.
fn roots(config: &str) -> Vec<String> {
    let table: toml::Table = toml::from_str(config).expect("the config is TOML");
    table["root"]
        .as_array()
        .expect("[[root]] tables")
        .iter()
        .map(|r| r["path"].as_str().expect("a root's path").to_owned())
        .collect()
}

/// The value of `flag` in `args` (`--flag VALUE` or `--flag=VALUE`).
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(flag)?.strip_prefix('=')
        }
    })
}

/// The DaemonSet's pod spec and its only container.
fn pod(resources: &[Value]) -> (&Value, &Value) {
    let spec = &one(resources, "DaemonSet")["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    assert!(spec.get("initContainers").is_none(), "no init containers");
    (spec, &containers[0])
}

/// The container's mount at `path` and the pod volume it mounts.
fn mount_at<'a>(spec: &'a Value, container: &'a Value, path: &str) -> (&'a Value, &'a Value) {
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == path)
        .unwrap_or_else(|| panic!("nothing is mounted at {path}"));
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap_or_else(|| panic!("no volume {} (mounted at {path})", mount["name"]));
    (mount, volume)
}

// --- (a) the schemas ---

#[test]
fn the_manifests_validate_against_the_kubernetes_schemas() {
    let Some(tools) = tools("the_manifests_validate_against_the_kubernetes_schemas") else {
        return;
    };
    let files = manifests();
    let count: usize = files.iter().map(|f| documents(&tools, f).len()).sum();
    let validate = |version: Option<&str>, files: &[PathBuf]| {
        let mut cmd = Command::new(&tools.validate);
        cmd.arg("--strict");
        if let Some(v) = version {
            cmd.args(["--kubernetes-version", v]);
        }
        let out = cmd.args(files).output().expect("run kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    for version in [Some(OLDEST), None] {
        let (ok, text) = validate(version, &files);
        assert!(ok, "kubernetes-validate {version:?}:\n{text}");
        // A kind without a schema is only a warning, with status 0: every
        // document must have passed, and nothing else been said.
        let passed = text.lines().filter(|l| l.contains(" passed for ")).count();
        assert_eq!(passed, count, "{version:?}: every resource passes:\n{text}");
        assert!(
            text.lines().all(|l| l.starts_with("INFO ")),
            "{version:?}: only passes:\n{text}"
        );
    }

    // Broken on purpose: a wrong type, and an unknown field (strict).
    let daemonset = read(&contrib().join("daemonset.yaml"));
    let scratch = scratch!("k8s-schemas");
    for (name, from, to) in [
        ("wrong-type.yaml", "hostPID: true", "hostPID: \"yes\""),
        ("unknown-field.yaml", "hostPID: true", "hostPid: true"),
    ] {
        assert!(daemonset.contains(from));
        let broken = scratch.join(name);
        fs::write(&broken, daemonset.replacen(from, to, 1)).unwrap();
        let (ok, text) = validate(None, &[broken]);
        assert!(!ok, "{name} must fail:\n{text}");
        assert!(text.contains("hostP"), "{name}: names the field:\n{text}");
    }
}

#[test]
fn the_kustomization_applies_every_manifest() {
    let Some(tools) = tools("the_kustomization_applies_every_manifest") else {
        return;
    };
    let kustomization = documents(&tools, &contrib().join("kustomization.yaml"));
    let kustomization = &kustomization[0];
    assert_eq!(kustomization["kind"], "Kustomization");
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| str_of(r, "a resource").to_owned())
        .collect();
    let present: BTreeSet<String> = manifests()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, present, "kustomization.yaml lists every manifest");

    // One namespace for everything, as the Namespace names it.
    let resources = resources(&tools);
    let namespace = str_of(
        &one(&resources, "Namespace")["metadata"]["name"],
        "namespace",
    );
    assert_eq!(kustomization["namespace"], namespace);
    for r in resources.iter().filter(|r| r["kind"] != "Namespace") {
        assert_eq!(r["metadata"]["namespace"], namespace, "{}", r["kind"]);
    }
    // The pod needs what only the privileged Pod Security level admits.
    assert_eq!(
        one(&resources, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
}

// --- (b) the config, checked by the real binary ---

#[test]
fn the_configmaps_config_checks_out_as_mounted() {
    let config = config_from_configmap();
    let scratch = scratch!("k8s-config");
    // As the kubelet lays out a ConfigMap volume: the key is a link into
    // `..data`, itself a link to the directory of the current version.
    let version = "..2026_01_01_00_00_00.000000001";
    fs::create_dir(scratch.join(version)).unwrap();
    fs::write(scratch.join(version).join("config.toml"), &config).unwrap();
    std::os::unix::fs::symlink(version, scratch.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/config.toml", scratch.join("config.toml")).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(["watch", "--check", "--config"])
        .arg(scratch.join("config.toml"))
        .env_remove("SANDKEEPER_TRUST_PID_NAMESPACE")
        .env_remove("SANDKEEPER_ASSUME_UNSEEN_FREE")
        .output()
        .expect("run sandkeeper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let roots = roots(&config);
    for want in ["/tmp", "/var/tmp"] {
        assert!(
            roots.iter().any(|r| r == want),
            "{want} is a root: {roots:?}"
        );
    }
    for root in &roots {
        assert!(
            stdout.contains(&format!("root {root}: ")),
            "{root}:\n{stdout}"
        );
    }
    // The node's processes are seen (hostPID), never assumed away.
    assert!(!config.contains("trust_pid_namespace"), "{config}");
    assert!(!config.contains("assume_unseen_free"), "{config}");
}

// --- (c) the DaemonSet against the config ---

#[test]
fn the_daemonset_runs_watch_on_the_configmap_into_the_textfile_directory() {
    let Some(tools) =
        tools("the_daemonset_runs_watch_on_the_configmap_into_the_textfile_directory")
    else {
        return;
    };
    let resources = resources(&tools);
    let (spec, container) = pod(&resources);
    assert_eq!(spec["hostPID"], true, "hostPID: the node's processes");

    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| str_of(a, "an argument").to_owned())
        .collect();
    assert_eq!(args.first().map(String::as_str), Some("watch"), "{args:?}");
    for weakening in [
        "--dry-run",
        "--once",
        "--trust-pid-namespace",
        "--assume-unseen-free",
        "--ignore-pid",
    ] {
        assert!(!args.iter().any(|a| a.starts_with(weakening)), "{args:?}");
    }

    // --config: a file of the ConfigMap, where its volume is mounted
    // (whole: a subPath mount would never see an update).
    let config = Path::new(flag(&args, "--config").expect("--config"));
    let dir = config.parent().unwrap().to_str().unwrap();
    let (mount, volume) = mount_at(spec, container, dir);
    assert_eq!(mount["readOnly"], true, "{mount}");
    assert!(mount.get("subPath").is_none(), "{mount}");
    let configmap = one(&resources, "ConfigMap");
    assert_eq!(
        volume["configMap"]["name"], configmap["metadata"]["name"],
        "{volume}"
    );
    let key = config.file_name().unwrap().to_str().unwrap();
    let text = str_of(&configmap["data"][key], "the ConfigMap's config");
    // What the ConfigMap holds is what the config test checked.
    assert_eq!(text, config_from_configmap());

    // --metrics-file: a .prom file in the node's textfile directory,
    // mounted at its own path, writable.
    let metrics = Path::new(flag(&args, "--metrics-file").expect("--metrics-file"));
    assert_eq!(metrics.extension().and_then(|e| e.to_str()), Some("prom"));
    let dir = metrics.parent().unwrap().to_str().unwrap();
    assert_eq!(dir, TEXTFILE_DIR);
    let (mount, volume) = mount_at(spec, container, dir);
    assert_eq!(volume["hostPath"]["path"], dir, "{volume}");
    assert_ne!(mount["readOnly"], true, "{mount}");
    let docs = read(&top().join("docs/integrations.md"));
    assert!(docs.contains(TEXTFILE_DIR), "the docs name {TEXTFILE_DIR}");
}

#[test]
fn every_root_of_the_config_is_mounted_read_write_at_its_path() {
    let Some(tools) = tools("every_root_of_the_config_is_mounted_read_write_at_its_path") else {
        return;
    };
    let resources = resources(&tools);
    let (spec, container) = pod(&resources);
    let roots = roots(&config_from_configmap());
    for root in &roots {
        let (mount, volume) = mount_at(spec, container, root);
        assert_eq!(
            volume["hostPath"]["path"],
            root.as_str(),
            "{root}: {volume}"
        );
        assert_ne!(mount["readOnly"], true, "{root}: {mount}");
        assert_eq!(
            mount["mountPropagation"], "HostToContainer",
            "{root}: {mount}"
        );
    }

    // Nothing else of the node: every hostPath volume is a root or the
    // metrics directory, mounted at its own path; the rest is the config.
    for volume in spec["volumes"].as_array().unwrap() {
        if let Some(path) = volume["hostPath"]["path"].as_str() {
            assert!(
                roots.iter().any(|r| r == path) || path == TEXTFILE_DIR,
                "hostPath {path} is neither a root nor the metrics directory"
            );
            let mount = container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == volume["name"])
                .unwrap_or_else(|| panic!("hostPath {path} is not mounted"));
            assert_eq!(mount["mountPath"], path, "{mount}");
        } else {
            assert!(
                volume.get("configMap").is_some(),
                "only hostPaths and the config: {volume}"
            );
        }
    }
}

#[test]
fn the_daemonset_has_only_the_privileges_it_documents() {
    let Some(tools) = tools("the_daemonset_has_only_the_privileges_it_documents") else {
        return;
    };
    let resources = resources(&tools);
    let (spec, container) = pod(&resources);
    assert_eq!(spec["hostPID"], true);
    assert_ne!(spec["hostNetwork"], true);
    assert_ne!(spec["hostIPC"], true);
    assert_eq!(spec["automountServiceAccountToken"], false);
    let account = one(&resources, "ServiceAccount");
    assert_eq!(spec["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(account["automountServiceAccountToken"], false);
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    // Every taint tolerated: one toleration with no key, operator Exists.
    assert!(
        spec["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .any(|t| t["operator"] == "Exists"
                && t.get("key").is_none()
                && t.get("effect").is_none()),
        "{}",
        spec["tolerations"]
    );

    let pod_sc = &spec["securityContext"];
    let sc = &container["securityContext"];
    assert_eq!(pod_sc["runAsUser"], 0, "root");
    let seccomp = if sc["seccompProfile"].is_null() {
        &pod_sc["seccompProfile"]
    } else {
        &sc["seccompProfile"]
    };
    assert_eq!(seccomp["type"], "RuntimeDefault");
    assert_ne!(sc["privileged"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mut added: Vec<&str> = sc["capabilities"]["add"]
        .as_array()
        .expect("capabilities.add")
        .iter()
        .map(|c| str_of(c, "a capability"))
        .collect();
    added.sort_unstable();
    assert_eq!(added, CAPABILITIES, "the capabilities the docs explain");

    // Memory bounded, CPU requested but not limited (a throttled reaper
    // stalls mid-check).
    let resources_of = &container["resources"];
    assert!(resources_of["requests"]["cpu"].is_string());
    assert!(resources_of["requests"]["memory"].is_string());
    assert!(resources_of["limits"]["memory"].is_string());
    assert!(resources_of["limits"].get("cpu").is_none());

    // Each privilege has its reason, in the manifest and in the docs.
    let manifest = read(&contrib().join("daemonset.yaml"));
    let comments: Vec<&str> = manifest
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('#'))
        .collect();
    let docs = read(&top().join("docs/integrations.md"));
    for cap in CAPABILITIES {
        assert!(
            comments
                .iter()
                .any(|c| c.starts_with(&format!("# {cap}: "))),
            "daemonset.yaml says why {cap}"
        );
        assert!(
            docs.contains(&format!("CAP_{cap}")),
            "the docs say why CAP_{cap}"
        );
    }
    for field in ["hostPID", "priorityClassName", "appArmorProfile"] {
        assert!(
            comments.iter().any(|c| c.contains(field)),
            "daemonset.yaml says why {field}"
        );
        assert!(docs.contains(field), "the docs say why {field}");
    }
    assert!(docs.contains("HostToContainer"));
}

// --- the image ---

/// Whether an image reference names a registry host: its first path
/// component has a `.` or `:`, or is `localhost`.
fn names_a_registry(image: &str) -> bool {
    image.split_once('/').is_some_and(|(first, _)| {
        first.contains('.') || first.contains(':') || first == "localhost"
    })
}

#[test]
fn the_image_is_this_versions_and_names_no_registry() {
    assert!(names_a_registry("registry.example/sandkeeper:1"));
    assert!(names_a_registry("localhost:5000/sandkeeper:1"));
    assert!(!names_a_registry("sandkeeper:1"));
    assert!(!names_a_registry("library/debian:bookworm-slim"));

    let value = |file: &str, key: &str| -> Vec<String> {
        read(&contrib().join(file))
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.trim_start_matches("- ").strip_prefix(key))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .collect()
    };
    assert_eq!(
        value("daemonset.yaml", "image:"),
        [format!("sandkeeper:{VERSION}")]
    );
    assert_eq!(value("kustomization.yaml", "newTag:"), [VERSION]);
    for name in value("kustomization.yaml", "newName:") {
        assert!(!names_a_registry(&name), "{name}");
    }
    let froms = value("Dockerfile", "FROM ");
    assert!(!froms.is_empty());
    for from in froms {
        assert!(!names_a_registry(&from), "{from}");
    }
    // The .deb it installs is the one scripts/package.sh names.
    assert_eq!(value("Dockerfile", "ARG VERSION="), [VERSION]);
    assert!(read(&contrib().join("Dockerfile")).contains("sandkeeper_${VERSION}_amd64.deb"));
    assert!(read(&top().join("scripts/package.sh")).contains("sandkeeper_${version}_amd64.deb"));
    let docs = read(&top().join("docs/integrations.md"));
    assert!(
        docs.contains(&format!("sandkeeper:{VERSION}")),
        "the docs build sandkeeper:{VERSION}"
    );
}
