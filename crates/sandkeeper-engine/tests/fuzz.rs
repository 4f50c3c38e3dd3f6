//! Property tests over hostile input ("fuzzing" on the stable toolchain):
//! lease records are written by whoever made a directory, so the parser,
//! and the scan and reap decisions that use record fields, must take any
//! bytes without a panic (debug builds check every arithmetic overflow).
//!
//! `PROPTEST_CASES` sets how many cases each property runs (default 256);
//! `.ci/run` runs the parser properties once more with many more cases,
//! well under a minute. See `docs/security.md`, "Fuzzing".

use std::fs;
use std::time::Duration;

use proptest::prelude::*;
use sandkeeper_engine::lease::LeaseRecord;
use sandkeeper_engine::reap::{Policy, Reaper};
use sandkeeper_engine::scan::Scanner;
use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::fuzz::record_shaped;

proptest! {
    #[test]
    fn fuzz_record_parser_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(record) = LeaseRecord::parse(&bytes) {
            let again = LeaseRecord::parse(record.to_line().as_bytes()).unwrap();
            prop_assert_eq!(again, record);
        }
    }

    #[test]
    fn fuzz_record_parser_takes_any_record_shaped_json(bytes in record_shaped()) {
        if let Ok(record) = LeaseRecord::parse(&bytes) {
            // Whatever it claims, asking about it never panics.
            let _ = record.is_kept_at(u64::MAX);
            let _ = record.is_kept_at(0);
            let _ = record.owner_status();
            let again = LeaseRecord::parse(record.to_line().as_bytes()).unwrap();
            prop_assert_eq!(again, record);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // A scan and reaps per case: a fifth of the cases the others run.
        cases: (ProptestConfig::default().cases / 5).max(1),
        ..ProptestConfig::default()
    })]

    /// Forged records, and mtimes anywhere from before 1970 to the far
    /// future, through a whole scan and the reap decisions (dry run).
    #[test]
    fn fuzz_forged_records_through_scan_and_reap(
        records in prop::collection::vec(record_shaped(), 1..6),
        mtimes in prop::collection::vec(any::<i32>(), 1..6),
    ) {
        let root = Sandbox::new().unwrap();
        for (i, record) in records.iter().enumerate() {
            let dir = root.path().join(format!("app-{i}"));
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join(".sandkeeper-lease"), record).unwrap();
            let secs = i64::from(mtimes[i % mtimes.len()]) * 1000;
            let when = if secs >= 0 {
                std::time::UNIX_EPOCH + Duration::from_secs(secs as u64)
            } else {
                std::time::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
            };
            let times = fs::FileTimes::new().set_modified(when).set_accessed(when);
            fs::File::open(&dir).unwrap().set_times(times).unwrap();
        }
        let report = Scanner::new().scan(&[root.path()]).unwrap();
        prop_assert_eq!(report.roots[0].entries.len(), records.len() + 1);
        for pressure in [false, true] {
            let mut b = Policy::builder();
            b.matching("app-*")
                .older_than(Duration::from_secs(1))
                .keep_last(1)
                .under_pressure(pressure)
                .dry_run(true);
            let reaper = Reaper::new(b.build().unwrap());
            for now in [0, i64::MAX, i64::MIN, report.started_ms] {
                let verdicts = reaper.decide(&report.roots[0], now);
                prop_assert_eq!(verdicts.len(), report.roots[0].entries.len());
            }
            reaper.reap(&[root.path()]).unwrap();
        }
    }
}
