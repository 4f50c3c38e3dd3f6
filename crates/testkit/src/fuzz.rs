//! Strategies for property tests over hostile input (proptest): what a
//! forger writes into a lease record.

use proptest::prelude::*;
use serde_json::{json, Value};

/// JSON numbers at and around the edges every field type has.
pub fn edge_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(1)),
        Just(json!(-1)),
        Just(json!(u32::MAX)),
        Just(json!(u64::from(u32::MAX) + 1)),
        Just(json!(i64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(u64::MAX)),
        Just(json!(1u64 << 63)),
        Just(json!(1.5e308)),
        Just(json!(-0.0)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
    ]
}

/// Any JSON value, biased towards what a forger would try.
pub fn hostile_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        edge_number(),
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        ".{0,64}".prop_map(Value::String),
        Just(json!("\u{1b}]0;pwned\u{7}\u{1b}[2J\u{202e}")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The fields of a lease record (protocol v1): the codec's own list.
pub use sandkeeper_engine::lease::RECORD_FIELDS as FIELDS;

/// A record-shaped object: each known field present or not, with a value
/// of the right type or any other; now and then a field nobody knows.
pub fn record_shaped() -> impl Strategy<Value = Vec<u8>> {
    let field = |name: &'static str| {
        let right_type: BoxedStrategy<Value> = match name {
            "boot_id" | "host" | "tag" | "site" | "checkout" => {
                ".{0,40}".prop_map(Value::String).boxed()
            }
            "cmd" => prop::collection::vec(".{0,20}".prop_map(Value::String), 0..4)
                .prop_map(Value::Array)
                .boxed(),
            _ => edge_number().boxed(),
        };
        prop_oneof![
            3 => right_type.prop_map(Some),
            1 => hostile_value().prop_map(Some),
            1 => Just(None),
        ]
        .prop_map(move |v| v.map(|v| (name.to_owned(), v)))
    };
    let fields: Vec<_> = FIELDS.iter().map(|&name| field(name)).collect();
    (fields, prop::option::of(hostile_value())).prop_map(|(fields, extra)| {
        let mut object: serde_json::Map<String, Value> = fields.into_iter().flatten().collect();
        if let Some(extra) = extra {
            object.insert("future_field".into(), extra);
        }
        serde_json::to_vec(&Value::Object(object)).unwrap()
    })
}
