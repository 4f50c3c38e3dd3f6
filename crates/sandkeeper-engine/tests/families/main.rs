//! Name families measured on names made the way real programs make them
//! (issue 13): a table of fixed examples with their exact patterns, and a
//! corpus whose random parts, member counts and neighbour mix are re-drawn
//! from many seeds, where at least 98 % of the names must land in the right
//! family every time.
//!
//! "Right" for a name: its family's pattern is the one written down for its
//! generator, and that family holds no name of another generator. (Since
//! families with equal patterns are merged, every name of the generator
//! that got the pattern is in that one family; a name split off is wrong.)
//!
//! `bench/families/run.sh` runs the ignored `report` test in release: the
//! share right over many seeds and the median time for 50,000 names.

mod corpus;
mod golden;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use corpus::{corpus, Corpus, Mix, GENERATORS};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use sandkeeper_engine::pattern::group;

/// The share of names in the right family, and the wrong ones as
/// (expected pattern, what its names got).
struct Score {
    right: usize,
    total: usize,
    wrong: BTreeMap<&'static str, Vec<String>>,
}

impl Score {
    fn share(&self) -> f64 {
        if self.total == 0 {
            return 1.0;
        }
        self.right as f64 / self.total as f64
    }
}

fn score(c: &Corpus) -> Score {
    let families = group(&c.names);
    let mut got = vec![usize::MAX; c.names.len()];
    for (f, family) in families.iter().enumerate() {
        for &m in &family.members {
            assert!(
                family.matches(c.names[m].as_ref()),
                "{:?} does not match its family {:?}",
                c.names[m],
                family.pattern
            );
            assert_eq!(got[m], usize::MAX, "{:?} is in two families", c.names[m]);
            got[m] = f;
        }
    }
    assert!(got.iter().all(|&f| f != usize::MAX), "a name has no family");
    let mut by_expected: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in c.expected.iter().enumerate() {
        by_expected.entry(e).or_default().push(i);
    }
    let mut score = Score {
        right: 0,
        total: c.names.len(),
        wrong: BTreeMap::new(),
    };
    // Whether a family holds names of other generators.
    let mixed: Vec<bool> = families
        .iter()
        .map(|f| {
            f.members
                .iter()
                .any(|&m| c.expected[m] != c.expected[f.members[0]])
        })
        .collect();
    for (i, &expected) in c.expected.iter().enumerate() {
        let family = &families[got[i]];
        if family.pattern == expected && !mixed[got[i]] {
            score.right += 1;
        } else {
            let seen = format!(
                "{} ({} of {}: {})",
                family.pattern,
                family.members.len(),
                by_expected[expected].len(),
                c.names[i]
            );
            let list = score.wrong.entry(expected).or_default();
            if !list
                .iter()
                .any(|l| l.starts_with(&format!("{} (", family.pattern)))
            {
                list.push(seen);
            }
        }
    }
    score
}

const MIN_SHARE: f64 = 0.98;

fn check(seed: u64, mix: Mix) -> Result<f64, String> {
    let c = corpus(seed, mix);
    let s = score(&c);
    if s.share() >= MIN_SHARE {
        Ok(s.share())
    } else {
        Err(format!(
            "seed {seed}: {:.1} % right ({} of {}); wrong: {:#?}",
            s.share() * 100.0,
            s.right,
            s.total,
            s.wrong
        ))
    }
}

