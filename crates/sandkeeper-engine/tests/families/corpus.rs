//! Names made the way real programs make them, each generator with the
//! family a person would write down for it.
//!
//! Every generator follows its program's source or documented behaviour:
//! the literal parts, the alphabet and the length of the random parts, and
//! how numbers are written. The expected pattern is written by hand.

use fastrand::Rng;

/// Python `tempfile._RandomNameSequence.characters`.
const PYTHON: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_";

fn python8(rng: &mut Rng) -> String {
    (0..8)
        .map(|_| PYTHON[rng.usize(..PYTHON.len())] as char)
        .collect()
}

/// glibc `__gen_tempname`, `mktemp(1)`, Rust `tempfile`, Node `mkdtemp`:
/// `[A-Za-z0-9]`.
fn alnum(rng: &mut Rng, n: usize) -> String {
    (0..n).map(|_| rng.alphanumeric()).collect()
}

/// ImageMagick's `AcquireUniqueFileResource`: the portable file-name
/// characters, `[A-Za-z0-9_-]`.
fn portable(rng: &mut Rng, n: usize) -> String {
    const PORTABLE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..n)
        .map(|_| PORTABLE[rng.usize(..PORTABLE.len())] as char)
        .collect()
}

/// A date in the last few years: `YYYY`, `MM` and `DD` joined by `sep`.
fn date(rng: &mut Rng, sep: &str) -> String {
    let (y, m, d) = (rng.u32(2019..=2026), rng.u32(1..=12), rng.u32(1..=28));
    format!("{y}{sep}{m:02}{sep}{d:02}")
}

/// A time of day: `HH`, `MM` and `SS` joined by `sep`.
fn time(rng: &mut Rng, sep: &str) -> String {
    let (h, m, s) = (rng.u32(..24), rng.u32(..60), rng.u32(..60));
    format!("{h:02}{sep}{m:02}{sep}{s:02}")
}

/// Ruby's `rand(0x100000000).to_s(36)`.
fn base36(rng: &mut Rng) -> String {
    let mut n = rng.u64(..0x1_0000_0000);
    let mut out = Vec::new();
    loop {
        out.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

fn hex(rng: &mut Rng, n: usize) -> String {
    (0..n)
        .map(|_| b"0123456789abcdef"[rng.usize(..16)] as char)
        .collect()
}

/// A Linux pid (`pid_max` is 4194304 on 64-bit; low pids are taken at boot).
fn pid(rng: &mut Rng) -> u32 {
    rng.u32(300..4_194_304)
}

/// Go's `os.MkdirTemp`: `strconv.Itoa(int(uint32(rand)))` in the `*` (or
/// appended).
fn go_random(rng: &mut Rng) -> u32 {
    rng.u32(..)
}

/// A word-slug list a launcher might carry (not Docker's).
const LAUNCHER_ADJECTIVES: &[&str] = &[
    "brave", "calm", "eager", "fuzzy", "gentle", "jolly", "lucky", "mellow", "nimble", "plucky",
    "quiet", "rapid", "shiny", "snappy", "sunny", "tidy", "witty", "zesty", "bouncy", "cosmic",
    "dusty", "fancy", "giddy", "hasty", "lumpy", "merry", "perky", "rusty", "spry", "wobbly",
];
const LAUNCHER_NOUNS: &[&str] = &[
    "otter", "falcon", "badger", "lynx", "heron", "panda", "koala", "walrus", "yak", "zebra",
    "gecko", "marmot", "puffin", "quokka", "raven", "salmon", "tapir", "vole", "wombat", "ibis",
    "moose", "newt", "okapi", "pika", "shrew", "stoat", "tern", "viper", "wren", "bison",
];
/// Docker's `pkg/namesgenerator` (a part of each list).
const DOCKER_LEFT: &[&str] = &[
    "admiring",
    "adoring",
    "affectionate",
    "agitated",
    "amazing",
    "angry",
    "awesome",
    "beautiful",
    "blissful",
    "bold",
    "boring",
    "brave",
    "busy",
    "charming",
    "clever",
    "compassionate",
    "competent",
    "condescending",
    "confident",
    "cranky",
    "crazy",
    "dazzling",
    "determined",
    "distracted",
    "dreamy",
    "eager",
    "ecstatic",
    "elastic",
    "elated",
    "elegant",
    "eloquent",
    "epic",
    "exciting",
    "fervent",
    "festive",
    "flamboyant",
    "focused",
    "friendly",
    "frosty",
    "funny",
    "gallant",
    "gifted",
    "goofy",
    "gracious",
    "happy",
    "hardcore",
    "heuristic",
    "hopeful",
    "hungry",
    "infallible",
    "inspiring",
    "intelligent",
    "interesting",
    "jolly",
    "jovial",
    "keen",
    "laughing",
    "loving",
    "lucid",
    "magical",
    "modest",
    "musing",
    "mystifying",
    "naughty",
    "nervous",
    "nifty",
    "nostalgic",
    "objective",
    "optimistic",
    "peaceful",
    "pedantic",
    "pensive",
    "practical",
    "priceless",
    "quirky",
    "quizzical",
    "recursing",
    "relaxed",
    "reverent",
    "romantic",
    "sad",
    "serene",
    "sharp",
    "silly",
    "sleepy",
    "stoic",
    "strange",
    "stupefied",
    "suspicious",
    "sweet",
    "tender",
    "thirsty",
    "trusting",
    "unruffled",
    "upbeat",
    "vibrant",
    "vigilant",
    "vigorous",
    "wizardly",
    "wonderful",
    "xenodochial",
    "youthful",
    "zealous",
    "zen",
];
const DOCKER_RIGHT: &[&str] = &[
    "turing", "hopper", "lovelace", "curie", "darwin", "einstein", "feynman", "galileo", "hawking",
    "newton", "pasteur", "ritchie", "shannon", "tesla", "wozniak", "knuth", "dijkstra", "torvalds",
    "babbage", "kepler", "noether", "hypatia", "bohr", "fermi",
];

fn pick<'a>(rng: &mut Rng, list: &[&'a str]) -> &'a str {
    list[rng.usize(..list.len())]
}

