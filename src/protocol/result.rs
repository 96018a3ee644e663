//! `ToolResult`: what one tool call returns to the model.

use serde::{Deserialize, Serialize};

/// One content block of a result, as the MCP-style `content` array carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Content {
    /// Plain text.
    Text { text: String },
    /// Base64 image data. Tools may say `media_type`; we always answer `mimeType`.
    Image {
        data: String,
        #[serde(rename = "mimeType", alias = "media_type")]
        mime_type: String,
    },
}

/// The structured answer to a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub content: Vec<Content>,
    #[serde(rename = "isError", default)]
    pub is_error: bool,
}

impl ToolResult {
    /// A successful result holding one text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::Text { text: text.into() }],
            is_error: false,
        }
    }

    /// An error result holding one text block.
    pub fn error(text: impl Into<String>) -> Self {
        ToolResult {
            content: vec![Content::Text { text: text.into() }],
            is_error: true,
        }
    }

    /// All text blocks joined by newlines (images are skipped).
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for c in &self.content {
            if let Content::Text { text } = c {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_accepts_media_type_and_answers_mime_type() {
        let r: ToolResult = serde_json::from_str(
            r#"{"content":[{"type":"image","data":"AA==","media_type":"image/png"}]}"#,
        )
        .unwrap();
        assert!(!r.is_error);
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.contains(r#""mimeType":"image/png""#), "{s}");
    }
}
