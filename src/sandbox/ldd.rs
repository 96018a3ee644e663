//! What an executable needs to run: its `#!` interpreter and, via `ldd`, its
//! shared libraries (cached per path and modification time).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::SystemTime;

type Key = (PathBuf, Option<SystemTime>);
static CACHE: LazyLock<Mutex<HashMap<Key, Vec<PathBuf>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Absolute paths of the shared libraries `ldd` lists for `exe` (empty for
/// static executables and scripts, or when `ldd` is missing).
pub(crate) fn shared_libraries(exe: &Path) -> Vec<PathBuf> {
    let mtime = std::fs::metadata(exe).and_then(|m| m.modified()).ok();
    let key = (exe.to_path_buf(), mtime);
    if let Some(hit) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return hit.clone();
    }
    let libs = match std::process::Command::new("ldd")
        .arg(exe)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    {
        Ok(out) => parse_ldd(&String::from_utf8_lossy(&out.stdout)),
        Err(e) => {
            tracing::debug!(exe = %exe.display(), error = %e, "ldd unavailable");
            Vec::new()
        }
    };
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, libs.clone());
    libs
}

fn parse_ldd(out: &str) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    for line in out.lines() {
        let candidate = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = candidate.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    libs
}

/// The `#!` interpreter of a script (and, for `#!/usr/bin/env prog`, `prog`
/// resolved in `path_var`). Empty for binaries.
pub(crate) fn interpreters(exe: &Path, path_var: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let mut head = [0u8; 256];
    let n = match std::fs::File::open(exe).and_then(|mut f| f.read(&mut head)) {
        Ok(n) => n,
        Err(_) => return Vec::new(),
    };
    let Some(rest) = head[..n].strip_prefix(b"#!") else {
        return Vec::new();
    };
    let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let Some(interp) = words.next() else {
        return Vec::new();
    };
    let mut out = vec![PathBuf::from(interp)];
    if interp.ends_with("/env")
        && let Some(prog) = words.find(|w| !w.starts_with('-'))
        && let Some(found) = find_in_path(prog, path_var)
    {
        out.push(found);
    }
    out
}

/// Find an executable by name in a `PATH`-style list (absolute names as is).
pub fn find_in_path(name: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ldd_output() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n\tlibgone.so => not found\n";
        assert_eq!(
            parse_ldd(out),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn real_ldd_and_shebang() {
        let sh = find_in_path("sh", Some(std::ffi::OsStr::new("/usr/bin:/bin"))).unwrap();
        let libs = shared_libraries(&std::fs::canonicalize(&sh).unwrap());
        assert!(
            libs.iter().any(|l| l.to_string_lossy().contains("libc")),
            "{libs:?}"
        );
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("s");
        std::fs::write(&s, "#!/usr/bin/env -S sh -e\necho\n").unwrap();
        let i = interpreters(&s, Some(std::ffi::OsStr::new("/usr/bin:/bin")));
        assert_eq!(i[0], PathBuf::from("/usr/bin/env"));
        assert!(i[1].ends_with("sh"));
    }
}
