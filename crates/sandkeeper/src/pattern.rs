//! Grouping names into families: `app-235-*`, `.tmp*`,
//! `systemd-private-*-chronyd.service-*`.
//!
//! A leak shows up as thousands of directories whose names differ only in a
//! pid, a counter, a hash or a random suffix. [`group`] turns such a list of
//! names into a few [`Family`] values, each with a glob-like pattern in which
//! the parts that vary are `*` and the parts that carry meaning stay
//! literal.
//!
//! ```
//! use sandkeeper::pattern;
//!
//! let names = ["app-235-4100", "app-235-4242", "app-235-977", "pytest-of-root"];
//! let families = pattern::group(&names);
//! let patterns: Vec<&str> = families.iter().map(|f| f.pattern.as_str()).collect();
//! assert_eq!(patterns, ["app-235-*", "pytest-of-root"]);
//! assert_eq!(families[0].members, [0, 1, 2]);
//! assert!(families[0].matches("app-235-1".as_ref()));
//! # Ok::<(), sandkeeper::Error>(())
//! ```
//!
//! # How names are read
//!
//! A name is split at *separators* (every ASCII byte that is not a letter or
//! a digit: `-`, `_`, `.`, `+`, `@`, spaces, …) into *words*, and each word
//! is classified:
//!
//! | word | class | example |
//! |---|---|---|
//! | digits only | number | `4242`, `0` |
//! | a UUID (`8-4-4-4-12` hex groups) | random | `vm-1b4e28ba-2fa1-11d2-883f-0016d3cca427` |
//! | letters then digits, or digits then letters | word + number | `pid1234`, `python3`, `X11` |
//! | letters and digits mixed more than that | random | `tmpAbC12x`, `1a2b3c`, hashes |
//! | letters whose case flips like a random string | random | `XyZaQw` (but not `MyProject`) |
//! | anything else | word | `pytest`, `chronyd`, `nodes` |
//!
//! A random string can look like a word by chance (`abcdef`). Where other
//! names of the same shape have random strings of exactly that length at the
//! same place (same separators, or same first word and same place counted
//! from the end), such a word of five or more bytes is read as random too.
//!
//! # How families are formed
//!
//! - Names belong to one family candidate when their words and separators
//!   are equal except where numbers and random strings stand. Words are
//!   literal, so `app-nodes-resolve-<pid>` and `app-nodes-list-<pid>` are
//!   two families.
//! - A number that is the same in every member stays literal
//!   (`app-235-*`); one that varies becomes `*`. When one place is nearly
//!   unique per name (a pid) and another number takes few values
//!   (each at least twice on average), the names split by that number:
//!   `app-235-*` and `app-17-*` rather than `app-*-*`.
//! - Random strings and UUIDs are always `*`, even when every member shares
//!   them (a boot id would otherwise give each service's `systemd-private-…`
//!   family a 32-digit literal). A random string that opens the name keeps
//!   the lowercase letters every member starts with, when there are three
//!   or more (`.tmp*`, `rustc*`).
//! - A name alone in its family keeps its literal text except where it is
//!   obviously generated: random strings and UUIDs become `*` as above, and
//!   so does its last number when that has three or more digits (a pid or
//!   counter: `app-235-4242` gives `app-235-*`, `sandkeeper-0` stays). A lone
//!   name that would keep no letter or digit at all stays literal.
//! - Families whose patterns come out equal are merged.
//!
//! The result depends only on the *set* of names: families are sorted by
//! pattern (byte order), members by index. Names are bucketed by shape
//! first, so grouping is linear in the total length of the names apart from
//! sorting: 50,000 names take under 0.1 s in a release build.
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
//! The reading of words is a heuristic. Random strings whose alphabet
//! includes a separator (Python's `tempfile` uses `_`) give names of
//! several shapes, and so several families; a lone name with a random
//! suffix that happens to look like a word keeps it literally.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

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
/// let families = sandkeeper::pattern::group(&names);
/// assert_eq!(families.len(), 2);
/// assert_eq!(families[0].pattern, "app-nodes-list-*");
/// assert_eq!(families[0].members, [0, 2]);
/// assert_eq!(families[1].pattern, "app-nodes-resolve-*");
/// ```
pub fn group<S: AsRef<OsStr>>(names: &[S]) -> Vec<Family> {
    let mut parsed: Vec<Parsed<'_>> = names
        .iter()
        .map(|n| Parsed::new(n.as_ref().as_bytes()))
        .collect();
    promote_random_lookalikes(&mut parsed);

    let mut buckets: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    let mut key = Vec::new();
    for (index, name) in parsed.iter().enumerate() {
        key.clear();
        name.key(&mut key);
        // Only a bucket's first name pays for an owned key.
        match buckets.get_mut(key.as_slice()) {
            Some(members) => members.push(index),
            None => {
                buckets.insert(key.clone(), vec![index]);
            }
        }
    }

    let pieces: Vec<Vec<Piece>> = parsed.iter().map(Parsed::pieces).collect();
    let mut by_pattern: HashMap<String, Vec<usize>> = HashMap::new();
    for members in buckets.into_values() {
        for family in bucket_families(&parsed, &pieces, members) {
            by_pattern
                .entry(family.pattern)
                .or_default()
                .extend(family.members);
        }
    }
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
/// use sandkeeper::pattern::matches;
/// assert!(matches("app-235-*", "app-235-4242".as_ref()));
/// assert!(!matches("app-235-*", "app-236-4242".as_ref()));
/// assert!(matches(r"odd\*name", "odd*name".as_ref()));
/// assert!(!matches(r"odd\*name", "odd-name".as_ref()));
/// ```
pub fn matches(pattern: &str, name: &OsStr) -> bool {
    glob_match(&parse_glob(pattern), name.as_bytes())
}

/// Words of five or more bytes can be promoted to random (see the module
/// docs); shorter ones (`dev`, `ICE`, `font`) never are.
const PROMOTE_MIN_LEN: usize = 5;

/// A leading lowercase run of at least this many letters is kept before the
/// `*` of a random word that opens the name (`.tmp*`).
const STEM_MIN_LEN: usize = 3;

/// A lone name's last number becomes `*` when it has at least this many
/// digits (pids and counters do; `sandkeeper-0` keeps its `0`).
const LONE_NUMBER_MIN_DIGITS: usize = 3;

/// How a token of a name is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// One separator byte.
    Sep,
    /// A word that is literal.
    Word,
    /// Digits only.
    Num,
    /// Letters then digits or digits then letters, split at this byte
    /// offset (absolute in the name).
    Split(u32),
    /// A random string, hash or UUID.
    Rand,
}

