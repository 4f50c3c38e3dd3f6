//! `sandkeeper completions` and `sandkeeper man`: generated from the clap
//! definitions, so they cover every subcommand `sandkeeper --help` lists
//! (the list is read from there, never written down here). Shells and
//! roff renderers that are not installed are skipped, printing why.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use sandkeeper_engine::sandbox;

use crate::{sandkeeper, stderr, stdout};

/// The shells `completions` takes.
const SHELLS: [&str; 5] = ["bash", "zsh", "fish", "elvish", "powershell"];

/// The subcommands `sandkeeper --help` lists, clap's own `help` aside.
fn subcommands() -> Vec<String> {
    let help = stdout(&sandkeeper(&["--help"]));
    let (_, list) = help.split_once("Commands:\n").expect("a Commands section");
    let names: Vec<String> = list
        .lines()
        .take_while(|l| !l.trim().is_empty())
        // A name starts its line; its wrapped description is indented more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&n| n != "help")
        .map(str::to_owned)
        .collect();
    for known in ["scan", "reap", "completions", "man"] {
        assert!(names.iter().any(|n| n == known), "{known} in {names:?}");
    }
    names
}

/// The first paragraph of `sandkeeper ARGS --help`: the about line.
fn about(args: &[&str]) -> String {
    let mut args = args.to_vec();
    args.push("--help");
    let help = stdout(&sandkeeper(&args));
    help.split("\n\n").next().unwrap().to_owned()
}

/// Only the letters and digits of `text`, after dropping overstrikes
/// (`X\bX`): what survives wrapping, hyphenation and typographic quotes
/// and dashes in any renderer.
fn letters(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out.retain(|c| c.is_ascii_alphanumeric());
    out
}

/// Runs `program args…`, or `None` (printing why) when it is not installed.
fn tool(program: &str, args: &[&str], file: &Path) -> Option<Output> {
    match Command::new(program)
        .args(args)
        .arg(file)
        .env("MANWIDTH", "80")
        .output()
    {
        Ok(out) => Some(out),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("run {program}: {e}"),
    }
}

#[test]
fn completion_scripts_name_every_subcommand_and_parse() {
    let subs = subcommands();
    let dir = sandbox!().unwrap();
    for shell in SHELLS {
        let out = sandkeeper(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {out:?}");
        assert!(out.stderr.is_empty(), "{shell}: {out:?}");
        let script = stdout(&out);
        let words: Vec<&str> = script
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .collect();
        for sub in &subs {
            assert!(words.contains(&sub.as_str()), "{shell} script names {sub}");
        }
        let file = dir.path().join(format!("sandkeeper.{shell}"));
        fs::write(&file, &script).unwrap();
        let check: &[&str] = match shell {
            "bash" | "zsh" => &["-n"],
            "fish" => &["--no-execute"],
            _ => continue,
        };
        match tool(shell, check, &file) {
            Some(out) => assert!(out.status.success(), "{shell} -n: {out:?}"),
            None if shell == "bash" => panic!("bash is needed to check the bash script"),
            None => {
                eprintln!("skipped: {shell} is not installed; its script's syntax is not checked")
            }
        }
    }
}

#[test]
fn a_bad_shell_name_is_a_usage_error_naming_the_valid_ones() {
    let out = sandkeeper(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
    for shell in SHELLS {
        assert!(err.contains(shell), "names {shell}: {err}");
    }
}

#[test]
fn man_pages_for_the_command_and_every_subcommand() {
    let subs = subcommands();
    let dir = sandbox!().unwrap();
    let out_dir = dir.path().join("man1");
    fs::create_dir(&out_dir).unwrap();
    let out = sandkeeper(&["man", "--out-dir", out_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out, dir.path()));

    let mut pages: Vec<(String, Vec<&str>)> = vec![("sandkeeper.1".into(), vec![])];
    pages.extend(
        subs.iter()
            .map(|s| (format!("sandkeeper-{s}.1"), vec![s.as_str()])),
    );
    let mut want: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    want.push("sandkeeper.toml.5");
    let mut got: Vec<String> = fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);

    let mut rendered = 0;
    for (name, args) in &pages {
        let path = out_dir.join(name);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644, "{name}");
        let roff = fs::read_to_string(&path).unwrap();
        assert!(roff.contains("\n.TH "), "{name} has a title line");
        let Some(text) = render(&path) else {
            continue;
        };
        rendered += 1;
        let page = letters(&text);
        assert!(page.contains(&letters(&about(args))), "{name}: {text}");
        assert!(page.contains("EXITSTATUS"), "{name}: {text}");
        // Every option the help lists is described in the page.
        let help = stdout(&sandkeeper(&[args.as_slice(), &["--help"]].concat()));
        for line in help.lines().map(str::trim_start) {
            if let Some(long) = line.split(", ").last().filter(|l| l.starts_with("--")) {
                let flag = long.split([' ', '=']).next().unwrap();
                assert!(page.contains(&letters(flag)), "{name}: {flag}: {text}");
            }
        }
        if args.is_empty() {
            for sub in &subs {
                let link = letters(&format!("sandkeeper-{sub}(1)"));
                assert!(page.contains(&link), "{name} lists {sub}: {text}");
            }
            assert!(page.contains("130interrupted"), "{name}: {text}");
        }
    }
    // sandkeeper.toml(5): every key of the config file, with its default.
    let config = out_dir.join("sandkeeper.toml.5");
    assert_eq!(
        fs::metadata(&config).unwrap().permissions().mode() & 0o777,
        0o644
    );
    if let Some(text) = render(&config) {
        rendered += 1;
        let page = letters(&text);
        for key in sandkeeper_engine::config::reference::KEYS {
            let entry = letters(&format!("{} (default: {})", key.name, key.default));
            assert!(
                page.contains(&entry),
                "sandkeeper.toml.5 lacks {}: {text}",
                key.name
            );
        }
    }
    if rendered == 0 {
        eprintln!("skipped: none of groff, mandoc, man is installed; the pages are not rendered");
    }
}

