//! Grouping names into families: `app-235-*`, `.tmp*`, `pip-install-*`,
//! `systemd-private-*-chronyd.service-*`.
//!
//! A leak shows up as thousands of directories whose names differ only in a
//! pid, a counter, a hash or a random suffix. [`group`] turns such a list of
//! names into a few [`Family`] values, each with a glob-like pattern in which
//! the parts that vary are `*` and the parts that carry meaning stay
//! literal — the literal part a person would type.
//!
//! ```
//! use sandkeeper_engine::pattern;
//!
//! let names = [
//!     "app-235-4100", "app-235-4242", "app-235-977", // a test helper's pid dirs
//!     "tmpk2_x9aab", "tmpq0w_e1rt",                 // Python's tempfile.mkdtemp()
//!     "pip-install-3vn_t1zq",                        // pip
//!     "sandbox-tester-brave-otter-3fa9c1",           // a launcher's run dir
//!     "rust_out.0009", "rust_out.001d",              // a hex counter
//!     ".X11-unix", ".ICE-unix", "pytest-of-root",    // fixed names
//! ];
//! let families = pattern::group(&names);
//! let patterns: Vec<&str> = families.iter().map(|f| f.pattern.as_str()).collect();
//! assert_eq!(
//!     patterns,
//!     [
//!         ".ICE-unix", ".X11-unix", "app-235-*", "pip-install-*", "pytest-of-root",
//!         "rust_out.*", "sandbox-tester-*", "tmp*",
//!     ],
//! );
//! assert_eq!(families[2].members, [0, 1, 2]);
//! assert!(families.iter().all(|f| f.members.iter().all(|&m| f.matches(names[m].as_ref()))));
//! # Ok::<(), sandkeeper_engine::Error>(())
//! ```
//!
//! # How names are read
//!
//! Each name is first read on its own, so that a family's pattern does not
//! depend on its neighbours, on how many members it has, or on what its
//! random parts happen to be.
//!
//! 1. **Known generators** (data in `pattern/known.rs`, each with the
//!    source of its shape): a name that fits one has its random part read
//!    as one varying piece, even where it contains a separator or looks
//!    like a word:
//!
//!    | generator | shape | pattern |
//!    |---|---|---|
//!    | Python `tempfile` | `tmp` + 8 of `[a-z0-9_]` + suffix | `tmp*`, `tmp*.py`, `tmp*__tempfs__` |
//!    | pip | `pip-<kind>-` + 8 of `[a-z0-9_]` | `pip-install-*`, `pip-build-env-*` |
//!    | Rust `tempfile`, rustc, rustdoc | `.tmp` + 6 of `[A-Za-z0-9]` + suffix; `rustc`, `rustdoctest` + 6 | `.tmp*`, `rustc*` |
//!    | `mktemp(1)` | `tmp.` + 10 of `[A-Za-z0-9]` | `tmp.*` |
//!    | systemd `PrivateTmp=` | `systemd-private-<32 hex>-<unit>-` + 6; the unit literal as a whole | `systemd-private-*-user@1000.service-*` |
//!    | gcc | `cc` + 6 + `.s`/`.o`/`.res`/… | `cc*.o` |
//!    | ssh-agent, dbus | `ssh-` + 10–12, `dbus-` + 10 | `ssh-*` |
//!    | Chromium, Chrome, puppeteer | `.org.chromium.Chromium.` + 6, `puppeteer_dev_chrome_profile-` + 6 | `.org.chromium.Chromium.*` |
//!    | R, ImageMagick | `Rtmp` + 6; `magick-` + 32 of `[A-Za-z0-9_-]` | `Rtmp*`, `magick-*` |
//!    | Java `File.createTempFile` (Maven Surefire) | `surefire` + up to 20 digits + `tmp` | `surefire*tmp` |
//!
//!    A name ending in a separator and 8 characters of Python's alphabet
//!    that show they are random (a digit, or a `_` that does not join two
//!    words) is Python `tempfile` with the program's own prefix
//!    (`myapp-k2_x9aab` gives `myapp-*`).
//!
//!    **Dates and times** are one varying piece wherever they stand: a
//!    year 1970–2099, a month and a day (`2024-12-05`, `2024_12_05`,
//!    `20241205`), with a time after it (`T07:02:19`, `.07-02-19`,
//!    `_070219Z`, a fraction); so a log per start or a dump per night is
//!    one family (`kotlin-daemon.*.log`), not one per day. Ruby's
//!    `Dir::Tmpname` (`<prefix><date>-<pid>-<base 36>`) gives `d*-*-*`.
//! 2. **Words.** The rest is split at *separators* (every ASCII byte that
//!    is not a letter or a digit: `-`, `_`, `.`, `+`, `@`, spaces, …) into
//!    words, each classified:
//!
//!    | word | class | example |
//!    |---|---|---|
//!    | digits only | number | `4242`, `0` |
//!    | a UUID (`8-4-4-4-12` hex groups) | random | `vm-1b4e28ba-2fa1-11d2-883f-0016d3cca427` |
//!    | letters then digits, digits then lowercase letters | word + number | `pid1234`, `X11`, `64bit`, `TestHTTPHandler3311417221` |
//!    | up to 4 bytes starting with a letter | word | `e2e`, `k8s`, `i18n` |
//!    | hex starting with a digit (a counter), or 8+ hex | random | `001d`, `d6335848` |
//!    | letters and digits mixed more than that | random | `tmpAbC12x`, `1a2b3c`, hashes |
//!    | letters whose case is not a word's | random | `XyZaQw`, `ccKarzSK`, `qkQqbg` (not `MyProject`, `iPhone`, `ABC`) |
//!    | anything else | word | `pytest`, `chronyd`, `nodes` |
//!
//!    A random word keeps a literal head when all but its last 6 bytes
//!    are lowercase letters, two or more at the start of the name, five or
//!    more after a separator (`rustc*` from `rustcAb12Cd`; 6 is glibc's
//!    `XXXXXX`, Rust `tempfile`'s and Node's `mkdtemp`'s length).
//! 3. **Random tails.** The last word, after a separator, is random when it
//!    is what a generator's tail looks like by chance: letters no one
//!    would say (four consonants in a row or no vowel: `flhxzdhe`,
//!    `Mhcl29`), a word of 6, 8, 10 or 12 letters with a capital first or
//!    several capitals (`Ahpddc`, `STRUXW`), or 6+ hex letters (`eecedc`).
//! 4. **Slugs.** After the first word, a slug generator's adjective
//!    (Docker's `pkg/namesgenerator`, petname; `brave`, `focused`, …)
//!    followed by `-` or `_` and a word is a generated slug; with the
//!    random parts and numbers right beside it, it is one `*`
//!    (`sandbox-tester-brave-otter-3fa9c1` gives `sandbox-tester-*`,
//!    `ci-focused_turing` gives `ci-*`).
//!
//! Then two passes compare a name with the others of its shape, both
//! decided from counts over the whole input (so order-independent):
//!
//! - **Slugs from unknown lists.** Among names with a number or random
//!   part, the same skeleton and first word (at least 5, or 3 when all
//!   end in a random part), two neighbouring places after the first word
//!   whose word pairs are as varied as independent draws make them (80 %
//!   of the distinct pairs that as many uniform draws from `distinct ×
//!   distinct` give on average) are a slug. Words that mean
//!   something come in few combinations (`aura-nodes-resolve-*`,
//!   `aura-campaign-exec-*`), so they stay literal.
//! - **Random look-alikes.** A word of five or more bytes that stands where
//!   names with the same first word (and the separators before it) have
//!   random strings of exactly its length, counted from the end, at least
//!   half as often as such words — or, as a first word, where names of the
//!   same skeleton do — is random too (`rust_out.abcdef` beside
//!   `rust_out.1a2b3c`). A fixed name is never changed by an unrelated
//!   neighbour (`mio_tests` stays beside `tmpq_x9k2m`).
//!
//! # How families are formed
//!
//! - Names belong to one family candidate when their literal pieces are
//!   equal and they vary at the same places. Words are literal, so
//!   `app-nodes-resolve-<pid>` and `app-nodes-list-<pid>` are two families.
//! - A random piece is always `*`, even when every member shares it (a boot
//!   id would otherwise give each service's `systemd-private-…` family a
//!   32-digit literal).
//! - A number of 4 or more digits, or the last number with 3, is a pid or
//!   counter: `*`, even in a family of one (`app-235-4242` gives
//!   `app-235-*`). So is a number ending a name that has a pid or random
//!   part elsewhere (`e2e-run-<pid>-<n>` gives `e2e-run-*-*`).
//! - Any other number stays literal when every member has the same one
//!   (`app-235-*`, `.X11-unix`, `getty@tty1`, `sandkeeper-0`); where it
//!   takes several values the names split by it when the name ends in a pid
//!   or random part (`app-235-*` and `app-17-*`, not `app-*-*`), or when it
//!   takes few values and another place is nearly unique; otherwise it is
//!   `*` (`job-*-*`).
//! - A name alone whose pattern would keep no letter or digit stays
//!   literal. Families whose patterns come out equal are merged.
//!
//! The result depends only on the *set* of names: families are sorted by
//! pattern (byte order), members by index. Names are bucketed by key, so
//! grouping is linear in the total length of the names apart from sorting.
//! No tokens are kept: a pass that needs a name's tokens reads it again
//! from its bytes, in order. The first walk reads every name and keys those
//! that neither pass can change; the second reads the names slugs may
//! change; the third those again, and the few with a word where names of
//! their shape have random strings of its length. What a bucket needs of
//! each member is kept as one `u16` per varying place (a tag's digits, or
//! whether it is random and how long), so a bucket reads only its first
//! member again — all of them only when a place that is no tag must be
//! counted. Per name that is two `u32` ids and where its long words stand
//! while reading, its bucket and codes, then one `u32` index in key order
//! (about 17 bytes per name at peak beyond the names themselves for
//! 1,000,000 short names, the result's member lists included); 50,000
//! names from the corpus take about half the time of reading every name
//! in every pass (about 50 ms in release on an idle 2-core machine, where
//! that took about 100; `bench/families/run.sh` reports both).
//! [`group_with`] reads names from any source (one buffer and offsets),
//! without a slice of references. The hashes of names' bytes are std's
//! keyed SipHash, so names chosen to collide cannot make grouping
//! quadratic.
//!
//! # Pattern syntax
//!
//! A pattern is a glob in which `*` matches any sequence of bytes, including
//! none, and is the only special character. It is lossless for any name:
//! `\` escapes the next character (`\*`, `\?`, `\[`, `\\` stand for those
//! characters: `?` and `[` are escaped so that a richer glob syntax can give
//! them meaning later without changing any pattern made today), and `\xNN`
//! (two lowercase hex digits) stands for one raw byte. Bytes that are not
//! valid UTF-8 and ASCII control characters are always written as `\xNN`, so
//! a pattern never carries a terminal escape sequence; other Unicode text is
//! kept as it is (output layers still sanitise it for terminals).
//!
//! # Limits
//!
//! The reading is a heuristic, measured on a corpus of names made the way
//! the generators above make them (`tests/families`: 99.8 % of names in
//! the right family over 600 corpora; `bench/families/run.sh`). What it
//! cannot know:
//!
//! - A random part that looks like a word, from a generator it does not
//!   know, in a name alone (`myapp-qwerty`, `mio_zemwyp`): it stays
//!   literal. Beside a neighbour of the same shape that is visibly random
//!   it becomes `*`.
//! - Python `tempfile` with a program's own prefix whose random part reads
//!   as words or as a word and a number (`iysd_ucn`, `eghczu_4`) keeps it.
//! - A slug whose adjective is in no list, in a family of fewer than 3
//!   names, keeps its words (one family per word pair); a few meaningful
//!   word pairs (`ci-debug-build-<hex>`, `ci-release-test-<hex>`), one name
//!   each, can be read as a slug.
//! - A tag of 4 or more digits (`build-2024-<pid>`) is read as a pid:
//!   `build-*-*`; a uid at the end (`tracker-extract-3-files.1000`) too. A
//!   name ending in digits before a generator's digits (Go's `TestParse2`
//!   plus its random number) loses them into the `*`.
//! - Different extensions of one generator (`cc*.s`, `cc*.o`) are different
//!   families.

