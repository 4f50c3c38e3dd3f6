//! Reading names: tokens, their classes, and the passes that compare a
//! name with the others of its shape.

use super::known;

/// Digits after letters that are a number whatever the letters look like
/// (Go's `os.MkdirTemp` appends a uint32: 7 digits or more but for one in
/// a thousand).
const GO_MIN_DIGITS: usize = 7;

/// A word of letters and digits this short is a word (`e2e`, `k8s`,
/// `i18n`), not a random part.
const SHORT_WORD_MAX_LEN: usize = 4;

/// The random tail of a word with a literal head (`rustc` + `Ab12Cd`):
/// glibc's `XXXXXX`, Rust `tempfile` and Node's `mkdtemp` all draw 6.
const TAIL_LEN: usize = 6;

/// A literal head kept before such a tail has at least this many bytes.
const STEM_MIN_LEN: usize = 2;

/// ... or this many when the word does not open the name.
const STEM_MIN_LEN_INSIDE: usize = 5;

/// The last word is checked for vowels when it has at least this many
/// letters (`root`, `unix`, `tmp` never are; two fewer before a number).
const UNSAYABLE_MIN_LEN: usize = 6;

/// The lengths generators draw random tails in: 6 (`XXXXXX`), 8 (Python),
/// 10 (`mktemp(1)`), 12 (ssh-agent).
const GENERATOR_LENGTHS: [usize; 4] = [6, 8, 10, 12];

/// How a token of a name is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// One separator byte.
    Sep,
    /// A word that is literal.
    Word,
    /// Digits only.
    Num,
    /// Letters then digits or digits then letters, split at this byte
    /// offset (absolute in the name).
    Split(u32),
    /// A random string, hash, UUID, or a generator's random part.
    Rand,
    /// `<adjective>-<noun>` of a slug generator (merged into a random
    /// token with its neighbours before keys are made).
    Slug,
}

/// A token: a byte range of the name and how it is read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Token {
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) class: Class,
    /// For a random token: how many leading bytes are a literal head.
    pub(super) stem: u32,
}

impl Token {
    fn new(start: usize, end: usize, class: Class) -> Self {
        Token {
            start: start as u32,
            end: end as u32,
            class,
            stem: 0,
        }
    }
}

/// A name split into tokens.
pub(super) struct Parsed<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) tokens: Vec<Token>,
}

/// What a piece of a name is: literal text, or a varying part (`num` when
/// it is digits only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PieceKind {
    Lit,
    Var { num: bool },
}

/// A piece of a name as the family sees it: literal runs merged, varying
/// parts alone. Names with equal keys have equal piece layouts (the same
/// literal and varying places; a varying place may be digits in one name
/// and random in another).
#[derive(Debug, Clone, Copy)]
pub(super) struct Piece {
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) kind: PieceKind,
}

/// One name's bytes and tokens, read only.
#[derive(Clone, Copy)]
pub(super) struct Name<'a, 't> {
    pub(super) bytes: &'a [u8],
    pub(super) tokens: &'t [Token],
}

/// Marks a varying part in a key; a NUL of the text is doubled.
const VAR: [u8; 2] = [0, 1];

impl<'a> Parsed<'a> {
    /// The name as read so far.
    pub(super) fn name(&self) -> Name<'a, '_> {
        Name {
            bytes: self.bytes,
            tokens: &self.tokens,
        }
    }

    /// Reads one name on its own into `self` (its token buffer reused):
    /// generator windows, words, UUIDs (slugs come with
    /// [`super::shape::read`]).
    pub(super) fn read(&mut self, bytes: &'a [u8], windows: &mut Vec<known::Window>) {
        known::windows(bytes, windows);
        let mut next_window = windows.iter().copied().peekable();
        self.bytes = bytes;
        let tokens = &mut self.tokens;
        tokens.clear();
        let mut i = 0;
        while i < bytes.len() {
            if let Some(w) = next_window.next_if(|w| w.start as usize == i) {
                let class = if w.literal { Class::Word } else { Class::Rand };
                tokens.push(Token::new(w.start as usize, w.end as usize, class));
                i = w.end as usize;
                continue;
            }
            if is_sep(bytes[i]) {
                tokens.push(Token::new(i, i + 1, Class::Sep));
                i += 1;
                continue;
            }
            let start = i;
            let stop = next_window.peek().map_or(bytes.len(), |w| w.start as usize);
            while i < stop && !is_sep(bytes[i]) {
                i += 1;
            }
            let (class, stem) = classify_word(&bytes[start..i], start as u32);
            let mut token = Token::new(start, i, class);
            token.stem = stem;
            tokens.push(token);
        }
        collapse_uuids(bytes, tokens);
        self.random_tail();
    }

