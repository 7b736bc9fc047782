//! Every request decoder of `cairn-server` (issue 47): the input's first byte picks a request
//! message and an encoding (JSON or protobuf), the rest is the body, decoded as the server
//! decodes it (`Format::decode`). Decoding must give a message or a typed error, never panic;
//! a message that decodes must survive a round trip through both encodings unchanged. The
//! whole input also goes, as text, to the configuration parser and its check, and, as a
//! token, to the grants' lookup.
//!
//! With `CAIRN_FUZZ_SEEDS=<dir>`, the first run writes one valid encoding of each request in
//! each format into `<dir>`. With `CAIRN_FUZZ_REQUEST=<0..5>`, every input goes to that one
//! request's decoders (in `decode`'s order), so each decoder can be given a run of its own.
#![no_main]

use cairn_server::codec::Format;
use cairn_server::wire;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use serde::{de::DeserializeOwned, Serialize};

fn round_trip<T>(format: Format, body: &[u8])
where
    T: Message + Default + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let Ok(message) = format.decode::<T>(body) else {
        return;
    };
    let proto = Format::Protobuf.encode(&message);
    let again: T = Format::Protobuf
        .decode(&proto)
        .expect("a message's protobuf decodes");
    assert_eq!(again, message, "protobuf round trip");
    let json = Format::Json.encode(&message);
    let again: T = Format::Json
        .decode(&json)
        .expect("a message's JSON decodes");
    assert_eq!(again, message, "JSON round trip");
}

/// The requests the server decodes, in the order the first byte picks them.
const REQUESTS: usize = 6;

fn decode(kind: usize, format: Format, body: &[u8]) {
    match kind {
        0 => round_trip::<wire::GetRequest>(format, body),
        1 => round_trip::<wire::PutRequest>(format, body),
        2 => round_trip::<wire::TransactRequest>(format, body),
        3 => round_trip::<wire::VerifyRequest>(format, body),
        4 => round_trip::<wire::VerifyReceiptRequest>(format, body),
        _ => round_trip::<wire::RangeRequest>(format, body),
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let keys = wire::TableKeys {
        table: "checking".into(),
        keys: vec![b"alice".to_vec(), Vec::new()],
    };
    let writes = wire::TableWrites {
        table: "savings".into(),
        writes: vec![
            wire::Write {
                key: b"a".to_vec(),
                value: Some(b"1".to_vec()),
            },
            wire::Write {
                key: b"b".to_vec(),
                value: None,
            },
        ],
    };
    let digest = wire::Digest {
        size: 3,
        root: vec![7; 32],
    };
    let bodies: Vec<(usize, Vec<u8>, Vec<u8>)> = vec![
        {
            let m = wire::GetRequest {
                tables: vec![keys.clone()],
                version: 2,
                promise: true,
                lift: true,
            };
            (0, m.encode_to_vec(), serde_json::to_vec(&m).unwrap())
        },
        {
            let m = wire::PutRequest {
                tables: vec![writes.clone()],
                meta: b"m".to_vec(),
                prove: true,
            };
            (1, m.encode_to_vec(), serde_json::to_vec(&m).unwrap())
        },
        {
            let m = wire::TransactRequest {
                expects: vec![wire::TableExpects {
                    table: "checking".into(),
                    expects: vec![wire::Expect {
                        key: b"a".to_vec(),
                        value: None,
                    }],
                }],
                tables: vec![writes],
                meta: Vec::new(),
                prove: false,
            };
            (2, m.encode_to_vec(), serde_json::to_vec(&m).unwrap())
        },
        {
            let m = wire::VerifyRequest {
                promises: vec![wire::Promise {
                    version: 1,
                    table: "t".into(),
                    keys: keys.keys.clone(),
                }],
            };
            (3, m.encode_to_vec(), serde_json::to_vec(&m).unwrap())
        },
        {
            let m = wire::VerifyReceiptRequest {
                receipt: vec![0x43, 0x52, 0x4e, 0x4c, 1, 1, 0, 0],
                tables: vec![wire::TableClaims {
                    table: "t".into(),
                    claims: vec![wire::Claim {
                        key: b"k".to_vec(),
                        value: Some(b"v".to_vec()),
                    }],
                }],
                digest: Some(digest),
                at: true,
            };
            (4, m.encode_to_vec(), serde_json::to_vec(&m).unwrap())
        },
        {
            let m = wire::RangeRequest {
                table: "log".into(),
                lo: b"k0".to_vec(),
                hi: b"k9".to_vec(),
                version: 0,
                promise: false,
            };
            (5, m.encode_to_vec(), serde_json::to_vec(&m).unwrap())
        },
    ];
    let mut out = Vec::new();
    for (kind, proto, json) in bodies {
        out.push([&[(kind * 2 + 1) as u8][..], &proto].concat());
        out.push([&[(kind * 2) as u8][..], &json].concat());
    }
    out
}

fuzz_target!(|data: &[u8]| {
    static SEEDED: std::sync::Once = std::sync::Once::new();
    SEEDED.call_once(|| {
        if let Ok(dir) = std::env::var("CAIRN_FUZZ_SEEDS") {
            for (i, seed) in seeds().iter().enumerate() {
                let _ = std::fs::write(format!("{dir}/seed-request-{i}"), seed);
            }
        }
    });
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    static PINNED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let pinned = PINNED.get_or_init(|| {
        std::env::var("CAIRN_FUZZ_REQUEST")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map(|k| k % REQUESTS)
    });
    let kind = pinned.unwrap_or((first as usize / 2) % REQUESTS);
    let format = if first % 2 == 1 {
        Format::Protobuf
    } else {
        Format::Json
    };
    decode(kind, format, body);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(config) = cairn_server::Config::parse(text) {
            let _ = config.check();
        }
        let grants = cairn_server::auth::Grants::default();
        assert!(grants.principal(text).is_none());
    }
});