/// A token: a byte range of the name and how it is read.
#[derive(Debug, Clone, Copy)]
struct Token {
    start: u32,
    end: u32,
    class: Class,
}

/// A name split into tokens.
struct Parsed<'a> {
    bytes: &'a [u8],
    tokens: Vec<Token>,
}

/// What a piece of a family key is: literal text, or a varying part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PieceKind {
    Lit,
    Num,
    /// A random part; `first` when it is the name's first word.
    Rand {
        first: bool,
    },
}

/// A piece of a name as the family sees it: literal runs merged, varying
/// parts alone. Names with equal keys have equal piece layouts.
#[derive(Debug, Clone, Copy)]
struct Piece {
    start: u32,
    end: u32,
    kind: PieceKind,
}

impl<'a> Parsed<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            if is_sep(bytes[i]) {
                tokens.push(Token {
                    start: i as u32,
                    end: i as u32 + 1,
                    class: Class::Sep,
                });
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && !is_sep(bytes[i]) {
                i += 1;
            }
            tokens.push(Token {
                start: start as u32,
                end: i as u32,
                class: classify_word(&bytes[start..i], start as u32),
            });
        }
        collapse_uuids(bytes, &mut tokens);
        Parsed { bytes, tokens }
    }

    fn text(&self, start: u32, end: u32) -> &'a [u8] {
        &self.bytes[start as usize..end as usize]
    }

    /// The word tokens: (word position, token index).
    fn words(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| t.class != Class::Sep)
            .enumerate()
            .map(|(pos, (index, _))| (pos, index))
    }

    /// The separators and word slots, e.g. `\0-\0.\0` for `a-b.c`: names
    /// of one shape have equal skeletons.
    fn skeleton(&self) -> Vec<u8> {
        self.tokens
            .iter()
            .map(|t| match t.class {
                Class::Sep => self.bytes[t.start as usize],
                _ => 0,
            })
            .collect()
    }

    /// Whether token `index` is the name's first word.
    fn is_first_word(&self, index: usize) -> bool {
        self.tokens[..index].iter().all(|t| t.class == Class::Sep)
    }

    /// The family key: literal text where words and separators are, a
    /// marker where something varies (with the stem of a random first word).
    fn key(&self, key: &mut Vec<u8>) {
        let lit = |key: &mut Vec<u8>, text: &[u8]| {
            for &b in text {
                key.push(b);
                if b == 0 {
                    key.push(0); // a NUL in the text is doubled
                }
            }
        };
        for (index, t) in self.tokens.iter().enumerate() {
            let text = self.text(t.start, t.end);
            match t.class {
                Class::Sep | Class::Word => lit(key, text),
                Class::Num => key.extend_from_slice(&[0, 1]),
                Class::Split(at) => {
                    let (a, b) = text.split_at((at - t.start) as usize);
                    if a[0].is_ascii_digit() {
                        key.extend_from_slice(&[0, 1]);
                        lit(key, b);
                    } else {
                        lit(key, a);
                        key.extend_from_slice(&[0, 1]);
                    }
                }
                Class::Rand => {
                    key.extend_from_slice(&[0, 2]);
                    let stem = stem_len(text);
                    if self.is_first_word(index) && stem >= STEM_MIN_LEN {
                        key.push(3);
                        lit(key, &text[..STEM_MIN_LEN]);
                    }
                }
            }
        }
    }

    /// The name as literal runs and varying pieces.
    fn pieces(&self) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::with_capacity(self.tokens.len());
        let mut push = |start: u32, end: u32, kind: PieceKind| match out.last_mut() {
            Some(last) if kind == PieceKind::Lit && last.kind == PieceKind::Lit => last.end = end,
            _ => out.push(Piece { start, end, kind }),
        };
        for (index, t) in self.tokens.iter().enumerate() {
            match t.class {
                Class::Sep | Class::Word => push(t.start, t.end, PieceKind::Lit),
                Class::Num => push(t.start, t.end, PieceKind::Num),
                Class::Split(at) => {
                    if self.bytes[t.start as usize].is_ascii_digit() {
                        push(t.start, at, PieceKind::Num);
                        push(at, t.end, PieceKind::Lit);
                    } else {
                        push(t.start, at, PieceKind::Lit);
                        push(at, t.end, PieceKind::Num);
                    }
                }
                Class::Rand => push(
                    t.start,
                    t.end,
                    PieceKind::Rand {
                        first: self.is_first_word(index),
                    },
                ),
            }
        }
        out
    }
}