mod glob;
mod known;
mod read;
mod shape;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use glob::{escape_into, glob_match, parse_glob};
use read::{Parsed, Piece, PieceKind};
use shape::{Given, Reader};

/// One family of names, e.g. `app-235-*`.
///
/// Every member matches [`Family::pattern`] ([`Family::matches`]), and every
/// input name is a member of exactly one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The family's pattern in the syntax described in the [module
    /// docs](self#pattern-syntax): `*` for what varies, escapes for
    /// special characters and non-UTF-8 bytes.
    pub pattern: String,
    /// Indexes of the members in the slice given to [`group`], ascending.
    pub members: Vec<usize>,
}

impl Family {
    /// Whether `name` matches this family's pattern (see [`matches()`]).
    pub fn matches(&self, name: &OsStr) -> bool {
        matches(&self.pattern, name)
    }
}

/// Groups `names` into families of names that differ only in numbers and
/// random parts.
///
/// Families are sorted by pattern, members by index; an empty input gives
/// no families. The outcome depends only on the set of names, not on their
/// order (apart from the indexes themselves). See the [module docs](self)
/// for the rules.
///
/// ```
/// let names = ["app-nodes-list-4101", "app-nodes-resolve-4100", "app-nodes-list-3999"];
/// let families = sandkeeper_engine::pattern::group(&names);
/// assert_eq!(families.len(), 2);
/// assert_eq!(families[0].pattern, "app-nodes-list-*");
/// assert_eq!(families[0].members, [0, 2]);
/// assert_eq!(families[1].pattern, "app-nodes-resolve-*");
/// ```
pub fn group<S: AsRef<OsStr>>(names: &[S]) -> Vec<Family> {
    group_with(names.len(), |i| names[i].as_ref().as_bytes())
}

