//! Issue 27: a launcher's whole life (`docs/launchers.md`). The launcher
//! recipe, in Rust, ended every way a launcher ends: a clean exit, an
//! error (a panic), `process::exit` and `abort` (no destructor runs),
//! SIGTERM, SIGINT, SIGHUP, SIGKILL and an OOM kill in a memory cgroup.
//! Each leaves no process of its own and nothing on disk after at most
//! one `sandkeeper reap` with default options, while a live launcher
//! beside them loses nothing.
//!
//! The launchers make what a VM launcher makes, for real: a run dir with a
//! sparse 1 GiB ext4 image, mounted on an autoclear loop device in the
//! launcher's own mount namespace, and a stand-in VM (`sleep`) holding a
//! file inside the mount.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::process::{alive, test_command, wait_until, Helper};

use super::{sandkeeper, stdout};

/// What the launcher does once its VM runs, from the test.
const ENDING_ENV: &str = "SK_LAUNCHER_ENDING";
/// Where it makes its run dir.
const ROOT_ENV: &str = "SK_LAUNCHER_ROOT";

type Failure = Box<dyn std::error::Error>;

/// The launcher recipe of `docs/launchers.md`, as its author writes it.
fn launch(root: &Path, ending: &str) -> Result<(), Failure> {
    sandkeeper_engine::teardown_on_signals()?;
    let run = Sandbox::builder().root(root).tag("vm").create()?;
    // Registered first, so it runs last: after the VM was stopped and the
    // image unmounted, before the directory goes.
    run.defer(|| println!("TEARDOWN done"));
    let image = run.join("rootfs.img");
    File::create(&image)?.set_len(1 << 30)?; // a sparse 1 GiB image
    command(
        "mkfs.ext4",
        &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
    )?;
    let mnt = run.join("mnt");
    fs::create_dir(&mnt)?;
    // `mount -o loop` makes an autoclear loop device: it goes with the
    // last unmount, the teardown's or the kernel's when this launcher's
    // mount namespace dies with it.
    command(
        "mount",
        &[
            "-o".as_ref(),
            "loop".as_ref(),
            image.as_os_str(),
            mnt.as_os_str(),
        ],
    )?;
    let unmount = mnt.clone();
    run.defer(move || command("umount", &[unmount.as_os_str()]).expect("unmount the image"));
    fs::write(mnt.join("state"), "booted")?;
    let vm = run.spawn(
        Command::new("sleep")
            .arg("600")
            .stdin(File::open(mnt.join("state"))?),
    )?;
    println!("READY {} {vm}", run.display());
    match ending {
        "clean" => run.close()?,
        "error" => panic!("the VM failed to boot"),
        // Ends without unwinding: no destructor, no teardown.
        "exit" => std::process::exit(3),
        "abort" => {
            // (No core file in the test's directory, whatever the limit.)
            let none = rustix::process::Rlimit {
                current: Some(0),
                maximum: Some(0),
            };
            let _ = rustix::process::setrlimit(rustix::process::Resource::Core, none);
            std::process::abort()
        }
        "hog" => hog(),
        _ => std::thread::sleep(Duration::from_secs(600)),
    }
    Ok(())
}

/// Runs `program args…`, failing with its stderr.
fn command(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), Failure> {
    let out = Command::new(program).args(args).output()?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{program} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into()),
    }
}

/// Takes memory until the OOM killer ends this process.
fn hog() {
    let mut taken: Vec<Vec<u8>> = Vec::new();
    loop {
        taken.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&taken);
    }
}

#[test]
#[ignore = "helper: the launcher recipe, ended as SK_LAUNCHER_ENDING says"]
fn launcher_main() {
    let (Some(root), Ok(ending)) = (std::env::var_os(ROOT_ENV), std::env::var(ENDING_ENV)) else {
        return;
    };
    if ending == "own-handlers" {
        return with_own_handlers(Path::new(&root)).unwrap();
    }
    launch(Path::new(&root), &ending).unwrap();
}