/// Separators: every ASCII byte that is neither a letter nor a digit.
/// Bytes of multi-byte characters (and invalid UTF-8) belong to words.
fn is_sep(b: u8) -> bool {
    b.is_ascii() && !b.is_ascii_alphanumeric()
}

fn classify_word(word: &[u8], start: u32) -> Class {
    let digits = word.iter().filter(|b| b.is_ascii_digit()).count();
    if digits == word.len() {
        return Class::Num;
    }
    if digits > 0 {
        // Runs of letters and digits: two runs is a word and a number.
        let mut runs = 1;
        let mut split = 0;
        for i in 1..word.len() {
            if word[i].is_ascii_digit() != word[i - 1].is_ascii_digit() {
                runs += 1;
                split = i;
            }
        }
        return if runs == 2 {
            Class::Split(start + split as u32)
        } else {
            Class::Rand
        };
    }
    if word.iter().all(u8::is_ascii_alphabetic) && random_case(word) {
        Class::Rand
    } else {
        Class::Word
    }
}

/// Whether a word of ASCII letters flips case like a random string: two or
/// more single lowercase letters between uppercase ones (`AbCdEf`,
/// `XyZaQw`), which CamelCase words (`MyProject`, `iPhone`) do not have.
fn random_case(word: &[u8]) -> bool {
    let mut singles = 0;
    let mut run_start = 0;
    for i in 1..=word.len() {
        let run_ends =
            i == word.len() || word[i].is_ascii_lowercase() != word[i - 1].is_ascii_lowercase();
        if run_ends {
            if run_start > 0 && i - run_start == 1 && word[run_start].is_ascii_lowercase() {
                singles += 1;
            }
            run_start = i;
        }
    }
    singles >= 2
}