/// [`group`] for names that are not in a slice: `name(i)` gives the bytes
/// of name `i`, for `i` in `0..len` (e.g. from one buffer of names and
/// their offsets, without a slice of references beside it). It is called
/// several times per name and must give the same bytes each time.
///
/// ```
/// let buffer = b"app-235-4100app-235-4242tmp";
/// let ends = [12, 24, 27];
/// let families = sandkeeper_engine::pattern::group_with(ends.len(), |i| {
///     &buffer[if i == 0 { 0 } else { ends[i - 1] }..ends[i]]
/// });
/// assert_eq!(families[0].pattern, "app-235-*");
/// assert_eq!(families[0].members, [0, 1]);
/// assert_eq!(families[1].pattern, "tmp");
/// ```
///
/// # Panics
///
/// When `len` is more than `u32::MAX` (indexes are kept as `u32`).
pub fn group_with<'a>(len: usize, name: impl Fn(usize) -> &'a [u8]) -> Vec<Family> {
    assert!(
        u32::try_from(len).is_ok(),
        "pattern::group_with: {len} names; at most {} can be grouped at once",
        u32::MAX
    );
    // Each name's key, as an id in order of first sight (its bucket), and
    // per bucket how many varying places its names have.
    let mut keys: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut vars: Vec<u32> = Vec::new();
    let mut of: Vec<u32> = vec![u32::MAX; len];
    // Per name, in order, the code of each varying place (see
    // `place_code`): for the names given as read, and for those given
    // again; and which names were given again, with the bucket of those
    // given before (whose codes as read are left out).
    let mut codes_as_read: Vec<u16> = Vec::with_capacity(len);
    let mut codes_again: Vec<u16> = Vec::new();
    let mut again: Vec<u32> = Vec::new();
    let mut replaced: Vec<(u32, u32)> = Vec::new();
    let mut key = Vec::new();
    let mut pieces = Vec::new();
    let mut reader = shape::read(len, name, |n, name, given| {
        key.clear();
        name.key(&mut key);
        pieces.clear();
        name.pieces_into(&mut pieces);
        let places = pieces.iter().filter(|p| p.kind != PieceKind::Lit);
        // Only a bucket's first name pays for an owned key.
        let next = keys.len() as u32;
        let id = match keys.get(key.as_slice()) {
            Some(&id) => id,
            None => {
                keys.insert(key.clone(), next);
                vars.push(places.clone().count() as u32);
                next
            }
        };
        let codes = match given {
            Given::AsRead => &mut codes_as_read,
            Given::Again => {
                if of[n] != u32::MAX {
                    replaced.push((n as u32, of[n]));
                }
                again.push(n as u32);
                &mut codes_again
            }
        };
        of[n] = id;
        debug_assert_eq!(places.clone().count(), vars[id as usize] as usize);
        codes.extend(places.map(|p| place_code(p.kind, name.text(p.start, p.end))));
    });
    let buckets = keys.len();
    drop(keys);
    let vars_of = |b: u32| vars[b as usize] as usize;

    // The names sorted by key (a counting sort: ascending within a key),
    // their codes with them.
    let mut starts = vec![0u32; buckets + 1];
    for &k in &of {
        starts[k as usize + 1] += 1;
    }
    for b in 0..buckets {
        starts[b + 1] += starts[b];
    }
    let mut code_starts = vec![0usize; buckets + 1];
    for b in 0..buckets {
        code_starts[b + 1] =
            code_starts[b] + (starts[b + 1] - starts[b]) as usize * vars_of(b as u32);
    }
    let mut order = vec![0u32; len];
    let mut codes = vec![0u16; code_starts[buckets]];
    let mut next = starts.clone();
    let (mut again, mut replaced) = (again.iter().peekable(), replaced.iter().peekable());
    let (mut from_as_read, mut from_again) = (0, 0);
    for (n, &k) in of.iter().enumerate() {
        let v = vars_of(k);
        let slot = next[k as usize];
        next[k as usize] += 1;
        order[slot as usize] = n as u32;
        let to = code_starts[k as usize] + (slot - starts[k as usize]) as usize * v;
        let from = match again.next_if(|&&a| a as usize == n) {
            Some(_) => {
                if let Some(&(_, before)) = replaced.next_if(|&&(r, _)| r as usize == n) {
                    from_as_read += vars_of(before);
                }
                from_again += v;
                &codes_again[from_again - v..from_again]
            }
            None => {
                from_as_read += v;
                &codes_as_read[from_as_read - v..from_as_read]
            }
        };
        codes[to..to + v].copy_from_slice(from);
    }
    drop(next);
    drop(of);
    drop(codes_as_read);
    drop(codes_again);

    let mut scratch = Scratch::default();
    let mut by_pattern: HashMap<String, Vec<usize>> = HashMap::new();
    for b in 0..buckets {
        let members = &order[starts[b] as usize..starts[b + 1] as usize];
        if members.is_empty() {
            // Only names given again, elsewhere, made it.
            continue;
        }
        let bucket = Bucket {
            members,
            codes: &codes[code_starts[b]..code_starts[b + 1]],
        };
        for family in bucket_families(&mut reader, &mut scratch, bucket) {
            let all = by_pattern.entry(family.pattern).or_default();
            match all.is_empty() {
                true => *all = family.members,
                false => all.extend(family.members),
            }
        }
    }
    drop(order);
    drop(codes);
    let mut families: Vec<Family> = by_pattern
        .into_iter()
        .map(|(pattern, mut members)| {
            members.sort_unstable();
            Family { pattern, members }
        })
        .collect();
    families.sort_unstable_by(|a, b| a.pattern.cmp(&b.pattern));
    families
}

