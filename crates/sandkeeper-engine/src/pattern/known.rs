//! What common generators of temporary names make, as data: their literal
//! prefixes, the alphabets and lengths of their random parts, and the
//! adjectives of word-slug generators.
//!
//! Each entry names the program and the source of its shape. A name that
//! fits an entry gets its random part read as one random piece, whatever
//! characters it happens to contain (Python's alphabet has `_`, which is
//! otherwise a separator) and however much it happens to look like a word.

/// The characters a random part is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alphabet {
    /// `tempfile._RandomNameSequence.characters`:
    /// `abcdefghijklmnopqrstuvwxyz0123456789_`.
    Python,
    /// `[A-Za-z0-9]`: glibc `mkdtemp`/`mkstemp` (`XXXXXX`), `mktemp(1)`,
    /// Rust `tempfile`, Node's `fs.mkdtemp`.
    Alnum,
    /// `[A-Za-z0-9_-]`: ImageMagick's `AcquireUniqueFileResource` (the
    /// POSIX portable file-name characters).
    Portable,
    /// `[0-9]`: Java's `File.createTempFile` (an unsigned random `long`).
    Digits,
}

impl Alphabet {
    fn has(self, b: u8) -> bool {
        match self {
            Alphabet::Python => b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_',
            Alphabet::Alnum => b.is_ascii_alphanumeric(),
            Alphabet::Portable => b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
            Alphabet::Digits => b.is_ascii_digit(),
        }
    }
}

/// What may follow the random part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Nothing: the random part ends the name.
    End,
    /// Nothing, or a suffix that starts with a separator (`.py`,
    /// `__tempfs__`).
    EndOrSuffix,
    /// A dot and a short extension (gcc's `.s`, `.o`, `.res`, `.ld`).
    Extension,
    /// Exactly these bytes, ending the name (Java's suffix given with no
    /// dot: Maven Surefire's `tmp`).
    Literal(&'static [u8]),
}

/// A generator: a literal prefix, then `len` characters of `alphabet`.
struct Generator {
    prefix: &'static [u8],
    alphabet: Alphabet,
    len: std::ops::RangeInclusive<usize>,
    after: After,
}

const fn gen(
    prefix: &'static [u8],
    alphabet: Alphabet,
    len: std::ops::RangeInclusive<usize>,
    after: After,
) -> Generator {
    Generator {
        prefix,
        alphabet,
        len,
        after,
    }
}

/// Generators recognised by their literal prefix. The first that fits wins.
const GENERATORS: &[Generator] = &[
    // Python `tempfile.mkdtemp()`/`mkstemp()`: `template = "tmp"`, then
    // `_RandomNameSequence` (8 characters), then the caller's suffix.
    gen(b"tmp", Alphabet::Python, 8..=8, After::EndOrSuffix),
    // Rust `tempfile`: `Builder` defaults `.tmp` and 6 random characters.
    gen(b".tmp", Alphabet::Alnum, 6..=6, After::EndOrSuffix),
    // `mktemp(1)`'s default template `tmp.XXXXXXXXXX`.
    gen(b"tmp.", Alphabet::Alnum, 10..=10, After::EndOrSuffix),
    // OpenSSH `ssh-agent`: `ssh-XXXXXXXXXX` (10), newer `ssh-XXXXXXXXXXXX`.
    gen(b"ssh-", Alphabet::Alnum, 10..=12, After::End),
    // `dbus-daemon --address=unix:tmpdir=/tmp`: `dbus-` + 10.
    gen(b"dbus-", Alphabet::Alnum, 10..=10, After::End),
    // Chromium's `base::CreateNewTempDirectory`: `.org.chromium.Chromium.XXXXXX`,
    // and Google Chrome's own.
    gen(
        b".org.chromium.Chromium.",
        Alphabet::Alnum,
        6..=6,
        After::End,
    ),
    gen(b".com.google.Chrome.", Alphabet::Alnum, 6..=6, After::End),
    // puppeteer: `fs.mkdtemp(tmpdir + "/puppeteer_dev_chrome_profile-")`.
    gen(
        b"puppeteer_dev_chrome_profile-",
        Alphabet::Alnum,
        6..=6,
        After::End,
    ),
    gen(
        b"puppeteer_dev_firefox_profile-",
        Alphabet::Alnum,
        6..=6,
        After::End,
    ),
    // rustdoc and cargo through Rust `tempfile` with their own prefixes.
    gen(b"rustdoctest", Alphabet::Alnum, 6..=6, After::End),
    gen(b"rustc", Alphabet::Alnum, 6..=6, After::End),
    gen(b"cargo-install", Alphabet::Alnum, 6..=6, After::End),
    // gcc's `make_temp_file`: `ccXXXXXX` plus the suffix (`.s`, `.o`, `.res`).
    gen(b"cc", Alphabet::Alnum, 6..=6, After::Extension),
    // R's session directory: `tempdir()` is `mkdtemp("RtmpXXXXXX")`.
    gen(b"Rtmp", Alphabet::Alnum, 6..=6, After::End),
    // ImageMagick 7's `AcquireUniqueFileResource`: `magick-` and 32 of the
    // portable file-name characters, whose `_` and `-` would otherwise
    // split the random part into words.
    gen(b"magick-", Alphabet::Portable, 32..=32, After::End),
    // Maven Surefire's `File.createTempFile("surefire", "tmp")`: the
    // random `long` between two literals, with no separator to tell them
    // apart.
    gen(
        b"surefire",
        Alphabet::Digits,
        1..=20,
        After::Literal(b"tmp"),
    ),
];

