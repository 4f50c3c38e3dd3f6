//! Issue 30 ("Where CI runs"), the runner hooks: `contrib/github-actions`,
//! `contrib/gitlab-runner` and `contrib/buildkite`, thin files that all
//! call `contrib/ci-hooks/reap-job-leftovers.sh`, each started the way its
//! CI starts it (its variables, its shell, its user: `nobody` stands for
//! the runner's user), on runner-shaped trees where a killed job's
//! leftovers lie beside a live job's files. Precisely what remains is
//! checked: a snapshot of the whole tree before, less what should go,
//! must be the tree after.
//!
//! The live jobs' processes hold files and working directories for real, so
//! these tests run as PID 1 of a private PID namespace, where every process
//! can be inspected (the machine may hide its own PID 1 even from root);
//! without root and `CI` they skip, saying why. Also here: every hook exits
//! 0 when sandkeeper is missing, fails or hangs, or its variables are
//! missing; and the `watch` config of docs/integrations.md checks
//! out and collects what a dead runner left.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::privilege::{nobody_living_in, setpriv_nobody, NOBODY, SETPRIV_NOBODY};
use sandkeeper_testkit::process::{spawn_ready, wait_with_deadline, Helper, Spawned, DEADLINE};
use sandkeeper_testkit::scratch::Scratch;
use sandkeeper_testkit::tree::{mkdirs, snapshot, write};

const SANDKEEPER: &str = env!("CARGO_BIN_EXE_sandkeeper");

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The helper processes' entry point (`sandkeeper_testkit::child`): a
/// job's leased sandbox, made by a process of the runner's user.
#[test]
#[ignore = "helper process entry point, run by other tests"]
fn child_main() {
    sandkeeper_testkit::child::main()
}

// ---------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------

/// The checkout's top directory.
fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

thread_local! {
    /// Where this test installed the hooks and the binary ([`install`]).
    static INSTALLED: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// Installs the hooks and the sandkeeper under test below `base`, as the
/// docs install them (`contrib/{ci-hooks,github-actions,gitlab-runner,
/// buildkite}` into `lib/sandkeeper/`, the binary into `bin/`), for this
/// test's thread: from then on [`contrib`] and [`hook_path`] name the
/// copies. The runner's user must reach them, and the checkout (with its
/// `target/`) may sit below a directory only root can search.
fn install(base: &Path) {
    let root = base.join("install");
    let lib = root.join("lib/sandkeeper");
    fs::create_dir_all(&lib).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    for dir in ["ci-hooks", "github-actions", "gitlab-runner", "buildkite"] {
        let out = Command::new("cp")
            .arg("-Rp")
            .arg(top().join("contrib").join(dir))
            .arg(&lib)
            .output()
            .unwrap();
        assert!(out.status.success(), "cp {dir}: {out:?}");
    }
    fs::copy(SANDKEEPER, root.join("bin/sandkeeper")).unwrap();
    for dir in [&root, &root.join("lib"), &lib, &root.join("bin")] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
    INSTALLED.with(|i| *i.borrow_mut() = Some(root));
}

/// A file of `contrib/`: the installed copy once this test has
/// [`install`]ed them.
fn contrib(rel: &str) -> PathBuf {
    INSTALLED.with(|i| match &*i.borrow() {
        Some(root) => root.join("lib/sandkeeper").join(rel),
        None => top().join("contrib").join(rel),
    })
}

/// `PATH` for a hook: the sandkeeper under test first, as an operator's
/// install would have it (its installed copy once [`install`]ed).
fn hook_path() -> OsString {
    let bin = INSTALLED.with(|i| match &*i.borrow() {
        Some(root) => root.join("bin"),
        None => Path::new(SANDKEEPER).parent().unwrap().to_owned(),
    });
    let mut path = bin.into_os_string();
    path.push(":/usr/local/bin:/usr/bin:/bin");
    path
}

/// `s` quoted for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The user a hook runs as.
#[derive(Clone, Copy, PartialEq)]
enum As {
    /// uid 65534, the runner's own user here.
    Runner,
    /// root (GitLab Runner's service runs as root by default; its custom
    /// executor's scripts too).
    Root,
}

/// Runs a hook as a CI starts it: `argv` with only `env` (and `PATH`, and
/// the PID-namespace switch: the namespace is the test's own) in `cwd`.
fn start_hook(user: As, argv: &[&OsStr], env: &[(&str, &OsStr)], cwd: &Path) -> Output {
    let mut cmd = match user {
        As::Runner => {
            let mut cmd = setpriv_nobody();
            cmd.args(argv);
            cmd
        }
        As::Root => {
            let mut cmd = Command::new(argv[0]);
            cmd.args(&argv[1..]);
            cmd
        }
    };
    cmd.env_clear()
        .env("PATH", hook_path())
        .env("LANG", "C.UTF-8")
        // As in sandkeeper_testkit::namespace: nothing outside the test's
        // own PID namespace uses what it made.
        .env(sandkeeper_testkit::namespace::TRUST_PID_NAMESPACE_ENV, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the hook");
    wait_with_deadline(&mut child, DEADLINE)
}

/// What a hook printed, both streams.
fn said(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The hook exited 0 (a hook never fails the job).
#[track_caller]
fn assert_ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: {}", said(out));
}

/// Sets the mtime and atime of `path` and of everything under it to `by`
/// ago (sandkeeper ages an entry by the newest change inside it).
fn age(path: &Path, by: Duration) {
    set_times_under(path, SystemTime::now() - by);
}

fn set_times_under(path: &Path, when: SystemTime) {
    let meta = fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if meta.is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            set_times_under(&entry.unwrap().path(), when);
        }
    }
    if meta.is_dir() || meta.is_file() {
        let times = fs::FileTimes::new().set_modified(when).set_accessed(when);
        fs::File::open(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .set_times(times)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Gives `path` and everything under it to the runner's user.
fn give_to_runner(path: &Path) {
    std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            give_to_runner(&entry.unwrap().path());
        }
    }
}

/// A process of the runner's user holding `file` open until dropped.
fn holding_open(file: &Path) -> Spawned {
    spawn_ready(
        setpriv_nobody()
            .args([
                "sh",
                "-c",
                "exec 3<\"$1\" && echo ready && exec sleep 600",
                "sh",
            ])
            .arg(file),
    )
}

/// A leased sandbox in `root` made by a process of `user`, alive until the
/// helper is killed or dropped (then it is an orphan).
fn job_sandbox(user: As, root: &Path, tag: &str) -> (Helper, PathBuf) {
    let wrapper: &[&str] = match user {
        As::Runner => &SETPRIV_NOBODY,
        As::Root => &[],
    };
    let helper = Helper::start_via(
        wrapper,
        "create",
        &[("SK_ROOT", root.to_str().unwrap()), ("SK_TAG", tag)],
    );
    let path = helper.ready_path();
    assert!(path.starts_with(root), "{}", path.display());
    (helper, path)
}

/// A sandbox whose owner, a process of `user`, was killed (SIGKILL: no
/// teardown), aged `by`.
fn orphaned_sandbox(user: As, root: &Path, tag: &str, by: Duration) -> PathBuf {
    let (mut helper, path) = job_sandbox(user, root, tag);
    write(&path.join("build.log"), "the job was killed here");
    if user == As::Runner {
        give_to_runner(&path.join("build.log"));
    }
    helper.kill();
    age(&path, by);
    path
}

/// A step wrapped in `sandkeeper run --root ROOT` (docs: "sandkeeper run
/// as a job step"), run by the runner's user and then SIGKILLed with its
/// command, as a runner that dies takes its step: its directory, leased,
/// is left behind, aged `by`. Its path.
fn killed_run(root: &Path, by: Duration) -> PathBuf {
    use std::io::BufRead;
    let mut cmd = setpriv_nobody();
    cmd.arg(SANDKEEPER)
        .args(["run", "--root"])
        .arg(root)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"ready $$ $TMPDIR\" && exec sleep 600",
        ])
        .env_remove("SANDKEEPER_KEEP")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut run = Spawned(cmd.spawn().expect("start sandkeeper run"));
    let mut line = String::new();
    std::io::BufReader::new(run.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (pid, dir) = line
        .trim_end()
        .strip_prefix("ready ")
        .and_then(|l| l.split_once(' '))
        .unwrap_or_else(|| panic!("sandkeeper run said {line:?}"));
    let dir = PathBuf::from(dir);
    write(
        &dir.join("target/debug/build.log"),
        "the step was killed here",
    );
    give_to_runner(&dir.join("target"));
    // The runner kills the whole step: sandkeeper run first (else it would
    // clean up after its command, as it does when the command ends).
    drop(run);
    let step = rustix::process::Pid::from_raw(pid.parse().unwrap()).unwrap();
    rustix::process::kill_process(step, rustix::process::Signal::KILL).unwrap();
    // We are PID 1 here: the step, orphaned by its runner, is ours to reap.
    while let Ok(Some(_)) = rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {}
    assert!(dir.starts_with(root), "{}", dir.display());
    age(&dir, by);
    dir
}

