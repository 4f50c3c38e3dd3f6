//! contrib/nixos: the NixOS module (`services.sandkeeper`) and its package,
//! checked without nixpkgs, which is not available offline here.
//!
//! Every `.nix` file is parsed (`nix-instantiate --parse`). The module is
//! evaluated (`nix-instantiate --eval --strict`) with [`STUB`], a small
//! stand-in for nixpkgs' `lib` and `pkgs`, and what it defines is held
//! against contrib/systemd: the units directive for directive, the config
//! file key for key; the TOML it writes is checked with the real binary,
//! and the build-time check and the package's install script are run as
//! written. Without `nix-instantiate` (Debian package `nix-bin`) each test
//! skips, saying why, unless `CI` is set, where it fails.
//!
//! What the stub cannot prove: that nixpkgs' module system and its
//! rendering of `systemd.services` agree with the reduced versions here
//! (docs/integrations.md says so).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use sandkeeper_testkit::scratch::Scratch;

/// nixpkgs' `lib` and `pkgs`, reduced to what contrib/nixos uses: options
/// with types and defaults (a definition of an unknown option, or a value
/// of the wrong type, is an error, as in NixOS), `mkIf` and `mkMerge` at
/// the top of `config`, `formats.toml`, `runCommand`, `callPackage` and
/// `rustPlatform.buildRustPackage`, which record their arguments instead
/// of building. The user's side is either `user` (the value of
/// `services.sandkeeper`) or `configFile`, a NixOS module like the
/// documented example.
const STUB: &str = r#"
{ moduleFile, user ? { }, configFile ? "" }:
let
  inherit (builtins) attrNames elem filter foldl' isAttrs isBool isInt isList isString mapAttrs;

  store = name: "/nix/store/00000000000000000000000000000000-${name}";
  mkType = name: check: { _type = "type"; inherit name check; };
  tagged = t: v: isAttrs v && (v._type or null) == t;

  lib = rec {
    types = {
      bool = mkType "bool" isBool;
      str = mkType "str" isString;
      int = mkType "int" isInt;
      ints.unsigned = mkType "unsigned int" (v: isInt v && v >= 0);
      package = mkType "package" (v: isAttrs v && v ? outPath);
      enum = values: mkType "one of ${builtins.toJSON values}" (v: elem v values);
      strMatching = re: mkType "string matching ${re}" (v: isString v && builtins.match re v != null);
      either = a: b: mkType "${a.name} or ${b.name}" (v: a.check v || b.check v);
      nullOr = elemType: { _type = "type"; name = "nullOr"; inherit elemType; };
      listOf = elemType: { _type = "type"; name = "listOf"; inherit elemType; };
      submodule = m: { _type = "type"; name = "submodule"; inherit (m) options; };
    };
    mkOption = attrs: attrs // { _type = "option"; };
    mkEnableOption = what: mkOption { type = types.bool; default = false; description = "Whether to enable ${what}."; };
    mkIf = cond: content: { _type = "if"; inherit cond content; };
    mkMerge = contents: { _type = "merge"; inherit contents; };
    literalExpression = text: { _type = "literalExpression"; inherit text; };
    filterAttrs = pred: set: builtins.listToAttrs (builtins.concatMap
      (name: if pred name set.${name} then [ { inherit name; value = set.${name}; } ] else [ ])
      (attrNames set));
    optional = cond: x: if cond then [ x ] else [ ];
    optionalAttrs = cond: set: if cond then set else { };
    optionalString = cond: s: if cond then s else "";
    concatStringsSep = builtins.concatStringsSep;
    inherit filter elem;
    all = builtins.all;
    hasPrefix = prefix: s: builtins.substring 0 (builtins.stringLength prefix) s == prefix;
    importTOML = path: builtins.fromTOML (builtins.readFile path);
    cleanSourceWith = { src, filter, name ? "source" }: { srcPath = toString src; inherit filter name; };
    licenses = { mit = "MIT"; asl20 = "Apache-2.0"; };
    platforms.linux = [ "x86_64-linux" "aarch64-linux" ];
  };

  rustPlatform.buildRustPackage = attrs: {
    outPath = store "${attrs.pname}-${attrs.version}";
    inherit attrs;
  };

  pkgs = {
    formats.toml = { }: {
      type = mkType "TOML table" isAttrs;
      generate = name: value: { outPath = store name; stub = "toml"; inherit value; };
    };
    runCommand = name: env: script: { outPath = store name; stub = "runCommand"; inherit env script; };
    coreutils = { outPath = store "coreutils"; };
    callPackage = path: args:
      let fn = import path; in
      fn (builtins.intersectAttrs (builtins.functionArgs fn) { inherit lib rustPlatform; } // args);
  };

  # The module system, reduced: each option's value is the user's
  # definition or its default, checked against its type.
  coerce = where: t: v:
    if t.name == "nullOr" then (if v == null then null else coerce where t.elemType v)
    else if t.name == "listOf" then
      (if isList v then map (coerce "${where}.*" t.elemType) v else throw "${where}: not a list")
    else if t.name == "submodule" then
      (if isAttrs v then resolve where t.options v else throw "${where}: not an attribute set")
    else if t.check v then v
    else throw "${where}: ${builtins.toJSON v} is not a ${t.name}";
  resolve = where: opts: defs:
    let unknown = filter (n: !(opts ? ${n})) (attrNames defs); in
    if unknown != [ ] then throw "${where}: no such option: ${toString unknown}"
    else mapAttrs
      (n: o:
        if tagged "option" o then
          (if defs ? ${n} then coerce "${where}.${n}" o.type defs.${n}
           else if o ? default then coerce "${where}.${n}" o.type o.default
           else throw "${where}.${n} is used but not defined")
        else resolve "${where}.${n}" o (defs.${n} or { }))
      opts;
  merge = a: b: a // mapAttrs
    (n: bv:
      if !(a ? ${n}) then bv
      else if isAttrs a.${n} && isAttrs bv && !(bv ? outPath) then merge a.${n} bv
      else if isList a.${n} && isList bv then a.${n} ++ bv
      else throw "conflicting definitions of ${n}")
    b;
  flatten = v:
    if tagged "if" v then (if v.cond then flatten v.content else { })
    else if tagged "merge" v then foldl' merge { } (map flatten v.contents)
    else v;

  userModule =
    if configFile == "" then { services.sandkeeper = user; }
    else let m = import configFile; in
      if builtins.isFunction m then m { inherit lib pkgs; config = { }; } else m;

  module = import moduleFile { inherit lib pkgs config; };
  config.services.sandkeeper =
    resolve "services.sandkeeper" module.options.services.sandkeeper userModule.services.sandkeeper;
  cfg = config.services.sandkeeper;
  out = flatten module.config;

  source = out.environment.etc."sandkeeper/config.toml".source or null;
  pkg = cfg.package;
  src = pkg.attrs.src;
in
{
  # Every option's value, so that each is type-checked (as NixOS does).
  options = builtins.removeAttrs cfg [ "package" ];
  services = out.systemd.services or { };
  timers = out.systemd.timers or { };
  etc = mapAttrs (_: e: e.source.outPath) (out.environment.etc or { });
  systemPackages = map (p: p.outPath) (out.environment.systemPackages or [ ]);
  failedAssertions = map (a: a.message) (filter (a: !a.assertion) (out.assertions or [ ]));
  configSource =
    if source == null then null
    else { path = source.outPath; inherit (source) stub; }
      // (if source.stub == "runCommand" then {
        inherit (source) script;
        inherit (source.env) preferLocalBuild;
        nativeBuildInputs = map (p: p.outPath) source.env.nativeBuildInputs;
      } else { inherit (source) value; });
  coreutils = pkgs.coreutils.outPath;
  package = { path = pkg.outPath; } // (if pkg ? attrs then {
    inherit (pkg.attrs) pname version cargoBuildFlags doCheck postInstall meta;
    lockFile = toString pkg.attrs.cargoLock.lockFile;
    src = src.srcPath;
    keeps = builtins.listToAttrs (map
      (name: { inherit name; value = src.filter "${src.srcPath}/${name}" "directory"; })
      [ "crates" "contrib" "docs" "target" ".git" "result" "result-2" ]);
  } else { });
  userTmpfilesRules = userModule.systemd.tmpfiles.rules or [ ];
}
"#;

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Whether `nix-instantiate` is there; without it the test skips, saying
/// why, unless `CI` is set (`.ci/run` installs nix-bin), where it fails.
fn have_nix(test: &str) -> bool {
    sandkeeper_testkit::skips::tool(test, "nix-instantiate", "nix-bin")
}

