//! A `tools/call` result as the server writes it. The tool's value is serialized
//! once: the text content is that text, and `structuredContent` is the same text
//! written as it stands (a result is most of the message, and `Value` would have
//! it serialized twice).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

#[derive(Debug)]
pub struct ToolResult {
    structured: Box<RawValue>,
    is_error: bool,
    meta: Value,
    /// `complete` under the stateless (2026-07-28) rules; absent before them.
    result_type: Option<&'static str>,
}

impl ToolResult {
    pub fn new(structured: &Value, is_error: bool, meta: Value) -> Self {
        Self {
            // Writing a `Value` cannot fail: its keys are strings.
            structured: serde_json::value::to_raw_value(structured)
                .unwrap_or_else(|_| RawValue::NULL.to_owned()),
            is_error,
            meta,
            result_type: None,
        }
    }

    pub fn complete(mut self) -> Self {
        self.result_type = Some("complete");
        self
    }
}

#[derive(serde::Serialize)]
struct TextContent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = TextContent {
            kind: "text",
            text: self.structured.get(),
        };
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("content", &[text])?;
        map.serialize_entry("structuredContent", &self.structured)?;
        map.serialize_entry("isError", &self.is_error)?;
        map.serialize_entry("_meta", &self.meta)?;
        if let Some(kind) = self.result_type {
            map.serialize_entry("resultType", kind)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_content_and_the_structured_content_are_the_same_json() {
        let value = json!({ "order": "A-7", "amount": 1250.5, "note": "a \"quoted\" line\n" });
        let written =
            serde_json::to_value(ToolResult::new(&value, false, json!({ "k": 1 }))).unwrap();
        assert_eq!(written["structuredContent"], value);
        let text = written["content"][0]["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), value);
        assert_eq!(written["content"][0]["type"], "text");
        assert_eq!(written["isError"], false);
        assert_eq!(written["_meta"], json!({ "k": 1 }));
        assert!(written.get("resultType").is_none());
    }

    #[test]
    fn a_complete_result_says_so_after_its_members() {
        let text =
            serde_json::to_string(&ToolResult::new(&json!({"n": 1}), true, json!({})).complete())
                .unwrap();
        assert_eq!(
            text,
            r#"{"content":[{"type":"text","text":"{\"n\":1}"}],"structuredContent":{"n":1},"isError":true,"_meta":{},"resultType":"complete"}"#
        );
    }
}
