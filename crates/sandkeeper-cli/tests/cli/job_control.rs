//! Issue 15: `sandkeeper run` in a real terminal is one job of the shell
//! that started it. Ctrl-Z stops the command and gives the prompt back,
//! `jobs` says it is stopped, `fg` and `bg` continue it, and Ctrl-C ends
//! it, with the directory cleaned up in every case.
//!
//! The terminal is a tmux pane running an interactive `bash` (job control
//! on); keys go in with `send-keys`, the screen comes out with
//! `capture-pane`. Every wait is bounded by [`DEADLINE`]; the tmux server
//! (on a socket of its own inside the test's sandbox) is killed when the
//! test ends, failed or not.

use std::cell::Cell;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::process::DEADLINE;
use sandkeeper_testkit::tree::names;

/// The shell's prompt, so that a returned prompt can be told apart.
const PROMPT: &str = "jc$ ";

/// A tmux server with one pane running `bash -i`, killed on drop.
struct Terminal {
    socket: PathBuf,
    shell: u32,
    /// The marks [`Terminal::shell`] used.
    marks: Cell<u32>,
    /// The sandbox holding the socket, the shell's home and the run's root.
    dir: Sandbox,
}

impl Terminal {
    /// Starts one, or returns `None` (saying why) when tmux is missing and
    /// `CI` is unset; in CI it must run.
    fn start(test: &str) -> Option<Terminal> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test} needs tmux, and CI is set (.ci/run installs it)"
            );
            eprintln!("skipping {test}: needs tmux");
            return None;
        }
        // In the temp directory, not target/tmp: a unix socket's path has
        // at most 107 bytes.
        let dir = Sandbox::builder()
            .root(std::env::temp_dir())
            .tag("jc")
            .create()
            .expect("make the terminal's sandbox");
        fs::create_dir(dir.path().join("root")).unwrap();
        let socket = dir.path().join("tmux");
        let shell = format!(
            "exec env -i PATH={path} HOME={home} HISTFILE=/dev/null TERM=xterm-256color \
             PS1='{PROMPT}' bash --norc --noprofile -i",
            path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
            home = dir.path().display(),
        );
        let status = Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
            ])
            .arg(shell)
            .stdin(Stdio::null())
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session: {status}");
        let mut terminal = Terminal {
            socket,
            shell: 0,
            marks: Cell::new(0),
            dir,
        };
        terminal.shell = terminal
            .tmux(&["display-message", "-p", "#{pane_pid}"])
            .trim()
            .parse()
            .expect("the pane's pid");
        terminal.wait_for("the first prompt", |s| s.contains(PROMPT));
        Some(terminal)
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Where `run` makes its directories.
    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Writes `script` to a file and returns the command line that runs
    /// it under `sandkeeper run` (`$0` is the script's path in it).
    fn run_line(&self, name: &str, script: &str) -> String {
        let file = self.dir.path().join(name);
        fs::write(&file, script).unwrap();
        format!(
            "{} run --root {} -- sh {}",
            env!("CARGO_BIN_EXE_sandkeeper"),
            self.root().display(),
            file.display()
        )
    }

    /// Types `line` and Enter.
    fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", line]);
        self.tmux(&["send-keys", "-t", "0", "Enter"]);
    }

    /// Presses a key (`C-z`, `C-c`).
    fn press(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "0", key]);
    }

    /// The whole pane, history included, wrapped lines joined.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", "0"])
    }

    /// Waits until the screen satisfies `done`, failing with the screen
    /// after [`DEADLINE`].
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        self.wait_for_or(what, done, String::new)
    }

    /// [`wait_for`](Terminal::wait_for), failing with `more()` too.
    fn wait_for_or(
        &self,
        what: &str,
        done: impl Fn(&str) -> bool,
        more: impl Fn() -> String,
    ) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "waited {DEADLINE:?} for {what}; the screen:\n{}\n{}",
                screen.trim_end(),
                more()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Presses Ctrl-Z and waits for the shell to say its job stopped.
    fn stop_job(&self, pid: u32) {
        self.press("C-z");
        self.wait_for_or(
            "the job stopped",
            |s| s.contains("Stopped"),
            || processes(pid),
        );
    }

    /// Waits for a line that is exactly `line`, or the prompt and `line`
    /// (a background job's output after the prompt); not the typed command
    /// that prints it.
    fn wait_line(&self, line: &str) -> String {
        let after_prompt = format!("{PROMPT}{line}");
        self.wait_for(line, |s| {
            s.lines()
                .any(|l| l.trim_end() == line || l.trim_end() == after_prompt)
        })
    }

    /// Runs `command; echo MARK-N` at the prompt and returns what it
    /// printed: proves that the prompt is back (typed into a running
    /// command, it would not run). `N` is typed as `$((N+0))`, so only the
    /// output has the mark.
    fn shell(&self, command: &str) -> String {
        let n = self.marks.get() + 1;
        self.marks.set(n);
        let mark = format!("MARK-{n}");
        let typed = format!("{command}; echo MARK-$(({n}+0))");
        self.type_line(&typed);
        let screen = self.wait_line(&mark);
        let at = screen
            .rfind(&typed)
            .expect("the typed command on the screen")
            + typed.len();
        let end = screen.rfind(&mark).expect("the mark");
        screen[at..end].trim().to_owned()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .stdin(Stdio::null())
            .status();
        // The shell hangs up its jobs (continuing stopped ones) and exits;
        // then the sandbox goes.
        let deadline = Instant::now() + DEADLINE;
        while self.shell != 0 && alive(self.shell) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z')
}

