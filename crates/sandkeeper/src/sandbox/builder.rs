//! Options for creating a [`Sandbox`].

use std::ffi::{OsStr, OsString};
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::keep::KeepPolicy;
use super::keyed::{self, WhenHeld};
use super::{open, test_macro, worktree, Inner, Sandbox, State};
use crate::error::{Error, ErrorKind, Result};
use crate::lease::{self, Created, Lease, LeaseRecord, RootDir};

/// The environment variable that sets the default root for sandboxes.
pub const ROOT_ENV: &str = "SANDKEEPER_ROOT";

/// Tags longer than this leave too little of `NAME_MAX` (255) for suffixes.
const MAX_TAG_BYTES: usize = 200;

/// Options for a [`Sandbox`]; [`create`](Builder::create) makes one.
///
/// ```
/// use sandkeeper::Sandbox;
/// # let scratch = Sandbox::new()?;
/// # let root = scratch.path();
///
/// let sandbox = Sandbox::builder().tag("vm-run").root(root).create()?;
/// let name = sandbox.path().file_name().unwrap().to_str().unwrap();
/// assert!(name.starts_with("vm-run-"));
/// # Ok::<(), sandkeeper::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    opts: Options,
}

#[derive(Debug, Clone)]
struct Options {
    tag: Option<String>,
    root: Option<PathBuf>,
    keyed: bool,
    checkout: Option<OsString>,
    process_lifetime: bool,
    mode: u32,
    when_held: WhenHeld,
    keep: KeepPolicy,
    keep_env: bool,
    keep_for: Duration,
    kill_grace: Duration,
    site: Option<String>,
    /// Where the builder was made: the default site.
    caller: &'static Location<'static>,
    /// Set by `sandbox!()`: two sites claiming one keyed name is an error.
    claim_site: bool,
    outside_worktree: bool,
}

impl Default for Builder {
    #[track_caller]
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// A builder with the defaults described on each setter.
    ///
    /// It remembers where it was called as the sandbox's [`site`](Builder::site);
    /// being `#[track_caller]`, a helper marked `#[track_caller]` that calls
    /// it passes its own caller's location on.
    #[track_caller]
    pub fn new() -> Builder {
        Builder {
            opts: Options {
                tag: None,
                root: None,
                keyed: false,
                checkout: None,
                process_lifetime: false,
                mode: 0o700,
                when_held: WhenHeld::NextSlot,
                keep: KeepPolicy::Never,
                keep_env: true,
                keep_for: Duration::from_secs(24 * 3600),
                kill_grace: Duration::from_secs(5),
                site: None,
                caller: Location::caller(),
                claim_site: false,
                outside_worktree: false,
            },
        }
    }

    /// The name prefix (default `sandbox`). Unique sandboxes are named
    /// `<tag>-<random>`, keyed ones `<tag>-<checkout hash>`.
    ///
    /// A tag must be 1 to 200 bytes, must not contain `/` or NUL, must not
    /// be `.` or `..`, and must not start with `.sandkeeper-` (reserved);
    /// [`create`](Builder::create) rejects others.
    pub fn tag(&mut self, tag: impl Into<String>) -> &mut Builder {
        self.opts.tag = Some(tag.into());
        self
    }

    /// The directory to create the sandbox in. Default: `$SANDKEEPER_ROOT`
    /// if set, else the system temp directory (`$TMPDIR` or `/tmp`). A
    /// relative root is made absolute against the current directory at
    /// creation.
    ///
    /// Keyed and process-lifetime sandboxes go into a per-user directory
    /// `sandkeeper-<uid>` inside it (mode 0700, checked to be yours and not
    /// a symlink) when the root is the default one, *and* when the root you
    /// give is shared — writable by group or others, or not owned by you,
    /// as `/tmp` is — so `.root(std::env::temp_dir())` keeps that
    /// protection. In a private root of yours (mode 0700 or 0755, say) they
    /// go directly inside it. Unique sandboxes always go directly inside:
    /// their names are random.
    ///
    /// The filesystem root (`/`, or a drive's root on Windows) is refused
    /// at creation, as `sandkeeper reap` and the Python package refuse it:
    /// a sandbox there would sit among the system's own directories.
    ///
    /// ```
    /// # let base = sandkeeper::Sandbox::builder().permissions(0o1777).create()?;
    /// # let shared = base.path();
    /// // `shared` is mode 1777, like /tmp.
    /// let keyed = sandkeeper::Sandbox::builder().root(shared).tag("k").keyed(true).create()?;
    /// let uid = rustix::process::getuid().as_raw();
    /// assert_eq!(keyed.path().parent(), Some(&*shared.join(format!("sandkeeper-{uid}"))));
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    pub fn root(&mut self, root: impl Into<PathBuf>) -> &mut Builder {
        self.opts.root = Some(root.into());
        self
    }

