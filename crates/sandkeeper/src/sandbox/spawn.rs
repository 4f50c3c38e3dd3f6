//! Children that die with their launcher: [`Sandbox::spawn`](crate::Sandbox::spawn)
//! starts its children so that the kernel kills them when the launcher
//! dies, however it dies, and the lease they share goes with them.
//!
//! `PR_SET_PDEATHSIG` (Linux; FreeBSD's `PROC_PDEATHSIG_CTL`) fires when
//! the *thread* that forked the child exits, not the process: a child
//! started from a test's thread, or a worker thread, would be killed when
//! that thread ends. So every such child is forked from one thread that
//! lives as long as the process, and the command travels to it and back.
//! Elsewhere (macOS, Windows) no kernel offers this; the child is started
//! as is, and only the teardown stops it.

use std::io;
use std::process::{Child, Command};
#[cfg(any(target_os = "linux", target_os = "freebsd"))]
use std::sync::{
    mpsc::{self, Sender},
    Mutex,
};

/// A command to start, and where to send it back with its child.
#[cfg(any(target_os = "linux", target_os = "freebsd"))]
type Job = (Command, Sender<(Command, io::Result<Child>)>);

/// Starts `command`; where the kernel can, tied to this process's life.
pub(crate) fn spawn_tied(command: &mut Command) -> io::Result<Child> {
    #[cfg(any(target_os = "linux", target_os = "freebsd"))]
    {
        crate::sys::die_with_parent(command);
        on_spawner_thread(command)
    }
    #[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
    command.spawn()
}

/// Runs `command.spawn()` on the spawner thread (started on first use);
/// on this thread when no thread can be started.
#[cfg(any(target_os = "linux", target_os = "freebsd"))]
fn on_spawner_thread(command: &mut Command) -> io::Result<Child> {
    static SPAWNER: Mutex<Option<Sender<Job>>> = Mutex::new(None);
    let sender = {
        let mut spawner = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
        if spawner.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let started = std::thread::Builder::new()
                .name("sandkeeper-spawner".into())
                .spawn(move || {
                    for (mut command, reply) in rx {
                        let child = command.spawn();
                        let _ = reply.send((command, child));
                    }
                });
            if started.is_ok() {
                *spawner = Some(tx);
            }
        }
        spawner.clone()
    };
    let Some(sender) = sender else {
        return command.spawn();
    };
    let (reply, answer) = mpsc::channel();
    let taken = std::mem::replace(command, Command::new(""));
    if let Err(mpsc::SendError((taken, _))) = sender.send((taken, reply)) {
        *command = taken;
        return command.spawn();
    }
    match answer.recv() {
        Ok((taken, child)) => {
            *command = taken;
            child
        }
        // The spawner thread died (it cannot panic on a spawn: never).
        Err(_) => Err(io::Error::other("the sandbox's spawner thread is gone")),
    }
}