/// Asserts that `after` is `before` less every path under `gone` (which
/// must have been there), naming what differs.
#[track_caller]
fn assert_left(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
    base: &Path,
    gone: &[PathBuf],
    out: &str,
) {
    let gone: Vec<PathBuf> = gone
        .iter()
        .map(|p| p.strip_prefix(base).unwrap().to_owned())
        .collect();
    for g in &gone {
        assert!(
            before.contains_key(g),
            "{} was not there before",
            g.display()
        );
    }
    let want: BTreeMap<_, _> = before
        .iter()
        .filter(|(p, _)| !gone.iter().any(|g| p.starts_with(g)))
        .map(|(p, d)| (p.clone(), d.clone()))
        .collect();
    let missing: Vec<_> = want.keys().filter(|p| !after.contains_key(*p)).collect();
    let extra: Vec<_> = after.keys().filter(|p| !want.contains_key(*p)).collect();
    let changed: Vec<_> = want
        .iter()
        .filter(|(p, d)| after.get(*p).is_some_and(|a| a != *d))
        .map(|(p, _)| p)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && changed.is_empty(),
        "removed but should have stayed: {missing:#?}\nstill there but should have gone: {extra:#?}\nchanged: {changed:#?}\n{out}"
    );
    // No hostile name was ever run as a command.
    assert!(
        !after
            .keys()
            .any(|p| p.file_name() == Some(OsStr::new("PWNED"))),
        "a name was run as a command: {after:#?}"
    );
}

/// Killed-job leftovers whose names are hostile to a shell or a log: each a
/// directory with a file, aged `by`. Their paths.
fn hostile_leftovers(dir: &Path, by: Duration) -> Vec<PathBuf> {
    let names: [&[u8]; 7] = [
        b"-rf --no-preserve-root",
        b"$(touch PWNED)",
        b"`touch PWNED`",
        b"new\nline\n::error::forged",
        b"*",
        b" spaced ",
        b"\xff\xfe not utf-8",
    ];
    names
        .iter()
        .map(|name| {
            let path = dir.join(OsStr::from_bytes(name));
            write(&path.join("f"), "x");
            give_to_runner(&path);
            age(&path, by);
            path
        })
        .collect()
}