/// The length of the leading run of ASCII lowercase letters.
fn stem_len(word: &[u8]) -> usize {
    word.iter().take_while(|b| b.is_ascii_lowercase()).count()
}

/// Replaces the tokens of each UUID (`8-4-4-4-12` hex digits) by one
/// random token.
fn collapse_uuids(bytes: &[u8], tokens: &mut Vec<Token>) {
    const GROUPS: [u32; 5] = [8, 4, 4, 4, 12];
    let is_group = |t: &Token, len: u32| {
        t.class != Class::Sep
            && t.end - t.start == len
            && bytes[t.start as usize..t.end as usize]
                .iter()
                .all(u8::is_ascii_hexdigit)
    };
    let mut i = 0;
    while i + 9 <= tokens.len() {
        let found = GROUPS.iter().enumerate().all(|(g, &len)| {
            let ok = is_group(&tokens[i + 2 * g], len);
            ok && (g == 4 || {
                let sep = tokens[i + 2 * g + 1];
                sep.class == Class::Sep && bytes[sep.start as usize] == b'-'
            })
        });
        if found {
            let end = tokens[i + 8].end;
            tokens[i] = Token {
                start: tokens[i].start,
                end,
                class: Class::Rand,
            };
            tokens.drain(i + 1..i + 9);
        }
        i += 1;
    }
}

/// Reads words that look literal as random where names of the same shape
/// have random strings of that exact length at that place (see the module
/// docs). Decided from counts over the whole input, so order-independent.
fn promote_random_lookalikes(parsed: &mut [Parsed<'_>]) {
    let mut skeletons: HashMap<Vec<u8>, u32> = HashMap::new();
    let places: Vec<Vec<WordPlace<'_>>> = parsed
        .iter()
        .map(|p| {
            let next = skeletons.len() as u32;
            let id = *skeletons.entry(p.skeleton()).or_insert(next);
            word_places(p, id)
        })
        .collect();
    let promotable = |w: &WordPlace<'_>| {
        matches!(w.class, Class::Word | Class::Split(_)) && w.len >= PROMOTE_MIN_LEN
    };

    // (place, length) -> (random words, promotable words)
    let mut counts: HashMap<(Place<'_>, usize), (u32, u32)> = HashMap::new();
    for w in places.iter().flatten() {
        if w.class != Class::Rand && !promotable(w) {
            continue;
        }
        for place in w.places() {
            let c = counts.entry((place, w.len)).or_default();
            if w.class == Class::Rand {
                c.0 += 1;
            } else {
                c.1 += 1;
            }
        }
    }

    for (n, words) in places.iter().enumerate() {
        for w in words.iter().filter(|w| promotable(w)) {
            let random_there = w.places().any(|place| {
                counts
                    .get(&(place, w.len))
                    .is_some_and(|&(random, other)| random >= 1 && random >= other)
            });
            if random_there {
                parsed[n].tokens[w.token].class = Class::Rand;
            }
        }
    }
}

/// Where a word stands, for comparing it with words of other names.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
enum Place<'a> {
    /// Skeleton id and word position from the start.
    Skeleton(u32, usize),
    /// First word's text and word position from the end.
    FirstWord(&'a [u8], usize),
}

/// One word of a name with the places it stands at.
struct WordPlace<'a> {
    token: usize,
    len: usize,
    class: Class,
    by_shape: Place<'a>,
    by_first: Place<'a>,
}

