//! Finds where a JSON pointer lands in a `.meta` text, so problems found
//! after parsing (schemas, tiers, variants) still get a line and column.

/// One step of a path into a JSON document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// Convenience: a key segment.
pub fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

/// Splits an RFC 6901 pointer (`/a/0/b~1c`) into segments; numeric
/// segments match both array indices and object keys.
pub fn pointer(p: &str) -> Vec<Seg> {
    p.split('/')
        .skip(1)
        .map(|s| {
            let s = s.replace("~1", "/").replace("~0", "~");
            match s.parse::<usize>() {
                Ok(i) => Seg::Index(i),
                Err(_) => Seg::Key(s),
            }
        })
        .collect()
}

/// 1-based (line, column) of the value at `path` in `text` — for the last
/// object key, of the key itself. Falls back to the deepest part found;
/// `None` only when the text is not a JSON value at all.
pub fn locate(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut pos = skip_ws(b, 0);
    if pos >= b.len() {
        return None;
    }
    let mut best = pos;
    for seg in path {
        match (b.get(pos), seg) {
            (Some(b'{'), Seg::Key(_) | Seg::Index(_)) => {
                let want = match seg {
                    Seg::Key(k) => k.clone(),
                    Seg::Index(i) => i.to_string(),
                };
                let Some((key_pos, val_pos)) = find_member(text, pos, &want) else {
                    break;
                };
                best = key_pos;
                pos = val_pos;
            }
            (Some(b'['), Seg::Index(i)) => {
                let Some(p) = find_element(b, pos, *i) else {
                    break;
                };
                best = p;
                pos = p;
            }
            _ => break,
        }
    }
    Some(line_col(text, best))
}

/// 1-based line and byte column of a byte offset.
pub fn line_col(text: &str, off: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..off.min(text.len())];
    let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    (line, off - start + 1)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// End (exclusive) of the string token starting at `i` (a `"`).
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// End (exclusive) of the value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            Some(j)
        }
    }
}

/// In the object at `i`, the offsets of member `want`'s key and value.
fn find_member(text: &str, i: usize, want: &str) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let mut j = skip_ws(b, i + 1);
    let mut found = None;
    while b.get(j) == Some(&b'"') {
        let kend = string_end(b, j)?;
        let k: String = serde_json::from_str(&text[j..kend]).ok()?;
        let colon = skip_ws(b, kend);
        let v = skip_ws(b, colon + 1);
        if k == want {
            // Duplicate keys: the last one wins, as when parsing.
            found = Some((j, v));
        }
        j = skip_ws(b, value_end(b, v)?);
        if b.get(j) == Some(&b',') {
            j = skip_ws(b, j + 1);
        }
    }
    found
}

/// In the array at `i`, the offset of element `n`.
fn find_element(b: &[u8], i: usize, n: usize) -> Option<usize> {
    let mut j = skip_ws(b, i + 1);
    let mut k = 0;
    while j < b.len() && b[j] != b']' {
        if k == n {
            return Some(j);
        }
        j = skip_ws(b, value_end(b, j)?);
        if b.get(j) == Some(&b',') {
            j = skip_ws(b, j + 1);
        }
        k += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "{\n  \"a\": 1,\n  \"v\": [\n    {\"x\": \"}]\\\"\"},\n    {\"m\": {\"os\": [\"linux\", \"plan10\"]}}\n  ]\n}";

    #[test]
    fn finds_keys_and_elements() {
        assert_eq!(locate(TEXT, &[]), Some((1, 1)));
        assert_eq!(locate(TEXT, &[key("a")]), Some((2, 3)));
        assert_eq!(locate(TEXT, &pointer("/v/1/m/os/1")), Some((5, 28)));
        assert_eq!(locate(TEXT, &pointer("/v/0/x")), Some((4, 6)));
        // Missing parts fall back to the deepest found.
        assert_eq!(locate(TEXT, &pointer("/v/1/nope")), Some((5, 5)));
        assert_eq!(locate("", &[]), None);
    }
}