/// The text after a marker comment in docs/integrations.md: the fenced
/// block that follows it.
fn doc_block(marker: &str) -> String {
    let text = fs::read_to_string(top().join("docs/integrations.md")).unwrap();
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in docs/integrations.md"));
    let rest = &text[at..];
    let open = rest.find("```").expect("a fenced block after the marker");
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let close = body.find("\n```").expect("the block ends");
    body[..close + 1].to_owned()
}

/// The marker of the `watch` config for a host of self-hosted runners.
const WATCH_CONFIG_MARKER: &str = "<!-- runner-hooks: watch config -->";

// ---------------------------------------------------------------------
// GitHub Actions
// ---------------------------------------------------------------------

/// A self-hosted runner's install and work directories, as
/// `./config.sh` and the first jobs make them; every file 30 days old.
struct Runner {
    root: PathBuf,
    work: PathBuf,
    temp: PathBuf,
}

impl Runner {
    fn new(host: &Path, name: &str, repo: &str) -> Runner {
        let root = host.join(name);
        let work = root.join("_work");
        let temp = work.join("_temp");
        write(&root.join("bin/Runner.Listener"), "ELF");
        write(&root.join("bin/Runner.Worker"), "ELF");
        write(&root.join("externals/node20/bin/node"), "ELF");
        write(&root.join("config.sh"), "#!/bin/bash");
        write(&root.join("run.sh"), "#!/bin/bash");
        write(&root.join(".runner"), r#"{"workFolder": "_work"}"#);
        write(
            &root.join(".env"),
            "ACTIONS_RUNNER_HOOK_JOB_COMPLETED=/usr/local/lib/sandkeeper/github-actions/job-completed.sh\n",
        );
        write(&root.join("_diag/Runner_20260101-000000-utc.log"), "log");
        write(&temp.join("_runner_file_commands/set_env_0f9e"), "");
        write(&temp.join("_github_workflow/event.json"), "{}");
        write(&temp.join("_github_home/.gitconfig"), "");
        write(&work.join("_tool/node/20.11.0/x64/bin/node"), "ELF");
        write(&work.join("_tool/node/20.11.0/x64.complete"), "");
        write(
            &work.join("_actions/actions/checkout/v4/action.yml"),
            "name: checkout",
        );
        write(
            &work.join(format!("_PipelineMapping/acme/{repo}/PipelineFolder.json")),
            format!(r#"{{"pipelineDirectory": "{repo}"}}"#),
        );
        write(
            &work.join(format!("{repo}/{repo}/.git/HEAD")),
            "ref: refs/heads/main",
        );
        give_to_runner(&root);
        age(&root, 30 * DAY);
        Runner { root, work, temp }
    }

    /// The variables the runner gives a job's hooks, for a job of `repo`.
    fn env(&self, repo: &str) -> Vec<(&'static str, OsString)> {
        let workspace = self.work.join(repo);
        vec![
            ("CI", "true".into()),
            ("GITHUB_ACTIONS", "true".into()),
            ("HOME", self.root.clone().into()),
            ("RUNNER_NAME", "runner-1".into()),
            ("RUNNER_OS", "Linux".into()),
            ("RUNNER_ARCH", "X64".into()),
            ("RUNNER_TEMP", self.temp.clone().into()),
            ("RUNNER_TOOL_CACHE", self.work.join("_tool").into()),
            ("RUNNER_WORKSPACE", workspace.clone().into()),
            ("GITHUB_WORKSPACE", workspace.join(repo).into()),
            ("GITHUB_REPOSITORY", format!("acme/{repo}").into()),
            ("GITHUB_RUN_ID", "4242".into()),
            (
                "GITHUB_EVENT_PATH",
                self.temp.join("_github_workflow/event.json").into(),
            ),
            (
                "GITHUB_ENV",
                self.temp.join("_runner_file_commands/set_env_0f9e").into(),
            ),
        ]
    }

    /// Runs `script` (`job-started.sh` or `job-completed.sh`) as the
    /// runner does: `bash -e PATH`, as its user, in the job's workspace.
    fn hook(&self, script: &str, repo: &str) -> Output {
        let path = contrib("github-actions").join(script);
        let env = self.env(repo);
        let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
        start_hook(
            As::Runner,
            &["bash".as_ref(), "-e".as_ref(), path.as_os_str()],
            &env,
            &self.work.join(repo).join(repo),
        )
    }
}

#[test]
fn github_hooks_reap_a_killed_jobs_leftovers_beside_a_live_job() {
    run_in_pid_namespace(
        "github_hooks_reap_a_killed_jobs_leftovers_beside_a_live_job",
        "github_inner",
    );
}

#[test]
#[ignore = "inner half of github_hooks_reap_a_killed_jobs_leftovers_beside_a_live_job"]
fn github_inner() {
    if !in_namespace() {
        return;
    }
    let scratch = Scratch::reachable_by_others("runner-hooks-github");
    let host = scratch.path();
    install(host);
    // Two runners on one host; names a careless script would run.
    let one = Runner::new(
        host,
        "actions-runner-1 $(touch PWNED) `touch PWNED` *",
        "app",
    );
    let two = Runner::new(host, "actions-runner-2 'q' \"dq\"", "web");

    // Runner 1: its previous job was killed (the runner with it). It left
    // scratch, a script, hostile names, a leased sandbox whose owner died,
    // and a daemon that survived it and still writes its log.
    let killed_scratch = one.temp.join("killed-scratch");
    write(&killed_scratch.join("deep/er/file"), "x");
    age(&killed_scratch, 2 * HOUR);
    let killed_script = one.temp.join("0a1b2c3d-4e5f.sh");
    write(&killed_script, "make test");
    age(&killed_script, 2 * HOUR);
    let hostile = hostile_leftovers(&one.temp, 2 * HOUR);
    let orphan = orphaned_sandbox(As::Runner, &one.temp, "job", 2 * HOUR);
    let killed_step = killed_run(&one.temp, 2 * HOUR);
    let daemon_state = one.temp.join("daemon-state");
    write(&daemon_state.join("log"), "still running");
    // Its workspace stays a while (a checkout the next job reuses); one of
    // a repository no job used for 30 days goes.
    write(&one.work.join("killed-repo/killed-repo/.git/HEAD"), "x");
    age(&one.work.join("killed-repo"), DAY);
    write(&one.work.join("stale-repo/stale-repo/.git/HEAD"), "x");
    write(&one.work.join("stale-repo/build-output/a.o"), "x");
    age(&one.work.join("stale-repo"), 30 * DAY);
    give_to_runner(&one.root);
    age(&daemon_state, 2 * HOUR);
    let mut daemon = Some(holding_open(&daemon_state.join("log")));
    // The job that is completing now made something a moment ago.
    let fresh = one.temp.join("fresh-from-this-job");
    write(&fresh.join("out"), "x");
    give_to_runner(&fresh);

    // Runner 2: a live job, with its shell in its workspace, a file held
    // open, a working directory, a leased sandbox, and an idle download a
    // later step of it will use.
    let live_cwd = two.temp.join("live-cwd");
    let live_open = two.temp.join("live-open");
    let live_idle = two.temp.join("live-idle");
    write(&live_cwd.join("x"), "x");
    write(&live_open.join("data"), "x");
    write(&live_idle.join("download.tar"), "x");
    give_to_runner(&two.root);
    for dir in [&live_cwd, &live_open, &live_idle] {
        age(dir, 2 * HOUR);
    }
    let live = vec![
        nobody_living_in(&two.work.join("web/web")),
        nobody_living_in(&live_cwd),
        holding_open(&live_open.join("data")),
    ];
    let (live_sandbox_owner, live_sandbox) = job_sandbox(As::Runner, &two.temp, "job");
    age(&live_sandbox, 2 * HOUR);

    // Runner 1's job completes: its hook, as the runner runs it.
    let before = snapshot(host);
    let out = one.hook("job-completed.sh", "app");
    let text = said(&out);
    assert_ok(&out, "job-completed.sh");
    let mut gone = vec![killed_scratch, killed_script, orphan, killed_step];
    gone.extend(hostile);
    gone.push(one.work.join("stale-repo"));
    assert_left(&before, &snapshot(host), host, &gone, &text);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("::stop-commands::sandkeeper-") && stdout.contains("removed"),
        "{text}"
    );
    assert!(
        !stdout.lines().any(|l| l.starts_with("::error::")),
        "a name reached the log as a workflow command: {text}"
    );

    // The next job starts on runner 1: the daemon has died meanwhile, and
    // the last job's fresh entry is old now. The job-started hook takes
    // both.
    drop(daemon.take());
    age(&fresh, 2 * HOUR);
    let before = snapshot(host);
    let out = one.hook("job-started.sh", "app");
    let text = said(&out);
    assert_ok(&out, "job-started.sh");
    assert_left(
        &before,
        &snapshot(host),
        host,
        &[daemon_state, fresh],
        &text,
    );

    // `sandkeeper watch` with the docs' config for this host (as root, as
    // its service runs): runner 2's job is live, so nothing of it goes.
    let config = scratch.join("config.toml");
    let text = doc_block(WATCH_CONFIG_MARKER)
        .replace(
            "\"/home/runner/actions-runner-1/_work/_temp\"",
            &toml_string(one.temp.to_str().unwrap()),
        )
        .replace(
            "\"/home/runner/actions-runner-2/_work/_temp\"",
            &toml_string(two.temp.to_str().unwrap()),
        );
    assert!(
        !text.contains("/home/runner/"),
        "a root was not replaced:\n{text}"
    );
    fs::write(&config, &text).unwrap();
    let watch = || {
        let out = Command::new(SANDKEEPER)
            .args(["watch", "--once", "--config"])
            .arg(&config)
            .env_remove("SANDKEEPER_KEEP")
            .output()
            .unwrap();
        assert_ok(&out, "watch --once");
        said(&out)
    };
    let before = snapshot(host);
    let out = watch();
    assert_left(&before, &snapshot(host), host, &[], &out);

    // Runner 2 dies with its job; hours later, `watch` collects what the
    // job left in its temp area (the runner's own `_*` and everything
    // outside the temp areas stay).
    drop(live);
    drop(live_sandbox_owner);
    for dir in [&live_cwd, &live_open, &live_idle, &live_sandbox] {
        age(dir, 7 * HOUR);
    }
    let before = snapshot(host);
    let out = watch();
    assert_left(
        &before,
        &snapshot(host),
        host,
        &[live_cwd, live_open, live_idle, live_sandbox],
        &out,
    );
}

// ---------------------------------------------------------------------
// GitLab Runner
// ---------------------------------------------------------------------

/// contrib/gitlab-runner/config.toml, with the install path and the temp
/// directory of this host.
fn gitlab_config(temp: &Path, runs: &Path) -> toml::Table {
    let text = fs::read_to_string(contrib("gitlab-runner/config.toml")).unwrap();
    let lib = sh_quote(contrib("").to_str().unwrap().trim_end_matches('/'));
    let text = text
        .replace("bash /usr/local/lib/sandkeeper/", &format!("bash {lib}/"))
        .replace(
            "\"/usr/local/lib/sandkeeper/gitlab-runner/cleanup.sh\"",
            &toml_string(contrib("gitlab-runner/cleanup.sh").to_str().unwrap()),
        )
        .replace(
            "=/home/gitlab-runner/tmp\"",
            &format!("={}\"", temp.display()),
        )
        .replace(
            "\"/var/lib/gitlab-runner/runs\"",
            &toml_string(runs.to_str().unwrap()),
        );
    let config: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("config.toml: {e}\n{text}"));
    // Every value that names the install or the temp directory was replaced.
    let values = format!("{:?}", config["runners"]);
    assert!(
        !values.contains("/usr/local/lib/") && !values.contains("/home/gitlab-runner/"),
        "{values}"
    );
    config
}

