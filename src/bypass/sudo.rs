//! The credential gate's mechanics: is `sudo` there, does it need a
//! password, and the wrapped command that pipes the password to `sudo -S`.
//!
//! With a password the tool runs as
//! `{ cat <&3; exec 3<&-; exec cat; } | sudo -S -p '' -u USER -- TOOL`:
//! fd 3 is a pipe holding only `password\n` (written by the server, then
//! closed), so `sudo` — which reads its password one byte at a time up to
//! the newline — consumes exactly that line, and everything after it (the
//! call's JSON from the server's stdin pipe) reaches the tool untouched. The
//! password is never in an argument list, the environment or a file.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use zeroize::Zeroizing;

use crate::exec::PreExec;
use crate::meta::Command;

/// Longest password accepted (it must fit a pipe buffer).
pub const MAX_PASSWORD: usize = 4096;

/// `sudo` in `PATH`, if installed.
pub fn find_sudo() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    crate::sandbox::find_in_path("sudo", Some(&path))
}

/// Quote `s` for `/bin/sh`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What `sudo` runs for `command`: the executable, or `/bin/sh -c SCRIPT`.
fn target(command: &Command) -> String {
    match command {
        Command::Exec(p) => sh_quote(&p.to_string_lossy()),
        Command::Shell(s) => format!("/bin/sh -c {}", sh_quote(s)),
    }
}

/// Whether `sudo -n -u USER true` succeeds for the server's user (root, or
/// NOPASSWD): then no password is needed.
pub async fn nopasswd(sudo: &Path, user: &str) -> Result<bool, String> {
    let child = tokio::process::Command::new(sudo)
        .args(["-n", "-u", user, "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", sudo.display()))?;
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .map_err(|_| format!("{} -n true did not answer within 20 s", sudo.display()))?
        .map_err(|e| format!("waiting for {}: {e}", sudo.display()))?;
    if !out.status.success() {
        tracing::debug!(
            stderr = %String::from_utf8_lossy(&out.stderr).trim(),
            "sudo -n true failed: a password is needed"
        );
    }
    Ok(out.status.success())
}

/// The command of a call that may use `sudo` without a password.
pub fn wrap_nopasswd(sudo: &Path, user: &str, command: &Command) -> Command {
    Command::Shell(format!(
        "exec {} -n -u {} -- {}",
        sh_quote(&sudo.to_string_lossy()),
        sh_quote(user),
        target(command)
    ))
}

/// The command of a call whose password goes to `sudo -S`, and the hook
/// that places the password pipe on fd 3 of the child.
pub fn wrap_with_password(
    sudo: &Path,
    user: &str,
    command: &Command,
    password: &Zeroizing<String>,
) -> std::io::Result<(Command, PreExec)> {
    if password.len() > MAX_PASSWORD || password.contains('\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the password is longer than 4096 bytes or contains a newline",
        ));
    }
    let (reader, mut writer) = std::io::pipe()?;
    let mut line = Zeroizing::new(Vec::with_capacity(password.len() + 1));
    line.extend_from_slice(password.as_bytes());
    line.push(b'\n');
    // Fits the pipe buffer (64 KiB): never blocks. The writer is closed at
    // the end of this function, so the pipe holds exactly this line.
    writer.write_all(&line)?;
    drop(writer);
    let script = format!(
        "{{ cat <&3; exec 3<&-; exec cat; }} | {} -S -p '' -u {} -- {} 3<&-",
        sh_quote(&sudo.to_string_lossy()),
        sh_quote(user),
        target(command)
    );
    let reader: OwnedFd = reader.into();
    let hook: PreExec = Box::new(move || {
        let fd = reader.as_raw_fd();
        // SAFETY: runs in the child between fork and exec; dup2 and fcntl
        // are async-signal-safe and touch only this process's descriptor
        // table. `reader` stays open (owned by the closure) until exec.
        unsafe {
            if fd == 3 {
                // Already on fd 3: only clear close-on-exec.
                if libc::fcntl(3, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) == -1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    });
    Ok((Command::Shell(script), hook))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        let c = wrap_nopasswd(
            Path::new("/usr/bin/sudo"),
            "root",
            &Command::Shell("echo 'x'".into()),
        );
        let Command::Shell(s) = c else { panic!() };
        assert_eq!(
            s,
            r"exec '/usr/bin/sudo' -n -u 'root' -- /bin/sh -c 'echo '\''x'\'''"
        );
    }

    #[test]
    fn password_is_not_in_the_script() {
        let pw = Zeroizing::new("hunter2-secret".to_string());
        let (c, _hook) = wrap_with_password(
            Path::new("/usr/bin/sudo"),
            "root",
            &Command::Exec("/bin/id".into()),
            &pw,
        )
        .unwrap();
        let Command::Shell(s) = c else { panic!() };
        assert!(!s.contains("hunter2"));
        assert!(s.contains("-S -p '' -u 'root' -- '/bin/id'"), "{s}");
        let bad = Zeroizing::new("a\nb".to_string());
        assert!(
            wrap_with_password(
                Path::new("/usr/bin/sudo"),
                "root",
                &Command::Exec("/bin/id".into()),
                &bad
            )
            .is_err()
        );
    }
}
