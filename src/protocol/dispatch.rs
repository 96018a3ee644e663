//! Dispatch fields of a call (`bypass`, `timeout`, `sandbox`): taken out of the
//! tool's JSON arguments before the tool sees them, plus Go-style duration parsing.

use std::time::Duration;

use serde_json::{Map, Value};
use thiserror::Error;

/// How a call is to be run, as the request asked; none of it reaches the tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dispatch {
    /// Run through the approved bypass route instead of the sandbox.
    pub bypass: bool,
    /// Per-call timeout; `None` means the server default.
    pub timeout: Option<Duration>,
    /// Name of the sandbox profile to use; `None` means the default profile.
    pub sandbox: Option<String>,
}

/// A dispatch field had a value we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DispatchError {
    #[error("invalid `bypass` value {0}: expected true or false")]
    Bypass(String),
    #[error("invalid `timeout` value {value}: {reason}")]
    Timeout {
        value: String,
        reason: DurationError,
    },
    #[error(
        "invalid `sandbox` value {0}: expected a profile name made of letters, digits, '.', '_' and '-'"
    )]
    Sandbox(String),
}

/// A duration string we could not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    #[error("{0:?} is not a duration (use e.g. 30, 2.5, 90s, 2m, 1h30m, 500ms)")]
    Invalid(String),
    #[error("missing unit in duration {0:?} (use ns, us, ms, s, m or h)")]
    MissingUnit(String),
    #[error("unknown unit {unit:?} in duration {input:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit { unit: String, input: String },
    #[error("duration {0:?} is negative")]
    Negative(String),
    #[error("duration {0:?} is zero; it must be positive")]
    Zero(String),
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// Removes `bypass`, `timeout` and `sandbox` from `args` and validates them.
///
/// JSON `null` and the empty string mean "not given" for every field (a
/// `key=` payload line yields an empty string).
pub fn take_dispatch(args: &mut Map<String, Value>) -> Result<Dispatch, DispatchError> {
    let bypass = args.remove("bypass");
    let timeout = args.remove("timeout");
    let sandbox = args.remove("sandbox");
    Ok(Dispatch {
        bypass: parse_bypass(bypass)?,
        timeout: parse_timeout_value(timeout)?,
        sandbox: parse_sandbox(sandbox)?,
    })
}

fn is_absent(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.trim().is_empty(),
        _ => false,
    }
}

fn parse_bypass(v: Option<Value>) -> Result<bool, DispatchError> {
    if is_absent(&v) {
        return Ok(false);
    }
    match v {
        Some(Value::Bool(b)) => Ok(b),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(true),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => Err(DispatchError::Bypass(other.to_string())),
        None => Ok(false),
    }
}

fn parse_timeout_value(v: Option<Value>) -> Result<Option<Duration>, DispatchError> {
    if is_absent(&v) {
        return Ok(None);
    }
    let (shown, parsed) = match v {
        Some(Value::Number(n)) => {
            let shown = n.to_string();
            let secs = n.as_f64().unwrap_or(f64::NAN);
            let parsed = secs_to_duration(secs, &shown);
            (shown, parsed)
        }
        Some(Value::String(s)) => {
            let parsed = parse_timeout(&s);
            (format!("{s:?}"), parsed)
        }
        Some(other) => {
            let shown = other.to_string();
            let reason = DurationError::Invalid(shown.clone());
            return Err(DispatchError::Timeout {
                value: shown,
                reason,
            });
        }
        None => return Ok(None),
    };
    parsed.map(Some).map_err(|reason| DispatchError::Timeout {
        value: shown,
        reason,
    })
}

fn parse_sandbox(v: Option<Value>) -> Result<Option<String>, DispatchError> {
    if is_absent(&v) {
        return Ok(None);
    }
    match v {
        Some(Value::String(s)) => {
            let name = s.trim();
            let ok = !name.starts_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if ok {
                Ok(Some(name.to_string()))
            } else {
                Err(DispatchError::Sandbox(format!("{s:?}")))
            }
        }
        Some(other) => Err(DispatchError::Sandbox(other.to_string())),
        None => Ok(None),
    }
}