/// Whether `name` matches `pattern` in the syntax of the [module
/// docs](self#pattern-syntax): `*` matches any bytes, `\` escapes, `\xNN`
/// is one byte.
///
/// A `\` at the end of the pattern stands for itself; `\x` not followed by
/// two hex digits stands for `x`.
///
/// ```
/// use sandkeeper_engine::pattern::matches;
/// assert!(matches("app-235-*", "app-235-4242".as_ref()));
/// assert!(!matches("app-235-*", "app-236-4242".as_ref()));
/// assert!(matches(r"odd\*name", "odd*name".as_ref()));
/// assert!(!matches(r"odd\*name", "odd-name".as_ref()));
/// ```
pub fn matches(pattern: &str, name: &OsStr) -> bool {
    glob_match(&parse_glob(pattern), name.as_bytes())
}

/// A number with more digits than this is a pid or a counter: always `*`.
const TAG_MAX_DIGITS: usize = 3;

/// How many distinct byte strings `values` holds, the longest `longest`
/// bytes long: by sorting, as one 64- or 128-bit number each when they fit
/// in 7 or 15 bytes (their bytes, then their length: equal numbers, equal
/// strings).
fn distinct_values<'v>(values: impl ExactSizeIterator<Item = &'v [u8]>, longest: usize) -> usize {
    const PACKED_MAX: usize = 15;
    const PACKED_SHORT_MAX: usize = 7;
    if longest <= PACKED_SHORT_MAX {
        let mut packed: Vec<u64> = values
            .map(|v| {
                let mut bytes = [0u8; 8];
                bytes[..v.len()].copy_from_slice(v);
                bytes[PACKED_SHORT_MAX] = v.len() as u8;
                u64::from_le_bytes(bytes)
            })
            .collect();
        packed.sort_unstable();
        packed.dedup();
        return packed.len();
    }
    if longest <= PACKED_MAX {
        let mut packed: Vec<u128> = values
            .map(|v| {
                let mut bytes = [0u8; 16];
                bytes[..v.len()].copy_from_slice(v);
                bytes[PACKED_MAX] = v.len() as u8;
                u128::from_le_bytes(bytes)
            })
            .collect();
        packed.sort_unstable();
        packed.dedup();
        return packed.len();
    }
    let mut values: Vec<&[u8]> = values.collect();
    values.sort_unstable();
    values.dedup();
    values.len()
}

/// `10^TAG_MAX_DIGITS`: a tag code is its length times this plus its value.
const TAG_CODE_BASE: u16 = 1000;
const _: () = assert!(10usize.pow(TAG_MAX_DIGITS as u32) == TAG_CODE_BASE as usize);

/// A place code that is not a tag code ...
const UNCODED: u16 = 1 << 15;
/// ... and is not digits ...
const RANDOM: u16 = 1 << 14;
/// ... with its length, at most this.
const CODE_LEN_MAX: u16 = RANDOM - 1;

/// What a bucket needs of a member's varying place, as one `u16`, kept
/// per name instead of reading every member again. A number of up to
/// [`TAG_MAX_DIGITS`] digits (a tag, maybe) is its length times
/// [`TAG_CODE_BASE`] plus its value (`7` is 1007, `07` is 2007), so equal
/// codes are equal text; anything else is [`UNCODED`], [`RANDOM`] unless
/// it is digits, and its length (up to [`CODE_LEN_MAX`]).
fn place_code(kind: PieceKind, text: &[u8]) -> u16 {
    let num = kind == PieceKind::Var { num: true };
    if num
        && !text.is_empty()
        && text.len() <= TAG_MAX_DIGITS
        && text.iter().all(u8::is_ascii_digit)
    {
        let value = text.iter().fold(0u16, |v, &d| v * 10 + u16::from(d - b'0'));
        return text.len() as u16 * TAG_CODE_BASE + value;
    }
    let len = text.len().min(usize::from(CODE_LEN_MAX)) as u16;
    UNCODED | if num { 0 } else { RANDOM } | len
}