    /// A fixed name per tag and checkout instead of a random one (default
    /// off). Creating a keyed sandbox reclaims the previous run's directory
    /// when its owner is gone, and never touches one whose owner is alive:
    /// see [`when_held`](Builder::when_held).
    pub fn keyed(&mut self, yes: bool) -> &mut Builder {
        self.opts.keyed = yes;
        self
    }

    /// What distinguishes this checkout's keyed sandboxes from another's
    /// with the same tag (default: the path of the running executable). Only
    /// its hash appears in the name; it is recorded in the lease.
    pub fn checkout(&mut self, checkout: impl AsRef<OsStr>) -> &mut Builder {
        self.opts.checkout = Some(checkout.as_ref().to_owned());
        self
    }

    /// What a keyed sandbox does when a live process holds its name
    /// (default [`WhenHeld::NextSlot`]). Ignored for unique sandboxes.
    pub fn when_held(&mut self, policy: WhenHeld) -> &mut Builder {
        self.opts.when_held = policy;
        self
    }

    /// A sandbox for a `static` (default off; implies [`keyed`](Builder::keyed)).
    ///
    /// Rust never drops statics, so the lease lives until the process exits.
    /// The directory is removed at normal exit (`main` returns or
    /// `std::process::exit`), and otherwise reclaimed by the next creation
    /// of the same key or by any reaper.
    ///
    /// ```
    /// use std::sync::OnceLock;
    /// use sandkeeper::Sandbox;
    ///
    /// static SHARED: OnceLock<Sandbox> = OnceLock::new();
    /// let sandbox = SHARED.get_or_init(|| {
    ///     Sandbox::builder().tag("doc-shared").process_lifetime(true).create().unwrap()
    /// });
    /// assert!(sandbox.path().is_dir());
    /// ```
    pub fn process_lifetime(&mut self, yes: bool) -> &mut Builder {
        self.opts.process_lifetime = yes;
        self
    }

    /// Permission bits of the directory (default `0o700`). Bits outside
    /// `0o7777` are ignored; the umask does not apply.
    pub fn permissions(&mut self, mode: u32) -> &mut Builder {
        self.opts.mode = mode & 0o7777;
        self
    }

    /// When to keep the directory instead of removing it (default
    /// [`KeepPolicy::Never`]). `SANDKEEPER_KEEP`, when set, overrides this:
    /// it is the switch for whoever runs the program to debug it.
    pub fn keep_policy(&mut self, policy: KeepPolicy) -> &mut Builder {
        self.opts.keep = policy;
        self
    }

    /// Whether `SANDKEEPER_KEEP` overrides [`keep_policy`](Builder::keep_policy)
    /// (default true). A program that decides itself when to keep (such as
    /// `sandkeeper run --keep`) turns it off.
    pub fn keep_env(&mut self, yes: bool) -> &mut Builder {
        self.opts.keep_env = yes;
        self
    }

    /// How long a kept sandbox is protected from reapers (default 24 h).
    pub fn keep_for(&mut self, duration: Duration) -> &mut Builder {
        self.opts.keep_for = duration;
        self
    }

    /// How long a child registered with [`Sandbox::spawn`] gets between
    /// SIGTERM and SIGKILL at teardown (default 5 s).
    pub fn kill_grace(&mut self, grace: Duration) -> &mut Builder {
        self.opts.kill_grace = grace;
        self
    }

    /// The source location recorded in the lease's `site` field, which
    /// `sandkeeper explain` shows: who made this directory, from where.
    ///
    /// Default: `file:line` of the call to [`Builder::new`] (or
    /// [`Sandbox::builder`], [`Sandbox::new`]). Those are
    /// `#[track_caller]`, so a helper marked `#[track_caller]` records its
    /// caller's location instead of its own; set it here when the helper
    /// knows better (a test name, a job id). Any text; it is only shown.
    ///
    /// ```
    /// use sandkeeper::Sandbox;
    ///
    /// #[track_caller]
    /// fn scratch(tag: &str) -> Sandbox {
    ///     Sandbox::builder().tag(tag).create().unwrap()
    /// }
    ///
    /// let sandbox = scratch("helper"); let line = line!();
    /// assert_eq!(sandbox.record().site, Some(format!("{}:{line}", file!())));
    ///
    /// let sandbox = Sandbox::builder().site("job 42").create()?;
    /// assert_eq!(sandbox.record().site.as_deref(), Some("job 42"));
    /// # Ok::<(), sandkeeper::Error>(())
    /// ```
    pub fn site(&mut self, site: impl Into<String>) -> &mut Builder {
        self.opts.site = Some(site.into());
        self
    }