/// Fixed examples, one per generator shape, with exact patterns.
#[test]
fn table() {
    let rows: &[(&str, &[&str], &str)] = &[
        (
            "python mkdtemp",
            &["tmpk2_x9aab", "tmpq0w_e1rt", "tmpqwertyui", "tmp_abc_de_"],
            "tmp*",
        ),
        (
            "python lone with suffix",
            &["tmpwzi4k9q___tempfs__"],
            "tmp*__tempfs__",
        ),
        (
            "pip",
            &["pip-install-3vn_t1zq", "pip-install-abcdefgh"],
            "pip-install-*",
        ),
        ("pip lone", &["pip-build-env-_x_y_z_w"], "pip-build-env-*"),
        ("rust tempfile", &[".tmpAbC12x", ".tmpabcdef"], ".tmp*"),
        ("rustc", &["rustcAb12Cd", "rustc123456"], "rustc*"),
        (
            "rust_out counter",
            &[
                "rust_out.0000",
                "rust_out.0009",
                "rust_out.000a",
                "rust_out.001d",
            ],
            "rust_out.*",
        ),
        ("rust_out lone", &["rust_out.001d"], "rust_out.*"),
        ("mktemp", &["tmp.AbCdEf1234", "tmp.abcdefghij"], "tmp.*"),
        (
            "go test",
            &["TestServerShutdown3311417221", "TestServerShutdown42"],
            "TestServerShutdown*",
        ),
        (
            "systemd",
            &[
                "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-chronyd.service-8Xk2Lm",
                "systemd-private-0b4c3c9e7d0a4f8e9c1d2b3a4f5e6d7c-chronyd.service-qwerty",
            ],
            "systemd-private-*-chronyd.service-*",
        ),
        ("gcc", &["ccKarzSK.o", "ccabcdef.o"], "cc*.o"),
        (
            "puppeteer",
            &["puppeteer_dev_chrome_profile-abcdef"],
            "puppeteer_dev_chrome_profile-*",
        ),
        (
            "chromium",
            &[".org.chromium.Chromium.xYz123"],
            ".org.chromium.Chromium.*",
        ),
        (
            "ssh-agent",
            &["ssh-AbCdEfGhIjKl", "ssh-qwertyuiop"],
            "ssh-*",
        ),
        ("R tempdir", &["RtmpAb12Cd", "Rtmpqwerty"], "Rtmp*"),
        (
            "kotlin daemon log",
            &[
                "kotlin-daemon.2024-12-05.07-02-19-310.log",
                "kotlin-daemon.2025-01-31.23-59-59-7.log",
            ],
            "kotlin-daemon.*.log",
        ),
        (
            "ruby mktmpdir",
            &["d20241205-4242-1xk9qz", "d20250101-31337-5jevmgc"],
            "d*-*-*",
        ),
        (
            "imagemagick",
            &[
                "magick-Ab_-c9XyZ0123456789abcdefghijk_-",
                "magick-bears_and-wolves_run_fast-xyzabc",
            ],
            "magick-*",
        ),
        (
            "surefire",
            &["surefire7136409574466290286tmp", "surefire42tmp"],
            "surefire*tmp",
        ),
        (
            "npm",
            &["npm-12345-0c5e1e3d", "npm-888-12345678"],
            "npm-*-*",
        ),
        ("helper", &["aura-235-4242"], "aura-235-*"),
        (
            "helper words",
            &["aura-campaign-exec-4101"],
            "aura-campaign-exec-*",
        ),
        (
            "launcher slug lone",
            &["sandbox-tester-brave-otter-3fa9c1"],
            "sandbox-tester-*",
        ),
        (
            "docker-style",
            &["ci-focused_turing", "ci-eager_hopper"],
            "ci-*",
        ),
        ("fixed", &[".X11-unix"], ".X11-unix"),
        ("fixed", &["mio_tests"], "mio_tests"),
    ];
    for (what, names, want) in rows {
        let families = group(names);
        let patterns: Vec<&str> = families.iter().map(|f| f.pattern.as_str()).collect();
        assert_eq!(patterns, [*want], "{what}: {names:?}");
    }
}