impl<'a> WordPlace<'a> {
    fn places(&self) -> impl Iterator<Item = Place<'a>> {
        [self.by_shape, self.by_first].into_iter()
    }
}

fn word_places<'a>(p: &Parsed<'a>, skeleton: u32) -> Vec<WordPlace<'a>> {
    let words: Vec<(usize, usize)> = p.words().collect();
    let Some(&(_, first)) = words.first() else {
        return Vec::new();
    };
    let first = p.text(p.tokens[first].start, p.tokens[first].end);
    let n = words.len();
    words
        .into_iter()
        .map(|(pos, token)| {
            let t = p.tokens[token];
            WordPlace {
                token,
                len: (t.end - t.start) as usize,
                class: t.class,
                by_shape: Place::Skeleton(skeleton, pos),
                by_first: Place::FirstWord(first, n - 1 - pos),
            }
        })
        .collect()
}

/// The families of one bucket (names with equal keys, so equal piece
/// layouts).
fn bucket_families(
    parsed: &[Parsed<'_>],
    pieces: &[Vec<Piece>],
    members: Vec<usize>,
) -> Vec<Family> {
    let layout = &pieces[members[0]];
    let text = |m: usize, p: usize| {
        let piece = pieces[m][p];
        parsed[m].text(piece.start, piece.end)
    };
    let n = members.len();

    if n == 1 {
        return vec![Family {
            pattern: lone_pattern(&parsed[members[0]], layout),
            members,
        }];
    }

    // Per varying place: is any member random there, how many values.
    struct Place {
        piece: usize,
        random: bool,
        distinct: usize,
    }
    let places: Vec<Place> = (0..layout.len())
        .filter(|&p| layout[p].kind != PieceKind::Lit)
        .map(|p| {
            let values: HashSet<&[u8]> = members.iter().map(|&m| text(m, p)).collect();
            Place {
                piece: p,
                random: members
                    .iter()
                    .any(|&m| matches!(pieces[m][p].kind, PieceKind::Rand { .. })),
                distinct: values.len(),
            }
        })
        .collect();

    // Split by numbers that take few values, when another place is nearly
    // unique per name.
    let unique = |pl: &Place| pl.distinct * 10 >= n * 9;
    let splits: Vec<usize> = places
        .iter()
        .enumerate()
        .filter(|(i, pl)| {
            !pl.random
                && pl.distinct >= 2
                && pl.distinct * 2 <= n
                && places.iter().enumerate().any(|(j, q)| j != *i && unique(q))
        })
        .map(|(_, pl)| pl.piece)
        .collect();

    // The stem kept before the `*` of a random first word: what all
    // members share, up to their lowercase runs.
    let stem = |p: usize| -> usize {
        let first = text(members[0], p);
        let mut len = first.len();
        for &m in &members {
            let t = text(m, p);
            let common = first.iter().zip(t).take_while(|(a, b)| a == b).count();
            len = len.min(common).min(stem_len(t));
        }
        if len >= STEM_MIN_LEN {
            len
        } else {
            0
        }
    };
    let stems: Vec<usize> = (0..layout.len())
        .map(|p| match layout[p].kind {
            PieceKind::Rand { first: true } => stem(p),
            _ => 0,
        })
        .collect();

    let mut sorted = members;
    sorted.sort_by(|&a, &b| {
        splits
            .iter()
            .map(|&p| text(a, p))
            .cmp(splits.iter().map(|&p| text(b, p)))
            .then(a.cmp(&b))
    });
    let mut families = Vec::new();
    for chunk in sorted.chunk_by(|&a, &b| splits.iter().all(|&p| text(a, p) == text(b, p))) {
        let m0 = chunk[0];
        let mut pattern = String::new();
        let mut places = places.iter().peekable();
        for (p, piece) in layout.iter().enumerate() {
            let place = places.next_if(|pl| pl.piece == p);
            let literal = match (piece.kind, place) {
                (PieceKind::Lit, _) => true,
                (_, Some(pl)) if !pl.random => pl.distinct == 1 || splits.contains(&p),
                _ => false,
            };
            if literal {
                escape_into(&mut pattern, text(m0, p));
            } else {
                escape_into(&mut pattern, &text(m0, p)[..stems[p]]);
                pattern.push('*');
            }
        }
        families.push(Family {
            pattern,
            members: chunk.to_vec(),
        });
    }
    families
}

/// The pattern of a name alone in its bucket: only what is obviously
/// generated becomes `*`.
fn lone_pattern(name: &Parsed<'_>, pieces: &[Piece]) -> String {
    let last_num = pieces.iter().rposition(|p| p.kind == PieceKind::Num);
    let mut pattern = String::new();
    let mut kept_alnum = false;
    for (i, piece) in pieces.iter().enumerate() {
        let text = name.text(piece.start, piece.end);
        let keep = match piece.kind {
            PieceKind::Lit => text.len(),
            PieceKind::Num if Some(i) == last_num && text.len() >= LONE_NUMBER_MIN_DIGITS => 0,
            PieceKind::Num => text.len(),
            PieceKind::Rand { first: true } => {
                let stem = stem_len(text);
                if stem >= STEM_MIN_LEN {
                    stem
                } else {
                    0
                }
            }
            PieceKind::Rand { first: false } => 0,
        };
        kept_alnum |= text[..keep].iter().any(|&b| !is_sep(b));
        escape_into(&mut pattern, &text[..keep]);
        if keep < text.len() {
            pattern.push('*');
        }
    }
    if kept_alnum {
        pattern
    } else {
        let mut literal = String::new();
        escape_into(&mut literal, name.bytes);
        literal
    }
}

/// Appends `bytes` to a pattern, escaped (see the module docs).
fn escape_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '*' | '?' | '[' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                c if c.is_ascii_control() => {
                    let _ = write!(out, "\\x{:02x}", c as u8);
                }
                c => out.push(c),
            }
        }
        for &b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