/// The digits of a tag code (see [`place_code`]) in `out`.
fn tag_text(code: u16, out: &mut [u8; TAG_MAX_DIGITS]) -> &[u8] {
    let len = usize::from(code / TAG_CODE_BASE);
    let mut value = code % TAG_CODE_BASE;
    for d in out[..len].iter_mut().rev() {
        *d = b'0' + (value % 10) as u8;
        value /= 10;
    }
    &out[..len]
}

/// How many distinct codes `codes` holds (a bit per possible code).
fn distinct_codes(codes: impl Iterator<Item = u16>) -> usize {
    const WORDS: usize = (TAG_CODE_BASE as usize * (TAG_MAX_DIGITS + 1)).div_ceil(64);
    let mut bits = [0u64; WORDS];
    for c in codes {
        bits[usize::from(c) / 64] |= 1 << (c % 64);
    }
    bits.iter().map(|w| w.count_ones() as usize).sum()
}

/// Buffers [`bucket_families`] reuses from bucket to bucket.
#[derive(Default)]
struct Scratch<'a> {
    parsed: Option<Parsed<'a>>,
    pieces: Vec<Piece>,
    layout: Vec<Piece>,
    /// Per member, the byte range of each varying place (read only when
    /// a place that is not a tag must be counted).
    ranges: Vec<(u32, u32)>,
}

/// One bucket: names with equal keys, so equal piece layouts.
struct Bucket<'b> {
    /// Ascending.
    members: &'b [u32],
    /// Per member, the code of each varying place (see [`place_code`]).
    codes: &'b [u16],
}

/// Reads `members` again, one after another, keeping only where their
/// varying places (the pieces `vars` of the layout) are.
fn read_ranges<'a, F: Fn(usize) -> &'a [u8]>(
    reader: &mut Reader<'a, F>,
    parsed: &mut Parsed<'a>,
    pieces: &mut Vec<Piece>,
    ranges: &mut Vec<(u32, u32)>,
    members: &[u32],
    vars: &[usize],
) {
    ranges.clear();
    ranges.reserve_exact(members.len() * vars.len());
    for &i in members {
        reader.final_tokens(i as usize, parsed);
        pieces.clear();
        parsed.name().pieces_into(pieces);
        ranges.extend(vars.iter().map(|&p| (pieces[p].start, pieces[p].end)));
    }
}