    /// A last word after a separator that is a generator's random tail
    /// that happened to look like a word: letters no one would say
    /// (`flhxzdhe`, `Mhcl29`: four consonants in a row, or no vowel), a
    /// word of a generator's length (6, 8, 10 or 12) with a capital first
    /// or more than one (`Ahpddc`, `STRUXW`, `LvIngm`), hex letters
    /// (`eecedc`), or letters with capitals inside and a number
    /// (`RzOdydi6`).
    fn random_tail(&mut self) {
        let n = self.tokens.len();
        if n < 3 || self.tokens[n - 2].class != Class::Sep {
            return;
        }
        let last = self.tokens[n - 1];
        let text = self.token_text(&last);
        let (letters, number) = match last.class {
            Class::Word if text.iter().all(u8::is_ascii_alphabetic) => (text, false),
            Class::Split(at) if text[0].is_ascii_alphabetic() => {
                (&text[..(at - last.start) as usize], true)
            }
            _ => return,
        };
        let uppers = letters.iter().filter(|b| b.is_ascii_uppercase()).count();
        let capitalised = uppers == 1 && letters[0].is_ascii_uppercase();
        let all_upper = uppers == letters.len();
        let random = if number {
            (letters.len() >= UNSAYABLE_MIN_LEN - 2 && unsayable(letters))
                || (uppers >= 2 && !all_upper)
        } else {
            (letters.len() >= UNSAYABLE_MIN_LEN && unsayable(letters))
                || (GENERATOR_LENGTHS.contains(&letters.len()) && (capitalised || uppers >= 2))
                // Hex that drew no digit (`eecedc`).
                || (letters.len() >= UNSAYABLE_MIN_LEN
                    && letters.iter().all(|b| matches!(b, b'a'..=b'f')))
        };
        if random {
            self.tokens[n - 1].class = Class::Rand;
            self.tokens[n - 1].stem = 0;
        }
    }

    pub(super) fn text(&self, start: u32, end: u32) -> &'a [u8] {
        &self.bytes[start as usize..end as usize]
    }

    pub(super) fn token_text(&self, t: &Token) -> &'a [u8] {
        self.text(t.start, t.end)
    }

    /// `<adjective>-<noun>` after the first word (`sandbox-tester-brave-otter-…`,
    /// Docker's `focused_turing`) becomes one slug token.
    pub(super) fn mark_dictionary_slugs(&mut self) {
        let mut i = 0;
        let mut seen_word = false;
        while i < self.tokens.len() {
            let t = self.tokens[i];
            if t.class == Class::Sep {
                i += 1;
                continue;
            }
            let first = !seen_word;
            seen_word = true;
            let slug =
                !first && t.class == Class::Word && dictionary_slug_at(self.bytes, &self.tokens, i);
            if slug {
                let end = self.tokens[i + 2].end;
                self.tokens[i] = Token::new(t.start as usize, end as usize, Class::Slug);
                self.tokens.drain(i + 1..i + 3);
            }
            i += 1;
        }
    }

    /// Each run of slugs, random parts and numbers joined by single
    /// separators that holds a slug becomes one random token: a slug and
    /// what varies beside it is one `*`.
    pub(super) fn merge_slugs(&mut self) {
        if !self.tokens.iter().any(|t| t.class == Class::Slug) {
            return;
        }
        let varying =
            |c: Class| matches!(c, Class::Slug | Class::Rand | Class::Num | Class::Split(_));
        let mut out: Vec<Token> = Vec::with_capacity(self.tokens.len());
        let mut i = 0;
        while i < self.tokens.len() {
            if !varying(self.tokens[i].class) {
                out.push(self.tokens[i]);
                i += 1;
                continue;
            }
            let mut j = i;
            let mut slug = self.tokens[i].class == Class::Slug;
            while j + 2 < self.tokens.len()
                && self.tokens[j + 1].class == Class::Sep
                && varying(self.tokens[j + 2].class)
            {
                j += 2;
                slug |= self.tokens[j].class == Class::Slug;
            }
            if slug {
                let (s, e) = (self.tokens[i].start, self.tokens[j].end);
                out.push(Token::new(s as usize, e as usize, Class::Rand));
            } else {
                out.extend_from_slice(&self.tokens[i..=j]);
            }
            i = j + 1;
        }
        self.tokens = out;
    }
}