fn secs_to_duration(secs: f64, shown: &str) -> Result<Duration, DurationError> {
    if secs.is_nan() {
        return Err(DurationError::Invalid(shown.to_string()));
    }
    if secs < 0.0 {
        return Err(DurationError::Negative(shown.to_string()));
    }
    if secs == 0.0 {
        return Err(DurationError::Zero(shown.to_string()));
    }
    let d = Duration::try_from_secs_f64(secs)
        .map_err(|_| DurationError::Overflow(shown.to_string()))?;
    if d.is_zero() {
        return Err(DurationError::Zero(shown.to_string()));
    }
    Ok(d)
}

/// Parses a positive timeout: plain seconds (`30`, `2.5`) or a Go duration
/// (`90s`, `2m`, `1h30m`). Zero and negative values are refused.
pub fn parse_timeout(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    let plain_number = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'+' | b'-'));
    if plain_number {
        let secs: f64 = t
            .parse()
            .map_err(|_| DurationError::Invalid(s.to_string()))?;
        return secs_to_duration(secs, s);
    }
    let d = parse_duration(t)?;
    if d.is_zero() {
        return Err(DurationError::Zero(s.to_string()));
    }
    Ok(d)
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3600 * NANOS_PER_SEC,
        _ => return None,
    })
}

