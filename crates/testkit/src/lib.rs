//! Test support shared by sandkeeper's test suites, one module per
//! concept. Not published; only the workspace's tests use it.
//!
//! - [`privilege`]: root checks and acting as `nobody` (on a thread, through
//!   `setpriv`, in a shell, as a process living in a directory).
//! - [`namespace`]: re-running a test as PID 1 of a private PID namespace.
//! - [`process`]: helper child processes, killed on drop; re-running this
//!   test binary for one test; waits bounded by a deadline.
//! - [`prometheus`]: `promtool`, and the metrics file's samples read back.
//! - [`child`]: the helper side the library's sandbox and lease tests start.
//! - [`mounts`]: tmpfs, bind and loop-device guards, undone on drop
//!   (and the errno of a full filesystem).
//! - [`tree`]: building (orphaned sandboxes too), inspecting (entry names,
//!   snapshots) and ageing directory trees.
//! - [`scratch`](mod@scratch): the [`Scratch`](scratch::Scratch) sandbox
//!   (and its [`scratch!`] macro), and the one every test that acts as
//!   another user works in, which that user can reach
//!   ([`Scratch::reachable_by_others`](scratch::Scratch::reachable_by_others)),
//!   with a shared root like `/tmp` in it ([`scratch::shared_root`]).
//! - [`fuzz`]: proptest strategies for hostile input.
//! - [`skips`]: a test skipped for want of root or of a tool, said and
//!   listed at the end of the binary (with `CI` set, it fails instead).
//!
//! Everything a test makes is undone: every scratch directory is a
//! sandkeeper sandbox, every mount is unmounted on drop, and every
//! spawned child is killed and reaped on drop.
#![deny(missing_docs)]

pub mod child;
pub mod fuzz;
pub mod mounts;
pub mod namespace;
pub mod privilege;
pub mod process;
pub mod prometheus;
pub mod scratch;
pub mod skips;
pub mod tree;
