//! The passes that compare a name with the other names of its shape:
//! slugs from lists this crate does not know, and random parts that
//! happen to look like words. Both are decided from counts over the whole
//! input, so the outcome does not depend on the order of the names.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::known;
use super::read::{is_sep, stem, Class, Name, Parsed, Token};

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

/// How many names [`Reader::touch_ahead`] touches at once.
const AHEAD: usize = 8;

/// The first-word id of a name of one word: never handed out (ids count
/// distinct first words, fewer than `u32::MAX`).
const NO_FIRST: u32 = u32::MAX;

impl<'a> Shapes<'a> {
    fn ids(&mut self, p: Name<'a, '_>) -> (u32, u32) {
        self.buf.clear();
        for t in p.tokens {
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
        let mut words = p.tokens.iter().filter(|t| t.class != Class::Sep);
        let first_end = words.next().map_or(0, |t| t.end);
        if words.next().is_none() {
            // The first word's id is only asked for places after it: a
            // name of one word (`f0000001`, often unique) needs none.
            return (skeleton, NO_FIRST);
        }
        let next = self.firsts.len() as u32;
        let first = *self.firsts.entry(p.text(0, first_end)).or_insert(next);
        (skeleton, first)
    }
}

/// The names' source, the counts both passes gathered, and scratch space:
/// what is needed to read any name again, to its final tokens, from its
/// bytes alone ([`Reader::final_tokens`]). Nothing per name is kept here.
pub(super) struct Reader<'a, F> {
    source: F,
    shapes: Shapes<'a>,
    slug_at: IdSet<(u32, u32, u32)>,
    lookalikes: Lookalikes,
    windows: Vec<known::Window>,
    marks: Vec<usize>,
}

/// When [`read`] gives a name to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Given {
    /// In the first walk, as read: the slug pass cannot change it, and
    /// neither can the look-alike pass unless the name is given again.
    AsRead,
    /// In the last walk, final: it replaces what was given as read.
    Again,
}

/// Reads every name (see [`Parsed::read`]) and runs both passes over them
/// (slugs first: they change the shapes the second sees), calling
/// `done(index, name, given)` for each name with its tokens: in the first
/// walk for each name the slug pass cannot change ([`Given::AsRead`]), and
/// in the last walk ([`Given::Again`]) for the others and for those the
/// look-alike pass may change, whose earlier call it replaces. Names are
/// read from their bytes again for each pass instead of keeping their
/// tokens: what is kept per name is two ids and where its promotable words
/// stand (12 bytes), and only while this runs. The first walk reads every
/// name; the second only the names slugs may change; the third those again
/// and the names with a word at a place where the look-alike pass reads
/// words as random.
pub(super) fn read<'a, F: Fn(usize) -> &'a [u8]>(
    len: usize,
    source: F,
    mut done: impl FnMut(usize, Name<'a, '_>, Given),
) -> Reader<'a, F> {
    let mut r = Reader {
        source,
        shapes: Shapes {
            skeletons: HashMap::new(),
            firsts: HashMap::new(),
            buf: Vec::new(),
        },
        slug_at: IdSet::default(),
        lookalikes: Lookalikes::default(),
        windows: Vec::new(),
        marks: Vec::new(),
    };
    let mut scratch = Parsed {
        bytes: &[],
        tokens: Vec::new(),
    };
    let mut ids: Vec<(u32, u32)> = Vec::with_capacity(len);
    // Where each name's promotable words stand (for the names given as
    // read): whether the look-alike pass may change it.
    let mut word_at: Vec<u32> = Vec::with_capacity(len);
    let mut slug_counts = SlugCounts::default();
    // Names whose tokens the slug pass may change: counted for look-alikes
    // after it.
    let mut later: Vec<u32> = Vec::new();
    for n in 0..len {
        r.touch_ahead(n, len);
        scratch.read((r.source)(n), &mut r.windows);
        let p = scratch.name();
        let id = r.shapes.ids(p);
        ids.push(id);
        slug_counts.add(p, id);
        if may_change(p) {
            later.push(n as u32);
            word_at.push(WORDS_MANY);
        } else {
            word_at.push(r.lookalikes.add(p, id));
            done(n, p, Given::AsRead);
        }
    }
    r.slug_at = slug_counts.places();

    for &n in &later {
        let n = n as usize;
        scratch.read((r.source)(n), &mut r.windows);
        if r.apply_slugs(&mut scratch, Some(ids[n])) {
            ids[n] = r.shapes.ids(scratch.name());
        }
        // Given again in any case.
        let _ = r.lookalikes.add(scratch.name(), ids[n]);
    }
    let mut later = later.iter().map(|&n| n as usize).peekable();
    for (n, (&id, &at)) in ids.iter().zip(&word_at).enumerate() {
        let slugs = later.next_if_eq(&n).is_some();
        if slugs || r.lookalikes.may_change(at, id) {
            r.finish(n, &mut scratch, Some(id), slugs);
            done(n, scratch.name(), Given::Again);
        }
    }
    r
}