/// A program with signal dispositions of its own before it asks for the
/// teardown: a SIGTERM handler (plain `signal`, as C code or an older
/// crate installs one) and SIGHUP ignored (as under `nohup`).
#[allow(unsafe_code)]
fn with_own_handlers(root: &Path) -> Result<(), Failure> {
    extern "C" fn own(_: libc::c_int) {
        let said = b"OWN handler\n";
        // SAFETY: write(2) is async-signal-safe; the buffer is static.
        let _ = unsafe { libc::write(1, said.as_ptr().cast(), said.len()) };
    }
    // SAFETY: installs a handler that only calls write(2), and SIG_IGN.
    unsafe {
        libc::signal(
            libc::SIGTERM,
            own as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    sandkeeper_engine::teardown_on_signals()?;
    sandkeeper_engine::teardown_on_signals()?; // a second call adds nothing
    let run = Sandbox::builder().root(root).tag("vm").create()?;
    run.defer(|| println!("TEARDOWN done"));
    let vm = run.spawn(Command::new("sleep").arg("600"))?;
    println!("READY {} {vm}", run.display());
    std::thread::sleep(Duration::from_secs(600));
    Ok(())
}

/// Issue 27: `teardown_on_signals` chains (the program's own handler runs
/// first, once), leaves an ignored signal ignored, and ends the process by
/// the signal.
#[test]
fn the_signal_teardown_chains_to_the_programs_own_handlers() {
    let scratch = sandkeeper_engine::sandbox!().unwrap();
    let Launcher { helper, run, vm } = start_plain(&scratch, "own-handlers");
    let pid = rustix::process::Pid::from_raw(helper.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        alive(helper.pid()) && run.is_dir() && alive(vm),
        "an ignored SIGHUP tore down"
    );
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let exit = helper.wait();
    let at = |what: &str| exit.stdout.iter().position(|l| l.contains(what));
    let (own, teardown) = (at("OWN handler"), at("TEARDOWN done"));
    assert!(own.is_some() && own < teardown, "{exit:?}");
    assert_eq!(
        exit.stdout
            .iter()
            .filter(|l| l.contains("OWN handler"))
            .count(),
        1
    );
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&exit.status),
        Some(libc::SIGTERM),
        "{exit:?}"
    );
    assert!(!run.exists() && !alive(vm), "{exit:?}");
}

/// A launcher without the mount (no root needed), not in a namespace.
fn start_plain(root: &Path, ending: &str) -> Launcher {
    start_via(&[], root, ending)
}

#[test]
fn a_launchers_every_ending_leaves_nothing_after_one_reap() {
    run_in_pid_namespace(
        "a_launchers_every_ending_leaves_nothing_after_one_reap",
        "launcher::every_ending_inner",
    );
}

/// One launcher started, with the run dir and VM it reported.
struct Launcher {
    helper: Helper,
    run: PathBuf,
    vm: u32,
}

fn start(root: &Path, ending: &str, wrapper: &[&str]) -> Launcher {
    let mut wrapped: Vec<&str> = wrapper.to_vec();
    // Its own mount namespace: its mounts are undone by the kernel when
    // it and its VM are gone, however they went.
    wrapped.extend(["unshare", "--mount", "--propagation", "private"]);
    start_via(&wrapped, root, ending)
}

/// The launcher helper, through `wrapper`, once it said READY.
fn start_via(wrapper: &[&str], root: &Path, ending: &str) -> Launcher {
    let mut cmd = test_command(wrapper, "launcher::launcher_main");
    cmd.env(ROOT_ENV, root)
        .env(ENDING_ENV, ending)
        .env_remove("SANDKEEPER_KEEP");
    default_termination_signals(&mut cmd);
    let helper = Helper::spawn(cmd);
    let ready = helper.expect("READY");
    let (run, vm) = ready.rsplit_once(' ').expect("READY <run dir> <vm pid>");
    Launcher {
        run: PathBuf::from(run),
        vm: vm.parse().expect("vm pid"),
        helper,
    }
}