/// systemd's `PrivateTmp=`: `systemd-private-<boot id, 32 hex>-<unit>-XXXXXX`.
const SYSTEMD_PRIVATE: &[u8] = b"systemd-private-";

/// The prefixes of the known generators' names (`tmp`, `.tmp`, `rustc`,
/// …): a name that starts with one may be a generated name as a whole.
#[cfg(test)]
pub(crate) fn prefixes() -> Vec<&'static [u8]> {
    let mut all: Vec<&'static [u8]> = GENERATORS.iter().map(|g| g.prefix).collect();
    all.push(SYSTEMD_PRIVATE);
    all
}

/// pip's temporary directories: `tempfile.mkdtemp(prefix="pip-<kind>-")`.
const PIP: &[u8] = b"pip-";

/// A part of a name that a known generator made: its random part, or a
/// part that is literal as a whole (systemd's unit name, `user@1000.service`
/// included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) start: u32,
    pub(super) end: u32,
    pub(super) literal: bool,
}

const fn random(start: u32, end: u32) -> Window {
    Window {
        start,
        end,
        literal: false,
    }
}

/// Finds the parts a known generator put into `name`, in order, into `out`
/// (cleared first).
pub(super) fn windows(name: &[u8], out: &mut Vec<Window>) {
    out.clear();
    if let Some(found) = systemd_private(name) {
        out.extend_from_slice(&found);
        return;
    }
    let Some(&first) = name.first() else {
        return;
    };
    for g in GENERATORS {
        // The first byte before the whole prefix: most names fit none.
        if g.prefix[0] != first {
            continue;
        }
        let Some(rest) = name.strip_prefix(g.prefix) else {
            continue;
        };
        for len in g.len.clone().rev() {
            if rest.len() < len || !rest[..len].iter().all(|&b| g.alphabet.has(b)) {
                continue;
            }
            let after = &rest[len..];
            let fits = match g.after {
                After::End => after.is_empty(),
                After::EndOrSuffix => after.first().is_none_or(|&b| is_sep(b)),
                After::Extension => {
                    after.len() >= 2
                        && after.len() <= 5
                        && after[0] == b'.'
                        && after[1..].iter().all(u8::is_ascii_alphanumeric)
                }
                After::Literal(suffix) => after == suffix,
            };
            if fits {
                let start = g.prefix.len() as u32;
                out.push(random(start, start + len as u32));
                return;
            }
        }
    }
    timestamps(name, out);
    if let Some((start, end)) = python_suffix(name) {
        // (Not when a timestamp reaches into it.)
        if out.last().is_none_or(|w| w.end <= start) {
            out.push(random(start, end));
        }
    }
}