impl<'a, F: Fn(usize) -> &'a [u8]> Reader<'a, F> {
    /// When `n` is a multiple of [`AHEAD`], loads a byte at each end of
    /// the [`AHEAD`] names after the next [`AHEAD`], all at once: names
    /// scattered in memory (a `String` each) then wait for memory together
    /// rather than each in turn when it is read.
    fn touch_ahead(&self, n: usize, len: usize) {
        if !n.is_multiple_of(AHEAD) {
            return;
        }
        for m in n + AHEAD..(n + 2 * AHEAD).min(len) {
            let bytes = (self.source)(m);
            std::hint::black_box((bytes.first().copied(), bytes.last().copied()));
        }
    }

    /// Name `n`'s bytes.
    pub(super) fn bytes(&self, n: usize) -> &'a [u8] {
        (self.source)(n)
    }

    /// Reads name `n` into `scratch` as both passes left it.
    pub(super) fn final_tokens(&mut self, n: usize, scratch: &mut Parsed<'a>) {
        self.finish(n, scratch, None, true);
    }

    /// Reads name `n` into `scratch` as both passes left it. `ids` are its
    /// ids after the slug pass when known (they are found again
    /// otherwise); without `slugs` the slug pass is known to leave it as
    /// read.
    fn finish(&mut self, n: usize, scratch: &mut Parsed<'a>, ids: Option<(u32, u32)>, slugs: bool) {
        let bytes = (self.source)(n);
        scratch.read(bytes, &mut self.windows);
        if slugs {
            self.apply_slugs(scratch, None);
        }
        if scratch.tokens.iter().any(|t| promotable(bytes, t)) {
            let ids = match ids {
                Some(ids) => ids,
                None => self.shapes.ids(scratch.name()),
            };
            self.lookalikes.apply(bytes, &mut scratch.tokens, ids);
        }
    }

    /// Marks the words of `s` at the slug places as a slug, then its known
    /// slugs (see `known`), and merges each slug with the varying parts
    /// beside it. `ids` are its ids as read (found when `None`). Returns
    /// whether its tokens changed in number.
    fn apply_slugs(&mut self, s: &mut Parsed<'a>, ids: Option<(u32, u32)>) -> bool {
        let p = s.name();
        self.marks.clear();
        if !self.slug_at.is_empty() && generated(p) {
            let (skeleton, first) = match ids {
                Some(ids) => ids,
                None => self.shapes.ids(p),
            };
            let (slug_at, marks) = (&self.slug_at, &mut self.marks);
            word_pairs(p, |pos, a, b| {
                if slug_at.contains(&(skeleton, first, pos)) {
                    marks.extend([a, b]);
                }
            });
        }
        if self.marks.is_empty() && !p.may_have_slugs() {
            return false;
        }
        let before = s.tokens.len();
        for &i in &self.marks {
            s.tokens[i].class = Class::Slug;
        }
        // Token indexes change from here on.
        s.mark_dictionary_slugs();
        s.merge_slugs();
        s.tokens.len() != before
    }
}

/// Whether the slug pass may change a name: it is generated and has two
/// neighbouring words of letters, or it may hold a known slug.
fn may_change(p: Name<'_, '_>) -> bool {
    let mut pairs = false;
    if generated(p) {
        word_pairs(p, |_, _, _| pairs = true);
    }
    pairs || p.may_have_slugs()
}

/// Whether a name has a number or random part: only such names are
/// generated, so only their words can be slugs.
fn generated(p: Name<'_, '_>) -> bool {
    p.tokens
        .iter()
        .any(|t| matches!(t.class, Class::Rand | Class::Num | Class::Split(_)))
}

/// Calls `f(position of the first word, its token, the next word's token)`
/// for each two neighbouring words of letters after the name's first word.
fn word_pairs(p: Name<'_, '_>, mut f: impl FnMut(u32, usize, usize)) {
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

/// Per place (skeleton, first word, position after it): how many
/// generated names have two neighbouring words of letters there, how many
/// of those end in a random part, and the words as interned ids.
#[derive(Default)]
struct SlugCounts<'a> {
    // Words are interned once (hashing their bytes), then counted by id.
    interned: HashMap<&'a [u8], u32>,
    places: IdMap<(u32, u32, u32), u32>,
    /// Per place id: (names, names ending in a random part).
    names: Vec<(usize, usize)>,
    /// (place id, word, next word) for every pair seen.
    pairs: Vec<(u32, u32, u32)>,
}

