//! The library's one error type.
//!
//! Every [`Error`] says what was being done, on which path (and, where it
//! matters, which process), and why. It converts into [`std::io::Error`]
//! keeping its [`io::ErrorKind`], so callers that only speak `io` lose nothing.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong, in categories a caller can act on.
///
/// The enum is `#[non_exhaustive]`: later versions may add kinds, so match
/// with a wildcard arm.
///
/// ```
/// use sandkeeper::{ErrorKind, Sandbox};
/// let err = Sandbox::builder().tag("a/b").create().unwrap_err();
/// match err.kind() {
///     ErrorKind::InvalidInput => {} // the tag: no `/` in a name
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A system call failed; [`Error::io_error`] has the errno.
    Io,
    /// A value given by the caller or the environment is not acceptable
    /// (a tag containing `/`, an unknown `SANDKEEPER_KEEP` value, …).
    InvalidInput,
    /// The directory meant to hold sandboxes cannot be used: it does not
    /// exist, is not a directory, or is not writable.
    UnusableRoot,
    /// A directory that must belong to the current user (the per-user root
    /// for keyed sandboxes) is a symlink, belongs to someone else, or is open
    /// to other users: using it would let them hijack our sandboxes.
    UnsafeRoot,
    /// A keyed sandbox name is held by a live process and the builder was
    /// told not to take another slot; [`Error::pid`] names the holder.
    Held,
    /// Two different call sites claimed the same keyed name in one process.
    NameConflict,
    /// A lease record could not be parsed (empty, truncated, not JSON,
    /// missing fields).
    InvalidLease,
    /// Waiting for a keyed name to become free took longer than allowed.
    TimedOut,
    /// A directory could not be removed completely.
    Removal,
    /// The platform does not support the operation (non-Linux systems lack
    /// `/proc`).
    Unsupported,
    /// A stop was asked for (a stop flag: the engine's `reap::PolicyBuilder::stop_flag`
    /// was raised) before the work was done; nothing further was done.
    Stopped,
}

/// An error with the path (and pid, where relevant) it concerns.
///
/// Its [`Display`](fmt::Display) output is one line that names the
/// operation, the path and the cause; [`Error::hint`] may add what to do
/// about it.
///
/// ```
/// use sandkeeper::{Builder, ErrorKind};
///
/// let err = Builder::new().tag("a/b").create().unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidInput);
/// assert!(err.to_string().contains("a/b"));
/// ```
pub struct Error {
    kind: ErrorKind,
    message: Cow<'static, str>,
    path: Option<PathBuf>,
    pid: Option<u32>,
    hint: Option<Cow<'static, str>>,
    source: Option<io::Error>,
    /// The entry's name held another inode than the one expected: a race
    /// with whoever may rename in its parent, not a failure of the removal.
    replaced: bool,
}

