//! Per-profile cache of built Landlock rulesets: one ruleset fd is shared by
//! every call whose rules expand the same, until a rule path changes.
//!
//! Building a ruleset opens every profile path and adds one rule per path
//! (tens of syscalls per call). A ruleset fd can be passed to
//! `landlock_restrict_self` any number of times, so it is built once per
//! [`RuleKey`] (everything that goes into the rules: ABI, network mode, the
//! expanded paths with their access, the executable, ports) and reused. An
//! entry is re-validated at most every [`REVALIDATE`]: every path it looked at
//! is stat-ed again and compared (device, inode, kind; and for the executable
//! also size and mtime, since its `#!` line decides the interpreter rules).
//! Any difference, including a path that appeared or vanished, rebuilds it.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long a cached ruleset is trusted before its paths are checked again.
pub(crate) const REVALIDATE: Duration = Duration::from_secs(1);
/// Entries kept per profile; past this the cache starts over.
const MAX_ENTRIES: usize = 256;

/// Everything a ruleset is built from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RuleKey {
    pub abi: u32,
    pub net: u8,
    pub best_effort: bool,
    /// Expanded profile paths with their access bits.
    pub paths: Vec<(PathBuf, u64)>,
    pub exe: Option<PathBuf>,
    pub add_exec: bool,
    pub ldd: bool,
    pub bind_tcp: Vec<u16>,
    pub connect_tcp: Vec<u16>,
}

/// What a path looked like when a ruleset was built from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    dir: bool,
    /// Size and mtime, for the executable only.
    content: Option<(u64, Option<SystemTime>)>,
}

fn stamp(path: &Path, content: bool) -> Option<Stamp> {
    let md = std::fs::metadata(path).ok()?;
    Some(Stamp {
        dev: md.dev(),
        ino: md.ino(),
        dir: md.is_dir(),
        content: content.then(|| (md.size(), md.modified().ok())),
    })
}

/// The stamps of every path a ruleset depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamps(Vec<(PathBuf, bool, Option<Stamp>)>);

impl Stamps {
    /// Stamp `paths` (what the rules name) and `exe` (content too).
    pub(crate) fn take<'a>(paths: impl IntoIterator<Item = &'a Path>, exe: Option<&Path>) -> Self {
        let mut v: Vec<(PathBuf, bool, Option<Stamp>)> = paths
            .into_iter()
            .map(|p| (p.to_path_buf(), false, stamp(p, false)))
            .collect();
        if let Some(e) = exe {
            v.push((e.to_path_buf(), true, stamp(e, true)));
        }
        Stamps(v)
    }

    fn still_valid(&self) -> bool {
        self.0.iter().all(|(p, c, s)| stamp(p, *c) == *s)
    }
}

#[derive(Debug)]
struct Entry {
    ruleset: Option<Arc<OwnedFd>>,
    stamps: Stamps,
    checked: Instant,
}

/// Built rulesets of one profile. Cloning a profile gives the clone an empty cache.
#[derive(Debug, Default)]
pub(crate) struct RulesetCache {
    map: Mutex<HashMap<RuleKey, Entry>>,
    builds: std::sync::atomic::AtomicU64,
}

impl Clone for RulesetCache {
    fn clone(&self) -> Self {
        RulesetCache::default()
    }
}

impl RulesetCache {
    /// The ruleset for `key`, built by `build` (which returns the ruleset and
    /// the stamps taken before it looked at the paths) when missing or stale.
    pub(crate) fn get_or_build<E>(
        &self,
        key: RuleKey,
        build: impl FnOnce() -> Result<(Option<OwnedFd>, Stamps), E>,
    ) -> Result<Option<Arc<OwnedFd>>, E> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get_mut(&key) {
            if e.checked.elapsed() < REVALIDATE {
                return Ok(e.ruleset.clone());
            }
            if e.stamps.still_valid() {
                e.checked = Instant::now();
                return Ok(e.ruleset.clone());
            }
            tracing::debug!(exe = ?key.exe, "sandbox rule paths changed; rebuilding the ruleset");
        }
        let (ruleset, stamps) = build()?;
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ruleset = ruleset.map(Arc::new);
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(
            key,
            Entry {
                ruleset: ruleset.clone(),
                stamps,
                checked: Instant::now(),
            },
        );
        Ok(ruleset)
    }

    /// How many rulesets were built (not taken from the cache).
    pub(crate) fn builds(&self) -> u64 {
        self.builds.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forget when entries were last checked, so the next use re-validates (tests).
    #[cfg(test)]
    pub(crate) fn expire(&self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for e in map.values_mut() {
            let back = REVALIDATE + Duration::from_millis(1);
            e.checked = Instant::now().checked_sub(back).unwrap_or(e.checked);
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
