//! Authentication: the first secret written to an afid wins and every client
//! that presents it reads back the same session token.

use std::sync::Mutex;

use subtle::ConstantTimeEq;

/// Why authentication failed. The texts are the `Rerror`s clients see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("authentication failed")]
    Failed,
    #[error("authentication failed: write the secret to the afid before reading or attaching")]
    NoSecret,
    #[error(
        "authentication required: Tauth, write the secret to the afid, read the token, then attach with the afid"
    )]
    Required,
    #[error("authentication not required: this server runs with --no-auth; attach with NOFID")]
    NotRequired,
    #[error("invalid token: send the token read back from the afid as token=… in the payload")]
    BadToken,
}

/// The server's authentication state.
pub struct Auth {
    required: bool,
    secret: Mutex<Option<Vec<u8>>>,
    token: String,
}

impl Auth {
    /// `required` is false for `--no-auth`.
    pub fn new(required: bool) -> std::io::Result<Self> {
        let token = crate::protocol::random_token()?;
        Ok(Auth {
            required,
            secret: Mutex::new(None),
            token,
        })
    }

    pub fn required(&self) -> bool {
        self.required
    }

    /// Check a secret (trailing newline ignored); the first one ever offered
    /// becomes the server's secret. Returns the session token.
    pub fn verify_secret(&self, offered: &[u8]) -> Result<&str, AuthError> {
        let offered = offered.strip_suffix(b"\n").unwrap_or(offered);
        if offered.is_empty() {
            return Err(AuthError::NoSecret);
        }
        let mut secret = self.secret.lock().unwrap_or_else(|e| e.into_inner());
        match secret.as_deref() {
            None => {
                *secret = Some(offered.to_vec());
                tracing::info!("first client authenticated; secret stored");
                Ok(&self.token)
            }
            Some(s) if bool::from(s.ct_eq(offered)) => Ok(&self.token),
            Some(_) => {
                tracing::warn!("authentication failed: a different secret was offered");
                Err(AuthError::Failed)
            }
        }
    }

    /// Check the `token=` of a request payload (always passes with `--no-auth`).
    pub fn check_token(&self, token: Option<&str>) -> Result<(), AuthError> {
        if !self.required {
            return Ok(());
        }
        match token {
            Some(t) if bool::from(t.as_bytes().ct_eq(self.token.as_bytes())) => Ok(()),
            _ => Err(AuthError::BadToken),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_secret_wins() {
        let a = Auth::new(true).unwrap();
        let t1 = a.verify_secret(b"s3cret\n").unwrap().to_string();
        assert_eq!(a.verify_secret(b"s3cret").unwrap(), t1);
        assert_eq!(a.verify_secret(b"other"), Err(AuthError::Failed));
        assert_eq!(a.verify_secret(b""), Err(AuthError::NoSecret));
        assert!(a.check_token(Some(&t1)).is_ok());
        assert_eq!(a.check_token(Some("nope")), Err(AuthError::BadToken));
        assert_eq!(a.check_token(None), Err(AuthError::BadToken));
    }

    #[test]
    fn no_auth_accepts_any_token() {
        let a = Auth::new(false).unwrap();
        assert!(a.check_token(None).is_ok());
    }

    #[test]
    fn tokens_differ_between_servers() {
        let a = Auth::new(true).unwrap();
        let b = Auth::new(true).unwrap();
        assert_ne!(
            a.verify_secret(b"x").unwrap(),
            b.verify_secret(b"x").unwrap()
        );
    }
}
