//! `ledger post --file`: one posting or many, in the JSON grpcurl sends. The file is read in
//! the proto3 JSON mapping against the served descriptor set (lowerCamelCase or proto field
//! names, enums by name or number, times in RFC 3339, unknown fields refused), so what
//! grpcurl takes the CLI takes, and nothing else.

use ledger_server::grpc::pb;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};

/// What a `--file` holds.
#[derive(Debug, Clone, PartialEq)]
pub enum PostFile {
    /// One `PostRequest` (a JSON object): sent as one `Post`.
    One(pb::PostRequest),
    /// A JSON list of `PostRequest`s, or a `PostBatchRequest` (`{"requests": [...]}`, the
    /// body grpcurl sends to `PostBatch`, and its `ledger`, empty when it names none): sent as
    /// one `PostBatch`, in this order.
    Batch {
        ledger: String,
        requests: Vec<pb::PostRequest>,
    },
}

/// The example every message shows.
const FORM: &str = r#"{"idempotencyKey":"k-1","legs":[{"account":"assets:bank","direction":"DIRECTION_DEBIT","amount":"1.00"},{"account":"equity:world","direction":"DIRECTION_CREDIT","amount":"1.00"}]}"#;

/// What every message about a file ends with.
fn help() -> String {
    format!("give a PostRequest in the JSON grpcurl sends, e.g. {FORM}, or a JSON list of them, or {{\"requests\": [...]}} (one PostBatch)")
}

fn descriptor(name: &str) -> MessageDescriptor {
    DescriptorPool::decode(ledger_server::grpc::FILE_DESCRIPTOR_SET)
        .expect("the served descriptor set decodes")
        .get_message_by_name(name)
        .expect("the descriptor set holds the ledger's messages")
}

/// Reads the text of a `--file` (`what` names it in messages: its path, or standard input).
/// A message names the line and column where the file stops being what grpcurl would send.
pub fn parse(what: &str, text: &str) -> Result<PostFile, String> {
    let bad = |e: serde_json::Error| format!("{what} is not what grpcurl sends ({e}); {}", help());
    let shape: serde_json::Value = serde_json::from_str(text).map_err(bad)?;
    let mut json = serde_json::Deserializer::from_str(text);
    let file = match &shape {
        serde_json::Value::Array(_) => {
            let seed = Requests(descriptor("ledger.v1.PostRequest"));
            PostFile::Batch {
                ledger: String::new(),
                requests: transcode_all(seed.deserialize(&mut json).map_err(bad)?)?,
            }
        }
        serde_json::Value::Object(m) if m.contains_key("requests") => {
            let desc = descriptor("ledger.v1.PostBatchRequest");
            let batch: pb::PostBatchRequest =
                transcode(DynamicMessage::deserialize(desc, &mut json).map_err(bad)?)?;
            PostFile::Batch {
                ledger: batch.ledger,
                requests: batch.requests,
            }
        }
        serde_json::Value::Object(_) => {
            let desc = descriptor("ledger.v1.PostRequest");
            PostFile::One(transcode(
                DynamicMessage::deserialize(desc, &mut json).map_err(bad)?,
            )?)
        }
        _ => {
            return Err(format!(
                "{what} holds neither a PostRequest (a JSON object) nor a list of them; {}",
                help()
            ))
        }
    };
    Ok(file)
}

fn transcode<T: prost::Message + Default>(m: DynamicMessage) -> Result<T, String> {
    m.transcode_to()
        .map_err(|e| format!("the file's request does not encode: {e}"))
}

fn transcode_all(ms: Vec<DynamicMessage>) -> Result<Vec<pb::PostRequest>, String> {
    ms.into_iter().map(transcode).collect()
}

/// A JSON list of messages of one type, read in place (so errors keep their line and column).
struct Requests(MessageDescriptor);

impl<'de> DeserializeSeed<'de> for Requests {
    type Value = Vec<DynamicMessage>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Requests {
    type Value = Vec<DynamicMessage>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of PostRequests")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(m) = seq.next_element_seed(self.0.clone())? {
            out.push(m);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_of_the_messages_is_a_post_request() {
        assert!(help().contains(FORM));
        let PostFile::One(r) = parse("f", FORM).unwrap() else {
            panic!("one request")
        };
        assert_eq!((r.idempotency_key.as_str(), r.legs.len()), ("k-1", 2));
    }

    #[test]
    fn a_file_reads_as_grpcurl_reads_it_every_field_in_either_spelling() {
        let text = r#"{"idempotency_key":"k","memo":"m","effectiveAt":"2026-12-31T23:00:00.5Z",
            "metadata":{"a":"b"},"hold":true,"holdExpiresAt":"2030-01-01T00:00:00Z",
            "legs":[{"account":"x","direction":"DIRECTION_DEBIT","amount":"1.00"},
                    {"account":"y","direction":2,"amount":"1.00"}]}"#;
        let PostFile::One(r) = parse("f", text).unwrap() else {
            panic!("one request")
        };
        assert_eq!((r.idempotency_key.as_str(), r.memo.as_str()), ("k", "m"));
        assert_eq!(r.legs[0].direction, pb::Direction::Debit as i32);
        assert_eq!(r.legs[1].direction, pb::Direction::Credit as i32);
        assert_eq!(r.metadata.get("a").map(String::as_str), Some("b"));
        assert_eq!(r.effective_at.unwrap().nanos, 500_000_000);
        assert!(r.hold && r.hold_expires_at.is_some());
    }

    #[test]
    fn a_list_or_a_post_batch_request_is_a_batch_in_its_order() {
        let list = format!("[{FORM}, {}]", FORM.replace("k-1", "k-2"));
        let PostFile::Batch { ledger, requests } = parse("f", &list).unwrap() else {
            panic!("a batch")
        };
        let keys: Vec<&str> = requests
            .iter()
            .map(|r| r.idempotency_key.as_str())
            .collect();
        assert_eq!((keys, ledger.as_str()), (vec!["k-1", "k-2"], ""));
        let body = format!(r#"{{"requests": {list}}}"#);
        assert_eq!(
            parse("f", &body).unwrap(),
            PostFile::Batch {
                ledger: String::new(),
                requests: requests.clone()
            }
        );
        let body = format!(r#"{{"ledger": "acme", "requests": {list}}}"#);
        assert_eq!(
            parse("f", &body).unwrap(),
            PostFile::Batch {
                ledger: "acme".into(),
                requests
            }
        );
    }

    #[test]
    fn what_grpcurl_would_refuse_is_refused_naming_the_file_the_request_and_the_form() {
        for (text, names) in [
            ("{", "EOF while parsing"),
            ("42", "neither a PostRequest"),
            ("{\"legs\": [],\n \"memmo\": \"x\"}", "'memmo' at line 2"),
            (
                "[{\"legs\": []},\n {\"legs\": [{\"direction\": \"sideways\"}]}]",
                "line 2",
            ),
            (r#"{"requests": [], "memo": "x"}"#, "memo"),
            (r#"{"effectiveAt": "2026-12-31"}"#, "column 28"),
        ] {
            let e = parse("batch.json", text).unwrap_err();
            assert!(
                e.contains("batch.json") && e.contains(names) && e.contains(FORM),
                "{text}: {e}"
            );
        }
    }
}