/// `nix-instantiate` with no store to write to and no daemon to ask:
/// nothing here builds or copies anything, and it runs as any user.
fn nix_instantiate(scratch: &Scratch) -> Command {
    let mut cmd = Command::new("nix-instantiate");
    cmd.args(["--store", "dummy://", "--readonly-mode"])
        .env("HOME", scratch.path())
        .env("XDG_CACHE_HOME", scratch.join("cache"))
        .env_remove("NIX_PATH")
        .stdin(Stdio::null());
    cmd
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The evaluation of the module with the stub, as JSON: `user` is a Nix
/// expression for `services.sandkeeper`, or `config_file` a NixOS module.
fn try_eval(scratch: &Scratch, user: &str, config_file: Option<&Path>) -> Output {
    let stub = scratch.join("stub.nix");
    if !stub.exists() {
        fs::write(&stub, STUB).unwrap();
    }
    let module = top().join("contrib/nixos/module.nix");
    let mut cmd = nix_instantiate(scratch);
    cmd.args(["--eval", "--strict", "--json"])
        .arg(&stub)
        .arg("--argstr")
        .arg("moduleFile")
        .arg(&module)
        .args(["--arg", "user", user]);
    if let Some(file) = config_file {
        cmd.arg("--argstr").arg("configFile").arg(file);
    }
    cmd.output().expect("run nix-instantiate")
}

fn eval(scratch: &Scratch, user: &str) -> Value {
    let out = ok(try_eval(scratch, user, None), user);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A unit as (section, key) → values in order, the way systemd reads the
/// file: comments and blank lines dropped, a repeated key kept each time.
type Directives = BTreeMap<(String, String), Vec<String>>;

fn parse_unit(text: &str) -> Directives {
    let mut out = Directives::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{line}"));
        out.entry((section.clone(), key.trim().to_owned()))
            .or_default()
            .push(value.trim().to_owned());
    }
    out
}

fn contrib_unit(name: &str) -> Directives {
    let path = top().join("contrib/systemd").join(name);
    parse_unit(&fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// A unit value as nixpkgs writes it: lists as one line each, booleans as
/// `true`/`false`.
fn unit_values(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().flat_map(unit_values).collect(),
        Value::String(s) => vec![s.clone()],
        Value::Bool(b) => vec![b.to_string()],
        Value::Number(n) => vec![n.to_string()],
        other => panic!("not a unit value: {other}"),
    }
}

/// A `systemd.services.<name>` or `systemd.timers.<name>` of the
/// evaluation as the unit nixpkgs would write, without what nixpkgs adds
/// of its own (`Environment=PATH=…`, `X-Reload-Triggers=`): the test
/// mirrors nixpkgs' rendering of the options the module uses, and fails
/// on any other option.
fn nixos_unit(unit: &Value) -> Directives {
    let mut out = Directives::new();
    let mut put = |section: &str, key: &str, values: Vec<String>| {
        out.entry((section.to_owned(), key.to_owned()))
            .or_default()
            .extend(values);
    };
    for (option, value) in unit.as_object().expect("a unit") {
        let joined = || vec![unit_values(value).join(" ")];
        match option.as_str() {
            "description" => put("Unit", "Description", unit_values(value)),
            "documentation" => put("Unit", "Documentation", joined()),
            "after" => put("Unit", "After", joined()),
            "wantedBy" => put("Install", "WantedBy", joined()),
            "reloadTriggers" => {}
            "unitConfig" | "serviceConfig" | "timerConfig" => {
                let section = match option.as_str() {
                    "unitConfig" => "Unit",
                    "serviceConfig" => "Service",
                    _ => "Timer",
                };
                for (key, v) in value.as_object().unwrap() {
                    put(section, key, unit_values(v));
                }
            }
            other => panic!("an option the test does not render: {other} = {value}"),
        }
    }
    out
}

/// contrib/systemd's unit with the store paths the module uses.
fn expected_unit(name: &str, doc: &Value) -> Directives {
    let package = doc["package"]["path"].as_str().unwrap();
    let coreutils = doc["coreutils"].as_str().unwrap();
    contrib_unit(name)
        .into_iter()
        .map(|(key, values)| {
            let values = values
                .into_iter()
                .map(|v| {
                    v.replace(
                        "/usr/local/bin/sandkeeper",
                        &format!("{package}/bin/sandkeeper"),
                    )
                    .replace("/bin/kill ", &format!("{coreutils}/bin/kill "))
                })
                .collect();
            (key, values)
        })
        .collect()
}

fn assert_same_unit(name: &str, got: &Directives, want: &Directives) {
    for (key, values) in want {
        assert_eq!(got.get(key), Some(values), "{name}: {key:?}");
    }
    for key in got.keys() {
        assert!(
            want.contains_key(key),
            "{name}: {key:?} is not in contrib/systemd/{name}"
        );
    }
}

/// The TOML file `pkgs.formats.toml` would write for the module's value.
fn toml_text(value: &Value) -> String {
    toml::to_string(value).unwrap_or_else(|e| panic!("not TOML: {e}: {value}"))
}

fn sandkeeper(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandkeeper"))
        .args(args)
        .env_remove("SANDKEEPER_KEEP")
        .env_remove("SANDKEEPER_ROOT")
        .stdin(Stdio::null())
        .output()
        .expect("run sandkeeper")
}

/// `sandkeeper watch --check --config FILE`, its report without the line
/// naming the file.
fn check(file: &Path) -> String {
    let out = ok(
        sandkeeper(&["watch", "--check", "--config", file.to_str().unwrap()]),
        &format!("watch --check {}", fs::read_to_string(file).unwrap()),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("config {}\n", file.display())),
        "{text}"
    );
    text.lines().skip(1).collect::<Vec<_>>().join("\n")
}

/// The ```nix block of docs/integrations.md, in a file.
fn doc_example(scratch: &Scratch) -> PathBuf {
    let doc = fs::read_to_string(top().join("docs/integrations.md")).unwrap();
    let block = doc
        .split("```nix\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a ```nix block in docs/integrations.md");
    let path = scratch.join("configuration.nix");
    fs::write(&path, block).unwrap();
    path
}

#[test]
fn every_nix_file_parses() {
    if !have_nix("every_nix_file_parses") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-parse");
    let dir = top().join("contrib/nixos");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "nix"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [dir.join("module.nix"), dir.join("package.nix")],
        "a new .nix file: add it to the evaluation tests too"
    );
    // The stub and the documented example too.
    fs::write(scratch.join("stub.nix"), STUB).unwrap();
    files.push(scratch.join("stub.nix"));
    files.push(doc_example(&scratch));
    for file in &files {
        ok(
            nix_instantiate(&scratch)
                .arg("--parse")
                .arg(file)
                .output()
                .unwrap(),
            &format!("nix-instantiate --parse {}", file.display()),
        );
    }
}

