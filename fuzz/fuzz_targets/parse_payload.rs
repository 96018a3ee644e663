//! Fuzz target: `parse_payload` never panics; what it accepts survives
//! `encode_payload` → `parse_payload` unchanged, and argument coercion never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolsrv::protocol::{coerce_fields, encode_payload, parse_payload, parse_timeout};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_timeout(text);
    let Ok(p) = parse_payload(text) else {
        return;
    };
    let args = p.args.as_ref().map(|a| serde_json::to_string(a).expect("map serializes"));
    let mut fields: Vec<(&str, &str)> = Vec::new();
    for (k, v) in [
        ("token", &p.token),
        ("tool", &p.tool),
        ("agent", &p.agent),
        ("session", &p.session),
        ("cwd", &p.cwd),
        ("args", &args),
    ] {
        if let Some(v) = v {
            fields.push((k, v));
        }
    }
    fields.extend(p.fields.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let again = parse_payload(&encode_payload(&fields)).expect("re-encoded payload parses");
    assert_eq!(p, again);
    let types = ["integer", "number", "boolean", "array", "object", "string"];
    let _ = coerce_fields(&p.fields, |k| Some(types[k.len() % types.len()].to_owned()));
});