/// The `[[runners]]` section named `name`.
fn gitlab_runner<'a>(config: &'a toml::Table, name: &str) -> &'a toml::Table {
    config["runners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_table().unwrap())
        .find(|r| r["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no [[runners]] named {name}"))
}

/// Runs a `pre_build_script` or `post_build_script` line as the shell
/// executor does: inside the job's bash script (`set -eo pipefail`), as
/// the runner's user, in the project directory, with the section's
/// `environment`.
fn gitlab_build_script(line: &str, env: &[(String, OsString)], cwd: &Path) -> Output {
    let script = format!("set -eo pipefail\nset +o noclobber\n{line}\necho 'job script goes on'\n");
    let env: Vec<(&str, &OsStr)> = env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_os_str()))
        .collect();
    let out = start_hook(
        As::Runner,
        &[
            "bash".as_ref(),
            "--noprofile".as_ref(),
            "--norc".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
        &env,
        cwd,
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("job script goes on"),
        "{}",
        said(&out)
    );
    out
}

#[test]
fn gitlab_scripts_reap_a_killed_jobs_leftovers_beside_live_jobs() {
    run_in_pid_namespace(
        "gitlab_scripts_reap_a_killed_jobs_leftovers_beside_live_jobs",
        "gitlab_inner",
    );
}