/// mode = "daemon" (the default): sandkeeper.service, and nothing else,
/// is contrib/systemd/sandkeeper.service directive for directive; a new
/// config reloads it; the config is checked when it is built.
#[test]
fn daemon_mode_is_contrib_systemds_service() {
    if !have_nix("daemon_mode_is_contrib_systemds_service") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-daemon");
    let doc = eval(&scratch, "{ enable = true; }");
    assert_eq!(doc["failedAssertions"], Value::Array(vec![]));
    let services = doc["services"].as_object().unwrap();
    assert_eq!(services.keys().collect::<Vec<_>>(), ["sandkeeper"]);
    assert_eq!(doc["timers"], serde_json::json!({}));
    let unit = &services["sandkeeper"];
    assert_same_unit(
        "sandkeeper.service",
        &nixos_unit(unit),
        &expected_unit("sandkeeper.service", &doc),
    );
    // The file the units name, from the checked build; a change reloads.
    let source = &doc["configSource"];
    let path = source["path"].as_str().unwrap();
    assert_eq!(doc["etc"]["sandkeeper/config.toml"], path);
    assert_eq!(unit["reloadTriggers"], serde_json::json!([path]));
    assert_eq!(source["stub"], "runCommand");
    assert_eq!(
        source["nativeBuildInputs"],
        serde_json::json!([doc["package"]["path"]])
    );
    let script = source["script"].as_str().unwrap();
    assert!(
        script.contains("sandkeeper watch --check --config /nix/store/")
            && script.contains("cp /nix/store/"),
        "{script}"
    );
    assert_eq!(
        doc["systemPackages"],
        serde_json::json!([doc["package"]["path"]])
    );
}