/// Dates and times, each a varying part whatever its numbers look like
/// (a month or an hour would read as a small tag that splits a family by
/// day): `2024-12-05`, `2024_12_05`, `2024.12.05` or `20241205`, with a
/// time `T07:02:19`, `.07-02-19`, `_070219Z` and a fraction after it
/// (`kotlin-daemon.2024-12-05.07-02-19-310.log` gives
/// `kotlin-daemon.*.log`); and Ruby's `Dir::Tmpname`, `<prefix><date>-<pid>-<rand in base 36>`
/// (`d20241205-4242-1xk9qz`), whose base-36 tail is varying too.
fn timestamps(name: &[u8], out: &mut Vec<Window>) {
    let mut i = 0;
    while i + 8 <= name.len() {
        // (A year starts with 1 or 2, and no number goes on before it.)
        let year = matches!(name[i], b'1' | b'2') && (i == 0 || !name[i - 1].is_ascii_digit());
        let Some(date_end) = year.then(|| date_at(name, i)).flatten() else {
            i += 1;
            continue;
        };
        // Ruby's shape first: its pid may look like a time (`-142857-`).
        if let Some((start, end)) = ruby_tail(name, i, date_end) {
            out.push(random(i as u32, date_end as u32));
            out.push(random(start as u32, end as u32));
            i = end;
            continue;
        }
        let end = time_after(name, date_end).unwrap_or(date_end);
        out.push(random(i as u32, end as u32));
        i = end;
    }
}

/// The two digits at `at`, when they are a number in `range`.
fn two_digits(name: &[u8], at: usize, range: std::ops::RangeInclusive<u8>) -> bool {
    name.get(at..at + 2).is_some_and(|d| {
        d.iter().all(u8::is_ascii_digit) && range.contains(&((d[0] - b'0') * 10 + d[1] - b'0'))
    })
}

/// How many digits stand from `at` on.
fn digits_at(name: &[u8], at: usize) -> usize {
    name.get(at..).map_or(0, |rest| {
        rest.iter().take_while(|b| b.is_ascii_digit()).count()
    })
}

/// The end of the two groups of two digits after a first group that ends
/// at `at` (a date's month and day, a time's minutes and seconds): one of
/// `seps` before each, the same both times, or none; each a number in its
/// range.
fn two_more(
    name: &[u8],
    at: usize,
    seps: &[u8],
    first: std::ops::RangeInclusive<u8>,
    second: std::ops::RangeInclusive<u8>,
) -> Option<usize> {
    let sep = name.get(at).copied().filter(|b| seps.contains(b));
    let step = usize::from(sep.is_some());
    let (a, b) = (at + step, at + 2 + 2 * step);
    let ok = two_digits(name, a, first)
        && sep.is_none_or(|sep| name.get(a + 2) == Some(&sep))
        && two_digits(name, b, second);
    ok.then_some(b + 2)
}

/// The end of a date that starts at `at` (a year 1970–2099, a month, a
/// day, with one separator twice or none), not followed by a digit.
fn date_at(name: &[u8], at: usize) -> Option<usize> {
    let year = name.get(at..at + 4)?;
    if !year.iter().all(u8::is_ascii_digit) || !matches!(&year[..2], b"19" | b"20") {
        return None;
    }
    let end = two_more(name, at + 4, b"-_.", 1..=12, 1..=31)?;
    name.get(end)
        .is_none_or(|b| !b.is_ascii_digit())
        .then_some(end)
}

/// The end of a time of day right after a date ending at `at`: a
/// separator (`T`, `_`, `-`, `.`, a space), hours, minutes and seconds
/// (with `:`, `-` or `.` between them, or nothing), then maybe a fraction
/// (`.`, `,` or `-` and 1–9 digits) and UTC's `Z`, not followed by a
/// digit.
fn time_after(name: &[u8], at: usize) -> Option<usize> {
    let hour = at + 1;
    if !matches!(name.get(at)?, b'T' | b'_' | b'-' | b'.' | b' ') || !two_digits(name, hour, 0..=23)
    {
        return None;
    }
    let mut end = two_more(name, hour + 2, b":-.", 0..=59, 0..=60)?;
    if matches!(name.get(end), Some(b'.' | b',' | b'-')) {
        let digits = digits_at(name, end + 1);
        if (1..=9).contains(&digits) {
            end += 1 + digits;
        }
    }
    // UTC's `Z` belongs to the time (`T235959Z`).
    if name.get(end) == Some(&b'Z') && name.get(end + 1).is_none_or(|b| !b.is_ascii_alphanumeric())
    {
        end += 1;
    }
    name.get(end)
        .is_none_or(|b| !b.is_ascii_digit())
        .then_some(end)
}