/// How a generator makes one name; `boot` is the corpus's boot ids.
pub type Make = fn(&mut Rng, &Ctx) -> String;

/// What names of one corpus share: systemd's boot ids, a counter base.
pub struct Ctx {
    pub boot_ids: Vec<String>,
    pub counter: u32,
}

/// A generator: the family a person would write down, and how a name is
/// made.
pub struct Generator {
    /// The program (for messages).
    pub what: &'static str,
    /// The pattern of its family, written by hand.
    pub pattern: &'static str,
    /// At most this many members in one corpus (1 for a fixed name).
    pub max: usize,
    pub make: Make,
}

macro_rules! generators {
    ($($what:literal, $pattern:literal, $max:expr, |$rng:ident, $ctx:ident| $body:expr;)*) => {
        &[$(Generator {
            what: $what,
            pattern: $pattern,
            max: $max,
            make: {
                #[allow(unused_variables)]
                fn make($rng: &mut Rng, $ctx: &Ctx) -> String {
                    $body
                }
                make
            },
        }),*]
    };
}

/// systemd `PrivateTmp=`: `systemd-private-<boot id>-<unit>-XXXXXX`.
fn systemd(rng: &mut Rng, ctx: &Ctx, unit: &str) -> String {
    let boot = &ctx.boot_ids[rng.usize(..ctx.boot_ids.len())];
    format!("systemd-private-{boot}-{unit}-{}", alnum(rng, 6))
}