impl<'a> SlugCounts<'a> {
    fn add(&mut self, p: Name<'a, '_>, (skeleton, first): (u32, u32)) {
        if !generated(p) {
            return;
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
                let next = self.interned.len() as u32;
                *self
                    .interned
                    .entry(p.token_text(&p.tokens[t]))
                    .or_insert(next)
            };
            let (a, b) = (id(a), id(b));
            let next = self.places.len() as u32;
            let place = *self.places.entry((skeleton, first, pos)).or_insert(next);
            if place == next {
                self.names.push((0, 0));
            }
            let c = &mut self.names[place as usize];
            c.0 += 1;
            c.1 += usize::from(random_end);
            self.pairs.push((place, a, b));
        });
    }

    /// Neighbouring word places that hold a slug from a list this crate
    /// does not know (`sandbox-tester-<adjective>-<noun>-…`): among at
    /// least [`SLUG_MIN_NAMES`] (or [`SLUG_MIN_NAMES_RANDOM_END`]) generated
    /// names of the same skeleton and first word, two places after the
    /// first word with [`SLUG_MIN_WORDS`] or more distinct words each,
    /// whose pairs are as varied as independent draws would make them: at
    /// least [`SLUG_MIN_PAIRS_PERCENT`] % of [`expected_pairs`].
    /// Words that mean something come in few combinations
    /// (`nodes-resolve`, `nodes-list`, `campaign-exec`), so they stay
    /// literal.
    fn places(mut self) -> IdSet<(u32, u32, u32)> {
        // Distinct words here, next words, and pairs per place: by sorting.
        let places = self.names.len();
        let mut here = vec![0usize; places];
        let mut next = vec![0usize; places];
        let mut pairs = vec![0usize; places];
        self.pairs.sort_unstable();
        self.pairs.dedup();
        for (i, &(place, a, _)) in self.pairs.iter().enumerate() {
            pairs[place as usize] += 1;
            let new_word = i == 0 || {
                let (pp, pa, _) = self.pairs[i - 1];
                (pp, pa) != (place, a)
            };
            here[place as usize] += usize::from(new_word);
        }
        let mut by_next: Vec<(u32, u32)> = self.pairs.iter().map(|&(p, _, b)| (p, b)).collect();
        by_next.sort_unstable();
        by_next.dedup();
        for &(place, _) in &by_next {
            next[place as usize] += 1;
        }
        self.places
            .into_iter()
            .filter(|&(_, id)| {
                let id = id as usize;
                let (names, random_end) = self.names[id];
                let combinations = expected_pairs(here[id] * next[id], names);
                let min_names = match random_end == names {
                    true => SLUG_MIN_NAMES_RANDOM_END,
                    false => SLUG_MIN_NAMES,
                };
                names >= min_names
                    && here[id] >= SLUG_MIN_WORDS
                    && next[id] >= SLUG_MIN_WORDS
                    && pairs[id] * 100 >= combinations * SLUG_MIN_PAIRS_PERCENT
            })
            .map(|(place, _)| place)
            .collect()
    }
}

/// How many distinct pairs `names` independent, uniform draws from
/// `combinations` pairs give, on average: `D (1 - (1 - 1/D)^n)`, about
/// `n` while names are few and `D` once they are many. (Not `min(n, D)`:
/// 1,344 names drawn from 30 × 30 pairs give about 700 distinct ones, not
/// 900, and a launcher's slugs would read as words.)
fn expected_pairs(combinations: usize, names: usize) -> usize {
    if combinations == 0 || names == 0 {
        return 0;
    }
    let d = combinations as f64;
    let expected = d * (1.0 - (1.0 - 1.0 / d).powf(names as f64));
    // Rounded up: with few names one pair less than expected is already
    // a sign of meaning (`pip-build-env-*` beside `pip-req-build-*`).
    (expected.ceil() as usize).min(combinations).min(names)
}

/// Words that look literal read as random where names of the same shape
/// have random strings of that exact length at that place (at least half
/// as many as such words): the same first word and place counted from the
/// end (`rust_out.abcdef` beside `rust_out.1a2b3c`), or for the first word
/// itself the same skeleton.
#[derive(Default)]
struct Lookalikes {
    /// place -> (random words, promotable words)
    counts: IdMap<(u64, u32, u32), (u32, u32)>,
}

