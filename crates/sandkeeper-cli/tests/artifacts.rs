//! Issue 28: what users install, proven from the artifacts themselves
//! (`scripts/package.sh` writes them into `target/dist/`; `.ci/run` runs
//! it before the suite):
//!
//! - the `.deb` installs into a scratch root (`dpkg --root`, never into
//!   this machine), its binary runs, `man -l` renders every page, the
//!   installed units pass `systemd-analyze verify` (their binary and man
//!   pages found where the package put them), nothing is enabled, a
//!   reinstall keeps an edited config, and removing it leaves only the
//!   conffile;
//! - the wheel is abi3 for CPython 3.9+, tagged manylinux2014 (and links
//!   nothing newer than glibc 2.17), installs into a fresh venv, and
//!   `sandkeeper --version` and `import sandkeeper` work;
//! - the sdist builds and installs in a fresh venv;
//! - the crates carry their README and both license files, and name no
//!   placeholder URL; what users run is stripped.
//!
//! Without `target/dist` the tests say so and pass, unless `CI` is set:
//! CI must have built the artifacts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandkeeper_engine::sandbox;
use sandkeeper_testkit::privilege::require_root;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `target/dist`, or `None` (said) when it was not built.
fn dist(test: &str) -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_owned();
    let dist = std::env::var_os("SANDKEEPER_DIST").map_or(target.join("dist"), PathBuf::from);
    if dist.join(deb_name()).exists() {
        return Some(dist);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: no artifacts of {VERSION} in {}: CI runs scripts/package.sh first",
        dist.display()
    );
    eprintln!(
        "skipping {test}: no artifacts of {VERSION} in {} (run scripts/package.sh)",
        dist.display()
    );
    None
}

fn deb_name() -> String {
    format!("sandkeeper_{VERSION}_amd64.deb")
}

/// Runs `cmd`, failing the test with its output unless it succeeds.
fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        said(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn said(out: &Output) -> String {
    format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Everything under `root` but dpkg's own database, as sorted paths.
fn files_outside_dpkg(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let inside = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if inside == "var/lib/dpkg" {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                found.push(inside);
            }
        }
    }
    found.sort();
    found
}

/// An ELF file's section names (`readelf -S`).
fn sections(file: &Path) -> String {
    run("readelf -S", Command::new("readelf").arg("-SW").arg(file))
}

fn assert_stripped(file: &Path) {
    let sections = sections(file);
    assert!(
        !sections.contains(".debug_info") && !sections.contains(" .symtab"),
        "{} is not stripped:\n{sections}",
        file.display()
    );
}