/// Ruby's `Dir::Tmpname`: after a compact date (8 digits at `start`,
/// ending at `end`), `-<pid>-` and `rand(2**32).to_s(36)` (1–7 of
/// `[0-9a-z]`), then the end, `-<n>` or a suffix: the tail's range.
fn ruby_tail(name: &[u8], start: usize, end: usize) -> Option<(usize, usize)> {
    if end - start != 8 || name.get(end) != Some(&b'-') {
        return None;
    }
    let pid = digits_at(name, end + 1);
    let tail = end + 1 + pid + 1;
    if pid == 0 || name.get(end + 1 + pid) != Some(&b'-') {
        return None;
    }
    let len = name[tail..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        .count();
    let ends = name.get(tail + len).is_none_or(|&b| is_sep(b));
    ((1..=7).contains(&len) && ends).then_some((tail, tail + len))
}

/// `systemd-private-<32 hex>-<unit>-<6 alnum>`: the boot id, the unit (a
/// literal), and the tail.
fn systemd_private(name: &[u8]) -> Option<[Window; 3]> {
    if name.first() != Some(&SYSTEMD_PRIVATE[0]) {
        return None;
    }
    let rest = name.strip_prefix(SYSTEMD_PRIVATE)?;
    let start = SYSTEMD_PRIVATE.len();
    let id_ok = rest.len() > 32 + 1 + 1 + 1 + 6
        && rest[..32].iter().all(u8::is_ascii_hexdigit)
        && rest[32] == b'-';
    let n = name.len();
    let tail_ok = name[n - 7] == b'-' && name[n - 6..].iter().all(u8::is_ascii_alphanumeric);
    let (start, n) = (start as u32, n as u32);
    let unit = Window {
        start: start + 33,
        end: n - 7,
        literal: true,
    };
    (id_ok && tail_ok).then_some([random(start, start + 32), unit, random(n - 6, n)])
}

/// A Python `tempfile` name with its own prefix (pip's `pip-install-`,
/// `pip-build-env-`, or a program's `myapp-`): the last 8 characters, after
/// a separator, drawn from Python's alphabet. Without the `pip-` prefix the
/// part must show that it is random (a digit, or a `_` that does not join
/// two words) and must not be a word followed by a number (`build2024`,
/// `run_2024`), which the general rules read the same way.
fn python_suffix(name: &[u8]) -> Option<(u32, u32)> {
    const LEN: usize = 8;
    let n = name.len();
    if n <= LEN {
        return None;
    }
    let (head, tail) = name.split_at(n - LEN);
    if !matches!(head.last(), Some(b'-' | b'_' | b'.'))
        || !tail.iter().all(|&b| Alphabet::Python.has(b))
    {
        return None;
    }
    let range = ((n - LEN) as u32, n as u32);
    if head.starts_with(PIP) {
        return Some(range);
    }
    let digits = tail.iter().filter(|b| b.is_ascii_digit()).count();
    let letters = tail.iter().filter(|b| b.is_ascii_lowercase()).count();
    let underscores = LEN - digits - letters;
    if letters == 0 {
        return None;
    }
    // A word, then a number (`build2024`, `run_12`): `[a-z]*_?[0-9]+`.
    let lead = tail.iter().take_while(|b| !b.is_ascii_digit()).count();
    let word = &tail[..lead];
    let word = word.strip_suffix(b"_").unwrap_or(word);
    if digits > 0 && tail[lead..].iter().all(u8::is_ascii_digit) && !word.contains(&b'_') {
        return None;
    }
    // `abc_defg` joins two words; `rsh_xxig` does not (no vowel in `rsh`).
    let joins_words = underscores > 0
        && digits == 0
        && tail
            .split(|&b| b == b'_')
            .all(|w| w.len() >= 3 && w.iter().any(|b| b"aeiouy".contains(b)));
    (digits > 0 || (underscores > 0 && !joins_words)).then_some(range)
}

fn is_sep(b: u8) -> bool {
    b.is_ascii() && !b.is_ascii_alphanumeric()
}

/// Adjectives of word-slug generators (Docker's `pkg/namesgenerator`, the
/// petname and haikunator lists): `<adjective>-<noun>` after a literal
/// prefix is read as one random piece. Words common in fixed names
/// (`private`, `new`, `old`, colours, sizes) are left out.
const ADJECTIVES: &[&str] = &[
    "adapted",
    "admiring",
    "adoring",
    "affectionate",
    "agitated",
    "alert",
    "amazing",
    "amused",
    "ancient",
    "angry",
    "artistic",
    "assured",
    "autumn",
    "awake",
    "awesome",
    "balanced",
    "beautiful",
    "beloved",
    "billowing",
    "bitter",
    "blessed",
    "blissful",
    "bold",
    "boring",
    "brave",
    "brief",
    "bright",
    "brisk",
    "broken",
    "bursting",
    "busy",
    "calm",
    "capable",
    "careful",
    "caring",
    "champion",
    "charmed",
    "charming",
    "cheerful",
    "clever",
    "coherent",
    "communal",
    "compassionate",
    "competent",
    "composed",
    "concise",
    "condescending",
    "confident",
    "cool",
    "cosmic",
    "cranky",
    "crazy",
    "creative",
    "credible",
    "cuddly",
    "cunning",
    "curious",
    "damp",
    "daring",
    "darling",
    "dashing",
    "dazzling",
    "decent",
    "delicate",
    "desired",
    "destined",
    "determined",
    "devoted",
    "distinct",
    "distracted",
    "diverse",
    "divine",
    "dominant",
    "dreamy",
    "driven",
    "eager",
    "ecstatic",
    "elastic",
    "elated",
    "elegant",
    "eloquent",
    "emerging",
    "eminent",
    "enjoyed",
    "enormous",
    "epic",
    "ethical",
    "evident",
    "evolved",
    "exciting",
    "exotic",
    "faithful",
    "famous",
    "fancy",
    "feasible",
    "fervent",
    "festive",
    "fitting",
    "flamboyant",
    "flexible",
    "floral",
    "flowing",
    "fluent",
    "focused",
    "fragrant",
    "friendly",
    "frosty",
    "funny",
    "gallant",
    "generous",
    "gentle",
    "genuine",
    "gifted",
    "glorious",
    "glowing",
    "goofy",
    "gorgeous",
    "gracious",
    "grateful",
    "great",
    "handy",
    "happy",
    "hardcore",
    "hardy",
    "harmless",
    "healthy",
    "helpful",
    "heroic",
    "heuristic",
    "hidden",
    "honest",
    "hopeful",
    "humane",
    "humble",
    "humorous",
    "hungry",
    "icy",
    "immense",
    "immortal",
    "infallible",
    "innocent",
    "inspiring",
    "intelligent",
    "intense",
    "interesting",
    "intimate",
    "inviting",
    "jolly",
    "jovial",
    "keen",
    "kind",
    "knowing",
    "lasting",
    "laughing",
    "legible",
    "lenient",
    "liberal",
    "liked",
    "lingering",
    "literate",
    "lively",
    "loved",
    "loving",
    "loyal",
    "lucid",
    "lucky",
    "magical",
    "magnetic",
    "mature",
    "merry",
    "mighty",
    "misty",
    "modest",
    "moral",
    "musical",
    "musing",
    "mystifying",
    "nameless",
    "naughty",
    "nervous",
    "nice",
    "nifty",
    "nimble",
    "noble",
    "nostalgic",
    "notable",
    "novel",
    "objective",
    "obliging",
    "optimistic",
    "outgoing",
    "patient",
    "peaceful",
    "pedantic",
    "pensive",
    "perfect",
    "pleasant",
    "pleased",
    "pleasing",
    "poetic",
    "polished",
    "polite",
    "popular",
    "powerful",
    "practical",
    "precious",
    "pretty",
    "priceless",
    "profound",
    "proud",
    "proven",
    "pumped",
    "quiet",
    "quirky",
    "quizzical",
    "rapid",
    "recursing",
    "refined",
    "relaxed",
    "relaxing",
    "relieved",
    "restless",
    "reverent",
    "robust",
    "romantic",
    "rough",
    "sacred",
    "sad",
    "sensible",
    "serene",
    "sharp",
    "shy",
    "silent",
    "silly",
    "sincere",
    "singular",
    "skilled",
    "sleepy",
    "smashing",
    "smiling",
    "smooth",
    "snowy",
    "solitary",
    "sparkling",
    "splendid",
    "steady",
    "stoic",
    "strange",
    "striking",
    "stunning",
    "stupefied",
    "subtle",
    "suitable",
    "suited",
    "sunny",
    "superb",
    "supreme",
    "suspicious",
    "sweeping",
    "sweet",
    "swift",
    "talented",
    "tender",
    "thankful",
    "thirsty",
    "thorough",
    "tidy",
    "tolerant",
    "touching",
    "trusted",
    "trusting",
    "trusty",
    "twilight",
    "unbiased",
    "uncommon",
    "unruffled",
    "upbeat",
    "valued",
    "viable",
    "vibrant",
    "vigilant",
    "vigorous",
    "wandering",
    "wealthy",
    "weathered",
    "welcome",
    "wild",
    "willing",
    "winning",
    "wise",
    "wispy",
    "withered",
    "witty",
    "wizardly",
    "wonderful",
    "wondrous",
    "workable",
    "worthy",
    "xenodochial",
    "youthful",
    "zealous",
    "zen",
];

/// Whether `word` is an adjective of a slug generator (see [`ADJECTIVES`]).
pub(super) fn is_slug_adjective(word: &[u8]) -> bool {
    (3..=13).contains(&word.len())
        && word.iter().all(u8::is_ascii_lowercase)
        && std::str::from_utf8(word).is_ok_and(|w| ADJECTIVES.binary_search(&w).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjectives_are_sorted_for_binary_search() {
        assert!(ADJECTIVES.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn windows_of_known_generators() {
        let cases: &[(&str, &[(u32, u32)])] = &[
            (
                "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-user@1000.service-Ab12Cd",
                &[(16, 48), (49, 66), (67, 73)],
            ),
            ("tmpab_c1x9z", &[(3, 11)]),
            ("tmpwzi4k9q___tempfs__", &[(3, 11)]),
            ("tmpab_c1x9z.py", &[(3, 11)]),
            ("tmp_sandkeeper", &[]),
            (".tmpAbC12x", &[(4, 10)]),
            (".tmpabcdef", &[(4, 10)]),
            ("tmp.AbCdEf1234", &[(4, 14)]),
            ("ssh-AbCdEf123456", &[(4, 16)]),
            ("ccKarzSK.o", &[(2, 8)]),
            ("ccabcdef.res", &[(2, 8)]),
            ("cc-files", &[]),
            ("RtmpAb12Cd", &[(4, 10)]),
            ("Rtmp", &[]),
            ("magick-Ab_-c9XyZ0123456789abcdefghijk_-", &[(7, 39)]),
            ("magick-config.xml", &[]),
            ("surefire7136409574466290286tmp", &[(8, 27)]),
            ("surefire1tmp", &[(8, 9)]),
            ("surefirebooter123.jar", &[]),
            ("surefire123.tmp", &[]),
            ("kotlin-daemon.2024-12-05.07-02-19-310.log", &[(14, 37)]),
            ("backup-2024_01_31T235959Z.sql", &[(7, 25)]),
            ("backup-2024_01_31T235959Zulu", &[(7, 24)]),
            ("report-20241205.txt", &[(7, 15)]),
            ("d20241205-4242-1xk9qz", &[(1, 9), (15, 21)]),
            ("foo20241205-4242-1xk9qz.rb", &[(3, 11), (17, 23)]),
            ("d20190625-142857-4q8ujh", &[(1, 9), (17, 23)]),
            ("app-2024-13-01", &[]),
            ("app-2024-12-32", &[]),
            ("id-120241205", &[]),
            ("build-2024-1234", &[]),
            ("python-3.12.1", &[]),
            ("pip-install-qwertyui", &[(12, 20)]),
            ("pip-build-env-a_b_c_d_", &[(14, 22)]),
            ("myapp-k2_x9aab", &[(6, 14)]),
            ("hsperfdata_root", &[]),
            ("build-20241201", &[(6, 14)]), // a date (a number all the same)
            ("app-cache_dir", &[]),
            (
                "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-chronyd.service-abcdef",
                &[(16, 48), (49, 64), (65, 71)],
            ),
        ];
        let mut out = Vec::new();
        for (name, want) in cases {
            windows(name.as_bytes(), &mut out);
            let got: Vec<(u32, u32)> = out.iter().map(|w| (w.start, w.end)).collect();
            assert_eq!(got, *want, "{name}");
        }
    }
}