/// Neighbours do not change a family: each row's names alone and beside
/// the others get the same patterns.
#[test]
fn neighbours_do_not_change_patterns() {
    let sets: &[&[&str]] = &[
        &["mio_tests"],
        &["tmpq_x9k2m", "tmpab_c1x9z"],
        &["aura-nodes-resolve-4100", "aura-nodes-resolve-4177"],
        &["aura-campaign-exec-5100", "aura-campaign-exec-5111"],
        &[".X11-unix"],
        &[".ICE-unix"],
        &["rust_out.0000", "rust_out.001d"],
    ];
    let alone: Vec<Vec<String>> = sets
        .iter()
        .map(|s| group(s).into_iter().map(|f| f.pattern).collect())
        .collect();
    let all: Vec<&str> = sets.iter().flat_map(|s| s.iter().copied()).collect();
    let together = group(&all);
    for (set, patterns) in sets.iter().zip(&alone) {
        for name in *set {
            let f = together
                .iter()
                .find(|f| f.members.iter().any(|&m| all[m] == *name))
                .unwrap();
            assert!(
                patterns.contains(&f.pattern),
                "{name}: alone {patterns:?}, together {}",
                f.pattern
            );
        }
    }
}

/// Every generator present with 1 to its maximum members.
#[test]
fn full_corpus_over_seeds() {
    for seed in 0..40 {
        check(seed, Mix::All).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Every generator with one member: lone names keep only what is literal.
/// A lone slug whose words no list knows stays split (a known limit), so
/// one corpus of ~64 names may lose two names; over all seeds the share is
/// at least 98 %.
#[test]
fn lone_names_over_seeds() {
    let (mut right, mut total) = (0, 0);
    for seed in 100..160 {
        let s = score(&corpus(seed, Mix::Lone));
        assert!(
            s.share() >= 0.95,
            "seed {seed}: {:.1} %: {:#?}",
            s.share() * 100.0,
            s.wrong
        );
        right += s.right;
        total += s.total;
    }
    let share = right as f64 / total as f64;
    assert!(share >= MIN_SHARE, "{:.2} % right", share * 100.0);
}

/// Random parts, member counts and the neighbour mix re-drawn: the share
/// stays at or above 98 %, and the patterns stay the hand-written ones
/// (that is what "right" checks). Deterministic: the runner's RNG is seeded.
#[test]
fn redrawn_corpora_stay_right() {
    let config = Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = (proptest::num::u64::ANY, 0u8..2);
    runner
        .run(&strategy, |(seed, mix)| {
            let mix = if mix == 0 { Mix::All } else { Mix::Some };
            check(seed, mix)
                .map(|_| ())
                .map_err(proptest::test_runner::TestCaseError::fail)
        })
        .unwrap();
}

/// The grouping does not depend on the order of the names.
#[test]
fn order_does_not_matter() {
    let c = corpus(7, Mix::All);
    let mut reversed: Vec<String> = c.names.clone();
    reversed.reverse();
    let patterns = |names: &[String]| {
        let mut v: Vec<(String, Vec<String>)> = group(names)
            .into_iter()
            .map(|f| {
                let mut m: Vec<String> = f.members.iter().map(|&i| names[i].clone()).collect();
                m.sort();
                (f.pattern, m)
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(patterns(&c.names), patterns(&reversed));
}

/// 50,000 names from the generators, grouped in bounded time (the bound
/// only catches quadratic behaviour in a debug build; the release timing
/// is `bench/families/run.sh`).
#[test]
fn fifty_thousand_names() {
    let names = fifty_thousand(1);
    let start = Instant::now();
    let families = group(&names);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "took {:?}",
        start.elapsed()
    );
    assert!(families.len() < 200, "{} families", families.len());
}

/// 50,000 names: corpora of every generator, drawn until there are enough.
fn fifty_thousand(seed: u64) -> Vec<String> {
    let mut names = Vec::with_capacity(50_000);
    let mut seen = std::collections::HashSet::new();
    let mut s = seed;
    while names.len() < 50_000 {
        for name in corpus(s, Mix::All).names {
            if names.len() < 50_000 && seen.insert(name.clone()) {
                names.push(name);
            }
        }
        s += 1;
    }
    names
}

/// The benchmark's report (`bench/families/run.sh`): the share right over
/// many seeds and mixes, the families ever wrong, and the median time for
/// 50,000 names.
#[test]
#[ignore = "a benchmark: run by bench/families/run.sh in release"]
fn report() {
    let seeds: u64 = std::env::var("FAMILIES_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut right = 0;
    let mut total = 0;
    let mut worst = 1.0f64;
    let mut wrong: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in 0..seeds {
        for mix in [Mix::All, Mix::Some, Mix::Lone] {
            let s = score(&corpus(seed, mix));
            right += s.right;
            total += s.total;
            worst = worst.min(s.share());
            for e in s.wrong.keys() {
                *wrong.entry(e).or_default() += 1;
            }
        }
    }
    println!(
        "corpus: {} generators, {} seeds x 3 mixes, {total} names",
        GENERATORS.len(),
        seeds
    );
    println!(
        "share right: {:.2} % overall, worst corpus {:.2} %",
        right as f64 * 100.0 / total as f64,
        worst * 100.0
    );
    println!("generators ever wrong, in how many of the corpora:");
    for (pattern, count) in &wrong {
        let what = GENERATORS
            .iter()
            .find(|g| g.pattern == *pattern)
            .map_or("?", |g| g.what);
        println!("  {what:<28} {pattern:<40} {count}");
    }
    let names = fifty_thousand(1);
    let mut times: Vec<Duration> = (0..11)
        .map(|_| {
            let start = Instant::now();
            let families = group(&names);
            let took = start.elapsed();
            assert!(!families.is_empty());
            took
        })
        .collect();
    times.sort();
    println!(
        "50000 names: median {:.1} ms (min {:.1}, max {:.1}) over {} runs",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        times.len()
    );
}

/// The names that come out wrong over 100 seeds and every mix, a few per
/// generator: `cargo test --release -p sandkeeper --test families
/// wrong_names -- --ignored --nocapture`.
#[test]
#[ignore = "a report for tuning, not a check"]
fn wrong_names() {
    let mut wrong: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for seed in 0..100 {
        for mix in [Mix::All, Mix::Some, Mix::Lone] {
            for (k, v) in score(&corpus(seed, mix)).wrong {
                wrong.entry(k).or_default().extend(v);
            }
        }
    }
    for (k, v) in wrong {
        println!("{k}: {:?}", &v[..v.len().min(6)]);
    }
}

/// Only the time for 50,000 names (`FAMILIES_RUNS`, default 31): for
/// comparing two builds run one after the other.
#[test]
#[ignore = "a benchmark: run by bench/families/run.sh in release"]
fn speed() {
    let runs: usize = std::env::var("FAMILIES_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(31);
    let names = fifty_thousand(1);
    let mut times: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            let families = group(&names);
            let took = start.elapsed();
            assert!(!families.is_empty());
            took
        })
        .collect();
    times.sort();
    println!(
        "50000 names: median {:.1} ms (min {:.1}) over {} runs",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times.len()
    );
}

/// Peak memory of grouping 1,000,000 short names (`f0000001`… and Python
/// `tmp` + 8): run under `/usr/bin/time -v` with `FAMILIES_GROUP=0` (the
/// input alone) and `=1`; the difference in maximum resident size over
/// 1,000,000 is what `group` needs per name (`bench/families/run.sh`).
#[test]
#[ignore = "a benchmark: run by bench/families/run.sh in release"]
fn million_names_memory() {
    const PYTHON: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_";
    let mut rng = fastrand::Rng::with_seed(14);
    let names: Vec<String> = (0..1_000_000u32)
        .map(|i| match i % 2 {
            0 => format!("f{i:07}"),
            _ => {
                let random: String = (0..8)
                    .map(|_| PYTHON[rng.usize(..PYTHON.len())] as char)
                    .collect();
                format!("tmp{random}")
            }
        })
        .collect();
    if std::env::var("FAMILIES_GROUP").as_deref() != Ok("0") {
        let start = Instant::now();
        let families = group(&names);
        println!(
            "1000000 names: {} families in {:.0} ms",
            families.len(),
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    println!("{} names", names.len());
}
