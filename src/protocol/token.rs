//! Random tokens: the session token, client secrets and per-call bypass
//! capabilities are all 32 random bytes written as 64 lowercase hex digits.

/// 32 bytes from the OS random source, as 64 hex digits.
pub fn random_token() -> std::io::Result<String> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(std::io::Error::other)?;
    let mut out = String::with_capacity(64);
    for b in raw {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_hex_digits_and_differ() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b);
    }
}
