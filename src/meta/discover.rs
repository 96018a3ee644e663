//! Discovery over the tools directories with a per-file cache keyed by
//! (mtime, size, inode) and a per-directory listing cache keyed by mtime.
//!
//! A warm discovery stats each directory; only when a directory changed, or
//! at most every [`DEFAULT_RECHECK`], does it stat each `.meta`, and it
//! re-reads only files whose key changed (a new file shows up at once, since
//! adding it changes its directory; an in-place edit within the recheck period). A key is only trusted once the file (or
//! directory) is older than [`RACY`], because a rewrite within the
//! filesystem's timestamp granularity could keep the same mtime. What depends
//! on the host (variants, PATH, co-located executables) is re-resolved when
//! an entry is older than the host TTL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant, SystemTime};

use super::lint::{Checked, analyze};
use super::tool::{Built, Tool, build};
use super::{Host, Problem, Severity, parse_meta, tools_path_from_env};

/// Timestamps closer than this to "now" are not trusted for caching.
pub const RACY: Duration = Duration::from_secs(1);

/// Default time after which host-dependent resolution is redone.
pub const DEFAULT_HOST_TTL: Duration = Duration::from_secs(2);

/// Default time after which every `.meta` is stat-ed again (in-place edits
/// that leave the directory alone are seen within this).
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(1);

/// Every tool discovered on this host.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Visible tools by name (the first directory defining a name wins).
    pub tools: BTreeMap<String, Arc<Tool>>,
    /// Tools with variants of which none matches here (sorted).
    pub hidden: Vec<String>,
    /// Everything wrong, in directory then name order.
    pub problems: Vec<Problem>,
}

impl Catalog {
    /// True when some problem is an error.
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(|p| p.severity == Severity::Error)
    }
}

/// Finds tools in a list of directories; cheap to call again and again.
#[derive(Debug)]
pub struct Discoverer {
    dirs: Vec<PathBuf>,
    host: Host,
    host_ttl: Duration,
    recheck: Duration,
    cache: Mutex<Cache>,
    /// The last catalog built, for callers that must not wait for a pass
    /// another thread is running.
    published: Mutex<Option<Arc<Catalog>>>,
    /// A background thread does the periodic full checks
    /// ([`Discoverer::spawn_refresher`]); `discover` only does cheap passes.
    background: AtomicBool,
}

/// Counters of the work discovery did (for tests and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiscoverStats {
    /// Directory listings read.
    pub dirs_listed: u64,
    /// `.meta` files read and parsed.
    pub files_read: u64,
    /// Resolutions (variants + command) done.
    pub resolutions: u64,
    /// Passes that stat-ed every `.meta` file.
    pub full_checks: u64,
}

#[derive(Debug, Default)]
struct Cache {
    stats: DiscoverStats,
    dirs: HashMap<PathBuf, DirCache>,
    files: HashMap<PathBuf, FileCache>,
    last: Option<Arc<Catalog>>,
    /// When every file was last stat-ed.
    full_at: Option<Instant>,
}

#[derive(Debug)]
struct DirCache {
    mtime: SystemTime,
    trusted: bool,
    names: Arc<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileKey {
    mtime: SystemTime,
    size: u64,
    ino: u64,
    dev: u64,
}

#[derive(Debug)]
struct FileCache {
    key: FileKey,
    trusted: bool,
    text: String,
    checked: Result<Arc<Checked>, Problem>,
    built: Option<BuiltCache>,
}

#[derive(Debug)]
struct BuiltCache {
    at: Instant,
    tool: Option<Arc<Tool>>,
    hidden: bool,
    problems: Vec<Problem>,
}

impl BuiltCache {
    fn same(&self, b: &Built) -> bool {
        self.hidden == b.hidden
            && self.problems == b.problems
            && match (&self.tool, &b.tool) {
                (None, None) => true,
                (Some(x), Some(y)) => x.command == y.command && x.variant == y.variant,
                _ => false,
            }
    }
}

fn trusted(t: SystemTime, now: SystemTime) -> bool {
    now.duration_since(t).is_ok_and(|age| age >= RACY)
}

impl Discoverer {
    /// Discovers in `dirs`, in order, for the current host. Relative
    /// directories are made absolute now, so commands are absolute paths.
    pub fn new(dirs: Vec<PathBuf>) -> Discoverer {
        let dirs = dirs
            .into_iter()
            .map(|d| std::path::absolute(&d).unwrap_or(d))
            .collect();
        Discoverer {
            dirs,
            host: Host::current(),
            host_ttl: DEFAULT_HOST_TTL,
            recheck: DEFAULT_RECHECK,
            cache: Mutex::new(Cache::default()),
            published: Mutex::new(None),
            background: AtomicBool::new(false),
        }
    }