impl<'a> Name<'a, '_> {
    pub(super) fn text(&self, start: u32, end: u32) -> &'a [u8] {
        &self.bytes[start as usize..end as usize]
    }

    pub(super) fn token_text(&self, t: &Token) -> &'a [u8] {
        self.text(t.start, t.end)
    }

    pub(super) fn letters_only(&self, t: &Token) -> bool {
        self.token_text(t).iter().all(u8::is_ascii_alphabetic)
    }

    /// The family key: literal text where words and separators are, a
    /// marker where something varies.
    pub(super) fn key(&self, key: &mut Vec<u8>) {
        let lit = |key: &mut Vec<u8>, text: &[u8]| {
            if !text.contains(&0) {
                key.extend_from_slice(text);
                return;
            }
            for &b in text {
                key.push(b);
                if b == 0 {
                    key.push(0);
                }
            }
        };
        for t in self.tokens {
            let text = self.token_text(t);
            match t.class {
                Class::Sep | Class::Word => lit(key, text),
                Class::Num => key.extend_from_slice(&VAR),
                Class::Split(at) => {
                    let (a, b) = text.split_at((at - t.start) as usize);
                    if a[0].is_ascii_digit() {
                        key.extend_from_slice(&VAR);
                        lit(key, b);
                    } else {
                        lit(key, a);
                        key.extend_from_slice(&VAR);
                    }
                }
                Class::Rand | Class::Slug => {
                    lit(key, &text[..t.stem as usize]);
                    key.extend_from_slice(&VAR);
                }
            }
        }
    }

    /// The name as literal runs and varying pieces.
    pub(super) fn pieces_into(&self, out: &mut Vec<Piece>) {
        let from = out.len();
        let mut push = |start: u32, end: u32, kind: PieceKind| {
            let mine = out.len() > from;
            match out.last_mut() {
                Some(last) if mine && kind == PieceKind::Lit && last.kind == PieceKind::Lit => {
                    last.end = end
                }
                _ => out.push(Piece { start, end, kind }),
            }
        };
        const NUM: PieceKind = PieceKind::Var { num: true };
        const RAND: PieceKind = PieceKind::Var { num: false };
        for t in self.tokens {
            match t.class {
                Class::Sep | Class::Word => push(t.start, t.end, PieceKind::Lit),
                Class::Num => push(t.start, t.end, NUM),
                Class::Split(at) => {
                    if self.bytes[t.start as usize].is_ascii_digit() {
                        push(t.start, at, NUM);
                        push(at, t.end, PieceKind::Lit);
                    } else {
                        push(t.start, at, PieceKind::Lit);
                        push(at, t.end, NUM);
                    }
                }
                Class::Rand | Class::Slug => {
                    if t.stem > 0 {
                        push(t.start, t.start + t.stem, PieceKind::Lit);
                    }
                    push(t.start + t.stem, t.end, RAND);
                }
            }
        }
    }
}

/// Whether the word token `i` of a name (not its first word) is a slug
/// generator's adjective followed by `-` or `_` and a word of letters.
fn dictionary_slug_at(bytes: &[u8], tokens: &[Token], i: usize) -> bool {
    let text = |t: &Token| &bytes[t.start as usize..t.end as usize];
    // The cheap tests first.
    tokens
        .get(i + 1)
        .is_some_and(|s| s.class == Class::Sep && matches!(bytes[s.start as usize], b'-' | b'_'))
        && tokens.get(i + 2).is_some_and(|n| {
            matches!(n.class, Class::Word | Class::Rand)
                && text(n).iter().all(u8::is_ascii_alphabetic)
        })
        && known::is_slug_adjective(text(&tokens[i]))
}

impl Name<'_, '_> {
    /// Whether [`Parsed::mark_dictionary_slugs`] or
    /// [`Parsed::merge_slugs`] could change this name.
    pub(super) fn may_have_slugs(&self) -> bool {
        let mut seen_word = false;
        self.tokens.iter().enumerate().any(|(i, t)| {
            if t.class == Class::Sep {
                return false;
            }
            let first = !seen_word;
            seen_word = true;
            t.class == Class::Slug
                || (!first
                    && t.class == Class::Word
                    && dictionary_slug_at(self.bytes, self.tokens, i))
        })
    }
}

/// Whether letters have no vowel (`aeiouy`, either case) or four
/// consonants in a row.
fn unsayable(word: &[u8]) -> bool {
    let vowel = |b: &u8| b"aeiouy".contains(&b.to_ascii_lowercase());
    let mut run = 0;
    let mut longest = 0;
    for b in word {
        run = if vowel(b) { 0 } else { run + 1 };
        longest = longest.max(run);
    }
    longest >= 4 || !word.iter().any(vowel)
}

/// Separators: every ASCII byte that is neither a letter nor a digit.
/// Bytes of multi-byte characters (and invalid UTF-8) belong to words.
pub(super) fn is_sep(b: u8) -> bool {
    b.is_ascii() && !b.is_ascii_alphanumeric()
}

