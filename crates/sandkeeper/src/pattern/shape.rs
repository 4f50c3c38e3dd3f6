//! The passes that compare a name with the other names of its shape:
//! slugs from lists this crate does not know, and random parts that
//! happen to look like words. Both are decided from counts over the whole
//! input, so the outcome does not depend on the order of the names.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::read::{is_sep, stem, Class, Parsed, Token};

/// Words of five or more bytes can be promoted to random (see the module
/// docs); shorter ones (`dev`, `ICE`, `font`) never are.
const PROMOTE_MIN_LEN: usize = 5;

/// Two places of words are read as a slug when at least this many names
/// have words there (or [`SLUG_MIN_NAMES_RANDOM_END`] when every one of
/// them ends in a random part, as `…-<adjective>-<noun>-3fa9c1`) ...
const SLUG_MIN_NAMES: usize = 5;
const SLUG_MIN_NAMES_RANDOM_END: usize = 3;

/// ... with at least this many distinct words at each ...
const SLUG_MIN_WORDS: usize = 2;

/// ... and their pairs this varied (percent of what independent draws
/// give).
const SLUG_MIN_PAIRS_PERCENT: usize = 80;

/// A fast hasher for keys made of this module's own small integers (ids
/// handed out in order, positions, lengths): no byte of a name reaches it,
/// so it needs no protection against chosen collisions.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// Ids for each name's skeleton (its separators and word slots: names of
/// one shape have equal skeletons) and for its first word with the
/// separators before it (`.tmp`, `tmp`).
struct Shapes<'a> {
    skeletons: HashMap<Vec<u8>, u32>,
    firsts: HashMap<&'a [u8], u32>,
    buf: Vec<u8>,
}

impl<'a> Shapes<'a> {
    fn ids(&mut self, p: &Parsed<'a>) -> (u32, u32) {
        self.buf.clear();
        for t in &p.tokens {
            self.buf.push(match t.class {
                Class::Sep => p.bytes[t.start as usize],
                _ => 0,
            });
        }
        let next = self.skeletons.len() as u32;
        let skeleton = match self.skeletons.get(self.buf.as_slice()) {
            Some(&id) => id,
            None => {
                self.skeletons.insert(self.buf.clone(), next);
                next
            }
        };
        let first_end = p
            .tokens
            .iter()
            .find(|t| t.class != Class::Sep)
            .map_or(0, |t| t.end);
        let next = self.firsts.len() as u32;
        let first = *self.firsts.entry(p.text(0, first_end)).or_insert(next);
        (skeleton, first)
    }
}

