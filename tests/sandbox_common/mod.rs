//! Shared helpers for the sandbox end-to-end tests: a temp world (HOME, work
//! dir, profiles), python3 location, and running `toolsrv sandbox-exec`.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The real python interpreter (not a shim) and its installation prefix.
pub fn python() -> &'static (PathBuf, PathBuf) {
    static PY: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    PY.get_or_init(|| {
        let out = Command::new("python3")
            .args([
                "-c",
                "import os,sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix)",
            ])
            .output()
            .expect("python3 is required by the sandbox tests");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        (
            PathBuf::from(lines.next().unwrap()),
            PathBuf::from(lines.next().unwrap()),
        )
    })
}

/// Where worlds live: not under /tmp (or the checkout, which CI may put
/// under /tmp), so that no profile's /tmp or {CWD} rule covers them.
pub const OUTSIDE_ROOT: &str = "/var/tmp";

/// A temporary world, kept outside /tmp so that no profile's /tmp rule covers it.
pub struct World {
    pub root: tempfile::TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    pub profiles: PathBuf,
}

impl World {
    pub fn new() -> World {
        let root = tempfile::Builder::new()
            .prefix("sbx")
            .tempdir_in(OUTSIDE_ROOT)
            .unwrap();
        let home = root.path().join("home");
        let work = root.path().join("work");
        let profiles = root.path().join("profiles");
        for d in [&home, &work, &profiles] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_secret"), "TOP-SECRET\n").unwrap();
        World {
            root,
            home,
            work,
            profiles,
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Write a profile; `extra` is YAML appended after the base that lets
    /// python and sh run.
    pub fn profile(&self, name: &str, yaml: &str) {
        std::fs::write(self.profiles.join(format!("{name}.yaml")), yaml).unwrap();
    }

    /// A profile whose filesystem section lets python run, plus `fs_extra`
    /// lines (already indented list items under ro/rox/rw/rwx keys) and the rest.
    pub fn py_profile(&self, name: &str, fs: &[(&str, &[&str])], rest: &str) {
        let (_, prefix) = python();
        let mut y = String::from("general:\n  best_effort: false\nfilesystem:\n");
        let mut lists: Vec<(&str, Vec<String>)> = vec![
            ("ro", vec![]),
            (
                "rox",
                vec![
                    prefix.display().to_string(),
                    "/usr".into(),
                    "/bin".into(),
                    "/lib".into(),
                    "/lib64".into(),
                ],
            ),
            ("rw", vec!["{CWD}".into(), "/dev/null".into()]),
            ("rwx", vec![]),
        ];
        for (key, paths) in fs {
            let l = lists.iter_mut().find(|(k, _)| k == key).unwrap();
            l.1.extend(paths.iter().map(|p| p.to_string()));
        }
        for (k, v) in lists {
            y.push_str(&format!("  {k}:\n"));
            for p in v {
                y.push_str(&format!("    - \"{p}\"\n"));
            }
        }
        y.push_str(rest);
        self.profile(name, &y);
    }

    /// Run `toolsrv sandbox-exec` with HOME pointing into the world.
    pub fn exec(&self, profile: &str, argv: &[OsString], env: &[(&str, &str)]) -> Output {
        self.exec_with(profile, argv, env, &[])
    }

    pub fn exec_with(
        &self,
        profile: &str,
        argv: &[OsString],
        env: &[(&str, &str)],
        flags: &[&str],
    ) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolsrv"));
        cmd.arg("sandbox-exec")
            .arg("--profile")
            .arg(profile)
            .arg("--cwd")
            .arg(&self.work)
            .arg("--profiles-dir")
            .arg(&self.profiles)
            .args(flags)
            .arg("--")
            .args(argv)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

/// argv running a python snippet that prints `OK` or the errno name of the
/// OSError it raised. `body` may use `w` (work dir) and `r` (world root).
pub fn py(world: &World, body: &str) -> Vec<OsString> {
    let (exe, _) = python();
    let code = format!(
        "import os, sys, errno, socket\nw = {w:?}\nr = {r:?}\ntry:\n{body}\n    print('OK')\nexcept OSError as e:\n    print(errno.errorcode.get(e.errno, str(e.errno)))\n",
        w = world.work.display().to_string(),
        r = world.root.path().display().to_string(),
        body = body
            .lines()
            .map(|l| format!("    {l}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    vec![exe.clone().into(), "-I".into(), "-c".into(), code.into()]
}

/// The tool's stdout (trimmed), panicking with stderr if the run failed.
pub fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}