/// Starts `cmd` with the termination signals at their default action: a
/// suite run under `nohup` (SIGHUP ignored, and inherited) must not make
/// the launcher ignore the SIGHUP the test sends. (Ignored signals stay
/// ignored by `teardown_on_signals`, on purpose.)
#[allow(unsafe_code)]
fn default_termination_signals(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec, signal(2) only: async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// Reaps the zombies reparented to us (we are PID 1 of the namespace).
fn reap_zombies() {
    while let Ok(Some(_)) = rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {}
}

/// Whether a loop device is backed by a file under `dir` (the kernel
/// detaches an autoclear one shortly after its last unmount).
fn loop_backed_in(dir: &Path) -> bool {
    let Ok(devices) = fs::read_dir("/sys/block") else {
        return false;
    };
    devices.flatten().any(|d| {
        fs::read_to_string(d.path().join("loop/backing_file"))
            .is_ok_and(|f| Path::new(f.trim()).starts_with(dir))
    })
}

/// A memory cgroup of `limit` bytes, v2 or v1, removed on drop; `None`
/// (with why) where none can be made.
struct MemoryBox(PathBuf);

impl MemoryBox {
    fn new(limit: u64) -> Result<MemoryBox, String> {
        let own = fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let name = format!("sandkeeper-test-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        if fs::read_to_string(v2).is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) {
            let at = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            let dir = Path::new("/sys/fs/cgroup")
                .join(at.trim_start_matches('/'))
                .join(name);
            fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let made = MemoryBox(dir);
            fs::write(made.0.join("memory.max"), limit.to_string()).map_err(|e| e.to_string())?;
            let _ = fs::write(made.0.join("memory.swap.max"), "0");
            return Ok(made);
        }
        let v1 = Path::new("/sys/fs/cgroup/memory");
        if v1.is_dir() {
            let at = own
                .lines()
                .find_map(|l| l.split_once(":memory:").map(|(_, p)| p))
                .unwrap_or("/");
            let dir = v1.join(at.trim_start_matches('/')).join(name);
            fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let made = MemoryBox(dir);
            fs::write(made.0.join("memory.limit_in_bytes"), limit.to_string())
                .map_err(|e| e.to_string())?;
            let _ = fs::write(
                made.0.join("memory.memsw.limit_in_bytes"),
                limit.to_string(),
            );
            return Ok(made);
        }
        Err("no memory cgroup controller (neither v2 nor v1) is mounted".into())
    }

    /// The OOM kills the cgroup counted (`oom_kill` in v2's memory.events,
    /// v1's memory.oom_control).
    fn oom_kills(&self) -> u64 {
        ["memory.events", "memory.oom_control"]
            .iter()
            .filter_map(|f| fs::read_to_string(self.0.join(f)).ok())
            .flat_map(|text| {
                text.lines()
                    .filter_map(|l| l.strip_prefix("oom_kill "))
                    .filter_map(|n| n.trim().parse::<u64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    /// A wrapper that moves what it runs into the cgroup, then `exec`s it.
    fn wrapper(&self) -> [String; 4] {
        [
            "sh".into(),
            "-c".into(),
            format!(
                "echo $$ > '{}/cgroup.procs' && exec \"$@\"",
                self.0.display()
            ),
            "sh".into(),
        ]
    }
}

impl Drop for MemoryBox {
    fn drop(&mut self) {
        // (Its processes are gone; the kernel may take a moment to say so.)
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
#[ignore = "inner half of a_launchers_every_ending_leaves_nothing_after_one_reap"]
fn every_ending_inner() {
    if !in_namespace() {
        return;
    }
    let scratch = sandkeeper_engine::sandbox!().unwrap();
    let root = scratch.join("runs");
    fs::create_dir(&root).unwrap();
    // A live launcher beside all the others, from first to last.
    let live = start(&root, "wait", &[]);
    let memory = MemoryBox::new(96 << 20);
    let endings = [
        "clean", "error", "exit", "abort", "SIGTERM", "SIGINT", "SIGHUP", "SIGKILL", "OOM",
    ];
    for ending in endings {
        let launcher = match ending {
            "clean" | "error" | "exit" | "abort" => start(&root, ending, &[]),
            "OOM" => match &memory {
                Ok(memory) => {
                    let wrapper = memory.wrapper();
                    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
                    start(&root, "hog", &wrapper)
                }
                Err(why) => {
                    // Not skipped quietly: CI must be able to make one.
                    assert!(
                        std::env::var_os("CI").is_none(),
                        "OOM: cannot make a memory cgroup: {why}"
                    );
                    println!("skipped OOM: cannot make a memory cgroup: {why}");
                    continue;
                }
            },
            _ => start(&root, "wait", &[]),
        };
        let Launcher {
            mut helper,
            run,
            vm,
        } = launcher;
        let pid = rustix::process::Pid::from_raw(helper.pid() as i32).unwrap();
        let signal = match ending {
            "SIGTERM" => Some(rustix::process::Signal::TERM),
            "SIGINT" => Some(rustix::process::Signal::INT),
            "SIGHUP" => Some(rustix::process::Signal::HUP),
            "SIGKILL" => Some(rustix::process::Signal::KILL),
            _ => None,
        };
        if let Some(signal) = signal {
            rustix::process::kill_process(pid, signal).unwrap();
        }
        if ending == "SIGKILL" {
            helper.kill();
        }
        // (After SIGKILL or the OOM killer no teardown runs: the kernel
        // kills the VM.)
        let exit = helper.wait();
        let said = format!("{ending}: {exit:?}");
        let by_signal = std::os::unix::process::ExitStatusExt::signal(&exit.status);
        let tore_down = exit.stdout.iter().any(|l| l.contains("TEARDOWN done"));
        match ending {
            "clean" => assert!(exit.success && tore_down, "{said}"),
            "error" => assert!(!exit.success && tore_down, "{said}"),
            "SIGTERM" | "SIGINT" | "SIGHUP" => {
                assert!(tore_down, "{said}");
                // Ended by the signal it got, as if it had no handler.
                assert_eq!(by_signal, signal.map(|s| s.as_raw()), "{said}");
                // Removed by its own teardown, before any reap.
                assert!(!run.exists(), "{said}: the run dir outlived the teardown");
            }
            "exit" => assert!(exit.status.code() == Some(3) && !tore_down, "{said}"),
            "abort" => {
                let abort = rustix::process::Signal::ABORT.as_raw();
                assert!(by_signal == Some(abort) && !tore_down, "{said}");
            }
            _ => assert!(!tore_down, "{said}"),
        }
        if let ("OOM", Ok(memory)) = (ending, &memory) {
            assert_eq!(
                by_signal,
                Some(rustix::process::Signal::KILL.as_raw()),
                "{said}"
            );
            assert!(
                memory.oom_kills() > 0,
                "{said}: the cgroup counted no OOM kill"
            );
        }
        // No process of its own is left: the VM is gone.
        wait_until(&format!("{ending}: the VM to die"), || {
            reap_zombies();
            !alive(vm)
        });
        // The kernel undoes the mount with the launcher's namespace and
        // detaches the autoclear loop device after it.
        wait_until(&format!("{ending}: the loop device to go"), || {
            !loop_backed_in(&run)
        });
        println!(
            "{ending}: exit {:?}, teardown ran: {tore_down}",
            exit.status
        );
        // At most one reap, with default options (no --grace 0s).
        let out = sandkeeper(&["reap", root.to_str().unwrap()]);
        let text = format!(
            "{said}\nreap: {}{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(!run.exists(), "{text}\nthe run dir is still there");
        // The live launcher lost nothing.
        // (Its mount is in its own namespace: seen through its /proc root.)
        let in_live = Path::new("/proc")
            .join(live.helper.pid().to_string())
            .join("root")
            .join(live.run.strip_prefix("/").unwrap())
            .join("mnt/state");
        assert!(in_live.exists(), "{text}\nthe live launcher lost its mount");
        assert!(alive(live.vm), "{text}\nthe live launcher's VM died");
        let left: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(left, vec![live.run.clone()], "{text}");
    }
    // Last, the live one is told to stop: it tears down and goes.
    let pid = rustix::process::Pid::from_raw(live.helper.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let exit = live.helper.wait();
    assert!(
        exit.stdout.iter().any(|l| l.contains("TEARDOWN done")),
        "{exit:?}"
    );
    reap_zombies();
    assert!(!alive(live.vm));
    assert_eq!(fs::read_dir(&root).unwrap().count(), 0);
    drop(memory);
}