/// Where a name's promotable words stand, in a `u32`: none (0), up to two
/// as 16 bits each ([`WORD_AT`], [`WORD_FIRST`] for the first word, else
/// its place from the end in bits 8 to 13; its length in bits 0 to 7), or
/// [`WORDS_MANY`] for more, or places or lengths that do not fit.
const WORD_AT: u16 = 1 << 15;
const WORD_FIRST: u16 = 1 << 14;
const WORDS_MANY: u32 = u32::MAX;

/// `at` with one more promotable word (see [`WORD_AT`]).
fn add_word_at(at: u32, first: bool, from_end: u32, len: u32) -> u32 {
    if at == WORDS_MANY || at >> 16 != 0 || len > 0xff || (!first && from_end > 0x3f) {
        return WORDS_MANY;
    }
    let w = match first {
        true => WORD_AT | WORD_FIRST | len as u16,
        false => WORD_AT | (from_end as u16) << 8 | len as u16,
    };
    match at {
        0 => u32::from(w),
        _ => at | u32::from(w) << 16,
    }
}

/// A word of one piece: not a generator's literal part (systemd's unit).
fn promotable(bytes: &[u8], t: &Token) -> bool {
    matches!(t.class, Class::Word | Class::Split(_))
        && (t.end - t.start) as usize >= PROMOTE_MIN_LEN
        && !bytes[t.start as usize..t.end as usize]
            .iter()
            .any(|&b| is_sep(b))
}

/// (first word or skeleton, place, length): where a word stands.
fn place((skeleton, first): (u32, u32), pos: u32, from_end: u32, t: &Token) -> (u64, u32, u32) {
    match pos {
        0 => (u64::from(skeleton) << 1, 0, t.end - t.start),
        _ => ((u64::from(first) << 1) | 1, from_end, t.end - t.start),
    }
}

fn words(tokens: &[Token]) -> u32 {
    tokens.iter().filter(|t| t.class != Class::Sep).count() as u32
}

impl Lookalikes {
    /// Counts the random and promotable words of `p`, and returns where
    /// its promotable words stand (see [`Lookalikes::may_change`]).
    fn add(&mut self, p: Name<'_, '_>, ids: (u32, u32)) -> u32 {
        let total = words(p.tokens);
        let mut at = 0u32;
        for (pos, t) in p
            .tokens
            .iter()
            .filter(|t| t.class != Class::Sep)
            .enumerate()
        {
            let random = t.class == Class::Rand;
            if !random && !promotable(p.bytes, t) {
                continue;
            }
            let from_end = total - 1 - pos as u32;
            let c = self
                .counts
                .entry(place(ids, pos as u32, from_end, t))
                .or_default();
            match random {
                true => c.0 += 1,
                false => {
                    c.1 += 1;
                    at = add_word_at(at, pos == 0, from_end, t.end - t.start);
                }
            }
        }
        at
    }

    /// Whether [`Lookalikes::apply`] may change a name with these ids
    /// whose promotable words stand `at` (as [`Lookalikes::add`] gave).
    fn may_change(&self, at: u32, (skeleton, first): (u32, u32)) -> bool {
        if at == WORDS_MANY {
            return true;
        }
        [at as u16, (at >> 16) as u16]
            .into_iter()
            .filter(|w| w & WORD_AT != 0)
            .any(|w| {
                let len = u32::from(w & 0xff);
                let here = match w & WORD_FIRST != 0 {
                    true => (u64::from(skeleton) << 1, 0, len),
                    false => ((u64::from(first) << 1) | 1, u32::from((w >> 8) & 0x3f), len),
                };
                self.counts.get(&here).is_some_and(Self::random_there)
            })
    }

    /// Whether words at `counts`' place read as random.
    fn random_there(&(random, other): &(u32, u32)) -> bool {
        random >= 1 && random * 2 >= other
    }

    fn apply(&self, bytes: &[u8], tokens: &mut [Token], ids: (u32, u32)) {
        let total = words(tokens);
        let mut pos = 0u32;
        for token in tokens.iter_mut() {
            let t = *token;
            if t.class == Class::Sep {
                continue;
            }
            let here = place(ids, pos, total - 1 - pos, &t);
            pos += 1;
            if !promotable(bytes, &t) {
                continue;
            }
            let random_there = self.counts.get(&here).is_some_and(Self::random_there);
            if random_there {
                let text = &bytes[t.start as usize..t.end as usize];
                let hex = text.iter().all(u8::is_ascii_hexdigit);
                token.class = Class::Rand;
                token.stem = if hex { 0 } else { stem(text, t.start == 0) };
            }
        }
    }
}
