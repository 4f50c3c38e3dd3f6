//! Every key of the config file, its default and what it does: the one
//! list that `sandkeeper.toml(5)` is rendered from (`sandkeeper man`), and
//! that the tests hold against the parser (each section's accepted keys,
//! read from its own "unknown field" error) and `docs/config.md`.

/// One key of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The table it is in: `""` (top level), `"[[root]]"` or `"[[root.rule]]"`.
    pub section: &'static str,
    /// Its name (`grace`); a sub-table's header (`[[root]]`) for the tables.
    pub name: &'static str,
    /// Its default as written in the file, or `required`, or `none`.
    pub default: &'static str,
    /// What it does, in a paragraph.
    pub text: &'static str,
}

/// The three tables, in the order the page lists them.
pub const SECTIONS: [&str; 3] = ["", "[[root]]", "[[root.rule]]"];

/// Every key, table by table.
///
/// ```
/// use sandkeeper_engine::config::reference::KEYS;
///
/// let grace = KEYS.iter().find(|k| k.name == "grace").unwrap();
/// assert_eq!((grace.section, grace.default), ("[[root]]", "\"60s\""));
/// ```
pub const KEYS: &[Key] = &[
    Key {
        section: "",
        name: "interval",
        default: "\"5m\"",
        text: "Time between two full cycles of watch: a scan and a reap of every root. More than zero.",
    },
    Key {
        section: "",
        name: "poll",
        default: "\"5s\"",
        text: "Time between two watermark polls (one statvfs per root with watermarks). More than zero.",
    },
    Key {
        section: "",
        name: "assume_unseen_free",
        default: "false",
        text: "true assumes that every process sandkeeper cannot inspect (as a normal user: root's and \
               other users') holds nothing under the roots; regular files the caller owns are still \
               asked with a write lease. The same as --assume-unseen-free or \
               SANDKEEPER_ASSUME_UNSEEN_FREE=1; every output reports it.",
    },
    Key {
        section: "",
        name: "origin_store",
        default: "/var/lib/sandkeeper/origins",
        text: "Where watch keeps the origins of tracked roots whose filesystem has no trusted.* \
               attributes: absolute, without \"..\"; made 0700, root's, when missing, and refused \
               when it is a symlink, not root's, or open to others.",
    },
    Key {
        section: "",
        name: "trust_pid_namespace",
        default: "false",
        text: "true trusts that every process that can reach the roots is in the pid namespace \
               sandkeeper runs in. Without it, running in a child pid namespace makes every entry \
               unknown. The same as --trust-pid-namespace or SANDKEEPER_TRUST_PID_NAMESPACE=1.",
    },
    Key {
        section: "",
        name: "ignore_pids",
        default: "[]",
        text: "Processes that cannot be inspected but are vouched for: assumed to use nothing \
               under the roots, as with --ignore-pid (whose pids are added to these). A list of \
               numbers from 1 up.",
    },
    Key {
        section: "",
        name: "[[root]]",
        default: "required",
        text: "One or more roots: the directories whose top-level entries are reaped.",
    },
    Key {
        section: "[[root]]",
        name: "path",
        default: "required",
        text: "The root: absolute, not / (nor a symlink to it), not itself a symlink, no \"..\"; no \
               two roots may be the same or one inside the other.",
    },
    Key {
        section: "[[root]]",
        name: "grace",
        default: "\"60s\"",
        text: "Nothing whose newest change inside is younger than this is removed, under pressure \
               too. A proven orphan (its lease record present, its lock free) needs no grace.",
    },
    Key {
        section: "[[root]]",
        name: "orphan_age",
        default: "none",
        text: "Orphaned sandboxes are removed only once older than this; relaxed under pressure. \
               Without it they go once past the grace.",
    },
    Key {
        section: "[[root]]",
        name: "max_keep",
        default: "\"7d\"",
        text: "A sandbox kept on purpose (SANDKEEPER_KEEP, its lease's keep_until_ms) is honoured \
               for at most this long after its newest change. Above the high watermark, kept \
               sandboxes are taken last.",
    },
    Key {
        section: "[[root]]",
        name: "user_dirs",
        default: "true",
        text: "Also reap the per-user sandbox directories sandkeeper-<uid> directly inside the root, \
               with the same rules, after the root itself.",
    },
    Key {
        section: "[[root]]",
        name: "user_dir_families",
        default: "false",
        text: "Label the name families of the per-user directories in the metrics; by default they \
               appear only as totals (the metrics file is world-readable).",
    },
    Key {
        section: "[[root]]",
        name: "track_origins",
        default: "false",
        text: "watch records the creator of each new top-level entry (fanotify; needs root); scan, \
               explain and ls show it. Origins never change what is reaped.",
    },
    Key {
        section: "[[root]]",
        name: "high_watermark",
        default: "none",
        text: "Above this level a reap under pressure starts: \"90%\" used, or \"2GiB free\". Needs \
               low_watermark.",
    },
    Key {
        section: "[[root]]",
        name: "low_watermark",
        default: "none",
        text: "A reap under pressure goes on until the filesystem is at or below this level, \
               re-measured after each removal. Must be below the high watermark.",
    },
    Key {
        section: "[[root]]",
        name: "high_watermark_inodes",
        default: "none",
        text: "The same by inodes: \"95%\" of the inodes used, or \"5000 free\". Needs \
               low_watermark_inodes.",
    },
    Key {
        section: "[[root]]",
        name: "low_watermark_inodes",
        default: "none",
        text: "A reap under pressure by inodes goes on until at least this many inodes are free. \
               Must be below high_watermark_inodes.",
    },
    Key {
        section: "[[root]]",
        name: "[[root.rule]]",
        default: "none",
        text: "Unmanaged families this root may reap. Without a rule, only orphaned sandboxes go.",
    },
    Key {
        section: "[[root.rule]]",
        name: "match",
        default: "required",
        text: "A glob on the entry's name: *, ?, [...], {a,b}.",
    },
    Key {
        section: "[[root.rule]]",
        name: "older_than",
        default: "none",
        text: "Only entries whose newest change inside is older than this. Relaxed under pressure.",
    },
    Key {
        section: "[[root.rule]]",
        name: "keep_last",
        default: "none",
        text: "Keep the N newest entries of each name family. Relaxed under pressure.",
    },
    Key {
        section: "[[root.rule]]",
        name: "owner",
        default: "any",
        text: "Only entries owned by this user: a name (\"ci\") or a uid (1000). Never relaxed.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::path::Path;

    /// The keys a section accepts, from the parser's own "unknown field"
    /// error for it (serde lists every field it expects).
    fn accepted(section: &str) -> BTreeSet<String> {
        let text = match section {
            "" => "no_such_key = 1\n".to_owned(),
            "[[root]]" => "[[root]]\npath = \"/tmp\"\nno_such_key = 1\n".to_owned(),
            _ => "[[root]]\npath = \"/tmp\"\n[[root.rule]]\nmatch = \"a*\"\nno_such_key = 1\n"
                .to_owned(),
        };
        let err = super::super::parse(&text, Path::new("t.toml")).unwrap_err();
        let message = err.to_string();
        let (_, list) = message
            .split_once("expected one of ")
            .unwrap_or_else(|| panic!("{section}: {message}"));
        list.split(", ")
            .map(|k| k.trim().trim_matches('`').to_owned())
            .collect()
    }

    /// What the list says a section holds, sub-tables by their key.
    fn listed(section: &str) -> BTreeSet<String> {
        KEYS.iter()
            .filter(|k| k.section == section)
            .map(|k| match k.name {
                "[[root]]" => "root".to_owned(),
                "[[root.rule]]" => "rule".to_owned(),
                name => name.to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_list_is_what_the_parser_accepts() {
        for section in SECTIONS {
            assert_eq!(listed(section), accepted(section), "section {section:?}");
        }
    }

    #[test]
    fn the_list_is_what_docs_config_md_lists() {
        let docs = include_str!("../../../../docs/config.md");
        let mut in_docs = BTreeSet::new();
        let mut section = None;
        for line in docs.lines() {
            match line {
                "### Top level" => section = Some(""),
                "### `[[root]]`" => section = Some("[[root]]"),
                "### `[[root.rule]]`" => section = Some("[[root.rule]]"),
                l if l.starts_with("## ") => section = None,
                l => {
                    if let (Some(s), Some(rest)) = (section, l.strip_prefix("| `")) {
                        let name = rest.split('`').next().unwrap_or_default();
                        in_docs.insert((s, name.to_owned()));
                    }
                }
            }
        }
        let listed: BTreeSet<_> = KEYS
            .iter()
            .map(|k| (k.section, k.name.to_owned()))
            .collect();
        assert_eq!(listed, in_docs);
    }
}
