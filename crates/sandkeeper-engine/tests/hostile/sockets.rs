//! Finding 5(b), sockets: a listening unix socket bound inside an entry
//! by a relative path, through a bind-mount alias, or in another network
//! namespace. `/proc/net/unix` names none of them by the entry's path
//! (and lists only the reader's network namespace); the socket file's
//! inode, which `NETLINK_SOCK_DIAG` reports for every namespace, does.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use sandkeeper_engine::sandbox;
use sandkeeper_testkit::namespace::{in_namespace, run_in_pid_namespace};
use sandkeeper_testkit::process::spawn_ready;
use sandkeeper_testkit::scratch::Scratch;

use crate::kernel_support::{assert_in_use_and_kept, scan_via, sh};

/// Binds a listening socket at `name` relative to `dir`, then moves its
/// working directory to `/` (so only the socket ties it to `dir`), says
/// `ready` and sleeps.
const BINDER: &str = "import os, socket, sys, time
os.chdir(sys.argv[1])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[2])
s.listen(1)
os.chdir('/')
print('ready', flush=True)
time.sleep(600)
";

fn binder(wrapper: &[&str], dir: &Path, name: &str) -> Command {
    let mut cmd = Command::new(wrapper.first().copied().unwrap_or("/usr/bin/python3"));
    if !wrapper.is_empty() {
        cmd.args(&wrapper[1..]).arg("/usr/bin/python3");
    }
    cmd.arg("-c").arg(BINDER).arg(dir).arg(name);
    cmd
}

#[test]
fn socket_bound_by_a_relative_path_is_in_use() {
    run_in_pid_namespace(
        "socket_bound_by_a_relative_path_is_in_use",
        "sockets::inner_socket_bound_by_a_relative_path",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_socket_bound_by_a_relative_path() {
    if !in_namespace() {
        return;
    }
    // nobody binds it, in a shared root: no privilege needed.
    let root = Scratch::reachable_by_others("hostile-sockets-relative");
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let entry = root.path().join("app-sock");
    fs::create_dir(&entry).unwrap();
    fs::set_permissions(&entry, fs::Permissions::from_mode(0o777)).unwrap();
    let _binder = spawn_ready(&mut binder(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &entry,
        "s",
    ));
    assert!(entry.join("s").exists());
    assert_in_use_and_kept(root.path(), "app-sock");
}

#[test]
fn socket_bound_through_a_bind_mount_alias_is_in_use() {
    run_in_pid_namespace(
        "socket_bound_through_a_bind_mount_alias_is_in_use",
        "sockets::inner_socket_bound_through_a_bind_mount_alias",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_socket_bound_through_a_bind_mount_alias() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let elsewhere = sandbox!().unwrap();
    let entry = root.path().join("app-sock");
    let alias = elsewhere.path().join("alias");
    fs::create_dir(&entry).unwrap();
    fs::create_dir(&alias).unwrap();
    sh(r#"mount --bind "$1" "$2""#, &[&entry, &alias]);
    // Bound by its absolute path through the alias; then the alias goes,
    // so that nothing but the socket ties the entry to the binder.
    let _binder = spawn_ready(&mut binder(&[], &alias, &alias.join("s").to_string_lossy()));
    sh(r#"umount -l "$1""#, &[&alias]);
    assert!(entry.join("s").exists());
    assert_in_use_and_kept(root.path(), "app-sock");
}

#[test]
fn socket_bound_in_another_network_namespace_is_in_use() {
    run_in_pid_namespace(
        "socket_bound_in_another_network_namespace_is_in_use",
        "sockets::inner_socket_bound_in_another_network_namespace",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_socket_bound_in_another_network_namespace() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let entry = root.path().join("app-sock");
    fs::create_dir(&entry).unwrap();
    let _binder = spawn_ready(&mut binder(
        &["unshare", "--net"],
        &entry,
        &entry.join("s").to_string_lossy(),
    ));
    assert!(entry.join("s").exists());
    assert_in_use_and_kept(root.path(), "app-sock");
}

#[test]
fn network_namespace_that_cannot_be_entered_fails_closed() {
    run_in_pid_namespace(
        "network_namespace_that_cannot_be_entered_fails_closed",
        "sockets::inner_network_namespace_that_cannot_be_entered",
    );
}

#[test]
#[ignore = "runs inside a PID namespace, started by its outer test"]
fn inner_network_namespace_that_cannot_be_entered() {
    if !in_namespace() {
        return;
    }
    let root = sandbox!().unwrap();
    let entry = root.path().join("app-sock");
    fs::create_dir(&entry).unwrap();
    // Without CAP_SYS_ADMIN the scanner cannot setns().
    let no_setns = [
        "setpriv",
        "--bounding-set=-sys_admin",
        "--inh-caps=-sys_admin",
    ];
    // A namespace without a socket bound to a file: its /proc/PID/net/unix
    // proves that nothing there holds an entry.
    let _quiet = spawn_ready(Command::new("unshare").args([
        "--net",
        "sh",
        "-c",
        "echo ready; exec sleep 600",
    ]));
    let out = scan_via(&no_setns, root.path(), "app-sock");
    assert!(out.contains("STATE idle"), "{out}");
    assert!(!out.contains("BLIND"), "{out}");
    // One with a socket bound to a file: it could be anywhere.
    let binder = spawn_ready(&mut binder(
        &["unshare", "--net"],
        &entry,
        &entry.join("s").to_string_lossy(),
    ));
    let out = scan_via(&no_setns, root.path(), "app-sock");
    assert!(out.contains("STATE unknown"), "{out}");
    assert!(
        out.contains(&format!(
            "BLIND bound unix sockets of the network namespace of pid {} are unknown (cannot enter it)",
            binder.pid()
        )),
        "{out}"
    );
}