/// `file` rendered as plain text by whichever of groff, mandoc and man is
/// installed, asserting it renders without complaint; `None` if none is.
fn render(file: &Path) -> Option<String> {
    let renderers: [(&str, &[&str]); 3] = [
        // -k: UTF-8 input; -ww: every warning; -rHY=0: no hyphenation;
        // -P-cbou: no escapes or overstrikes.
        (
            "groff",
            &["-k", "-man", "-Tutf8", "-ww", "-rHY=0", "-P-cbou"],
        ),
        ("mandoc", &["-T", "utf8", "-W", "warning"]),
        ("man", &["-l"]),
    ];
    for (program, args) in renderers {
        if let Some(out) = tool(program, args, file) {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && err.trim().is_empty(),
                "{program} {}: {err}",
                file.display()
            );
            return Some(stdout(&out));
        }
    }
    None
}

#[test]
fn man_refuses_an_unsafe_out_dir_and_writes_nothing() {
    let dir = sandbox!().unwrap();
    let shared = dir.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).unwrap();
    let out = sandkeeper(&["man", "--out-dir", shared.to_str().unwrap()]);
    let err = stderr(&out, dir.path());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("other users may write") && err.contains("[DIR]/shared"),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    assert_eq!(fs::read_dir(&shared).unwrap().count(), 0);

    // A page name that is a symlink is never written through: refused
    // before any page is written.
    let own = dir.path().join("own");
    fs::create_dir(&own).unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, "keep").unwrap();
    symlink(&victim, own.join("sandkeeper-scan.1")).unwrap();
    let out = sandkeeper(&["man", "--out-dir", own.to_str().unwrap()]);
    let err = stderr(&out, dir.path());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is a symlink") && err.contains("[DIR]/own/sandkeeper-scan.1"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(fs::read_dir(&own).unwrap().count(), 1, "nothing written");

    let out = sandkeeper(&[
        "man",
        "--out-dir",
        dir.path().join("missing").to_str().unwrap(),
    ]);
    let err = stderr(&out, dir.path());
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[DIR]/missing") && err.contains("hint: create the directory first"),
        "{err}"
    );
}