/// mode = "timer": sandkeeper-reap.service and sandkeeper-reap.timer are
/// contrib/systemd's, and there is no sandkeeper.service.
#[test]
fn timer_mode_is_contrib_systemds_timer() {
    if !have_nix("timer_mode_is_contrib_systemds_timer") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-timer");
    let doc = eval(&scratch, r#"{ enable = true; mode = "timer"; }"#);
    let services = doc["services"].as_object().unwrap();
    assert_eq!(services.keys().collect::<Vec<_>>(), ["sandkeeper-reap"]);
    assert_same_unit(
        "sandkeeper-reap.service",
        &nixos_unit(&services["sandkeeper-reap"]),
        &expected_unit("sandkeeper-reap.service", &doc),
    );
    let timers = doc["timers"].as_object().unwrap();
    assert_eq!(timers.keys().collect::<Vec<_>>(), ["sandkeeper-reap"]);
    assert_same_unit(
        "sandkeeper-reap.timer",
        &nixos_unit(&timers["sandkeeper-reap"]),
        &expected_unit("sandkeeper-reap.timer", &doc),
    );
    // Another interval: the timer and its description follow.
    let doc = eval(
        &scratch,
        r#"{ enable = true; mode = "timer"; timerInterval = "1h"; }"#,
    );
    let timer = &doc["timers"]["sandkeeper-reap"];
    assert_eq!(timer["timerConfig"]["OnUnitActiveSec"], "1h");
    assert_eq!(
        timer["description"],
        "Reap leaked scratch directories every 1h"
    );
}

/// The default options write the config contrib/systemd/config.toml is:
/// the same keys and values, and `sandkeeper watch --check` reads the two
/// the same way.
#[test]
fn the_default_config_is_contrib_systemds() {
    if !have_nix("the_default_config_is_contrib_systemds") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-config");
    let doc = eval(&scratch, "{ enable = true; checkConfig = false; }");
    let source = &doc["configSource"];
    assert_eq!(source["stub"], "toml");
    let value = &source["value"];
    let shipped_path = top().join("contrib/systemd/config.toml");
    let shipped: Value = toml::from_str(&fs::read_to_string(&shipped_path).unwrap()).unwrap();
    assert_eq!(value, &shipped, "the module's default config");
    let written = scratch.join("config.toml");
    fs::write(&written, toml_text(value)).unwrap();
    assert_eq!(check(&written), check(&shipped_path));
}

/// The documented example: it evaluates, its TOML checks out, its extra
/// root is writable and required, its metrics directory writable, and its
/// tmpfiles lines are contrib/tmpfiles/sandkeeper.conf's.
#[test]
fn the_documented_example_checks_out() {
    if !have_nix("the_documented_example_checks_out") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-example");
    let example = doc_example(&scratch);
    let out = ok(
        try_eval(&scratch, "{ }", Some(&example)),
        "the documented example",
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["failedAssertions"], Value::Array(vec![]));
    let service = &doc["services"]["sandkeeper"]["serviceConfig"];
    assert_eq!(
        service["ReadWritePaths"],
        serde_json::json!([
            "/tmp /var/tmp",
            "-/srv/ci-scratch",
            "-/var/lib/prometheus-node-exporter-text-files"
        ])
    );
    assert!(service["ExecStart"].as_str().unwrap().ends_with(
        " watch --config /etc/sandkeeper/config.toml --metrics-file /var/lib/prometheus-node-exporter-text-files/sandkeeper.prom"
    ));
    assert_eq!(
        doc["services"]["sandkeeper"]["unitConfig"]["RequiresMountsFor"],
        "/tmp /var/tmp /srv/ci-scratch"
    );
    let conf = fs::read_to_string(top().join("contrib/tmpfiles/sandkeeper.conf")).unwrap();
    let lines: Vec<&str> = conf
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(doc["userTmpfilesRules"], serde_json::json!(lines));

    // The TOML it writes (with checkConfig off, the file itself is the
    // source) passes `sandkeeper watch --check`.
    let unchecked = scratch.join("unchecked.nix");
    fs::write(
        &unchecked,
        format!(
            "args: let m = import {} args; in m // {{ services.sandkeeper = m.services.sandkeeper // {{ checkConfig = false; }}; }}",
            example.display()
        ),
    )
    .unwrap();
    let out = ok(
        try_eval(&scratch, "{ }", Some(&unchecked)),
        "the example, unchecked",
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let written = scratch.join("example.toml");
    fs::write(&written, toml_text(&doc["configSource"]["value"])).unwrap();
    let said = check(&written);
    assert!(said.contains("root /srv/ci-scratch: grace 10m"), "{said}");
    assert!(said.contains("rule \"rust_out.*\" older than 1d"), "{said}");
}

/// The build-time check, run as the derivation would run it: its script
/// with the real binary on PATH and the generated file in place of the
/// store path. A good file is copied to `$out`; a bad one fails the build
/// with the file's line and the reason.
#[test]
fn the_build_time_check_passes_good_files_and_fails_bad_ones() {
    if !have_nix("the_build_time_check_passes_good_files_and_fails_bad_ones") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-check");
    let bin = scratch.join("bin");
    fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sandkeeper"), bin.join("sandkeeper")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let build = |name: &str, settings: &str| -> Output {
        let checked = eval(&scratch, &format!("{{ enable = true; {settings} }}"));
        let plain = eval(
            &scratch,
            &format!("{{ enable = true; checkConfig = false; {settings} }}"),
        );
        let store_path = plain["configSource"]["path"].as_str().unwrap().to_owned();
        let file = scratch.join(format!("{name}.toml"));
        fs::write(&file, toml_text(&plain["configSource"]["value"])).unwrap();
        let script = checked["configSource"]["script"]
            .as_str()
            .unwrap()
            .replace(&store_path, file.to_str().unwrap());
        let out = scratch.join(format!("{name}.out"));
        Command::new("bash")
            .args(["-e", "-c", &script])
            .env("PATH", &path)
            .env("out", &out)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let good = build(
        "good",
        r#"roots = [ { path = "/srv/scratch"; rules = [ { match = "job-*"; owner = 0; } ]; } ];"#,
    );
    ok(good, "the check of a good file");
    assert_eq!(
        fs::read_to_string(scratch.join("good.out")).unwrap(),
        fs::read_to_string(scratch.join("good.toml")).unwrap()
    );
    let bad = build("bad", r#"roots = [ { path = "/tmp"; grace = "5"; } ];"#);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.toml:") && err.contains("grace"), "{err}");
    assert!(!scratch.join("bad.out").exists());
}

/// What the module refuses while evaluating: no root at all, a value of
/// the wrong type, an option it does not have; and a disabled module
/// defines nothing.
#[test]
fn bad_options_fail_the_evaluation() {
    if !have_nix("bad_options_fail_the_evaluation") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-bad");
    let doc = eval(&scratch, "{ enable = true; roots = [ ]; }");
    let failed = doc["failedAssertions"].as_array().unwrap();
    assert!(
        failed.len() == 1 && failed[0].as_str().unwrap().contains("no root"),
        "{failed:?}"
    );
    for (user, said) in [
        (
            r#"{ enable = true; mode = "cron"; }"#,
            "services.sandkeeper.mode",
        ),
        (
            r#"{ enable = true; roots = [ { path = "/tmp"; rules = [ { match = "a*"; keep_last = -1; } ]; } ]; }"#,
            "keep_last",
        ),
        (
            r#"{ enable = true; roots = [ { path = "tmp"; } ]; }"#,
            "path",
        ),
        (
            r#"{ enable = true; intervall = "1m"; }"#,
            "no such option: intervall",
        ),
    ] {
        let out = try_eval(&scratch, user, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(said), "{user}: {err}");
    }
    let doc = eval(&scratch, "{ }");
    assert_eq!(doc["services"], serde_json::json!({}));
    assert_eq!(doc["etc"], serde_json::json!({}));
}

/// package.nix builds the CLI of this checkout (its version, its lock
/// file, the source without target/ and .git), and its install script,
/// run as written against the real binary, installs the man pages and
/// completions.
#[test]
fn the_package_builds_this_checkouts_cli() {
    if !have_nix("the_package_builds_this_checkouts_cli") {
        return;
    }
    let scratch = sandkeeper_testkit::scratch!("nixos-package");
    let doc = eval(&scratch, "{ enable = true; }");
    let package = &doc["package"];
    assert_eq!(package["pname"], "sandkeeper");
    assert_eq!(package["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        package["cargoBuildFlags"],
        serde_json::json!(["-p", "sandkeeper-cli"])
    );
    assert_eq!(package["doCheck"], false);
    assert_eq!(package["meta"]["mainProgram"], "sandkeeper");
    assert_eq!(
        package["lockFile"],
        top().join("Cargo.lock").to_str().unwrap()
    );
    assert_eq!(package["src"], top().to_str().unwrap());
    assert_eq!(
        package["keeps"],
        serde_json::json!({
            "crates": true, "contrib": true, "docs": true,
            "target": false, ".git": false, "result": false, "result-2": false
        })
    );

    let out = scratch.join("out");
    fs::create_dir_all(out.join("bin")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sandkeeper"), out.join("bin/sandkeeper"))
        .unwrap();
    ok(
        Command::new("bash")
            .args(["-e", "-c", package["postInstall"].as_str().unwrap()])
            .env("out", &out)
            .stdin(Stdio::null())
            .output()
            .unwrap(),
        "postInstall",
    );
    for file in [
        "share/man/man1/sandkeeper.1",
        "share/man/man1/sandkeeper-watch.1",
        "share/man/man1/sandkeeper-reap.1",
        "share/man/man5/sandkeeper.toml.5",
        "share/bash-completion/completions/sandkeeper",
        "share/zsh/site-functions/_sandkeeper",
        "share/fish/vendor_completions.d/sandkeeper.fish",
    ] {
        let meta = fs::metadata(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(meta.len() > 0, "{file} is empty");
    }
    assert!(!out.join("share/man/man1/sandkeeper.toml.5").exists());
}
