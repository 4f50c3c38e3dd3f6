//! What a lease record claims, in words, kept apart from what was verified
//! (which is the library's to tell: [`Entry::lock_holders`],
//! [`Entry::check_record_pid`]). Renders show facts as facts, and claims
//! labelled as claims, with a plain word where the two disagree.

use crate::lease::LeaseRecord;
use crate::scan::Entry;

use crate::config::value::user_name;
use crate::escape::Untrusted;

/// How many characters of a claimed command a table shows.
pub const TABLE_FIELD: usize = 200;

/// A user for people: `nobody (uid 65534)`, or `uid 12345` when it has no
/// name.
pub fn user(uid: u32) -> String {
    let name = user_name(uid);
    if name == uid.to_string() {
        format!("uid {uid}")
    } else {
        format!("{} (uid {uid})", Untrusted::text(&name))
    }
}

/// A user's name alone, or `uid N`.
pub fn user_short(uid: u32) -> String {
    let name = user_name(uid);
    if name == uid.to_string() {
        format!("uid {uid}")
    } else {
        Untrusted::text(&name).to_string()
    }
}

/// `record claims uid 0 (root); the directory belongs to nobody` when the
/// record's uid is not the directory's owner.
pub fn uid_mismatch(e: &Entry, record: &LeaseRecord) -> Option<String> {
    if !e.record_uid_differs(record) {
        return None;
    }
    let claimed = match user_name(record.uid) {
        n if n == record.uid.to_string() => format!("uid {n}"),
        n => format!("uid {} ({})", record.uid, Untrusted::text(&n)),
    };
    Some(format!(
        "record claims {claimed}; the directory belongs to {}",
        user_short(e.uid)
    ))
}