    /// Discovers in [`tools_path_from_env`].
    pub fn from_env() -> Discoverer {
        Discoverer::new(tools_path_from_env())
    }

    /// Resolves for another host description (tests, remote hosts).
    pub fn with_host(mut self, host: Host) -> Discoverer {
        self.host = host;
        self
    }

    /// How long host-dependent resolution (variants, PATH) is reused.
    pub fn with_host_ttl(mut self, ttl: Duration) -> Discoverer {
        self.host_ttl = ttl;
        self
    }

    /// How often every `.meta` is stat-ed even when no directory changed
    /// (`Duration::ZERO`: on every discovery).
    pub fn with_recheck(mut self, recheck: Duration) -> Discoverer {
        self.recheck = recheck;
        self
    }

    /// The directories searched, first wins.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The host tools are resolved for.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Work done so far.
    pub fn stats(&self) -> DiscoverStats {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).stats
    }

    /// The current catalog. Returns the previous `Arc` when nothing changed.
    ///
    /// With a refresher running, this never stats every file itself: it
    /// sees new and removed files at once (their directory changed), and if
    /// the refresher is in the middle of a pass it answers the last catalog
    /// instead of waiting for it.
    pub fn discover(&self) -> Arc<Catalog> {
        if self.background.load(Ordering::Acquire) {
            match self.cache.try_lock() {
                Ok(mut cache) => return self.pass(&mut cache, false),
                Err(TryLockError::Poisoned(p)) => return self.pass(&mut p.into_inner(), false),
                Err(TryLockError::WouldBlock) => {
                    if let Some(last) = self.last_published() {
                        return last;
                    }
                }
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let full = !self.background.load(Ordering::Acquire)
            && cache
                .full_at
                .is_none_or(|t| now.duration_since(t) >= self.period());
        self.pass(&mut cache, full)
    }

    /// How often every file is stat-ed and host-dependent resolution redone.
    fn period(&self) -> Duration {
        self.recheck.min(self.host_ttl)
    }

    fn last_published(&self) -> Option<Arc<Catalog>> {
        self.published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Starts a thread that discovers at once (so the first request finds a
    /// warm catalog) and then does the periodic full checks, off the
    /// request path. It ends when the last `Arc` of the discoverer is dropped.
    pub fn spawn_refresher(self: &Arc<Self>) -> std::io::Result<()> {
        let weak = Arc::downgrade(self);
        let period = self.period().max(Duration::from_millis(10));
        std::thread::Builder::new()
            .name("discover-tools".into())
            .spawn(move || {
                loop {
                    {
                        let Some(d) = weak.upgrade() else { return };
                        let mut cache = d.cache.lock().unwrap_or_else(|p| p.into_inner());
                        d.background.store(true, Ordering::Release);
                        d.pass(&mut cache, true);
                    }
                    std::thread::sleep(period);
                }
            })?;
        Ok(())
    }

    /// One discovery pass; `full` stats every file and redoes host-dependent
    /// resolution where it is due.
    fn pass(&self, cache: &mut Cache, full: bool) -> Arc<Catalog> {
        let now_sys = SystemTime::now();
        let now = Instant::now();
        if !full
            && let Some(last) = &cache.last
            && self.dirs_unchanged(cache)
        {
            return last.clone();
        }
        if full {
            cache.stats.full_checks += 1;
            cache.full_at = Some(now);
        }
        let mut changed = cache.last.is_none();
        let mut dir_problems: Vec<(usize, Problem)> = Vec::new();
        // (dir index, dir, name) in discovery order; shadowed names as notes.
        let mut entries: Vec<(usize, PathBuf)> = Vec::new();
        let mut claimed: HashMap<String, PathBuf> = HashMap::new();
        let mut seen_dirs = HashSet::new();

        for (di, dir) in self.dirs.iter().enumerate() {
            let Some(names) =
                self.list_dir(cache, dir, now_sys, &mut changed, &mut dir_problems, di)
            else {
                continue;
            };
            seen_dirs.insert(dir.clone());
            for name in names.iter() {
                let meta = dir.join(format!("{name}.meta"));
                if let Some(first) = claimed.get(name) {
                    let msg = format!(
                        "tool `{name}` is shadowed by {} (an earlier directory in the tools path wins)",
                        first.display()
                    );
                    dir_problems.push((di, Problem::new(&meta, Severity::Note, msg)));
                    continue;
                }
                claimed.insert(name.clone(), meta.clone());
                entries.push((di, meta));
            }
        }
        let before = cache.dirs.len();
        cache.dirs.retain(|d, _| seen_dirs.contains(d));
        changed |= cache.dirs.len() != before;

        let mut live = HashSet::new();
        for (di, meta) in &entries {
            let dir = &self.dirs[*di];
            // Between full checks only files not seen before are looked at.
            if (!full && cache.files.contains_key(meta))
                || self.refresh_file(cache, dir, meta, now_sys, now, &mut changed)
            {
                live.insert(meta.clone());
            }
        }
        let before = cache.files.len();
        cache.files.retain(|p, _| live.contains(p));
        changed |= cache.files.len() != before;

        if !changed && let Some(last) = &cache.last {
            return last.clone();
        }
        let mut cat = Catalog::default();
        let mut notes = dir_problems.into_iter().peekable();
        for (di, meta) in &entries {
            while let Some((ndi, _)) = notes.peek()
                && ndi < di
            {
                if let Some((_, p)) = notes.next() {
                    cat.problems.push(p);
                }
            }
            let Some(fc) = cache.files.get(meta) else {
                continue;
            };
            match &fc.checked {
                Err(p) => cat.problems.push(p.clone()),
                Ok(c) => cat.problems.extend(c.problems.iter().cloned()),
            }
            if let Some(b) = &fc.built {
                cat.problems.extend(b.problems.iter().cloned());
                if let Some(t) = &b.tool {
                    cat.tools.insert(t.name.clone(), t.clone());
                }
                if b.hidden
                    && let Ok(c) = &fc.checked
                {
                    cat.hidden.push(c.raw.name.clone());
                }
            }
        }
        cat.problems.extend(notes.map(|(_, p)| p));
        cat.hidden.sort();
        let cat = Arc::new(cat);
        cache.last = Some(cat.clone());
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = Some(cat.clone());
        cat
    }

    /// True when every directory is as last listed (same mtime, old enough to
    /// trust) and no directory appeared or vanished.
    fn dirs_unchanged(&self, cache: &Cache) -> bool {
        self.dirs.iter().all(|dir| {
            let now = std::fs::metadata(dir)
                .ok()
                .filter(|m| m.is_dir())
                .and_then(|m| m.modified().ok());
            match (cache.dirs.get(dir), now) {
                (Some(dc), Some(m)) => dc.trusted && dc.mtime == m,
                (None, None) => true,
                _ => false,
            }
        })
    }

    /// The tool names in `dir`, from the cache when its mtime is unchanged.
    fn list_dir(
        &self,
        cache: &mut Cache,
        dir: &Path,
        now: SystemTime,
        changed: &mut bool,
        problems: &mut Vec<(usize, Problem)>,
        di: usize,
    ) -> Option<Arc<Vec<String>>> {
        let md = match std::fs::metadata(dir) {
            Ok(md) if md.is_dir() => md,
            Ok(_) => {
                problems.push((
                    di,
                    Problem::warning(dir, "in the tools path but not a directory"),
                ));
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(dir = %dir.display(), "tools directory does not exist");
                return None;
            }
            Err(e) => {
                problems.push((
                    di,
                    Problem::warning(dir, format!("cannot read tools directory: {e}")),
                ));
                return None;
            }
        };
        let mtime = md.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if let Some(dc) = cache.dirs.get(dir)
            && dc.trusted
            && dc.mtime == mtime
        {
            return Some(dc.names.clone());
        }
        cache.stats.dirs_listed += 1;
        let mut names = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let f = e.file_name();
                    let f = f.to_str()?;
                    let name = f.strip_suffix(".meta")?;
                    (!name.is_empty() && !name.starts_with('.')).then(|| name.to_string())
                })
                .collect::<Vec<_>>(),
            Err(e) => {
                problems.push((
                    di,
                    Problem::warning(dir, format!("cannot list tools directory: {e}")),
                ));
                return None;
            }
        };
        names.sort();
        let names = Arc::new(names);
        let old = cache.dirs.insert(
            dir.to_path_buf(),
            DirCache {
                mtime,
                trusted: trusted(mtime, now),
                names: names.clone(),
            },
        );
        *changed |= old.is_none_or(|o| o.names != names);
        Some(names)
    }

    /// Brings one file's cache entry up to date. False when it is gone.
    fn refresh_file(
        &self,
        cache: &mut Cache,
        dir: &Path,
        meta: &Path,
        now_sys: SystemTime,
        now: Instant,
        changed: &mut bool,
    ) -> bool {
        let Ok(md) = std::fs::metadata(meta) else {
            return false;
        };
        if !md.is_file() {
            return false;
        }
        let key = FileKey {
            mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            size: md.len(),
            ino: md.ino(),
            dev: md.dev(),
        };
        let fresh = cache
            .files
            .get(meta)
            .is_some_and(|fc| fc.trusted && fc.key == key);
        if !fresh {
            cache.stats.files_read += 1;
            let (text, checked) = load(meta);
            let same = cache
                .files
                .get(meta)
                .is_some_and(|fc| fc.text == text && fc.checked.is_ok() == checked.is_ok());
            if let (true, Some(fc)) = (same, cache.files.get_mut(meta)) {
                fc.key = key;
                fc.trusted = trusted(key.mtime, now_sys);
            } else {
                *changed = true;
                cache.files.insert(
                    meta.to_path_buf(),
                    FileCache {
                        key,
                        trusted: trusted(key.mtime, now_sys),
                        text,
                        checked,
                        built: None,
                    },
                );
            }
        }
        let Some(fc) = cache.files.get_mut(meta) else {
            return false;
        };
        let stale = fc
            .built
            .as_ref()
            .is_none_or(|b| now.duration_since(b.at) >= self.host_ttl);
        if stale {
            cache.stats.resolutions += 1;
            let built = match &fc.checked {
                Ok(c) => build(c, dir, Some(&fc.text), &self.host),
                Err(_) => Built {
                    tool: None,
                    hidden: false,
                    problems: Vec::new(),
                },
            };
            match &mut fc.built {
                Some(old) if old.same(&built) => old.at = now,
                slot => {
                    *changed = true;
                    *slot = Some(BuiltCache {
                        at: now,
                        tool: built.tool.map(Arc::new),
                        hidden: built.hidden,
                        problems: built.problems,
                    });
                }
            }
        }
        true
    }
}

/// Reads and checks one `.meta` file.
fn load(meta: &Path) -> (String, Result<Arc<Checked>, Problem>) {
    let text = match std::fs::read(meta) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => return (String::new(), Err(Problem::error(meta, "not valid UTF-8"))),
        },
        Err(e) => {
            return (
                String::new(),
                Err(Problem::error(meta, format!("cannot read: {e}"))),
            );
        }
    };
    let name = meta
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let checked = parse_meta(&name, meta, &text).map(|raw| Arc::new(analyze(raw, &text)));
    (text, checked)
}

/// What `check` learns about one `.meta` file on a host.
#[derive(Debug)]
pub struct FileReport {
    /// The tool, when it loads and is visible.
    pub tool: Option<Tool>,
    /// No variant matches on this host.
    pub hidden: bool,
    /// Every problem, lint and resolution.
    pub problems: Vec<Problem>,
}

/// Parses, lints and resolves a single `.meta` file (for `toolsrv check`).
pub fn check_file(meta: &Path, host: &Host) -> FileReport {
    let (text, checked) = load(meta);
    let checked = match checked {
        Ok(c) => c,
        Err(p) => {
            return FileReport {
                tool: None,
                hidden: false,
                problems: vec![p],
            };
        }
    };
    let dir = meta.parent().unwrap_or(Path::new("."));
    let built = build(&checked, dir, Some(&text), host);
    let mut problems = checked.problems.clone();
    problems.extend(built.problems);
    FileReport {
        tool: built.tool,
        hidden: built.hidden,
        problems,
    }
}

#[cfg(test)]
#[path = "discover_tests.rs"]
mod tests;