/// Runs both passes (slugs first: they change the shapes the second sees).
pub(super) fn neighbour_passes(parsed: &mut [Parsed<'_>]) {
    let mut shapes = Shapes {
        skeletons: HashMap::new(),
        firsts: HashMap::new(),
        buf: Vec::new(),
    };
    let mut ids: Vec<(u32, u32)> = parsed.iter().map(|p| shapes.ids(p)).collect();
    let changed = slugs(parsed, &ids);
    for (i, p) in parsed.iter().enumerate() {
        if changed[i] {
            ids[i] = shapes.ids(p);
        }
    }
    random_lookalikes(parsed, &ids);
}

/// Whether a name has a number or random part: only such names are
/// generated, so only their words can be slugs.
fn generated(p: &Parsed<'_>) -> bool {
    p.tokens
        .iter()
        .any(|t| matches!(t.class, Class::Rand | Class::Num | Class::Split(_)))
}

/// Calls `f(position of the first word, its token, the next word's token)`
/// for each two neighbouring words of letters after the name's first word.
fn word_pairs(p: &Parsed<'_>, mut f: impl FnMut(u32, usize, usize)) {
    let mut prev: Option<(u32, usize)> = None;
    let mut pos = 0u32;
    for (i, t) in p.tokens.iter().enumerate() {
        if t.class == Class::Sep {
            continue;
        }
        if pos >= 1 && t.class == Class::Word && p.letters_only(t) {
            if let Some((ppos, pi)) = prev {
                f(ppos, pi, i);
            }
            prev = Some((pos, i));
        } else {
            prev = None;
        }
        pos += 1;
    }
}

/// Neighbouring word places that hold a slug from a list this crate does
/// not know (`sandbox-tester-<adjective>-<noun>-…`): among at least
/// [`SLUG_MIN_NAMES`] (or [`SLUG_MIN_NAMES_RANDOM_END`]) generated names of
/// the same skeleton and first word, two places after the first word with
/// [`SLUG_MIN_WORDS`] or more distinct words each, whose pairs are as
/// varied as independent draws would make them: at least
/// [`SLUG_MIN_PAIRS_PERCENT`] % of `min(names, words × words)`. Words that
/// mean something come in few combinations (`nodes-resolve`,
/// `nodes-list`, `campaign-exec`), so they stay literal. Then every name's
/// known slugs (see `known`) are marked, and each slug is merged with the
/// varying parts beside it. Returns which names changed.
fn slugs(parsed: &mut [Parsed<'_>], ids: &[(u32, u32)]) -> Vec<bool> {
    #[derive(Default)]
    struct Counts {
        names: usize,
        random_end: usize,
        here: IdSet<u32>,
        next: IdSet<u32>,
        pairs: IdSet<(u32, u32)>,
    }
    // Words are interned once (hashing their bytes), then counted by id.
    let mut interned: HashMap<&[u8], u32> = HashMap::new();
    let mut counts: IdMap<(u32, u32, u32), Counts> = IdMap::default();
    for (n, p) in parsed.iter().enumerate() {
        if !generated(p) {
            continue;
        }
        // Ends in a random part: random, or hex with a letter that happened
        // to read as a word and a number (`bf6490`).
        let random_end = p.tokens.last().is_some_and(|t| {
            let text = p.token_text(t);
            t.class == Class::Rand
                || (text.len() >= 6
                    && text.iter().all(u8::is_ascii_hexdigit)
                    && text.iter().any(u8::is_ascii_alphabetic))
        });
        word_pairs(p, |pos, a, b| {
            let mut id = |t: usize| {
                let next = interned.len() as u32;
                *interned.entry(p.token_text(&p.tokens[t])).or_insert(next)
            };
            let (a, b) = (id(a), id(b));
            let c = counts.entry((ids[n].0, ids[n].1, pos)).or_default();
            c.names += 1;
            c.random_end += usize::from(random_end);
            c.here.insert(a);
            c.next.insert(b);
            c.pairs.insert((a, b));
        });
    }
    let slug_at: IdSet<(u32, u32, u32)> = counts
        .into_iter()
        .filter(|(_, c)| {
            let combinations = (c.here.len() * c.next.len()).min(c.names);
            let min_names = match c.random_end == c.names {
                true => SLUG_MIN_NAMES_RANDOM_END,
                false => SLUG_MIN_NAMES,
            };
            c.names >= min_names
                && c.here.len() >= SLUG_MIN_WORDS
                && c.next.len() >= SLUG_MIN_WORDS
                && c.pairs.len() * 100 >= combinations * SLUG_MIN_PAIRS_PERCENT
        })
        .map(|(place, _)| place)
        .collect();
    parsed
        .iter_mut()
        .enumerate()
        .map(|(n, p)| {
            let before = p.tokens.len();
            if !slug_at.is_empty() && generated(p) {
                let mut marks: Vec<usize> = Vec::new();
                word_pairs(p, |pos, a, b| {
                    if slug_at.contains(&(ids[n].0, ids[n].1, pos)) {
                        marks.extend([a, b]);
                    }
                });
                for i in marks {
                    p.tokens[i].class = Class::Slug;
                }
            }
            // Token indexes change from here on.
            p.mark_dictionary_slugs();
            p.merge_slugs();
            p.tokens.len() != before
        })
        .collect()
}

/// Reads words that look literal as random where names of the same shape
/// have random strings of that exact length at that place (at least half
/// as many as such words): the same first
/// word and place counted from the end (`rust_out.abcdef` beside
/// `rust_out.1a2b3c`), or for the first word itself the same skeleton.
fn random_lookalikes(parsed: &mut [Parsed<'_>], ids: &[(u32, u32)]) {
    // A word of one piece: not a generator's literal part (systemd's unit).
    let promotable = |p: &Parsed<'_>, t: &Token| {
        matches!(t.class, Class::Word | Class::Split(_))
            && (t.end - t.start) as usize >= PROMOTE_MIN_LEN
            && !p.token_text(t).iter().any(|&b| is_sep(b))
    };
    // (first word or skeleton, place, length): where a word stands.
    let place = |(skeleton, first): (u32, u32), pos: u32, from_end: u32, t: &Token| match pos {
        0 => (u64::from(skeleton) << 1, 0, t.end - t.start),
        _ => ((u64::from(first) << 1) | 1, from_end, t.end - t.start),
    };
    let words = |p: &Parsed<'_>| p.tokens.iter().filter(|t| t.class != Class::Sep).count() as u32;
    // place -> (random words, promotable words)
    let mut counts: IdMap<(u64, u32, u32), (u32, u32)> = IdMap::default();
    for (n, p) in parsed.iter().enumerate() {
        let total = words(p);
        for (pos, t) in p
            .tokens
            .iter()
            .filter(|t| t.class != Class::Sep)
            .enumerate()
        {
            let random = t.class == Class::Rand;
            if !random && !promotable(p, t) {
                continue;
            }
            let c = counts
                .entry(place(ids[n], pos as u32, total - 1 - pos as u32, t))
                .or_default();
            match random {
                true => c.0 += 1,
                false => c.1 += 1,
            }
        }
    }
    for (n, p) in parsed.iter_mut().enumerate() {
        let total = words(p);
        let mut pos = 0u32;
        for i in 0..p.tokens.len() {
            let t = p.tokens[i];
            if t.class == Class::Sep {
                continue;
            }
            let here = place(ids[n], pos, total - 1 - pos, &t);
            pos += 1;
            if !promotable(p, &t) {
                continue;
            }
            let random_there = counts
                .get(&here)
                .is_some_and(|&(random, other)| random >= 1 && random * 2 >= other);
            if random_there {
                let text = p.token_text(&t);
                let hex = text.iter().all(u8::is_ascii_hexdigit);
                p.tokens[i].class = Class::Rand;
                p.tokens[i].stem = if hex { 0 } else { stem(text, t.start == 0) };
            }
        }
    }
}