struct Stat {
    state: char,
    pgrp: i32,
    tpgid: i32,
}

/// Fields 3, 5 and 8 of `/proc/PID/stat`.
fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        tpgid: fields.get(5)?.parse().ok()?,
    })
}

/// What a failure says of the command `pid` and of its parent (`run`):
/// each one's state, groups and signal sets from `/proc/PID/status`, so
/// that a stop that never came can be told apart (never sent, ignored,
/// blocked, or pending).
fn processes(pid: u32) -> String {
    let mut out = String::new();
    let mut next = Some(pid);
    for who in ["command", "run"] {
        let Some(p) = next.take() else { break };
        let status = fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        let keep = |l: &&str| {
            [
                "State", "PPid", "NSpgid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        };
        let lines: Vec<&str> = status.lines().filter(keep).collect();
        let stat = stat(p).map(|s| format!("pgrp {} tpgid {}", s.pgrp, s.tpgid));
        out.push_str(&format!("{who} {p} ({stat:?}): {}\n", lines.join(", ")));
        next = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse().ok());
    }
    out
}

/// The pid the script wrote to `$0.pid`, once it did.
fn pid_file(path: &Path) -> u32 {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(pid) = fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `pid` satisfies `done`.
fn wait_pid(pid: u32, what: &str, done: impl Fn(&Stat) -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !stat(pid).as_ref().is_some_and(&done) {
        assert!(Instant::now() < deadline, "pid {pid}: never {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The command's group holds the terminal, and it runs.
fn in_foreground(pid: u32) {
    wait_pid(pid, "in the foreground", |s| {
        s.tpgid == s.pgrp && s.pgrp == pid as i32 && s.state != 'T'
    });
}

#[test]
fn ctrl_z_gives_the_prompt_back_and_fg_continues() {
    let Some(term) = Terminal::start("ctrl_z_gives_the_prompt_back_and_fg_continues") else {
        return;
    };
    let script = r#"echo $$ > "$0.pid"; echo ready; read line; echo "got $line"; echo leak > "$TMPDIR/app-1""#;
    term.type_line(&term.run_line("fg.sh", script));
    term.wait_line("ready");
    let pid = pid_file(&term.dir.path().join("fg.sh.pid"));
    in_foreground(pid);

    term.stop_job(pid);
    let jobs = term.shell("jobs");
    assert!(
        jobs.contains("Stopped") && jobs.contains("run --root"),
        "{jobs}"
    );
    assert_eq!(
        stat(pid).map(|s| s.state),
        Some('T'),
        "the command is stopped"
    );

    term.type_line("fg");
    in_foreground(pid);
    term.type_line("hello");
    term.wait_line("got hello");
    term.wait_for("run's report", |s| {
        s.contains("sandkeeper: sh left 1 entry")
    });
    let status = term.shell("echo status=$?");
    assert_eq!(status.trim(), "status=0");
    assert!(names(&term.root()).is_empty(), "{:?}", names(&term.root()));
}

#[test]
fn bg_continues_in_the_background() {
    let Some(term) = Terminal::start("bg_continues_in_the_background") else {
        return;
    };
    let script = r#"echo $$ > "$0.pid"; echo ready
while [ ! -e "$0.go" ]; do sleep 0.05; done
echo leak > "$TMPDIR/app-1"; echo finished"#;
    term.type_line(&term.run_line("bg.sh", script));
    term.wait_line("ready");
    let pid = pid_file(&term.dir.path().join("bg.sh.pid"));
    in_foreground(pid);

    term.stop_job(pid);
    // Told to go on while stopped: it cannot, until `bg`.
    fs::write(term.dir.path().join("bg.sh.go"), "").unwrap();
    assert_eq!(
        stat(pid).map(|s| s.state),
        Some('T'),
        "the command is stopped"
    );
    let jobs = term.shell("jobs");
    assert!(jobs.contains("Stopped"), "{jobs}");

    term.type_line("bg");
    term.wait_line("finished");
    // A background job writes to the terminal when it likes: `run`'s
    // report may land between the command and its answer.
    let status = term.shell("wait; echo status=$?");
    assert_eq!(status.trim().lines().last(), Some("status=0"), "{status}");
    let screen = term.screen();
    assert!(screen.contains("sandkeeper: sh left 1 entry"), "{screen}");
    assert!(names(&term.root()).is_empty(), "{:?}", names(&term.root()));
}

#[test]
fn ctrl_c_after_fg_ends_the_command_and_run_cleans_up() {
    let Some(term) = Terminal::start("ctrl_c_after_fg_ends_the_command_and_run_cleans_up") else {
        return;
    };
    // The background sleep ignores SIGINT (a non-interactive shell's
    // background job): `run` must stop it before the directory goes.
    let script = r#"echo $$ > "$0.pid"; touch "$TMPDIR/app-1"
sleep 600 & echo $! > "$0.daemon"
echo ready; exec sleep 601"#;
    term.type_line(&term.run_line("int.sh", script));
    term.wait_line("ready");
    let pid = pid_file(&term.dir.path().join("int.sh.pid"));
    let daemon = pid_file(&term.dir.path().join("int.sh.daemon"));
    in_foreground(pid);

    term.stop_job(pid);
    term.type_line("fg");
    in_foreground(pid);
    term.press("C-c");
    term.wait_for("run's report", |s| {
        s.contains("sandkeeper: sh left 1 entry")
    });
    let status = term.shell("echo status=$?");
    assert_eq!(status.trim(), "status=130");
    assert!(
        !alive(pid) && !alive(daemon),
        "the command's processes are gone"
    );
    assert!(names(&term.root()).is_empty(), "{:?}", names(&term.root()));
}

/// `fg` of a job that runs gets no SIGCONT from bash or zsh: the command
/// gets the terminal when it next reads it (SIGTTIN), as `run` then finds
/// itself in the foreground.
#[test]
fn fg_after_bg_gives_the_command_the_terminal() {
    let Some(term) = Terminal::start("fg_after_bg_gives_the_command_the_terminal") else {
        return;
    };
    let script = r#"echo $$ > "$0.pid"; echo ready
while [ ! -e "$0.go" ]; do sleep 0.05; done
read line; echo "got $line""#;
    term.type_line(&term.run_line("bgfg.sh", script));
    term.wait_line("ready");
    let pid = pid_file(&term.dir.path().join("bgfg.sh.pid"));
    in_foreground(pid);

    term.stop_job(pid);
    term.type_line("bg");
    wait_pid(pid, "running in the background", |s| {
        s.state != 'T' && s.tpgid != s.pgrp
    });
    term.type_line("fg");
    // The shell gives `run`'s group (neither the command's nor its own)
    // the terminal, and no signal: the command is still in the background.
    let shell = term.shell as i32;
    wait_pid(pid, "behind run in the foreground", |s| {
        s.tpgid != s.pgrp && s.tpgid != shell
    });
    fs::write(term.dir.path().join("bgfg.sh.go"), "").unwrap();
    in_foreground(pid);
    term.type_line("hello");
    term.wait_line("got hello");
    let status = term.shell("echo status=$?");
    assert_eq!(status.trim(), "status=0");
    assert!(names(&term.root()).is_empty(), "{:?}", names(&term.root()));
}