/// The families of one bucket. Its first member gives the layout (and
/// every member's literal text: equal keys); what the last walk kept of
/// each member tells and spells its tags. Only when a place that is not a
/// tag must be counted (a tag before a last place that is no pid, to see
/// whether another place is nearly unique) are the members read again.
fn bucket_families<'a, F: Fn(usize) -> &'a [u8]>(
    reader: &mut Reader<'a, F>,
    scratch: &mut Scratch<'a>,
    bucket: Bucket<'_>,
) -> Vec<Family> {
    let Bucket { members, codes } = bucket;
    let n = members.len();
    let Scratch {
        parsed,
        pieces,
        layout,
        ranges,
    } = scratch;
    let parsed = parsed.get_or_insert_with(|| Parsed {
        bytes: &[],
        tokens: Vec::new(),
    });
    reader.final_tokens(members[0] as usize, parsed);
    layout.clear();
    parsed.name().pieces_into(layout);
    let layout = &*layout;
    let bytes0 = reader.bytes(members[0] as usize);
    let vars: Vec<usize> = (0..layout.len())
        .filter(|&p| layout[p].kind != PieceKind::Lit)
        .collect();
    let v = vars.len();
    debug_assert_eq!(codes.len(), n * v);
    // The code of varying place `k` (the `k`th varying piece) of member
    // `m`.
    let code = |m: usize, k: usize| codes[m * v + k];
    let last_var = vars.last().copied();

    // Per varying place: is any member random there, the longest value
    // (up to `CODE_LEN_MAX`), is every value a tag code, and how many
    // values (counted when needed).
    struct Place {
        piece: usize,
        random: bool,
        longest: usize,
        coded: bool,
        last: bool,
    }
    let mut places: Vec<Place> = vars
        .iter()
        .map(|&p| Place {
            piece: p,
            random: false,
            longest: 0,
            coded: true,
            last: Some(p) == last_var,
        })
        .collect();
    for member in codes.chunks_exact(v.max(1)) {
        for (pl, &c) in places.iter_mut().zip(member) {
            let uncoded = c & UNCODED != 0;
            pl.random |= uncoded && c & RANDOM != 0;
            pl.coded &= !uncoded;
            let len = match uncoded {
                true => c & CODE_LEN_MAX,
                false => c / TAG_CODE_BASE,
            };
            pl.longest = pl.longest.max(usize::from(len));
        }
    }
    debug_assert!(places
        .iter()
        .all(|pl| pl.coded == (!pl.random && pl.longest <= TAG_MAX_DIGITS)));
    // Distinct values by their codes, or by sorting (no hashing of names'
    // bytes).
    let mut distinct: Vec<Option<usize>> = vec![None; v];
    let mut ranges_read = false;
    let mut distinct_at = |k: usize| {
        if let Some(d) = distinct[k] {
            return d;
        }
        let d = if places[k].coded {
            distinct_codes((0..n).map(|m| code(m, k)))
        } else {
            if !ranges_read {
                read_ranges(reader, parsed, pieces, ranges, members, &vars);
                ranges_read = true;
            }
            let text = |m: usize| {
                let (start, end) = ranges[m * v + k];
                &reader.bytes(members[m] as usize)[start as usize..end as usize]
            };
            let longest = (0..n).map(|m| text(m).len()).max().unwrap_or(0);
            distinct_values((0..n).map(text), longest)
        };
        distinct[k] = Some(d);
        d
    };
    // A pid, counter or random part: always `*`.
    let pid_like = |pl: &Place| {
        pl.random || pl.longest > TAG_MAX_DIGITS || (pl.last && pl.longest == TAG_MAX_DIGITS)
    };
    let last_pid_like = places.last().is_some_and(pid_like);
    // A number that may stay literal: not pid-like, and not a counter at
    // the end of a name that has a pid or random part elsewhere. Every
    // member's value at a tag is a tag code.
    let tag = |i: usize, pl: &Place| {
        let counter_beside_pid = pl.last
            && places
                .iter()
                .enumerate()
                .any(|(j, q)| j != i && pid_like(q));
        !pid_like(pl) && !counter_beside_pid
    };

    // Split by tags that take several values: always when the name ends in
    // a pid or random part (`app-235-*`, `app-17-*`), otherwise when they
    // take few values and another place is nearly unique per name. Places
    // are named by their index `k` among the varying places.
    let mut splits: Vec<usize> = Vec::new();
    for (i, pl) in places.iter().enumerate() {
        if !(tag(i, pl) && !pl.last && distinct_at(i) >= 2) {
            continue;
        }
        let split = last_pid_like
            || (distinct_at(i) * 2 <= n
                && (0..places.len()).any(|j| j != i && distinct_at(j) * 10 >= n * 9));
        if split {
            splits.push(i);
        }
    }
    let literal_places: Vec<bool> = places
        .iter()
        .enumerate()
        .map(|(i, pl)| tag(i, pl) && (distinct_at(i) == 1 || splits.contains(&i)))
        .collect();
    debug_assert!(places
        .iter()
        .zip(&literal_places)
        .all(|(pl, &literal)| !literal || pl.coded));

    // Without splits the bucket is one family, all of `members`: its
    // first member stands for it. Splits are tags: their codes tell.
    let split_codes = |m: usize| splits.iter().map(move |&k| code(m, k));
    let mut sorted: Vec<usize> = vec![0];
    if !splits.is_empty() {
        sorted = (0..n).collect();
        sorted.sort_unstable_by(|&a, &b| split_codes(a).cmp(split_codes(b)).then(a.cmp(&b)));
    }
    let mut families = Vec::new();
    for chunk in sorted.chunk_by(|&a, &b| split_codes(a).eq(split_codes(b))) {
        let m0 = chunk[0];
        let mut pattern = String::new();
        let mut kept_alnum = false;
        let mut places = places.iter().zip(&literal_places).enumerate().peekable();
        for (p, piece) in layout.iter().enumerate() {
            let place = places.next_if(|(_, (pl, _))| pl.piece == p);
            let literal = place.is_none_or(|(_, (_, &literal))| literal);
            if literal {
                let mut digits = [0u8; TAG_MAX_DIGITS];
                let t = match place {
                    Some((k, _)) => tag_text(code(m0, k), &mut digits),
                    None => &bytes0[piece.start as usize..piece.end as usize],
                };
                kept_alnum |=
                    t.iter().any(u8::is_ascii_alphanumeric) || piece.kind != PieceKind::Lit;
                escape_into(&mut pattern, t);
            } else if !pattern.ends_with('*') || pattern.ends_with("\\*") {
                pattern.push('*');
            }
        }
        if n == 1 && !kept_alnum {
            pattern.clear();
            escape_into(&mut pattern, reader.bytes(members[m0] as usize));
        }
        families.push((pattern, chunk));
    }
    if let [(pattern, _)] = families.as_mut_slice() {
        // One family: all of them, in order.
        return vec![Family {
            pattern: std::mem::take(pattern),
            members: members.iter().map(|&i| i as usize).collect(),
        }];
    }
    families
        .into_iter()
        .map(|(pattern, chunk)| Family {
            pattern,
            members: chunk.iter().map(|&m| members[m] as usize).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// A sandbox's name (its tag and the `sandkeeper` crate's random
    /// suffix) reads as the tag and a random part.
    #[test]
    fn a_lone_sandbox_name_reads_as_random() {
        fastrand::seed(17);
        for tag in ["run-true", "live", "cli-scan-rs-42", "tests-it_works-7"] {
            for _ in 0..500 {
                let name = format!("{tag}-{}", crate::names::name_suffix());
                let families = group(&[name.as_str()]);
                assert_eq!(families[0].pattern, format!("{tag}-*"), "{name}");
            }
        }
    }

    use super::*;
    use read::Class;

    /// `(name, names, expected (pattern, member names))` rows.
    macro_rules! table {
        ($($name:ident: [$($input:expr),* $(,)?] => [$(($pattern:expr, [$($member:expr),* $(,)?])),* $(,)?];)*) => {$(
            #[test]
            fn $name() {
                let input: Vec<String> = vec![$($input.to_string()),*];
                let want: Vec<(String, Vec<String>)> = vec![$(
                    ($pattern.to_string(), {
                        let mut m: Vec<String> = vec![$($member.to_string()),*];
                        m.sort();
                        m
                    })
                ),*];
                assert_eq!(families_of(&input), want, "input: {input:?}");
            }
        )*};
    }

    /// Families as (pattern, sorted member names), in output order.
    fn families_of(input: &[String]) -> Vec<(String, Vec<String>)> {
        group(input)
            .into_iter()
            .map(|f| {
                let mut names: Vec<String> = f.members.iter().map(|&i| input[i].clone()).collect();
                names.sort();
                for n in &names {
                    assert!(
                        f.matches(n.as_ref()),
                        "{n:?} does not match {:?}",
                        f.pattern
                    );
                }
                (f.pattern, names)
            })
            .collect()
    }

    table! {
        shared_number_stays_literal:
            ["app-235-4100", "app-235-4242", "app-235-977", "app-235-31337"]
            => [("app-235-*", ["app-235-4100", "app-235-4242", "app-235-977", "app-235-31337"])];
        words_make_separate_families:
            ["app-nodes-resolve-101", "app-nodes-list-102", "app-nodes-resolve-103",
             "app-nodes-list-104"]
            => [("app-nodes-list-*", ["app-nodes-list-102", "app-nodes-list-104"]),
                ("app-nodes-resolve-*", ["app-nodes-resolve-101", "app-nodes-resolve-103"])];
        tempfile_names:
            [".tmpAbC12x", ".tmpXyz99q", ".tmp0aZ9kL", ".tmpQ2w3E4", ".tmpabcdef", ".tmpk8Jd0s"]
            => [(".tmp*", [".tmpAbC12x", ".tmpXyz99q", ".tmp0aZ9kL", ".tmpQ2w3E4", ".tmpabcdef",
                           ".tmpk8Jd0s"])];
        lone_tempfile_name: [".tmpAbC12x"] => [(".tmp*", [".tmpAbC12x"])];
        systemd_private_one_family_per_service:
            ["systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-chronyd.service-8Xk2Lm",
             "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-systemd-logind.service-aQ3zRt",
             "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-colord.service-Hw7pUe",
             "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-upower.service-qwerty",
             "systemd-private-5d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a-chronyd.service-Zz9YyX"]
            => [("systemd-private-*-chronyd.service-*",
                 ["systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-chronyd.service-8Xk2Lm",
                  "systemd-private-5d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a-chronyd.service-Zz9YyX"]),
                ("systemd-private-*-colord.service-*",
                 ["systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-colord.service-Hw7pUe"]),
                ("systemd-private-*-systemd-logind.service-*",
                 ["systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-systemd-logind.service-aQ3zRt"]),
                ("systemd-private-*-upower.service-*",
                 ["systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-upower.service-qwerty"])];
        lone_word_names_stay_literal:
            ["pytest-of-root", "sandkeeper-0", ".X11-unix", ".ICE-unix", ".font-unix",
             "hsperfdata_root", "MyProject"]
            => [(".ICE-unix", [".ICE-unix"]), (".X11-unix", [".X11-unix"]),
                (".font-unix", [".font-unix"]), ("MyProject", ["MyProject"]),
                ("hsperfdata_root", ["hsperfdata_root"]), ("pytest-of-root", ["pytest-of-root"]),
                ("sandkeeper-0", ["sandkeeper-0"])];
        rust_out_random_suffixes:
            ["rust_out.1a2b3c", "rust_out.XyZ9Qw", "rust_out.p0Lk7J"]
            => [("rust_out.*", ["rust_out.1a2b3c", "rust_out.XyZ9Qw", "rust_out.p0Lk7J"])];
        uuids:
            ["vm-1b4e28ba-2fa1-11d2-883f-0016d3cca427", "vm-6fa459ea-ee8a-3ca4-894e-db77e160355e"]
            => [("vm-*", ["vm-1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                          "vm-6fa459ea-ee8a-3ca4-894e-db77e160355e"])];
        lone_uuid: ["vm-1b4e28ba-2fa1-11d2-883f-0016d3cca427"]
            => [("vm-*", ["vm-1b4e28ba-2fa1-11d2-883f-0016d3cca427"])];
        lone_pid_suffix: ["app-235-4242"] => [("app-235-*", ["app-235-4242"])];
        lone_short_number_stays: ["run-42"] => [("run-42", ["run-42"])];
        tags_split_when_the_pid_is_unique:
            ["app-235-1001", "app-235-1002", "app-235-1003", "app-17-1004", "app-17-1005",
             "app-17-1006"]
            => [("app-17-*", ["app-17-1004", "app-17-1005", "app-17-1006"]),
                ("app-235-*", ["app-235-1001", "app-235-1002", "app-235-1003"])];
        pid_and_counter_stay_one_family:
            ["job-500-0", "job-500-1", "job-501-0", "job-501-1", "job-502-0", "job-502-1"]
            => [("job-*-*", ["job-500-0", "job-500-1", "job-501-0", "job-501-1", "job-502-0",
                             "job-502-1"])];
        word_and_number:
            ["pid1234", "pid99", "pid100000"]
            => [("pid*", ["pid1234", "pid99", "pid100000"])];
        random_stem_names:
            ["rustcAb12Cd", "rustcX9yZ0q", "rustcqwe8Rt"]
            => [("rustc*", ["rustcAb12Cd", "rustcX9yZ0q", "rustcqwe8Rt"])];
        special_characters_are_escaped:
            ["odd*name?[x]\\"] => [("odd\\*name\\?\\[x]\\\\", ["odd*name?[x]\\"])];
        control_characters_are_escaped:
            ["bad\u{1b}[31mname"] => [("bad\\x1b\\[31mname", ["bad\u{1b}[31mname"])];
        empty_input: [] => [];
    }

    #[test]
    fn non_utf8_names_are_escaped_losslessly() {
        let raw = OsStr::from_bytes(b"caf\xe9-1234");
        let families = group(&[raw]);
        assert_eq!(families.len(), 1);
        assert_eq!(families[0].pattern, "caf\\xe9-*");
        assert!(families[0].matches(raw));
        assert!(matches("caf\\xe9-1234", raw));
        assert!(!matches("caf\\xe8-1234", raw));
    }

    #[test]
    fn classify_words() {
        let cases: &[(&str, &str)] = &[
            ("4242", "num"),
            ("pid1234", "split"),
            ("X11", "split"),
            ("64bit", "split"),
            ("tmpAbC12x", "rand"),
            ("1a2b3c", "rand"),
            ("XyZaQw", "rand"),
            ("AbCdEf", "rand"),
            ("MyProject", "word"),
            ("iPhone", "word"),
            ("chronyd", "word"),
            ("ABCDEF", "word"),
        ];
        for (word, want) in cases {
            let got = match read::classify_word(word.as_bytes(), 0).0 {
                Class::Num => "num",
                Class::Split(_) => "split",
                Class::Rand => "rand",
                Class::Word => "word",
                Class::Sep => "sep",
                Class::Slug => "slug",
            };
            assert_eq!(got, *want, "{word}");
        }
    }

    #[test]
    fn glob_matching() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "", true),
            ("*", "anything", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("app-*-*", "app-1-2", true),
            ("app-*-*", "app-1", false),
            (".tmp*", ".tmp", true),
            (".tmp*", ".tm", false),
            ("\\*", "*", true),
            ("\\*", "x", false),
            ("\\x41", "A", true),
            ("\\xzz", "xzz", true),
            ("trailing\\", "trailing\\", true),
            ("", "", true),
            ("", "x", false),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(
                matches(pattern, name.as_ref()),
                *want,
                "{pattern:?} vs {name:?}"
            );
        }
    }

    #[test]
    fn fifty_thousand_names_group_quickly() {
        // The incident's shape: many tags, each with many pids; plus
        // tempfile names and a few lone ones. Well under a second in
        // release; the bound here only catches quadratic behaviour in a
        // debug build.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut names: Vec<String> = (0..50_000)
            .map(|i| match i % 5 {
                0 => format!(".tmp{}", random_alnum(&mut rng, 6)),
                _ => format!("app-{}-{}", rng.u32(1..300), 10_000 + i),
            })
            .collect();
        names.push("pytest-of-root".into());
        let start = std::time::Instant::now();
        let families = group(&names);
        let took = start.elapsed();
        assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
        assert!(families
            .iter()
            .any(|f| f.pattern == ".tmp*" && f.members.len() == 10_000));
        assert!(families.iter().any(|f| f.pattern == "pytest-of-root"));
        let apps = families
            .iter()
            .filter(|f| f.pattern.starts_with("app-"))
            .count();
        assert_eq!(apps, 299, "one family per tag");
    }

    fn random_alnum(rng: &mut fastrand::Rng, n: usize) -> String {
        (0..n).map(|_| rng.alphanumeric()).collect()
    }

    #[test]
    fn public_types_are_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Family>();
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Names from a few families with varying parts, plus arbitrary ones.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            (1u32..4, 100u32..100_000).prop_map(|(t, pid)| format!("app-{t}-{pid}")),
            (0usize..3, 100u32..100_000).prop_map(|(w, pid)| {
                format!("app-nodes-{}-{pid}", ["resolve", "list", "watch"][w])
            }),
            "[a-zA-Z0-9]{6}".prop_map(|r| format!(".tmp{r}")),
            "[a-zA-Z0-9]{6}".prop_map(|r| format!("rust_out.{r}")),
            "[0-9a-f]{32}".prop_map(|h| format!("systemd-private-{h}-chronyd.service-x1Y2z3")),
            "[a-zA-Z0-9._-]{1,16}",
            "\\PC{1,8}",
        ]
    }

    /// Families as (pattern, sorted member names), in output order.
    fn by_name(names: &[String]) -> Vec<(String, Vec<String>)> {
        group(names)
            .into_iter()
            .map(|f| {
                let mut m: Vec<String> = f.members.iter().map(|&i| names[i].clone()).collect();
                m.sort();
                (f.pattern, m)
            })
            .collect()
    }

    proptest! {
        #[test]
        fn order_does_not_matter(
            (names, shuffled) in prop::collection::vec(name(), 0..60)
                .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))
        ) {
            prop_assert_eq!(by_name(&names), by_name(&shuffled));
        }

        #[test]
        fn every_name_is_in_exactly_one_family_and_matches_it(
            names in prop::collection::vec(name(), 0..60)
        ) {
            let families = group(&names);
            let mut seen = vec![0u32; names.len()];
            for f in &families {
                prop_assert!(!f.members.is_empty());
                prop_assert!(f.members.windows(2).all(|w| w[0] < w[1]));
                for &i in &f.members {
                    seen[i] += 1;
                    prop_assert!(
                        f.matches(names[i].as_ref()),
                        "{:?} does not match {:?}", names[i], f.pattern
                    );
                }
            }
            prop_assert!(seen.iter().all(|&n| n == 1), "{:?}", seen);
            prop_assert!(families.windows(2).all(|w| w[0].pattern < w[1].pattern));
        }

        #[test]
        fn names_differing_in_a_numeric_suffix_are_one_family(
            // The base's last word is a plain word: a random-looking word
            // and a number (`rustczFmZB3`) is random as a whole, and `_`
            // belongs to Python's random alphabet (`sk_ab_c1234`).
            // Nor hex-looking (`d6335848` is random).
            base in "([a-zA-Z0-9.-]{0,12}[.-])?[g-z]{0,6}",
            numbers in prop::collection::btree_set(0u32..10_000_000, 1..30),
        ) {
            // Nor a known generator's prefix: `tmpg` + `1000000` is a name
            // Python's mkdtemp makes (`tmp` and 8 random characters), a
            // family of its own beside `tmpg0`.
            prop_assume!(!known::prefixes().iter().any(|p| base.as_bytes().starts_with(p)));
            let names: Vec<String> = numbers.iter().map(|n| format!("{base}{n}")).collect();
            let families = group(&names);
            prop_assert_eq!(families.len(), 1, "{:?}", families);
        }

        #[test]
        fn escaping_is_lossless(name in prop::collection::vec(any::<u8>(), 0..24)) {
            let name = OsStr::from_bytes(&name);
            let mut literal = String::new();
            escape_into(&mut literal, name.as_bytes());
            prop_assert!(matches(&literal, name));
            let families = group(&[name]);
            prop_assert!(families[0].matches(name));
        }
    }
}
