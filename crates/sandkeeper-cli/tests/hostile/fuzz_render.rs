//! Forged records through every renderer that prints record fields
//! (issue "Hostile /tmp, part 2", item 6): `ls`, `explain`, `scan
//! --entries` (text and JSON) and `reap --dry-run --verbose` take any record
//! a forger can write — numbers at every edge, any type in any field —
//! without a panic (the binary under test is a debug build: every overflow
//! is checked) and without a control character on the terminal.

use std::fs;

use crate::sandkeeper;
use proptest::prelude::*;
use sandkeeper_engine::Sandbox;
use sandkeeper_testkit::fuzz::record_shaped;

proptest! {
    #![proptest_config(ProptestConfig {
        // Six runs of the binary per case: a tenth of the usual cases.
        cases: (ProptestConfig::default().cases / 10).max(1),
        ..ProptestConfig::default()
    })]

    #[test]
    fn fuzz_forged_records_through_the_renderers(
        records in prop::collection::vec(record_shaped(), 1..5),
    ) {
        let root = Sandbox::new().unwrap();
        let r = root.path().to_str().unwrap().to_owned();
        for (i, record) in records.iter().enumerate() {
            let dir = root.path().join(format!("app-{i}"));
            fs::create_dir(&dir).unwrap();
            fs::write(dir.join(".sandkeeper-lease"), record).unwrap();
        }
        let first = format!("{r}/app-0");
        let runs: [&[&str]; 6] = [
            &["ls", &r],
            &["ls", "--json", &r],
            &["scan", "--entries", "--verbose", &r],
            &["scan", "--json", "--entries", &r],
            &["explain", "--match", "app-*", &first, "--root", &r],
            &["reap", "--dry-run", "--verbose", "--match", "*", "--older-than", "0s", "--grace", "0s", &r],
        ];
        for args in runs {
            let out = sandkeeper(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            prop_assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "{args:?}: {:?}\n{stderr}",
                out.status
            );
            prop_assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            for stream in [&out.stdout, &out.stderr] {
                let bad = stream.iter().find(|&&b| b < 0x20 && b != b'\n' || b == 0x7f);
                prop_assert!(bad.is_none(), "{args:?}: control byte {bad:?}");
            }
        }
    }
}