/// A word's class, and for a random word the length of its literal head.
pub(super) fn classify_word(word: &[u8], start: u32) -> (Class, u32) {
    let digits = word.iter().filter(|b| b.is_ascii_digit()).count();
    if digits == word.len() {
        return (Class::Num, 0);
    }
    let hex = word.iter().all(u8::is_ascii_hexdigit);
    if digits > 0 {
        let mut runs = 1;
        let mut split = 0;
        for i in 1..word.len() {
            if word[i].is_ascii_digit() != word[i - 1].is_ascii_digit() {
                runs += 1;
                split = i;
            }
        }
        // `pid1234`, `X11`, `64bit` are a word and a number; `001d` (a hex
        // counter) and `1a2b3c` are random.
        // A word part whose case is not a word's (`rustczFmZB3`) is random.
        let digits_first = word[0].is_ascii_digit();
        let letters = if digits_first {
            &word[split..]
        } else {
            &word[..split]
        };
        let plain = !letters.iter().all(u8::is_ascii_alphabetic)
            || match digits_first {
                // `64bit`, `3d`; not `7753LS`.
                true => letters.iter().all(u8::is_ascii_lowercase),
                // `pid1234`, `X11`, `TestFoo`; not `BVEQS1`.
                false => {
                    plain_case(letters)
                        && (letters.len() <= 3 || !letters.iter().all(u8::is_ascii_uppercase))
                }
            };
        // Go's `TestHTTPHandler` + a uint32: a long number after letters is
        // a number whatever the letters' case.
        let long_number = !digits_first && word.len() - split >= GO_MIN_DIGITS;
        // Hex of 8 or more (`d6335848`) is random even when it reads as a
        // word and a number.
        let long_hex = hex && word.len() >= 8;
        if runs == 2
            && (plain || long_number)
            && !(digits_first && hex && word.len() >= 3)
            && !long_hex
        {
            return (Class::Split(start + split as u32), 0);
        }
        // `e2e`, `k8s`, `i18n`: too short to be random.
        if word.len() <= SHORT_WORD_MAX_LEN && !digits_first {
            return (Class::Word, 0);
        }
        return (Class::Rand, if hex { 0 } else { stem(word, start == 0) });
    }
    if word.iter().all(u8::is_ascii_alphabetic) && !plain_case(word) {
        (Class::Rand, stem(word, start == 0))
    } else {
        (Class::Word, 0)
    }
}

/// The literal head of a random word: all but its last [`TAIL_LEN`] bytes,
/// when those are lowercase letters (`rustc` of `rustcAb12Cd`, `cc` of
/// `ccKarzSK`): at least [`STEM_MIN_LEN`] of them when the word opens the
/// name, [`STEM_MIN_LEN_INSIDE`] after a separator (where random parts of 8
/// or 10 characters are common and may start with a few lowercase letters).
pub(super) fn stem(word: &[u8], opens: bool) -> u32 {
    let Some(head) = word.len().checked_sub(TAIL_LEN) else {
        return 0;
    };
    let min = if opens {
        STEM_MIN_LEN
    } else {
        STEM_MIN_LEN_INSIDE
    };
    if head >= min && word[..head].iter().all(u8::is_ascii_lowercase) {
        head as u32
    } else {
        0
    }
}

/// Whether a word of ASCII letters has the case of a word: all lowercase,
/// all uppercase, or humps of capitals and three or more lowercase
/// letters after a first `Xx…` or `x` (`MyProject`, `iPhone`,
/// `ModemManager`, `TestHTTPHandler`). Random letters (`XyZaQw`, `ccKarzSK`, `qkQqbg`) rarely
/// do.
fn plain_case(word: &[u8]) -> bool {
    if word.iter().all(u8::is_ascii_lowercase) || word.iter().all(u8::is_ascii_uppercase) {
        return true;
    }
    let mut i = 0;
    let mut first = true;
    while i < word.len() {
        let ups = word[i..]
            .iter()
            .take_while(|b| b.is_ascii_uppercase())
            .count();
        i += ups;
        let lows = word[i..]
            .iter()
            .take_while(|b| b.is_ascii_lowercase())
            .count();
        i += lows;
        let ok = match first {
            // `Test`, `My`, or `i` of `iPhone`; then `Project`, `HTTPHandler`.
            true => (ups == 1 && lows >= 1) || (ups == 0 && lows == 1),
            false => ups >= 1 && lows >= 3,
        };
        if !ok {
            return false;
        }
        first = false;
    }
    true
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
            tokens[i] = Token::new(tokens[i].start as usize, end as usize, Class::Rand);
            tokens.drain(i + 1..i + 9);
        }
        i += 1;
    }
}
