//! The protobuf schema that `docs/server.md` publishes (for clients in other languages) must
//! be the one the server speaks: every message of `crates/cairn-wire/src/lib.rs`, every field with its tag,
//! type and label, and nothing more. Also: JSON and protobuf round trips of a full message.

use std::collections::BTreeMap;

use cairn_server::wire;
use prost::Message as _;

/// message name -> field name -> (label, type, tag).
type Schema = BTreeMap<String, BTreeMap<String, (String, String, u32)>>;

/// The `.proto` block of `docs/server.md`.
fn documented() -> Schema {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/server.md"))
        .unwrap();
    let start = doc
        .find("```proto\n")
        .expect("docs/server.md has a ```proto block")
        + 9;
    let end = start + doc[start..].find("```").unwrap();
    let mut schema = Schema::new();
    let mut current: Option<String> = None;
    for line in doc[start..end].lines() {
        let line = line.split("//").next().unwrap().trim();
        if let Some(rest) = line.strip_prefix("message ") {
            let name = rest.trim_end_matches('{').trim().to_string();
            schema.insert(name.clone(), BTreeMap::new());
            current = Some(name);
        } else if line == "}" {
            current = None;
        } else if let (Some(m), Some(decl)) = (&current, line.strip_suffix(';')) {
            let (lhs, tag) = decl.split_once('=').unwrap();
            let words: Vec<&str> = lhs.split_whitespace().collect();
            let (label, ty, name) = match words[..] {
                [label, ty, name] => (label.to_string(), ty.to_string(), name),
                [ty, name] => (String::new(), ty.to_string(), name),
                _ => panic!("cannot read {line:?}"),
            };
            schema
                .get_mut(m)
                .unwrap()
                .insert(name.to_string(), (label, ty, tag.trim().parse().unwrap()));
        }
    }
    schema
}

/// The messages as `crates/cairn-wire/src/lib.rs` declares them (its `#[prost(...)]` attributes).
fn declared() -> Schema {
    let src = include_str!("../../cairn-wire/src/lib.rs");
    let mut schema = Schema::new();
    let mut rest = src;
    while let Some(at) = rest.find("pub struct ") {
        rest = &rest[at + 11..];
        let name = rest[..rest.find(' ').unwrap()].to_string();
        let body = &rest[..rest.find("\n}").unwrap()];
        let mut fields = BTreeMap::new();
        let mut pending: Option<&str> = None;
        for line in body.lines().map(str::trim) {
            if let Some(attr) = line.strip_prefix("#[prost(") {
                pending = Some(attr.trim_end_matches(")]"));
            } else if let (Some(attr), Some(decl)) = (pending, line.strip_prefix("pub ")) {
                let (field, ty) = decl.trim_end_matches(',').split_once(": ").unwrap();
                let parts: Vec<&str> = attr.split(',').map(str::trim).collect();
                let kind = parts[0].split(" =").next().unwrap();
                let tag: u32 = attr
                    .split("tag = \"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                let label = if parts.contains(&"repeated") {
                    "repeated"
                } else if parts.contains(&"optional") && kind != "message" {
                    "optional"
                } else {
                    ""
                };
                let proto_ty = if kind == "message" {
                    ty.trim_start_matches("Vec<")
                        .trim_start_matches("Option<")
                        .trim_end_matches('>')
                        .to_string()
                } else {
                    kind.to_string()
                };
                fields.insert(field.to_string(), (label.to_string(), proto_ty, tag));
                pending = None;
            }
        }
        if !fields.is_empty() {
            schema.insert(name, fields);
        }
    }
    schema
}

#[test]
fn the_documented_schema_is_the_one_served() {
    let (doc, src) = (documented(), declared());
    assert!(src.len() >= 25, "read {} messages from wire.rs", src.len());
    for (name, fields) in &src {
        assert_eq!(
            doc.get(name),
            Some(fields),
            "message {name}: docs/server.md and crates/cairn-wire/src/lib.rs differ"
        );
    }
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        src.keys().collect::<Vec<_>>(),
        "docs/server.md documents messages wire.rs does not have"
    );
}

#[test]
fn messages_round_trip_in_both_encodings() {
    let req = wire::TransactRequest {
        expects: vec![wire::TableExpects {
            table: "checking".into(),
            expects: vec![
                wire::Expect {
                    key: b"alice".to_vec(),
                    value: Some(b"50".to_vec()),
                },
                wire::Expect {
                    key: b"bob".to_vec(),
                    value: None,
                },
            ],
        }],
        tables: vec![wire::TableWrites {
            table: "savings".into(),
            writes: vec![
                wire::Write {
                    key: b"alice".to_vec(),
                    value: Some(Vec::new()),
                },
                wire::Write {
                    key: b"carol".to_vec(),
                    value: None,
                },
            ],
        }],
        meta: vec![1, 2, 3],
        prove: true,
    };
    let bytes = req.encode_to_vec();
    assert_eq!(wire::TransactRequest::decode(&bytes[..]).unwrap(), req);
    let json = serde_json::to_string(&req).unwrap();
    assert!(json.contains(r#""value":null"#), "{json}");
    assert!(json.contains(r#""key":"616c696365""#), "{json}");
    assert_eq!(
        serde_json::from_str::<wire::TransactRequest>(&json).unwrap(),
        req
    );
    // An empty value and an absent one stay apart in both encodings.
    let empty = wire::Value {
        value: Some(Vec::new()),
    };
    let absent = wire::Value { value: None };
    assert_ne!(empty.encode_to_vec(), absent.encode_to_vec());
    assert_eq!(serde_json::to_string(&empty).unwrap(), r#""""#);
    assert_eq!(serde_json::to_string(&absent).unwrap(), "null");
}