    /// Refuse a root inside a git work tree (default off): for tests that
    /// need a directory with no repository above it (`git init`, `cargo
    /// new`, tools that look for a `.git` upwards).
    ///
    /// With it, [`create`](Builder::create) fails with
    /// [`ErrorKind::UnusableRoot`] naming the work tree when the root (the
    /// default one, or the one given to [`root`](Builder::root)) or any
    /// directory above it holds a `.git` (a directory, or the file of a
    /// linked work tree or submodule). It changes nothing else: with the
    /// default root, keyed sandboxes still go into the per-user root
    /// `sandkeeper-<uid>`. `sandbox!(outside_worktree)` is this for tests.
    ///
    /// ```
    /// # let base = sandkeeper::Sandbox::new()?;
    /// # let repo = base.path();
    /// std::fs::create_dir(repo.join(".git"))?;
    /// let err = sandkeeper::Sandbox::builder().root(repo).outside_worktree(true).create().unwrap_err();
    /// assert_eq!(err.kind(), sandkeeper::ErrorKind::UnusableRoot);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn outside_worktree(&mut self, yes: bool) -> &mut Builder {
        self.opts.outside_worktree = yes;
        self
    }

    /// For `sandbox!()`: the site, and that two sites claiming one keyed
    /// name in this process is an error.
    pub(super) fn macro_site(&mut self, site: String) -> &mut Builder {
        self.opts.site = Some(site);
        self.opts.claim_site = true;
        self
    }

    /// Creates the sandbox.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: a bad tag or `SANDKEEPER_KEEP` value;
    /// - [`ErrorKind::UnusableRoot`]: the root does not exist, is not a
    ///   directory, or is not writable; or it is inside a git work tree and
    ///   [`outside_worktree`](Builder::outside_worktree) is on;
    /// - [`ErrorKind::UnsafeRoot`]: the per-user root is a symlink or
    ///   belongs to another user;
    /// - [`ErrorKind::Held`] / [`ErrorKind::TimedOut`]: a keyed name is held
    ///   and the policy says fail or wait;
    /// - [`ErrorKind::NameConflict`]: two `sandbox!()` call sites claim one
    ///   keyed name;
    /// - [`ErrorKind::Io`] for other failures, with the path.
    pub fn create(&self) -> Result<Sandbox> {
        let o = &self.opts;
        let keep = match o.keep_env {
            true => KeepPolicy::from_env()?.unwrap_or(o.keep),
            false => o.keep,
        };
        let tag = o.tag.as_deref().unwrap_or("sandbox");
        validate_tag(tag)?;
        let base = absolute(match &o.root {
            Some(root) => root.clone(),
            None => default_root(),
        })?;
        // (`/tmp/..` and a link to `/` are `/` too.)
        let resolved = std::fs::canonicalize(&base).unwrap_or_else(|_| base.clone());
        if resolved.parent().is_none() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "refusing to make sandboxes in the filesystem root; give a directory for them, \
                 such as the system temp directory (the default)",
            )
            .at(&base));
        }
        if o.outside_worktree {
            worktree::check_outside(&base)?;
        }
        let keyed = o.keyed || o.process_lifetime;
        let site = match &o.site {
            Some(site) => site.clone(),
            None => format!("{}:{}", o.caller.file(), o.caller.line()),
        };
        let record = LeaseRecord::for_current_process(tag).with_site(site.clone());
        let (root_path, lease, in_user_root) = if keyed {
            self.create_keyed(&base, tag, record, &site)?
        } else {
            let (path, lease) = create_unique(&base, tag, &record, o.mode)?;
            (path, lease, false)
        };
        let (dev, ino) = lease.identity();
        let inner = Arc::new(Inner {
            path: lease.path().to_owned(),
            parent: root_path,
            name: lease.path().file_name().unwrap_or_default().to_owned(),
            identity: (dev, ino),
            in_user_root,
            keep,
            failed: AtomicBool::new(false),
            keep_for: o.keep_for,
            kill_grace: o.kill_grace,
            state: Mutex::new(State {
                lease: Some(lease),
                teardown: Vec::new(),
                finished: false,
            }),
        });
        open::register(&inner, o.process_lifetime);
        Ok(Sandbox { inner })
    }

    fn create_keyed(
        &self,
        base: &Path,
        tag: &str,
        record: LeaseRecord,
        site: &str,
    ) -> Result<(PathBuf, Lease, bool)> {
        let o = &self.opts;
        let checkout = match &o.checkout {
            Some(c) => c.clone(),
            None => std::env::current_exe()
                .map(PathBuf::into_os_string)
                .unwrap_or_default(),
        };
        let record = record.with_checkout(checkout.to_string_lossy());
        let name = format!("{tag}-{}", keyed::checkout_hash(&checkout));
        let claim = |root_path: &Path, root_fd: &RootDir| {
            if o.claim_site {
                test_macro::claim_site(&root_path.join(&name), site)?;
            }
            keyed::claim(
                lease::root_ref(root_fd),
                root_path,
                &name,
                &record,
                o.mode,
                o.when_held,
            )
        };
        if o.root.is_some() {
            let root_fd = lease::open_root_dir(base)?;
            if !is_shared(&root_fd, base)? {
                let lease = claim(base, &root_fd)?;
                return Ok((base.to_owned(), lease, false));
            }
        }
        // A concurrent finish may remove an empty per-user root between our
        // opening it and creating in it; start over a few times.
        let mut attempts = 0;
        loop {
            let attempt = keyed::open_user_root(base)
                .and_then(|(path, fd)| claim(&path, &fd).map(|lease| (path, lease)));
            match attempt {
                Err(e)
                    if attempts < 8
                        && e.io_error()
                            .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    attempts += 1;
                }
                other => return other.map(|(path, lease)| (path, lease, true)),
            }
        }
    }
}