#[test]
#[ignore = "inner half of gitlab_scripts_reap_a_killed_jobs_leftovers_beside_live_jobs"]
fn gitlab_inner() {
    if !in_namespace() {
        return;
    }
    let scratch = Scratch::reachable_by_others("runner-hooks-gitlab");
    let host = scratch.path();
    install(host);
    let builds = host.join("builds");
    let slot = builds.join("t1_Ab3dE/0/acme");
    let project = slot.join("app");
    let temp = host.join("tmp");
    let runs = host.join("runs");
    // The shell executor's tree: this job's project (cloned long ago, the
    // job's shell in it), its file variables, projects of the same group
    // (one stale, one recent, one a concurrent job is building), another
    // slot, and the cache.
    write(&project.join(".git/HEAD"), "x");
    write(&slot.join("stale/.git/HEAD"), "x");
    write(&slot.join("stale.tmp/CI_SERVER_TLS_CA_FILE"), "x");
    write(&slot.join("recent/.git/HEAD"), "x");
    write(&slot.join("busy/.git/HEAD"), "x");
    write(&builds.join("t1_Ab3dE/1/acme/app/.git/HEAD"), "x");
    write(&host.join("cache/acme/app/default/cache.zip"), "x");
    mkdirs(&temp);
    for dir in [&builds, &host.join("cache"), &temp] {
        give_to_runner(dir);
        age(dir, 30 * DAY);
    }
    age(&slot.join("recent"), 2 * DAY);
    write(&slot.join("app.tmp/gitlab_runner_env"), "");
    // The jobs' temp directory: a killed job's leftovers (hours old), a
    // concurrent live job's files (held, idle for 2 h, a leased sandbox).
    write(&temp.join("go-build1234/b001/x.a"), "x");
    write(&temp.join("pip-install-abc/setup.py"), "x");
    write(&temp.join("_keep/x"), "x");
    write(&temp.join("live-cwd/x"), "x");
    write(&temp.join("live-idle/x"), "x");
    give_to_runner(&builds);
    give_to_runner(&temp);
    for name in ["go-build1234", "pip-install-abc", "_keep", "live-cwd"] {
        age(&temp.join(name), 8 * HOUR);
    }
    age(&temp.join("live-idle"), 2 * HOUR);
    let hostile = hostile_leftovers(&temp, 8 * HOUR);
    give_to_runner(&temp);
    let orphan = orphaned_sandbox(As::Runner, &temp, "job", 2 * HOUR);
    let (live_owner, live_sandbox) = job_sandbox(As::Runner, &temp, "job");
    let live = vec![
        nobody_living_in(&project),
        nobody_living_in(&slot.join("busy")),
        nobody_living_in(&temp.join("live-cwd")),
    ];

    let config = gitlab_config(&temp, &runs);
    let shell = gitlab_runner(&config, "shell");
    let mut env: Vec<(String, OsString)> = shell["environment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            let (k, v) = kv.as_str().unwrap().split_once('=').unwrap();
            (k.to_owned(), OsString::from(v))
        })
        .collect();
    for (k, v) in [
        ("CI", OsString::from("true")),
        ("GITLAB_CI", "true".into()),
        ("HOME", host.into()),
        ("CI_BUILDS_DIR", builds.clone().into()),
        ("CI_PROJECT_DIR", project.clone().into()),
        ("CI_JOB_ID", "4242".into()),
        ("CI_CONCURRENT_ID", "0".into()),
        ("CI_CONCURRENT_PROJECT_ID", "0".into()),
        ("CI_RUNNER_SHORT_TOKEN", "t1_Ab3dE".into()),
    ] {
        env.push((k.to_owned(), v));
    }
    assert!(env
        .iter()
        .any(|(k, v)| k == "TMPDIR" && v == temp.as_os_str()));

    // Before the job's script: what the killed job left goes, and stale
    // projects; nothing of the live jobs.
    let before = snapshot(host);
    let out = gitlab_build_script(shell["pre_build_script"].as_str().unwrap(), &env, &project);
    let mut gone = vec![
        temp.join("go-build1234"),
        temp.join("pip-install-abc"),
        orphan,
        slot.join("stale"),
        slot.join("stale.tmp"),
    ];
    gone.extend(hostile);
    assert_left(&before, &snapshot(host), host, &gone, &said(&out));
    // After it: nothing more (the live job's idle download is 2 h old).
    let before = snapshot(host);
    let out = gitlab_build_script(shell["post_build_script"].as_str().unwrap(), &env, &project);
    assert_left(&before, &snapshot(host), host, &[], &said(&out));

    // The custom executor's cleanup_exec, as GitLab Runner (root) runs it
    // after a job: its arguments from config.toml, the job's variables as
    // CUSTOM_ENV_* (a hostile job points them at a directory of old files:
    // they choose nothing).
    let custom = gitlab_runner(&config, "custom")["custom"]
        .as_table()
        .unwrap();
    let exec = PathBuf::from(custom["cleanup_exec"].as_str().unwrap());
    let args: Vec<&str> = custom["cleanup_args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    write(&host.join("precious/notes.txt"), "keep me");
    write(&runs.join("run-41/disk.img"), "killed job's VM disk");
    write(&runs.join("run-42/disk.img"), "live job's VM disk");
    write(
        &runs.join("run-43/config.json"),
        "live job, idle for an hour",
    );
    age(&host.join("precious"), 30 * DAY);
    age(&runs.join("run-41"), 8 * HOUR);
    age(&runs.join("run-42"), 8 * HOUR);
    age(&runs.join("run-43"), HOUR);
    let killed_run = orphaned_sandbox(As::Root, &runs, "run", 2 * HOUR);
    let (live_run_owner, live_run) = job_sandbox(As::Root, &runs, "run");
    age(&live_run, 8 * HOUR);
    let vm = holding_open(&runs.join("run-42/disk.img"));
    let mut argv: Vec<&OsStr> = vec![exec.as_os_str()];
    argv.extend(args.iter().map(OsStr::new));
    let before = snapshot(host);
    let out = start_hook(
        As::Root,
        &argv,
        &[
            ("CUSTOM_ENV_CI_JOB_ID", OsStr::new("4243; touch PWNED")),
            ("CUSTOM_ENV_CI_BUILDS_DIR", host.as_os_str()),
            (
                "CUSTOM_ENV_CI_PROJECT_DIR",
                host.join("precious").as_os_str(),
            ),
            (
                "CUSTOM_ENV_SANDKEEPER_HOOK_TEMP",
                host.join("precious").as_os_str(),
            ),
            ("BUILD_FAILURE_EXIT_CODE", OsStr::new("1")),
            ("SYSTEM_FAILURE_EXIT_CODE", OsStr::new("2")),
        ],
        host,
    );
    let text = said(&out);
    assert_ok(&out, "cleanup_exec");
    assert!(
        text.contains("sandkeeper-hook[gitlab-cleanup-4243]"),
        "{text}"
    );
    assert_left(
        &before,
        &snapshot(host),
        host,
        &[killed_run, runs.join("run-41")],
        &text,
    );
    drop((live, live_owner, live_run_owner, vm));
    let _ = live_sandbox;
}

