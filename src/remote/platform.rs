//! The remote's platform: `uname -s`/`uname -m` mapped to Go's GOOS/GOARCH
//! names, so it compares with [`crate::meta::go_os`]/[`crate::meta::go_arch`].

/// Go's GOOS for a `uname -s` answer (lower-cased when unknown).
pub fn go_os(uname_s: &str) -> String {
    match uname_s.trim() {
        "Linux" => "linux".into(),
        "Darwin" => "darwin".into(),
        "FreeBSD" => "freebsd".into(),
        "OpenBSD" => "openbsd".into(),
        "NetBSD" => "netbsd".into(),
        "DragonFly" => "dragonfly".into(),
        "SunOS" => "solaris".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// Go's GOARCH for a `uname -m` answer (unchanged when unknown).
pub fn go_arch(uname_m: &str) -> String {
    match uname_m.trim() {
        "x86_64" | "amd64" => "amd64".into(),
        "aarch64" | "arm64" | "aarch64_be" => "arm64".into(),
        "i386" | "i486" | "i586" | "i686" | "i86pc" | "x86" => "386".into(),
        m if m.starts_with("armv") || m == "arm" => "arm".into(),
        "riscv64" => "riscv64".into(),
        "ppc64le" => "ppc64le".into(),
        "ppc64" => "ppc64".into(),
        "s390x" => "s390x".into(),
        "loongarch64" => "loong64".into(),
        "mips64" => "mips64".into(),
        "mips" => "mips".into(),
        other => other.to_string(),
    }
}

/// `os/arch` of this binary, in Go's names.
pub fn local() -> String {
    format!("{}/{}", crate::meta::go_os(), crate::meta::go_arch())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_answers_map_to_go_names() {
        assert_eq!(go_os("Linux\n"), "linux");
        assert_eq!(go_os("Darwin"), "darwin");
        assert_eq!(go_os("Plan9"), "plan9");
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("arm64"), "arm64");
        assert_eq!(go_arch("i686"), "386");
        assert_eq!(go_arch("armv7l"), "arm");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    #[test]
    fn this_machine_matches_itself() {
        let os = go_os(std::env::consts::OS.replace("linux", "Linux").as_str());
        assert_eq!(os, crate::meta::go_os());
        assert_eq!(go_arch(std::env::consts::ARCH), crate::meta::go_arch());
        assert!(!local().contains("x86_64"));
    }
}