/// Whether others may write in `root` (writable by group or others, or
/// not owned by us, as `/tmp` is): then keyed names go into the per-user
/// root inside it, where nobody else can take or watch them.
#[cfg(unix)]
fn is_shared(root: &RootDir, path: &Path) -> Result<bool> {
    let st = rustix::fs::fstat(root)
        .map_err(|e| Error::io("cannot inspect sandbox root", e.into()).at(path))?;
    Ok(st.st_mode & 0o022 != 0 || st.st_uid != rustix::process::geteuid().as_raw())
}

/// On Windows a temp directory is the user's own (`%TEMP%`): keyed names
/// go directly in any root given.
#[cfg(windows)]
fn is_shared(_root: &RootDir, _path: &Path) -> Result<bool> {
    Ok(false)
}

/// Creates `<tag>-<random>` in `root`, retrying on the (unlikely) clash.
fn create_unique(
    root: &Path,
    tag: &str,
    record: &LeaseRecord,
    mode: u32,
) -> Result<(PathBuf, Lease)> {
    let root_fd = lease::open_root_dir(root)?;
    for _ in 0..100 {
        let name = format!("{tag}-{}", crate::names::name_suffix());
        if let Created::New(lease) =
            lease::create_at(lease::root_ref(&root_fd), root, name.as_ref(), record, mode)?
        {
            return Ok((root.to_owned(), lease));
        }
    }
    Err(Error::new(
        ErrorKind::Io,
        "cannot find a free name for a sandbox after 100 attempts",
    )
    .at(root))
}

/// `$SANDKEEPER_ROOT`, else the system temp directory.
fn default_root() -> PathBuf {
    match std::env::var_os(ROOT_ENV) {
        Some(root) if !root.is_empty() => PathBuf::from(root),
        _ => std::env::temp_dir(),
    }
}

fn absolute(path: PathBuf) -> Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path);
    }
    let cwd = std::env::current_dir()
        .map_err(|e| Error::io("cannot make the sandbox root absolute", e).at(&path))?;
    // `components()` drops `.` segments: `/tmp/./x` becomes `/tmp/x`.
    Ok(cwd.join(path).components().collect())
}

/// Checks a tag: it becomes part of a file name.
pub(crate) fn validate_tag(tag: &str) -> Result<()> {
    let problem = if tag.is_empty() {
        Some("is empty")
    } else if tag.len() > MAX_TAG_BYTES {
        Some("is longer than 200 bytes")
    } else if tag.contains('/') {
        Some("contains `/`")
    } else if tag.contains('\0') {
        Some("contains a NUL byte")
    } else if tag == "." || tag == ".." {
        Some("is `.` or `..`")
    } else if tag.starts_with(".sandkeeper-") {
        Some("starts with `.sandkeeper-`, which is reserved")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(why) => Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "sandbox tag {tag:?} {why}; a tag is 1-200 bytes of a file name, without `/` or NUL"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filesystem_root_is_refused() {
        let up = std::env::temp_dir()
            .join("..")
            .join("..")
            .join("..")
            .join("..");
        for root in [
            PathBuf::from("/"),
            PathBuf::from("//"),
            PathBuf::from("/."),
            up,
        ] {
            let err = Builder::new().root(&root).create().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{root:?}: {err}");
            assert!(err.to_string().contains("filesystem root"), "{err}");
        }
    }

    #[test]
    fn tags() {
        let long = "x".repeat(201);
        let cases: &[(&str, bool)] = &[
            ("app", true),
            ("app-235", true),
            (".tmp", true),
            ("ünïcode", true),
            ("", false),
            ("a/b", false),
            ("a\0b", false),
            (".", false),
            ("..", false),
            (".sandkeeper-new-x", false),
            (&long, false),
        ];
        for (tag, ok) in cases {
            assert_eq!(validate_tag(tag).is_ok(), *ok, "{tag:?}");
        }
    }
}