#[test]
fn the_deb_installs_into_a_clean_root_works_and_leaves_only_its_conffile() {
    let test = "the_deb_installs_into_a_clean_root_works_and_leaves_only_its_conffile";
    let Some(dist) = dist(test) else { return };
    if !require_root(test) {
        return;
    }
    let deb = dist.join(deb_name());
    let info = run("dpkg-deb -I", Command::new("dpkg-deb").arg("-I").arg(&deb));
    // Nothing is enabled or started by installing it: no maintainer scripts.
    for script in ["postinst", "preinst", "prerm", "postrm"] {
        assert!(
            !info.contains(script),
            "the package has a {script}:\n{info}"
        );
    }
    assert!(info.contains(" conffiles"), "{info}");

    let scratch = sandbox!().unwrap();
    let root = scratch.join("root");
    for dir in ["var/lib/dpkg/updates", "var/lib/dpkg/info"] {
        fs::create_dir_all(root.join(dir)).unwrap();
    }
    fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let dpkg = |args: &[&str]| {
        let mut cmd = Command::new("dpkg");
        // (libc6 is not in the empty root: its dependency is not checked.)
        cmd.arg(format!("--root={}", root.display()))
            .args(["--force-depends", "--force-not-root"])
            .args(args);
        cmd
    };
    run(
        "dpkg -i",
        dpkg(&["-i", deb.to_str().unwrap()]).env("DEBIAN_FRONTEND", "noninteractive"),
    );

    // The binary runs, and is what users should get: stripped.
    let bin = root.join("usr/bin/sandkeeper");
    let version = run("sandkeeper --version", Command::new(&bin).arg("--version"));
    assert_eq!(version.trim(), format!("sandkeeper {VERSION}"));
    run(
        "sandkeeper scan",
        Command::new(&bin)
            .args(["scan", "--json"])
            .arg(scratch.path()),
    );
    assert_stripped(&bin);

    // Every page renders; one per subcommand and the config file's.
    let mut pages = Vec::new();
    for section in ["man1", "man5"] {
        for entry in fs::read_dir(root.join("usr/share/man").join(section)).unwrap() {
            pages.push(entry.unwrap().path());
        }
    }
    let names: Vec<String> = pages
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "sandkeeper.1.gz",
        "sandkeeper-reap.1.gz",
        "sandkeeper-watch.1.gz",
        "sandkeeper.toml.5.gz",
    ] {
        assert!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    for page in &pages {
        let out = Command::new("man")
            .arg("-l")
            .arg(page)
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty() && out.stdout.len() > 200,
            "man -l {}: {}",
            page.display(),
            said(&out)
        );
    }

    // Completions where bash, zsh and fish look for them.
    for file in [
        "usr/share/bash-completion/completions/sandkeeper",
        "usr/share/zsh/vendor-completions/_sandkeeper",
        "usr/share/fish/vendor_completions.d/sandkeeper.fish",
    ] {
        let text = fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(text.contains("reap"), "{file}");
    }
    run(
        "bash -n the bash completion",
        Command::new("bash")
            .arg("-n")
            .arg(root.join("usr/share/bash-completion/completions/sandkeeper")),
    );

    // The config file is a conffile, and passes `watch --check`.
    let conffiles = run(
        "dpkg-query",
        Command::new("dpkg-query")
            .arg(format!(
                "--admindir={}",
                root.join("var/lib/dpkg").display()
            ))
            .args(["-W", "-f=${Conffiles}", "sandkeeper"]),
    );
    assert!(
        conffiles.contains("/etc/sandkeeper/config.toml"),
        "{conffiles}"
    );
    let config = root.join("etc/sandkeeper/config.toml");

    // The units, as installed, pass systemd-analyze verify: their binary
    // and man pages found where the package put them. (In a private mount
    // namespace, /usr/bin gets the package's binary by an overlay; the
    // machine itself is not changed.)
    let units = root.join("usr/lib/systemd/system");
    for unit in [
        "sandkeeper.service",
        "sandkeeper-reap.service",
        "sandkeeper-reap.timer",
    ] {
        assert!(units.join(unit).exists(), "no {unit}");
    }
    let service = fs::read_to_string(units.join("sandkeeper.service")).unwrap();
    assert!(
        service.contains("ExecStart=/usr/bin/sandkeeper watch"),
        "{service}"
    );
    let settings: Vec<&str> = service.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        !settings.iter().any(|l| l.contains("/usr/local/")),
        "{service}"
    );
    assert!(!root.join("etc/systemd").exists(), "something was enabled");
    let upper = scratch.join("upper");
    let work = scratch.join("work");
    fs::create_dir(&upper).unwrap();
    fs::create_dir(&work).unwrap();
    fs::copy(&bin, upper.join("sandkeeper")).unwrap();
    let script = format!(
        "mount -t overlay overlay -o lowerdir=/usr/bin,upperdir={upper},workdir={work} /usr/bin \
         && exec systemd-analyze verify {units}/sandkeeper.service {units}/sandkeeper-reap.service \
         {units}/sandkeeper-reap.timer",
        upper = upper.display(),
        work = work.display(),
        units = units.display(),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("MANPATH", root.join("usr/share/man"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "systemd-analyze verify: {}",
        said(&out)
    );
    run(
        "sandkeeper watch --check",
        Command::new(&bin)
            .args(["watch", "--check", "--config"])
            .arg(&config),
    );

    // A reinstall never overwrites an edited config.
    let edited = format!(
        "{}\n# edited by the operator\n",
        fs::read_to_string(&config).unwrap()
    );
    fs::write(&config, &edited).unwrap();
    run(
        "dpkg -i (again)",
        dpkg(&["-i", deb.to_str().unwrap()]).env("DEBIAN_FRONTEND", "noninteractive"),
    );
    assert_eq!(fs::read_to_string(&config).unwrap(), edited);

    // Removing it leaves only the conffile.
    run("dpkg -r", &mut dpkg(&["-r", "sandkeeper"]));
    assert_eq!(
        files_outside_dpkg(&root),
        vec!["etc/sandkeeper/config.toml".to_owned()]
    );
    assert_eq!(fs::read_to_string(&config).unwrap(), edited);
}

/// A fresh venv under `dir`: its `bin/`.
fn venv(dir: &Path) -> PathBuf {
    run(
        "python3 -m venv",
        Command::new("python3").arg("-m").arg("venv").arg(dir),
    );
    dir.join("bin")
}

/// The one file of `dir` whose name ends with `suffix`.
fn only(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{suffix} in {}: {found:?}", dir.display());
    found.into_iter().next().unwrap()
}

/// `sandkeeper --version` and `import sandkeeper` in the venv at `bin`.
fn works_in(bin: &Path) {
    let version = run(
        "sandkeeper --version",
        Command::new(bin.join("sandkeeper")).arg("--version"),
    );
    assert_eq!(version.trim(), format!("sandkeeper {VERSION}"));
    let imported = run(
        "import sandkeeper",
        Command::new(bin.join("python")).args([
            "-c",
            "import sandkeeper; sb = sandkeeper.Sandbox(); sb.close(); print(sandkeeper.__version__)",
        ]),
    );
    assert_eq!(imported.trim(), VERSION);
}

#[test]
fn the_wheel_is_manylinux2014_abi3_and_installs_in_a_fresh_venv() {
    let test = "the_wheel_is_manylinux2014_abi3_and_installs_in_a_fresh_venv";
    let Some(dist) = dist(test) else { return };
    let wheel = only(&dist.join("python"), ".whl");
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    // CPython 3.9+ (abi3) on glibc 2.17+ (RHEL 7/8, Amazon Linux 2, Ubuntu 20.04).
    assert!(
        name.starts_with(&format!("sandkeeper-{VERSION}-cp39-abi3-")),
        "{name}"
    );
    assert!(name.contains("manylinux2014_x86_64"), "{name}");

    let scratch = sandbox!().unwrap();
    let unpacked = scratch.join("unpacked");
    run(
        "unzip the wheel",
        Command::new("python3")
            .args(["-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&unpacked),
    );
    let so = unpacked.join("sandkeeper/_native.abi3.so");
    assert_stripped(&so);
    // No symbol from a glibc newer than 2.17: what the tag promises.
    let symbols = run("objdump -T", Command::new("objdump").arg("-T").arg(&so));
    let newest = symbols
        .split("GLIBC_")
        .skip(1)
        .filter_map(|v| {
            let v = v
                .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .next()?;
            let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            Some((parts.next()?, parts.next().unwrap_or(0)))
        })
        .max()
        .unwrap_or((0, 0));
    assert!(
        newest <= (2, 17),
        "the extension needs glibc {}.{}",
        newest.0,
        newest.1
    );
    let info = unpacked.join(format!("sandkeeper-{VERSION}.dist-info"));
    let metadata = fs::read_to_string(info.join("METADATA")).unwrap();
    assert!(
        metadata.contains("pip install sandkeeper"),
        "no README in METADATA:\n{metadata}"
    );
    for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(info.join("licenses").join(license).exists(), "no {license}");
    }

    let bin = venv(&scratch.join("venv"));
    run(
        "pip install the wheel",
        Command::new(bin.join("pip"))
            .args(["install", "--quiet", "--no-index"])
            .arg(&wheel),
    );
    works_in(&bin);
}

#[test]
fn the_sdist_builds_and_installs_in_a_fresh_venv() {
    let test = "the_sdist_builds_and_installs_in_a_fresh_venv";
    let Some(dist) = dist(test) else { return };
    let sdist = only(&dist.join("python"), ".tar.gz");
    let scratch = sandbox!().unwrap();
    let bin = venv(&scratch.join("venv"));
    // maturin comes from PyPI into pip's build environment; the Rust build
    // reuses one target directory in scripts/package.sh's cache, outside
    // the checkout, between runs.
    let build_cache = package_cache().join("sdist-target");
    forget_own_crates(&build_cache);
    run(
        "pip install the sdist",
        Command::new(bin.join("pip"))
            .args(["install", "--quiet"])
            .arg(&sdist)
            .env("CARGO_TARGET_DIR", &build_cache),
    );
    works_in(&bin);
}

/// Makes cargo build the workspace's own crates anew in `target`: the
/// sdist pins every file's mtime (a reproducible archive), and cargo tells
/// a path dependency's change by mtime, so a cached build of an older
/// source would pass for this one's. Third-party crates stay cached.
fn forget_own_crates(target: &Path) {
    let Ok(profiles) = fs::read_dir(target) else {
        return;
    };
    for profile in profiles.flatten() {
        let Ok(prints) = fs::read_dir(profile.path().join(".fingerprint")) else {
            continue;
        };
        for print in prints.flatten() {
            let name = print.file_name();
            if name.to_string_lossy().starts_with("sandkeeper") {
                fs::remove_dir_all(print.path()).unwrap();
            }
        }
    }
}

/// `scripts/package.sh`'s cache: `$SANDKEEPER_PACKAGE_CACHE`, else
/// `sandkeeper-package` in `$XDG_CACHE_HOME` or `~/.cache`.
fn package_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("SANDKEEPER_PACKAGE_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("sandkeeper-package")
}

#[test]
fn the_crates_carry_their_readme_and_licenses() {
    let test = "the_crates_carry_their_readme_and_licenses";
    let Some(dist) = dist(test) else { return };
    for krate in ["sandkeeper", "sandkeeper-engine", "sandkeeper-cli"] {
        let file = dist.join("crates").join(format!("{krate}-{VERSION}.crate"));
        let list = run("tar -tzf", Command::new("tar").arg("-tzf").arg(&file));
        for want in ["README.md", "LICENSE-MIT", "LICENSE-APACHE", "Cargo.toml"] {
            let path = format!("{krate}-{VERSION}/{want}");
            assert!(list.lines().any(|l| l == path), "{krate}: no {want}");
        }
        let manifest = run(
            "tar -xOzf Cargo.toml",
            Command::new("tar")
                .arg("-xOzf")
                .arg(&file)
                .arg(format!("{krate}-{VERSION}/Cargo.toml")),
        );
        assert!(
            manifest.contains("readme = \"README.md\""),
            "{krate}: {manifest}"
        );
        assert!(
            !manifest.contains(".invalid"),
            "{krate}: a placeholder URL:\n{manifest}"
        );
    }
}