/// A parsed pattern: literal bytes and stars.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Glob {
    Byte(u8),
    Star,
}

fn parse_glob(pattern: &str) -> Vec<Glob> {
    let bytes = pattern.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'*' => out.push(Glob::Star),
            b'\\' if i + 1 < bytes.len() => {
                i += 1;
                let hex = |b: u8| (b as char).to_digit(16);
                match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
                    (b'x', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                        let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                        out.push(Glob::Byte(value as u8));
                        i += 2;
                    }
                    (b, _, _) => out.push(Glob::Byte(b)),
                }
            }
            b => out.push(Glob::Byte(b)),
        }
        i += 1;
    }
    out
}

/// Glob matching with `*` only: linear backtracking to the last star.
fn glob_match(pattern: &[Glob], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(Glob::Star) => {
                star = Some((p, n));
                p += 1;
            }
            Some(Glob::Byte(b)) if *b == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|g| *g == Glob::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let got = match classify_word(word.as_bytes(), 0) {
                Class::Num => "num",
                Class::Split(_) => "split",
                Class::Rand => "rand",
                Class::Word => "word",
                Class::Sep => "sep",
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
            base in "[a-zA-Z0-9._-]{0,16}",
            numbers in prop::collection::btree_set(0u32..10_000_000, 1..30),
        ) {
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
