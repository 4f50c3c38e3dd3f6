//! The helper side the library's sandbox, lease, scan and reap tests
//! start (see [`crate::process::Helper`]): each mode makes or holds a
//! sandbox and says so on stdout (`READY <path>`, `ERR …`, `PROBE …`).
//!
//! Its inputs are environment variables: `SK_ROOT` (the root), `SK_TAG`,
//! `SK_CHECKOUT` (keyed), `SK_PATH` (someone else's sandbox), `SK_SLEEP`,
//! and for `chaos` `SK_SEED` and `SK_ROUNDS`.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use sandkeeper_engine::{Builder, Sandbox, WhenHeld};

use crate::process::child_mode;

/// The helper side: does what [`CHILD_ENV`](crate::process::CHILD_ENV) says, printing protocol lines;
/// returns at once in a process that is no helper.
pub fn main() {
    let Some(mode) = child_mode() else {
        return;
    };
    let var = |name: &str| std::env::var(name).ok();
    let builder = || {
        let mut b = Builder::new();
        if let Some(root) = var("SK_ROOT") {
            b.root(root);
        }
        if let Some(tag) = var("SK_TAG") {
            b.tag(tag);
        }
        if let Some(checkout) = var("SK_CHECKOUT") {
            b.keyed(true)
                .checkout(checkout)
                .when_held(WhenHeld::NextSlot);
        }
        b
    };
    match mode.as_str() {
        // Create a sandbox, say where, and live until killed.
        "create" => match builder().create() {
            Ok(sandbox) => {
                println!("READY {}", sandbox.path().display());
                std::thread::sleep(Duration::from_secs(600));
                drop(sandbox);
            }
            Err(e) => println!("ERR {:?} {e}", e.kind()),
        },
        // A process-lifetime sandbox in a static; then exit normally, or
        // (with SK_SLEEP) live until killed.
        "static" => {
            static SHARED: OnceLock<Sandbox> = OnceLock::new();
            let sandbox = SHARED.get_or_init(|| {
                builder()
                    .process_lifetime(true)
                    .create()
                    .expect("create static sandbox")
            });
            std::fs::write(sandbox.path().join("state"), b"x").unwrap();
            println!("READY {}", sandbox.path().display());
            if var("SK_SLEEP").is_some() {
                std::thread::sleep(Duration::from_secs(600));
            }
        }
        // Take a shared hold on someone else's sandbox and live.
        "hold" => {
            let path = PathBuf::from(var("SK_PATH").unwrap());
            let hold = sandkeeper_engine::lease::hold(&path).expect("hold");
            println!("READY {}", path.display());
            std::thread::sleep(Duration::from_secs(600));
            drop(hold);
        }
        // Probe a path and say what was found, holding a claim for a while.
        "probe" => {
            let path = PathBuf::from(var("SK_PATH").unwrap());
            let word = match sandkeeper_engine::lease::probe(&path) {
                Ok(sandkeeper_engine::lease::Probe::Live { .. }) => "live".to_owned(),
                Ok(sandkeeper_engine::lease::Probe::Free(claim)) => {
                    println!("PROBE free");
                    std::thread::sleep(Duration::from_secs(600));
                    drop(claim);
                    return;
                }
                Ok(other) => format!("other {other:?}"),
                Err(e) => format!("error {e}"),
            };
            println!("PROBE {word}");
        }
        // A test that panics with a sandbox!() alive.
        "panic" => {
            let sandbox = sandkeeper_engine::sandbox!().expect("sandbox");
            std::fs::write(sandbox.path().join("evidence"), b"x").unwrap();
            println!("READY {}", sandbox.path().display());
            panic!("test failure with a sandbox alive");
        }
        // Create with a relative root, then change directory before drop.
        "relative" => {
            let base = PathBuf::from(var("SK_ROOT").unwrap());
            std::env::set_current_dir(&base).unwrap();
            let sandbox = Builder::new().root(".").create().unwrap();
            println!("READY {}", sandbox.path().display());
            std::env::set_current_dir("/").unwrap();
            drop(sandbox);
            println!("DONE ok");
        }
        // Chaos creator: make sandboxes (managed) and `app-*` directories
        // (unmanaged, held open while used), fill them, check they stay
        // intact while in use, drop them; exit 3 on a violation.
        "chaos" => chaos_creator(
            PathBuf::from(var("SK_ROOT").unwrap()),
            var("SK_SEED").unwrap().parse().unwrap(),
            var("SK_ROUNDS").unwrap().parse().unwrap(),
        ),
        other => panic!("unknown {} mode {other:?}", crate::process::CHILD_ENV),
    }
}

/// The chaos creator's loop (see the `chaos` mode).
fn chaos_creator(root: PathBuf, seed: u64, rounds: u32) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let pid = std::process::id();
    println!("\nREADY {}", root.display());
    for round in 0..rounds {
        let files: Vec<(String, Vec<u8>)> = (0..rng.usize(1..6))
            .map(|i| (format!("f{i}"), vec![rng.u8(..); rng.usize(1..4096)]))
            .collect();
        let managed = rng.bool();
        // Unmanaged: a plain directory kept in use through an open file.
        let (dir, guard): (PathBuf, Box<dyn std::any::Any>) = if managed {
            let sandbox = Builder::new()
                .root(&root)
                .tag("chaos")
                .create()
                .expect("create sandbox");
            (sandbox.path().to_owned(), Box::new(sandbox))
        } else {
            let dir = root.join(format!("app-{pid}-{round}"));
            std::fs::create_dir(&dir).expect("mkdir");
            std::fs::write(dir.join("held"), b"held").unwrap();
            let held = std::fs::File::open(dir.join("held")).unwrap();
            (dir, Box::new(held))
        };
        for (name, data) in &files {
            std::fs::write(dir.join(name), data).unwrap();
        }
        for _ in 0..rng.u32(1..4) {
            std::thread::sleep(Duration::from_millis(rng.u64(1..30)));
            for (name, data) in &files {
                match std::fs::read(dir.join(name)) {
                    Ok(got) if &got == data => {}
                    other => {
                        println!(
                            "\nVIOLATION {} {name}: {:?}",
                            dir.display(),
                            other.map(|g| g.len())
                        );
                        std::process::exit(3);
                    }
                }
            }
        }
        drop(guard);
        if !managed {
            // Once no longer held it is fair game: a reaper may beat us to it.
            match sandkeeper_engine::remove::remove_path(
                &dir,
                &sandkeeper_engine::remove::RemoveOptions::new(),
            ) {
                Ok(_) => {}
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {}
                Err(e) => panic!("remove own directory {}: {e}", dir.display()),
            }
        }
    }
    println!("\nDONE {rounds}");
}