// ---------------------------------------------------------------------
// Buildkite
// ---------------------------------------------------------------------

#[test]
fn buildkite_pre_exit_reaps_a_killed_jobs_leftovers_beside_live_jobs() {
    run_in_pid_namespace(
        "buildkite_pre_exit_reaps_a_killed_jobs_leftovers_beside_live_jobs",
        "buildkite_inner",
    );
}

#[test]
#[ignore = "inner half of buildkite_pre_exit_reaps_a_killed_jobs_leftovers_beside_live_jobs"]
fn buildkite_inner() {
    if !in_namespace() {
        return;
    }
    let scratch = Scratch::reachable_by_others("runner-hooks-buildkite");
    let host = scratch.path();
    install(host);
    let builds = host.join("builds");
    let org = builds.join("agent-1/acme");
    let checkout = org.join("web");
    let temp = host.join("tmp");
    // This agent's checkouts (the current one, an old one, a recent one),
    // another organization's, another agent's (its job live), the plugins.
    write(&checkout.join(".git/HEAD"), "x");
    write(&org.join("old-pipeline/.git/HEAD"), "x");
    write(&org.join("recent-pipeline/.git/HEAD"), "x");
    write(&builds.join("agent-1/other-org/old/.git/HEAD"), "x");
    write(&builds.join("agent-2/acme/web/.git/HEAD"), "x");
    write(
        &host.join("plugins/github.com/buildkite-plugins/docker-buildkite-plugin/hooks/command"),
        "#!/bin/bash",
    );
    // The agent's own temp directory (SANDKEEPER_HOOK_TEMP_AGE=0: one
    // agent uses it): a killed job's leftovers a few minutes old, the
    // agent's `_*`, a file a job's daemon still holds, one made just now.
    write(&temp.join("_agent/x"), "x");
    write(&temp.join("killed/x"), "x");
    write(&temp.join("held/x"), "x");
    for dir in [&builds, &host.join("plugins"), &temp] {
        give_to_runner(dir);
        age(dir, 30 * DAY);
    }
    age(&org.join("recent-pipeline"), 2 * DAY);
    for name in ["killed", "held"] {
        age(&temp.join(name), Duration::from_secs(300));
    }
    let hostile = hostile_leftovers(&temp, Duration::from_secs(300));
    let orphan = orphaned_sandbox(As::Runner, &temp, "job", Duration::from_secs(300));
    write(&temp.join("fresh/x"), "x");
    give_to_runner(&builds);
    give_to_runner(&temp);
    let live = vec![
        nobody_living_in(&checkout),
        nobody_living_in(&builds.join("agent-2/acme/web")),
        holding_open(&temp.join("held/x")),
    ];

    let hook = contrib("buildkite/pre-exit");
    let env: Vec<(&str, OsString)> = vec![
        ("CI", "true".into()),
        ("BUILDKITE", "true".into()),
        ("HOME", host.into()),
        ("BUILDKITE_AGENT_NAME", "agent-1".into()),
        ("BUILDKITE_BUILD_PATH", builds.clone().into()),
        ("BUILDKITE_BUILD_CHECKOUT_PATH", checkout.clone().into()),
        ("BUILDKITE_HOOKS_PATH", contrib("buildkite").into()),
        ("BUILDKITE_PLUGINS_PATH", host.join("plugins").into()),
        ("BUILDKITE_ORGANIZATION_SLUG", "acme".into()),
        ("BUILDKITE_PIPELINE_SLUG", "web".into()),
        ("BUILDKITE_JOB_ID", "0190-aaaa".into()),
        ("BUILDKITE_COMMAND_EXIT_STATUS", "1".into()),
        ("TMPDIR", temp.clone().into()),
        ("SANDKEEPER_HOOK_TEMP", temp.clone().into()),
        ("SANDKEEPER_HOOK_TEMP_AGE", "0".into()),
    ];
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    // The agent sources its hooks in a wrapper script that goes on after
    // them (to read the environment they leave): the hook must return, not
    // exit, and leave no function behind.
    let wrapper = "set -e\n. \"$1\"\necho \"hook returned $?\"\ndeclare -F sk_buildkite_pre_exit && exit 3\nexit 0\n";
    let before = snapshot(host);
    let out = start_hook(
        As::Runner,
        &[
            "bash".as_ref(),
            "-c".as_ref(),
            wrapper.as_ref(),
            "hook-wrapper".as_ref(),
            hook.as_os_str(),
        ],
        &env,
        &checkout,
    );
    let text = said(&out);
    assert_ok(&out, "pre-exit");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hook returned 0"),
        "{text}"
    );
    let mut gone = vec![temp.join("killed"), orphan, org.join("old-pipeline")];
    gone.extend(hostile);
    assert_left(&before, &snapshot(host), host, &gone, &text);
    drop(live);
}