pub const GENERATORS: &[Generator] = generators![
    // Python: tempfile.mkdtemp() / mkstemp(suffix=...) / prefix=...
    "python mkdtemp", "tmp*", 30, |rng, ctx| format!("tmp{}", python8(rng));
    "python suffix", "tmp*__tempfs__", 12, |rng, ctx| format!("tmp{}__tempfs__", python8(rng));
    "python mkstemp .py", "tmp*.py", 12, |rng, ctx| format!("tmp{}.py", python8(rng));
    "python prefix", "sk-test-*", 12, |rng, ctx| format!("sk-test-{}", python8(rng));
    // pip: TempDirectory(kind=...) -> tempfile.mkdtemp(prefix=f"pip-{kind}-")
    "pip install", "pip-install-*", 12, |rng, ctx| format!("pip-install-{}", python8(rng));
    "pip build-env", "pip-build-env-*", 12, |rng, ctx| format!("pip-build-env-{}", python8(rng));
    "pip req-build", "pip-req-build-*", 12, |rng, ctx| format!("pip-req-build-{}", python8(rng));
    "pip ephem", "pip-ephem-wheel-cache-*", 8, |rng, ctx| format!("pip-ephem-wheel-cache-{}", python8(rng));
    "pip unpack", "pip-unpack-*", 8, |rng, ctx| format!("pip-unpack-{}", python8(rng));
    "pip target", "pip-target-*", 4, |rng, ctx| format!("pip-target-{}", python8(rng));
    "pip download", "pip-download-*", 4, |rng, ctx| format!("pip-download-{}", python8(rng));
    "pip wheel", "pip-wheel-*", 8, |rng, ctx| format!("pip-wheel-{}", python8(rng));
    // Rust tempfile: Builder defaults (".tmp", 6), rustc's and rustdoc's prefixes
    "rust tempfile", ".tmp*", 30, |rng, ctx| format!(".tmp{}", alnum(rng, 6));
    "rustc", "rustc*", 10, |rng, ctx| format!("rustc{}", alnum(rng, 6));
    "rustdoc", "rustdoctest*", 10, |rng, ctx| format!("rustdoctest{}", alnum(rng, 6));
    "cargo install", "cargo-install*", 4, |rng, ctx| format!("cargo-install{}", alnum(rng, 6));
    "rust tempfile suffix", ".tmp*.json", 6, |rng, ctx| format!(".tmp{}.json", alnum(rng, 6));
    "rust tempfile prefix", "mio_*", 10, |rng, ctx| format!("mio_{}", alnum(rng, 6));
    "rust_out counter", "rust_out.*", 30, |rng, ctx| format!("rust_out.{:04x}", ctx.counter + rng.u32(0..64));
    // mktemp(1)
    "mktemp", "tmp.*", 20, |rng, ctx| format!("tmp.{}", alnum(rng, 10));
    "mktemp -t foo.XXXXXXXXXX", "deploy.*", 10, |rng, ctx| format!("deploy.{}", alnum(rng, 10));
    "mktemp -t build.XXXXXXXX", "build.*", 10, |rng, ctx| format!("build.{}", alnum(rng, 8));
    "mktemp ci-cache.XXXXXX", "ci-cache.*", 10, |rng, ctx| format!("ci-cache.{}", alnum(rng, 6));
    // Go: testing.T.TempDir -> os.MkdirTemp("", name); go build's work dir
    "go test", "TestServerShutdown*", 10, |rng, ctx| format!("TestServerShutdown{}", go_random(rng));
    "go subtest", "TestParseConfigempty_file*", 10, |rng, ctx| format!("TestParseConfigempty_file{}", go_random(rng));
    "go test acronym", "TestHTTPHandler*", 10, |rng, ctx| format!("TestHTTPHandler{}", go_random(rng));
    "go link", "go-link-*", 6, |rng, ctx| format!("go-link-{}", go_random(rng));
    "go build", "go-build*", 10, |rng, ctx| format!("go-build{}", go_random(rng));
    "go MkdirTemp pattern", "webhook-*-data", 10, |rng, ctx| format!("webhook-{}-data", go_random(rng));
    // systemd PrivateTmp=
    "systemd chronyd", "systemd-private-*-chronyd.service-*", 3, |rng, ctx| systemd(rng, ctx, "chronyd.service");
    "systemd logind", "systemd-private-*-systemd-logind.service-*", 3, |rng, ctx| systemd(rng, ctx, "systemd-logind.service");
    "systemd resolved", "systemd-private-*-systemd-resolved.service-*", 3, |rng, ctx| systemd(rng, ctx, "systemd-resolved.service");
    "systemd colord", "systemd-private-*-colord.service-*", 3, |rng, ctx| systemd(rng, ctx, "colord.service");
    "systemd upower", "systemd-private-*-upower.service-*", 3, |rng, ctx| systemd(rng, ctx, "upower.service");
    "systemd ModemManager", "systemd-private-*-ModemManager.service-*", 3, |rng, ctx| systemd(rng, ctx, "ModemManager.service");
    "systemd power-profiles", "systemd-private-*-power-profiles-daemon.service-*", 3, |rng, ctx| systemd(rng, ctx, "power-profiles-daemon.service");
    "systemd getty", "systemd-private-*-getty@tty1.service-*", 3, |rng, ctx| systemd(rng, ctx, "getty@tty1.service");
    "systemd user@", "systemd-private-*-user@1000.service-*", 3, |rng, ctx| systemd(rng, ctx, "user@1000.service");
    "systemd bluetooth", "systemd-private-*-bluetooth.service-*", 3, |rng, ctx| systemd(rng, ctx, "bluetooth.service");
    // gcc make_temp_file
    "gcc .s", "cc*.s", 10, |rng, ctx| format!("cc{}.s", alnum(rng, 6));
    "gcc .o", "cc*.o", 10, |rng, ctx| format!("cc{}.o", alnum(rng, 6));
    "gcc .res", "cc*.res", 6, |rng, ctx| format!("cc{}.res", alnum(rng, 6));
    // Chromium / puppeteer
    "puppeteer", "puppeteer_dev_chrome_profile-*", 12, |rng, ctx| format!("puppeteer_dev_chrome_profile-{}", alnum(rng, 6));
    "chromium", ".org.chromium.Chromium.*", 12, |rng, ctx| format!(".org.chromium.Chromium.{}", alnum(rng, 6));
    "chrome", ".com.google.Chrome.*", 6, |rng, ctx| format!(".com.google.Chrome.{}", alnum(rng, 6));
    // node fs.mkdtemp(prefix), npm
    "node mkdtemp", "node-test-*", 12, |rng, ctx| format!("node-test-{}", alnum(rng, 6));
    "node mkdtemp no separator", "jest*", 8, |rng, ctx| format!("jest{}", alnum(rng, 6));
    "vitest", "vitest-*", 8, |rng, ctx| format!("vitest-{}", alnum(rng, 6));
    "npm", "npm-*-*", 8, |rng, ctx| format!("npm-{}-{}", pid(rng), hex(rng, 8));
    // R's tempdir(), ImageMagick, Java's File.createTempFile under Maven Surefire
    "R tempdir", "Rtmp*", 8, |rng, ctx| format!("Rtmp{}", alnum(rng, 6));
    "imagemagick", "magick-*", 12, |rng, ctx| format!("magick-{}", portable(rng, 32));
    "surefire", "surefire*tmp", 8, |rng, ctx| format!("surefire{}tmp", rng.u64(..));
    // Dates and times: a log per daemon start, a dump per night, Ruby's Dir::Tmpname
    "kotlin daemon log", "kotlin-daemon.*.log", 8, |rng, ctx| format!("kotlin-daemon.{}.{}-{}.log", date(rng, "-"), time(rng, "-"), rng.u32(..1000));
    "nightly dump", "db-dump-*.sql", 8, |rng, ctx| format!("db-dump-{}T{}Z.sql", date(rng, "_"), time(rng, ""));
    "ruby mktmpdir", "d*-*-*", 10, |rng, ctx| format!("d{}-{}-{}", date(rng, ""), pid(rng), base36(rng));
    "ruby tempfile", "upload*-*-*.png", 8, |rng, ctx| format!("upload{}-{}-{}.png", date(rng, ""), pid(rng), base36(rng));
    // ssh-agent, dbus
    "ssh-agent", "ssh-*", 6, |rng, ctx| { let n = 10 + 2 * rng.usize(0..2); format!("ssh-{}", alnum(rng, n)) };
    "dbus", "dbus-*", 4, |rng, ctx| format!("dbus-{}", alnum(rng, 10));
    // hand-rolled test helpers
    "helper worker", "app-worker-*", 20, |rng, ctx| format!("app-worker-{}", pid(rng));
    "helper server", "app-server-*", 20, |rng, ctx| format!("app-server-{}", pid(rng));
    "aura 235", "aura-235-*", 30, |rng, ctx| format!("aura-235-{}", pid(rng));
    "aura 17", "aura-17-*", 20, |rng, ctx| format!("aura-17-{}", pid(rng));
    "aura resolve", "aura-nodes-resolve-*", 20, |rng, ctx| format!("aura-nodes-resolve-{}", pid(rng));
    "aura exec", "aura-campaign-exec-*", 20, |rng, ctx| format!("aura-campaign-exec-{}", pid(rng));
    "helper e2e", "e2e-run-*-*", 12, |rng, ctx| format!("e2e-run-{}-{}", pid(rng), rng.u32(0..10));
    "dotnet diagnostics", "dotnet-diagnostic-*-*-socket", 4, |rng, ctx| format!("dotnet-diagnostic-{}-{}-socket", pid(rng), rng.u64(1_000_000..100_000_000_000));
    "helper pid+counter", "sk-run-*-*", 12, |rng, ctx| format!("sk-run-{}-{}", pid(rng), rng.u32(0..40));
    // launcher run dirs
    "launcher slug", "sandbox-tester-*", 20, |rng, ctx| format!(
        "sandbox-tester-{}-{}-{}",
        pick(rng, LAUNCHER_ADJECTIVES),
        pick(rng, LAUNCHER_NOUNS),
        hex(rng, 6)
    );
    "docker-style", "ci-*", 12, |rng, ctx| format!("ci-{}_{}", pick(rng, DOCKER_LEFT), pick(rng, DOCKER_RIGHT));
    "launcher time+pid", "launch-*-*", 10, |rng, ctx| format!("launch-{}-{}", 1_700_000_000 + rng.u32(..50_000_000), pid(rng));
    // fixed names
    "X11", ".X11-unix", 1, |rng, ctx| ".X11-unix".into();
    "ICE", ".ICE-unix", 1, |rng, ctx| ".ICE-unix".into();
    "font", ".font-unix", 1, |rng, ctx| ".font-unix".into();
    "XIM", ".XIM-unix", 1, |rng, ctx| ".XIM-unix".into();
    "Test", ".Test-unix", 1, |rng, ctx| ".Test-unix".into();
    "snap", "snap-private-tmp", 1, |rng, ctx| "snap-private-tmp".into();
    "pytest", "pytest-of-root", 1, |rng, ctx| "pytest-of-root".into();
    "hsperfdata", "hsperfdata_root", 1, |rng, ctx| "hsperfdata_root".into();
    "v8", "v8-compile-cache-0", 1, |rng, ctx| "v8-compile-cache-0".into();
    "mio", "mio_tests", 1, |rng, ctx| "mio_tests".into();
    "node cache", "node-compile-cache", 1, |rng, ctx| "node-compile-cache".into();
    "sandkeeper", "sandkeeper-0", 1, |rng, ctx| "sandkeeper-0".into();
];

