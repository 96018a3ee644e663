//! Turning a finished call (exit status, captured output) into the
//! model-facing `ToolResult`, with UTF-8-safe truncation notes.

use std::time::Duration;

use super::{ExitInfo, Limits, Output};
use crate::protocol::{Content, ToolResult};

/// The longest prefix of `s` that is at most `max` bytes and ends on a char
/// boundary.
pub fn cut_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `bytes` as text (lossy) cut to `max` bytes, with a note saying how much of
/// the `total` bytes produced is not shown and whether the capture cap of
/// `cap` bytes was hit (`capped`).
pub(crate) fn model_text(bytes: &[u8], total: u64, capped: bool, cap: usize, max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let cut = cut_utf8(&text, max);
    if cut.len() == text.len() && !capped {
        return text.into_owned();
    }
    let mut out = String::with_capacity(cut.len() + 96);
    out.push_str(cut);
    out.push_str(&truncation_note(total, cut.len(), capped, cap));
    out
}

fn truncation_note(total: u64, shown: usize, capped: bool, cap: usize) -> String {
    let hidden = total.saturating_sub(shown as u64);
    if capped {
        format!(
            "\n[output truncated: {hidden} more bytes not shown; capture limit of {cap} bytes reached, the rest was discarded]"
        )
    } else {
        format!("\n[output truncated: {hidden} more bytes not shown]")
    }
}

/// Seconds as a short human string: `5s`, `2.5s`, `0.001s`.
pub(crate) fn fmt_secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        return format!("{}s", d.as_secs());
    }
    let s = format!("{:.3}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}s")
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => "signal",
    }
}

/// How a call ended, as far as the result is concerned.
pub(crate) struct Ending<'a> {
    pub tool: &'a str,
    pub status: ExitInfo,
    pub timed_out: bool,
    pub timeout: Duration,
    pub cancelled: bool,
}

/// Builds the result of a call that ran.
pub(crate) fn build(end: &Ending<'_>, output: &Output, limits: &Limits) -> ToolResult {
    let tool = end.tool;
    if end.cancelled {
        return ToolResult::error(format!("tool `{tool}` was cancelled"));
    }
    let combined = || {
        model_text(
            &output.combined(),
            output.total_bytes(),
            output.truncated(),
            output.cap(),
            limits.model_text,
        )
    };
    if end.timed_out {
        let mut msg = format!("tool `{tool}` timed out after {}", fmt_secs(end.timeout));
        let text = combined();
        if !text.is_empty() {
            msg.push_str("; output so far:\n");
            msg.push_str(&text);
        }
        return ToolResult::error(msg);
    }
    if end.status.success() {
        return success(output, limits);
    }
    let why = match (end.status.code, end.status.signal) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
        (None, None) => "exit status unknown".to_string(),
    };
    let text = combined();
    if text.trim().is_empty() {
        ToolResult::error(format!("tool `{tool}` failed: {why} (no output)"))
    } else {
        ToolResult::error(format!("tool `{tool}` failed: {why}\n{text}"))
    }
}

fn success(output: &Output, limits: &Limits) -> ToolResult {
    let stdout = output.stdout();
    let total = output.stdout_total_bytes();
    let capped = total > stdout.len() as u64;
    if !capped
        && stdout.trim_ascii_start().first() == Some(&b'{')
        && let Ok(mut r) = serde_json::from_slice::<ToolResult>(&stdout)
    {
        limit_text_blocks(&mut r, limits.model_text);
        return r;
    }
    ToolResult::text(model_text(
        &stdout,
        total,
        capped,
        output.cap(),
        limits.model_text,
    ))
}

/// Cuts the text blocks of a passed-through result to `max` bytes in total;
/// text blocks past the budget are dropped, image blocks are kept.
fn limit_text_blocks(r: &mut ToolResult, max: usize) {
    let total: usize = r
        .content
        .iter()
        .map(|c| match c {
            Content::Text { text } => text.len(),
            Content::Image { .. } => 0,
        })
        .sum();
    if total <= max {
        return;
    }
    let mut budget = max;
    let mut noted = false;
    r.content.retain_mut(|c| {
        let Content::Text { text } = c else {
            return true;
        };
        if noted {
            return false;
        }
        if text.len() <= budget {
            budget -= text.len();
            return true;
        }
        let shown = cut_utf8(text, budget).len();
        text.truncate(shown);
        let hidden = (total - max) + (budget - shown);
        text.push_str(&format!(
            "\n[output truncated: {hidden} more bytes not shown]"
        ));
        noted = true;
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Stream;

    #[test]
    fn cut_on_char_boundary() {
        let s = "aé€😀"; // 1 + 2 + 3 + 4 bytes
        assert_eq!(cut_utf8(s, 0), "");
        assert_eq!(cut_utf8(s, 1), "a");
        assert_eq!(cut_utf8(s, 2), "a");
        assert_eq!(cut_utf8(s, 3), "aé");
        assert_eq!(cut_utf8(s, 5), "aé");
        assert_eq!(cut_utf8(s, 6), "aé€");
        assert_eq!(cut_utf8(s, 9), "aé€");
        assert_eq!(cut_utf8(s, 10), s);
        assert_eq!(cut_utf8(s, 100), s);
    }

    #[test]
    fn model_text_notes_what_is_left_out() {
        let text = "€".repeat(10); // 30 bytes
        let t = model_text(text.as_bytes(), 30, false, 1000, 8);
        assert!(
            t.starts_with("€€\n[output truncated: 24 more bytes not shown]"),
            "{t}"
        );
        let t = model_text(text.as_bytes(), 5000, true, 30, 100);
        assert!(t.starts_with(&text), "{t}");
        assert!(t.contains("4970 more bytes") && t.contains("capture limit of 30 bytes"));
        assert_eq!(model_text(b"short", 5, false, 10, 100), "short");
        // Invalid UTF-8 is shown lossily, never an error.
        assert_eq!(model_text(b"a\xffb", 3, false, 10, 100), "a\u{fffd}b");
    }

    #[test]
    fn passthrough_budget_cuts_text_keeps_images() {
        let o = Output::new(1 << 20);
        let big = "x".repeat(100);
        let json = format!(
            r#"{{"content":[{{"type":"text","text":"{big}"}},{{"type":"image","data":"AA==","media_type":"image/png"}},{{"type":"text","text":"tail"}}]}}"#
        );
        o.push(Stream::Stdout, json.as_bytes());
        let limits = Limits {
            model_text: 40,
            ..Limits::default()
        };
        let r = success(&o, &limits);
        assert_eq!(r.content.len(), 2, "{r:?}");
        let Content::Text { text } = &r.content[0] else {
            panic!("{r:?}")
        };
        assert!(text.starts_with(&"x".repeat(40)));
        assert!(text.contains("64 more bytes not shown"), "{text}");
        assert!(matches!(r.content[1], Content::Image { .. }));
    }

    #[test]
    fn seconds_format() {
        assert_eq!(fmt_secs(Duration::from_secs(5)), "5s");
        assert_eq!(fmt_secs(Duration::from_millis(2500)), "2.5s");
        assert_eq!(fmt_secs(Duration::from_millis(1)), "0.001s");
    }
}