// ---------------------------------------------------------------------
// Every hook, when sandkeeper cannot do its part
// ---------------------------------------------------------------------

/// A directory of links to the few tools the hooks use besides sandkeeper
/// (so that PATH holds no sandkeeper, wherever one is installed).
fn tools_without_sandkeeper(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    mkdirs(&bin);
    for tool in [
        "bash", "sh", "dirname", "readlink", "id", "tr", "timeout", "sleep", "env",
    ] {
        let found = ["/usr/bin", "/bin", "/usr/local/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} is not installed"));
        std::os::unix::fs::symlink(&found, bin.join(tool)).unwrap();
    }
    bin
}

/// Each hook, as its CI starts it, with `path` as PATH and `extra`
/// variables, on a minimal runner tree under `dir`: each must exit 0 and
/// say `want` on stderr.
fn every_hook_exits_0(dir: &Path, path: &Path, extra: &[(&str, &str)], want: &str) {
    let work = dir.join("_work");
    mkdirs(&work.join("_temp"));
    mkdirs(&work.join("_PipelineMapping"));
    mkdirs(&work.join("app/app"));
    let builds = dir.join("builds");
    let project = builds.join("t1/0/acme/app");
    mkdirs(&project);
    let checkout = builds.join("agent-1/acme/web");
    mkdirs(&checkout);
    let temp = dir.join("tmp");
    mkdirs(&temp);
    let config = gitlab_config(&temp, &temp);
    let shell = gitlab_runner(&config, "shell");
    let custom = gitlab_runner(&config, "custom")["custom"]
        .as_table()
        .unwrap();
    let cleanup = custom["cleanup_exec"].as_str().unwrap().to_owned();
    let mut common: Vec<(String, OsString)> = vec![
        ("PATH".into(), path.into()),
        ("HOME".into(), dir.into()),
        ("SANDKEEPER_HOOK_TEMP".into(), temp.clone().into()),
        ("RUNNER_TEMP".into(), work.join("_temp").into()),
        ("RUNNER_WORKSPACE".into(), work.join("app").into()),
        ("GITHUB_WORKSPACE".into(), work.join("app/app").into()),
        ("CI_BUILDS_DIR".into(), builds.clone().into()),
        ("CI_PROJECT_DIR".into(), project.clone().into()),
        ("BUILDKITE_BUILD_PATH".into(), builds.clone().into()),
        (
            "BUILDKITE_BUILD_CHECKOUT_PATH".into(),
            checkout.clone().into(),
        ),
    ];
    for (k, v) in extra {
        common.push(((*k).into(), (*v).into()));
    }
    let hooks: Vec<(&str, Vec<OsString>)> = vec![
        (
            "job-started.sh",
            vec![
                "bash".into(),
                "-e".into(),
                contrib("github-actions/job-started.sh").into(),
            ],
        ),
        (
            "job-completed.sh",
            vec![
                "bash".into(),
                "-e".into(),
                contrib("github-actions/job-completed.sh").into(),
            ],
        ),
        (
            "pre_build_script",
            vec![
                "bash".into(),
                "-c".into(),
                format!(
                    "set -eo pipefail\n{}\n",
                    shell["pre_build_script"].as_str().unwrap()
                )
                .into(),
            ],
        ),
        (
            "post_build_script",
            vec![
                "bash".into(),
                "-c".into(),
                format!(
                    "set -eo pipefail\n{}\n",
                    shell["post_build_script"].as_str().unwrap()
                )
                .into(),
            ],
        ),
        (
            "cleanup_exec",
            vec![cleanup.clone().into(), "--temp".into(), temp.clone().into()],
        ),
        (
            "pre-exit, sourced",
            vec![
                "bash".into(),
                "-c".into(),
                "set -e; . \"$1\"".into(),
                "wrapper".into(),
                contrib("buildkite/pre-exit").into(),
            ],
        ),
        ("pre-exit, run", vec![contrib("buildkite/pre-exit").into()]),
    ];
    for (name, argv) in &hooks {
        // With the CI's variables, and with none of them.
        for with_vars in [true, false] {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .env_clear()
                .current_dir(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in &common {
                if with_vars || k == "PATH" || extra.iter().any(|(e, _)| e == k) {
                    cmd.env(k, v);
                }
            }
            let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: {e}"));
            let out = wait_with_deadline(&mut child, DEADLINE);
            let text = said(&out);
            assert_ok(&out, name);
            if with_vars {
                assert!(text.contains(want), "{name}: wanted {want:?}:\n{text}");
            }
        }
    }
}

#[test]
fn hooks_exit_0_when_sandkeeper_is_missing_fails_or_hangs() {
    let scratch = sandkeeper_engine::sandbox!().unwrap();
    let bin = tools_without_sandkeeper(scratch.path());
    // Missing from PATH.
    every_hook_exits_0(
        &scratch.join("missing"),
        &bin,
        &[],
        "sandkeeper not found (PATH=",
    );
    // Failing: an old or broken install refusing its arguments.
    let failing = scratch.join("failing-bin");
    mkdirs(&failing);
    write(
        &failing.join("sandkeeper"),
        "#!/bin/sh\necho 'error: broken' >&2\nexit 2\n",
    );
    sandkeeper_testkit::tree::chmod(&failing.join("sandkeeper"), 0o755);
    let path = std::env::join_paths([&failing, &bin]).unwrap();
    every_hook_exits_0(
        &scratch.join("failing"),
        Path::new(&path),
        &[],
        "sandkeeper failed (exit status 2, see above); the job goes on",
    );
    // Hanging (a dead network mount, say): stopped by the hook's timeout.
    let hanging = scratch.join("hanging-bin");
    mkdirs(&hanging);
    write(&hanging.join("sandkeeper"), "#!/bin/sh\nexec sleep 600\n");
    sandkeeper_testkit::tree::chmod(&hanging.join("sandkeeper"), 0o755);
    let path = std::env::join_paths([&hanging, &bin]).unwrap();
    every_hook_exits_0(
        &scratch.join("hanging"),
        Path::new(&path),
        &[("SANDKEEPER_HOOK_TIMEOUT", "0.5s")],
        "stopped after 0.5s",
    );
}

// ---------------------------------------------------------------------
// The docs
// ---------------------------------------------------------------------

/// The `watch` config the runner docs give checks out as written, and the
/// install paths the docs and contrib files name are files of contrib/.
#[test]
fn the_docs_watch_config_checks_out_and_named_scripts_exist() {
    let scratch = sandkeeper_engine::sandbox!().unwrap();
    let config = scratch.join("config.toml");
    fs::write(&config, doc_block(WATCH_CONFIG_MARKER)).unwrap();
    let out = Command::new(SANDKEEPER)
        .args(["watch", "--check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = said(&out);
    assert_ok(&out, "watch --check");
    for root in [
        "/home/runner/actions-runner-1/_work/_temp",
        "/home/runner/actions-runner-2/_work/_temp",
    ] {
        assert!(text.contains(&format!("root {root}: ")), "{text}");
    }
    let mut named = 0;
    for file in [
        "docs/integrations.md",
        "contrib/gitlab-runner/config.toml",
        "contrib/gitlab-runner/build-hook.sh",
        "contrib/gitlab-runner/cleanup.sh",
        "contrib/github-actions/job-completed.sh",
        "contrib/github-actions/job-started.sh",
        "contrib/buildkite/pre-exit",
    ] {
        let text = fs::read_to_string(top().join(file)).unwrap();
        for (at, _) in text.match_indices("/usr/local/lib/sandkeeper/") {
            let rest = &text[at + "/usr/local/lib/sandkeeper/".len()..];
            let rel: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "-_./".contains(*c))
                .collect();
            if rel.is_empty() {
                continue;
            }
            assert!(
                contrib(&rel).exists(),
                "{file} names contrib/{rel}, which does not exist"
            );
            named += 1;
        }
    }
    assert!(
        named >= 6,
        "the docs and contrib files name only {named} scripts"
    );
}
