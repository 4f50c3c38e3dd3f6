//! What a scan could not see or assumed, said the same way by every face:
//! the command (stderr, `watch`'s log) and the Python package
//! (`warnings.warn`, `ScanReport.warnings`). Only the way a switch is
//! named differs ([`Face`]): `--ignore-pid 1` for one, `ignore_pids=[1]`
//! for the other.

use super::Report;
use crate::human::plural;
use crate::inuse::{Uninspectable, ASSUME_UNSEEN_FREE_ENV};

/// Who is told, so that a switch is named as that face spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Face {
    /// The command line: `--ignore-pid 1`, `--assume-unseen-free`.
    Command,
    /// The Python package: `ignore_pids=[1]`, `assume_unseen_free=True`.
    Python,
}

impl Face {
    fn ignore_pids(self, pids: &[u32]) -> String {
        match self {
            Face::Command => pids
                .iter()
                .map(|p| format!("--ignore-pid {p}"))
                .collect::<Vec<_>>()
                .join(" "),
            Face::Python => format!(
                "ignore_pids=[{}]",
                pids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn ignore_pid_name(self) -> &'static str {
        match self {
            Face::Command => "--ignore-pid",
            Face::Python => "ignore_pids",
        }
    }

    fn assume_unseen_free(self) -> &'static str {
        match self {
            Face::Command => "--assume-unseen-free",
            Face::Python => "assume_unseen_free=True",
        }
    }

    fn trust_pid_namespace(self) -> &'static str {
        match self {
            Face::Command => "--trust-pid-namespace",
            Face::Python => "trust_pid_namespace=True",
        }
    }
}

impl Report {
    /// What the reader needs before any table or number: the processes
    /// that could not be inspected (and how to vouch for them, in `face`'s
    /// words), the blind spots, what was assumed, the entries that could
    /// not be read.
    ///
    /// ```
    /// use sandkeeper_engine::scan::{warnings::Face, Scanner};
    /// # let dir = sandkeeper_engine::Sandbox::new()?;
    /// let root = sandkeeper_engine::root::Root::open(dir.path())?;
    /// let report = Scanner::new().scan_roots(&[root])?;
    /// for line in report.warnings(Face::Command) {
    ///     eprintln!("warning: {line}");
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn warnings(&self, face: Face) -> Vec<String> {
        let mut out = Vec::new();
        let euid = rustix::process::geteuid().as_raw();
        out.extend(unseen_advice(&self.uninspectable, euid, face));
        let assumed_all = self.assumes_unseen_free;
        if assumed_all && !self.assumed.is_empty() {
            out.push(assumed_unseen(self.assumed.len(), face));
        }
        for a in self.assumed.iter().filter(|_| !assumed_all) {
            out.push(format!(
                "assumed to use nothing ({}): {a}",
                face.ignore_pid_name()
            ));
        }
        for b in &self.assumed_blind_spots {
            out.push(format!(
                "assumed to use nothing ({}): {b:#}",
                face.trust_pid_namespace()
            ));
        }
        out.extend(
            self.blind_spots
                .iter()
                .map(|b| format!("{b}: entries are `unknown`")),
        );
        for root in &self.roots {
            out.extend(root.warnings.iter().cloned());
        }
        out
    }
}

/// The line that names the switch that assumes every uninspectable process
/// holds nothing, and what it still checks; `count`: how many were assumed.
pub fn assumed_unseen(count: usize, face: Face) -> String {
    format!(
        "assumed to use nothing ({}, {ASSUME_UNSEEN_FREE_ENV}=1): {}; files you own were still asked (a write lease), which sees every open for reading or writing but not one with access mode 3 (ioctl only) nor an O_PATH descriptor: those, and their working directories, roots and open directories, were assumed: entries they use that way may be removed",
        face.assume_unseen_free(),
        plural(
            count as u64,
            "process that could not be inspected",
            "processes that could not be inspected"
        )
    )
}

/// How many to name one by one; beyond that, the count and one switch.
const SHOWN: usize = 8;

/// What to say about processes that could not be inspected, by who could
/// not inspect them (`euid`): the truth first, then every pid needed or
/// their number and one switch.
fn unseen_advice(unseen: &[Uninspectable], euid: u32, face: Face) -> Vec<String> {
    let n = unseen.len();
    if n == 0 {
        return Vec::new();
    }
    let first = &unseen[0];
    let why = if euid == 0 && first.refused_by_filesystem() {
        // /proc let root follow the link; the file's filesystem (or a
        // security module's rule on it) refused to stat what it leads to.
        format!(
            "{} hold a file on a filesystem that refuses even root ({first})",
            plural(n as u64, "process", "processes"),
        )
    } else if euid == 0 {
        // Root may read every process's /proc entries unless something
        // above root forbids it.
        format!(
            "{} hidden even from root: a sandbox or security module prevents reading /proc/{}/… ({first})",
            plural(n as u64, "process", "processes"),
            first.pid
        )
    } else {
        format!(
            "{} of other users (or root) cannot be inspected by uid {euid} ({first}); a descriptor they opened before a chmod, or received over a unix socket, needs no access to your files",
            plural(n as u64, "process", "processes")
        )
    };
    let vouch = if n <= SHOWN {
        let pids: Vec<u32> = unseen.iter().map(|u| u.pid).collect();
        format!(
            "if you know they use nothing under these roots, vouch for them: {}",
            face.ignore_pids(&pids)
        )
    } else {
        format!(
            "if you know none of them works in a directory under these roots, vouch for all {n} at once: run again with {} (or {ASSUME_UNSEEN_FREE_ENV}=1 in the environment); files you own are still checked for opens for reading or writing",
            face.assume_unseen_free()
        )
    };
    let see = if euid == 0 {
        ""
    } else {
        "; to see them, run as root"
    };
    let mut out = vec![format!(
        "{why}: entries they might use are `unknown`, not reclaimable{see}; {vouch}"
    )];
    out.extend(unseen.iter().take(SHOWN).skip(1).map(|u| format!("  {u}")));
    if n > SHOWN {
        out.push(format!("  … and {} more", n - SHOWN));
    }
    out
}