/// Parses a Go `time.ParseDuration` string (`300ms`, `1.5h`, `2h45m`, `1m2.5s`).
///
/// Accepts what Go accepts except negative values (a `Duration` cannot be
/// negative); `"0"` is zero. Callers that need a positive value check it.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(s.to_string());
    let mut rest = s;
    let mut negative = false;
    if let Some(r) = rest.strip_prefix('-') {
        negative = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, after_int) = rest.split_at(int_len);
        let (frac_part, after_num) = match after_int.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", after_int),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = after_num
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after_num.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(s.to_string()));
        }
        let (unit, next) = after_num.split_at(unit_len);
        let scale = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_string(),
            input: s.to_string(),
        })?;
        let overflow = || DurationError::Overflow(s.to_string());
        let mut int_val: u128 = 0;
        for b in int_part.bytes() {
            int_val = int_val
                .checked_mul(10)
                .and_then(|v| v.checked_add(u128::from(b - b'0')))
                .ok_or_else(overflow)?;
        }
        let mut value = int_val.checked_mul(scale).ok_or_else(overflow)?;
        // Fractional part: only the first 24 digits can matter at ns precision.
        let mut frac_val: u128 = 0;
        let mut frac_div: u128 = 1;
        for b in frac_part.bytes().take(24) {
            frac_val = frac_val * 10 + u128::from(b - b'0');
            frac_div *= 10;
        }
        value = value
            .checked_add(frac_val * scale / frac_div)
            .ok_or_else(overflow)?;
        total = total.checked_add(value).ok_or_else(overflow)?;
        rest = next;
    }
    if negative && total > 0 {
        return Err(DurationError::Negative(s.to_string()));
    }
    let secs =
        u64::try_from(total / NANOS_PER_SEC).map_err(|_| DurationError::Overflow(s.to_string()))?;
    // The remainder is below 1e9 and always fits.
    let nanos = u32::try_from(total % NANOS_PER_SEC).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1m2.5s").unwrap(), ms(62_500));
        assert_eq!(parse_duration("500ms").unwrap(), ms(500));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration(".5s").unwrap(), ms(500));
        assert_eq!(parse_duration("5.s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("+3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(parse_duration("10µs").unwrap(), Duration::from_micros(10));
        assert_eq!(parse_duration("10μs").unwrap(), Duration::from_micros(10));
        assert_eq!(parse_duration("7ns").unwrap(), Duration::from_nanos(7));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("-0s").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_duration("1h2m3s4ms5us6ns").unwrap(),
            Duration::new(3723, 4_005_006)
        );
        assert_eq!(
            parse_duration("0.000000001s").unwrap(),
            Duration::from_nanos(1)
        );
    }

    #[test]
    fn go_duration_errors() {
        for bad in [
            "", "s", "1", "30", ".", ".s", "1.2.3s", "abc", "1x", "1 s", "+", "-",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should fail");
        }
        assert!(matches!(
            parse_duration("30"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("3d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("-5s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        let msg = parse_duration("3d").unwrap_err().to_string();
        assert!(msg.contains("\"d\"") && msg.contains("ms"), "{msg}");
    }

    #[test]
    fn timeouts_accept_seconds_and_go_durations() {
        assert_eq!(parse_timeout("30").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_timeout("2.5").unwrap(), ms(2500));
        assert_eq!(parse_timeout(" 90s ").unwrap(), Duration::from_secs(90));
        assert!(matches!(parse_timeout("0"), Err(DurationError::Zero(_))));
        assert!(matches!(parse_timeout("0s"), Err(DurationError::Zero(_))));
        assert!(matches!(
            parse_timeout("-1"),
            Err(DurationError::Negative(_))
        ));
        assert!(parse_timeout("1.2.3").is_err());
        assert!(parse_timeout("soon").is_err());
    }

    fn take(v: Value) -> (Result<Dispatch, DispatchError>, Map<String, Value>) {
        let mut m = v.as_object().unwrap().clone();
        let r = take_dispatch(&mut m);
        (r, m)
    }

    #[test]
    fn dispatch_fields_are_removed() {
        let (r, rest) = take(json!({
            "path": "/x", "bypass": true, "timeout": "2m", "sandbox": "net", "n": 3
        }));
        assert_eq!(
            r.unwrap(),
            Dispatch {
                bypass: true,
                timeout: Some(Duration::from_secs(120)),
                sandbox: Some("net".into())
            }
        );
        assert_eq!(Value::Object(rest), json!({"path": "/x", "n": 3}));

        let (r, rest) = take(json!({"a": 1}));
        assert_eq!(r.unwrap(), Dispatch::default());
        assert_eq!(Value::Object(rest), json!({"a": 1}));
    }

    #[test]
    fn dispatch_value_forms() {
        let (r, _) = take(json!({"bypass": "false", "timeout": 2.5}));
        let d = r.unwrap();
        assert!(!d.bypass);
        assert_eq!(d.timeout, Some(ms(2500)));
        let (r, _) = take(json!({"bypass": "TRUE", "timeout": "30"}));
        let d = r.unwrap();
        assert!(d.bypass);
        assert_eq!(d.timeout, Some(Duration::from_secs(30)));
        let (r, _) = take(json!({"bypass": null, "timeout": "", "sandbox": ""}));
        assert_eq!(r.unwrap(), Dispatch::default());
    }

    #[test]
    fn dispatch_errors_name_the_field() {
        let cases = [
            (json!({"bypass": "yes please"}), "`bypass`"),
            (json!({"bypass": 1}), "`bypass`"),
            (json!({"timeout": -3}), "`timeout`"),
            (json!({"timeout": 0}), "`timeout`"),
            (json!({"timeout": "0s"}), "`timeout`"),
            (json!({"timeout": "forever"}), "`timeout`"),
            (json!({"timeout": [1]}), "`timeout`"),
            (json!({"sandbox": "../etc/passwd"}), "`sandbox`"),
            (json!({"sandbox": ".hidden"}), "`sandbox`"),
            (json!({"sandbox": 5}), "`sandbox`"),
        ];
        for (v, field) in cases {
            let (r, rest) = take(v.clone());
            let msg = r.expect_err(&v.to_string()).to_string();
            assert!(msg.contains(field), "{v}: {msg}");
            assert!(rest.is_empty(), "{v}: fields left: {rest:?}");
        }
        let (r, _) = take(json!({"timeout": -3}));
        assert!(r.unwrap_err().to_string().contains("negative"));
    }
}