/// One corpus: names with the expected pattern of each.
pub struct Corpus {
    pub names: Vec<String>,
    pub expected: Vec<&'static str>,
}

/// How the member counts and the neighbour mix are drawn.
#[derive(Clone, Copy)]
pub enum Mix {
    /// Every generator, each with 1 to its maximum members.
    All,
    /// A random subset of the generators, member counts skewed to few.
    Some,
    /// Every generator with exactly one member.
    Lone,
}

/// Draws a corpus from `seed`.
pub fn corpus(seed: u64, mix: Mix) -> Corpus {
    let mut rng = Rng::with_seed(seed);
    let boots = rng.usize(1..=3);
    let ctx = Ctx {
        boot_ids: (0..boots).map(|_| hex(&mut rng, 32)).collect(),
        counter: rng.u32(0..0x200),
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Corpus {
        names: Vec::new(),
        expected: Vec::new(),
    };
    for g in GENERATORS {
        let count = match mix {
            Mix::All => rng.usize(1..=g.max),
            Mix::Lone => 1,
            Mix::Some => {
                if rng.u8(0..3) == 0 {
                    continue;
                }
                let upto = rng.usize(1..=g.max);
                rng.usize(1..=upto)
            }
        };
        let mut made = 0;
        let mut tries = 0;
        while made < count && tries < count * 20 {
            tries += 1;
            let name = (g.make)(&mut rng, &ctx);
            if seen.insert(name.clone()) {
                out.names.push(name);
                out.expected.push(g.pattern);
                made += 1;
            }
        }
    }
    rng.shuffle_pairs(&mut out);
    out
}

trait ShufflePairs {
    fn shuffle_pairs(&mut self, c: &mut Corpus);
}

impl ShufflePairs for Rng {
    fn shuffle_pairs(&mut self, c: &mut Corpus) {
        for i in (1..c.names.len()).rev() {
            let j = self.usize(..=i);
            c.names.swap(i, j);
            c.expected.swap(i, j);
        }
    }
}