impl Error {
    /// A new error of `kind` with a human message (no trailing period).
    #[doc(hidden)]
    pub fn new(kind: ErrorKind, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            message: message.into(),
            path: None,
            pid: None,
            hint: None,
            source: None,
            replaced: false,
        }
    }

    /// An [`ErrorKind::Stopped`] error: a stop was asked for.
    #[doc(hidden)]
    pub fn stopped() -> Self {
        Error::new(
            ErrorKind::Stopped,
            "stopped on request before the scan was done",
        )
    }

    /// An [`ErrorKind::Io`] error: `message` says what was being done.
    #[doc(hidden)]
    pub fn io(message: impl Into<Cow<'static, str>>, source: io::Error) -> Self {
        Error::new(ErrorKind::Io, message).with_source(source)
    }

    #[doc(hidden)]
    pub fn at(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }

    #[doc(hidden)]
    pub fn with_pid(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self
    }

    #[doc(hidden)]
    pub fn with_hint(mut self, hint: impl Into<Cow<'static, str>>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    #[doc(hidden)]
    pub fn with_source(mut self, source: io::Error) -> Self {
        self.source = Some(source);
        self
    }

    /// Marks an error that says the entry was replaced under its name (see
    /// [`replaced`](Self::replaced)).
    #[doc(hidden)]
    pub fn replaced_name(mut self) -> Self {
        self.replaced = true;
        self
    }

    /// Whether the entry was found replaced under its name (another inode
    /// than the expected one), so nothing was removed: a race with
    /// whoever may rename in its parent (its owner re-creating it), which
    /// the reaper reports as a skip, not an error.
    #[doc(hidden)]
    pub fn replaced(&self) -> bool {
        self.replaced
    }

    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The path the failed operation concerned, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The process the error concerns (the holder of a keyed name), if any.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// What the user can do about it, if there is a known remedy.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The underlying system error, if the error came from a system call.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.source.as_ref()
    }

    /// The `io::ErrorKind` this error maps to when converted to `io::Error`.
    fn io_kind(&self) -> io::ErrorKind {
        match (&self.source, self.kind) {
            (Some(e), ErrorKind::Io | ErrorKind::UnusableRoot | ErrorKind::Removal) => e.kind(),
            (_, ErrorKind::InvalidInput | ErrorKind::NameConflict) => io::ErrorKind::InvalidInput,
            (_, ErrorKind::InvalidLease) => io::ErrorKind::InvalidData,
            (_, ErrorKind::UnsafeRoot) => io::ErrorKind::PermissionDenied,
            (_, ErrorKind::Held) => io::ErrorKind::ResourceBusy,
            (_, ErrorKind::TimedOut) => io::ErrorKind::TimedOut,
            (_, ErrorKind::Unsupported) => io::ErrorKind::Unsupported,
            (_, ErrorKind::Stopped) => io::ErrorKind::Interrupted,
            (None, _) => io::ErrorKind::Other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(path) = &self.path {
            write!(f, ": {}", path.display())?;
        }
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(path) = &self.path {
            d.field("path", path);
        }
        if let Some(pid) = self.pid {
            d.field("pid", &pid);
        }
        if let Some(hint) = &self.hint {
            d.field("hint", hint);
        }
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<Error> for io::Error {
    fn from(err: Error) -> io::Error {
        io::Error::new(err.io_kind(), err)
    }
}

/// The library's result type.
///
/// ```
/// fn scratch() -> sandkeeper::Result<sandkeeper::Sandbox> {
///     sandkeeper::Sandbox::builder().tag("scratch").create()
/// }
/// assert!(scratch()?.is_dir());
/// # Ok::<(), sandkeeper::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds the operation and the path to an `io::Result` where the syscall
/// happens, lazily so the happy path allocates nothing.
#[doc(hidden)]
pub trait IoResultExt<T> {
    /// Wraps the error as [`ErrorKind::Io`] with `what` and the path.
    fn with_path<P: Into<PathBuf>>(self, what: &'static str, path: impl FnOnce() -> P)
        -> Result<T>;
}

impl<T> IoResultExt<T> for io::Result<T> {
    fn with_path<P: Into<PathBuf>>(
        self,
        what: &'static str,
        path: impl FnOnce() -> P,
    ) -> Result<T> {
        self.map_err(|e| Error::io(what, e).at(path()))
    }
}

#[cfg(unix)]
impl<T> IoResultExt<T> for std::result::Result<T, rustix::io::Errno> {
    fn with_path<P: Into<PathBuf>>(
        self,
        what: &'static str,
        path: impl FnOnce() -> P,
    ) -> Result<T> {
        self.map_err(io::Error::from).with_path(what, path)
    }
}

/// Bytes shown with control characters and invalid UTF-8 escaped, so that
/// hostile names cannot drive a terminal.
#[doc(hidden)]
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() {
                    write!(f, "{}", c.escape_default())?;
                } else {
                    f.write_char(c)?;
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
        check::<ErrorKind>();
    }

    #[test]
    fn io_conversion_keeps_kind() {
        let cases = [
            (
                Error::io("open", io::Error::from(io::ErrorKind::NotFound)),
                io::ErrorKind::NotFound,
            ),
            (
                Error::new(ErrorKind::InvalidLease, "bad"),
                io::ErrorKind::InvalidData,
            ),
            (
                Error::new(ErrorKind::Held, "held"),
                io::ErrorKind::ResourceBusy,
            ),
            (
                Error::new(ErrorKind::InvalidInput, "tag"),
                io::ErrorKind::InvalidInput,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(io::Error::from(err).kind(), want);
        }
    }

    #[test]
    fn display_names_path_and_cause() {
        let err = Error::io("cannot open", io::Error::from_raw_os_error(2)).at("/x/y");
        let text = err.to_string();
        assert!(text.starts_with("cannot open: /x/y: "), "{text}");
        assert!(text.contains("No such file"), "{text}");
    }
}
