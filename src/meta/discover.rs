//! Discovery over the tools directories with a per-file cache keyed by
//! (mtime, size, inode) and a per-directory listing cache keyed by mtime.
//!
//! A warm discovery stats each directory and each `.meta`, and re-reads only
//! files whose key changed. A key is only trusted once the file (or
//! directory) is older than [`RACY`], because a rewrite within the
//! filesystem's timestamp granularity could keep the same mtime. What depends
//! on the host (variants, PATH, co-located executables) is re-resolved when
//! an entry is older than the host TTL.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::lint::{Checked, analyze};
use super::tool::{Built, Tool, build};
use super::{Host, Problem, Severity, parse_meta, tools_path_from_env};

/// Timestamps closer than this to "now" are not trusted for caching.
pub const RACY: Duration = Duration::from_secs(1);

/// Default time after which host-dependent resolution is redone.
pub const DEFAULT_HOST_TTL: Duration = Duration::from_secs(2);

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
    cache: Mutex<Cache>,
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
}

#[derive(Debug, Default)]
struct Cache {
    stats: DiscoverStats,
    /// Discovery pass counter, to find entries not seen in a pass.
    pass: u64,
    dirs: HashMap<PathBuf, DirCache>,
    last: Option<Arc<Catalog>>,
}

#[derive(Debug)]
struct DirCache {
    mtime: SystemTime,
    trusted: bool,
    names: Arc<Vec<String>>,
    /// By tool name.
    files: HashMap<String, FileCache>,
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
    seen: u64,
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
            cache: Mutex::new(Cache::default()),
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
    pub fn discover(&self) -> Arc<Catalog> {
        let mut guard = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let cache = &mut *guard;
        cache.pass += 1;
        let mut pass = Pass {
            now_sys: SystemTime::now(),
            now: Instant::now(),
            changed: cache.last.is_none(),
            host: None,
            problems: Vec::new(),
        };
        let listings: Vec<Option<Arc<Vec<String>>>> = self
            .dirs
            .iter()
            .enumerate()
            .map(|(di, dir)| self.list_dir(cache, dir, di, &mut pass))
            .collect();
        // The first directory listing a name owns it.
        let mut owner: HashMap<&str, usize> = HashMap::new();
        for (di, names) in listings.iter().enumerate() {
            for name in names.iter().flat_map(|n| n.iter()) {
                owner.entry(name.as_str()).or_insert(di);
            }
        }
        for (di, names) in listings.iter().enumerate() {
            let Some(names) = names else { continue };
            let dir = &self.dirs[di];
            let Some(dc) = cache.dirs.get_mut(dir) else {
                continue;
            };
            let fd = open_dir(dir);
            for name in names.iter() {
                let first = owner.get(name.as_str()).copied().unwrap_or(di);
                if first != di {
                    let msg = format!(
                        "tool `{name}` is shadowed by {} (an earlier directory in the tools path wins)",
                        meta_path(&self.dirs[first], name).display()
                    );
                    let p = Problem::new(&meta_path(dir, name), Severity::Note, msg);
                    pass.problems.push((di, p));
                    continue;
                }
                if let Some(fd) = &fd {
                    self.refresh_file(&mut cache.stats, cache.pass, dc, fd, dir, name, &mut pass);
                }
            }
            let before = dc.files.len();
            let current = cache.pass;
            dc.files.retain(|_, f| f.seen == current);
            pass.changed |= dc.files.len() != before;
        }
        let before = cache.dirs.len();
        cache.dirs.retain(|d, _| self.dirs.contains(d));
        pass.changed |= cache.dirs.len() != before;

        if !pass.changed
            && let Some(last) = &cache.last
        {
            return last.clone();
        }
        let cat = Arc::new(self.assemble(cache, &listings, &owner, pass.problems));
        cache.last = Some(cat.clone());
        cat
    }

    /// Builds the catalog from the cache, in directory then name order.
    fn assemble(
        &self,
        cache: &Cache,
        listings: &[Option<Arc<Vec<String>>>],
        owner: &HashMap<&str, usize>,
        notes: Vec<(usize, Problem)>,
    ) -> Catalog {
        let mut cat = Catalog::default();
        let mut notes = notes.into_iter().peekable();
        for (di, names) in listings.iter().enumerate() {
            while let Some((ndi, _)) = notes.peek()
                && *ndi < di
            {
                cat.problems.extend(notes.next().map(|(_, p)| p));
            }
            let Some(dc) = cache.dirs.get(&self.dirs[di]) else {
                continue;
            };
            for name in names.iter().flat_map(|n| n.iter()) {
                if owner.get(name.as_str()) != Some(&di) {
                    continue;
                }
                let Some(fc) = dc.files.get(name) else {
                    continue;
                };
                match &fc.checked {
                    Err(p) => cat.problems.push(p.clone()),
                    Ok(c) => cat.problems.extend(c.problems.iter().cloned()),
                }
                let Some(b) = &fc.built else { continue };
                cat.problems.extend(b.problems.iter().cloned());
                if let Some(t) = &b.tool {
                    cat.tools.insert(t.name.clone(), t.clone());
                }
                if b.hidden {
                    cat.hidden.push(name.clone());
                }
            }
        }
        cat.problems.extend(notes.map(|(_, p)| p));
        cat.hidden.sort();
        cat
    }

    /// The tool names in `dir`, from the cache when its mtime is unchanged.
    fn list_dir(
        &self,
        cache: &mut Cache,
        dir: &Path,
        di: usize,
        pass: &mut Pass,
    ) -> Option<Arc<Vec<String>>> {
        let md = std::fs::metadata(dir);
        if !md.as_ref().is_ok_and(|m| m.is_dir()) && cache.dirs.remove(dir).is_some() {
            pass.changed = true;
        }
        let md = match md {
            Ok(md) if md.is_dir() => md,
            Ok(_) => {
                let p = Problem::warning(dir, "in the tools path but not a directory");
                pass.problems.push((di, p));
                return None;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(dir = %dir.display(), "tools directory does not exist");
                return None;
            }
            Err(e) => {
                let p = Problem::warning(dir, format!("cannot read tools directory: {e}"));
                pass.problems.push((di, p));
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
                    let name = f.to_str()?.strip_suffix(".meta")?;
                    (!name.is_empty() && !name.starts_with('.')).then(|| name.to_string())
                })
                .collect::<Vec<_>>(),
            Err(e) => {
                let p = Problem::warning(dir, format!("cannot list tools directory: {e}"));
                pass.problems.push((di, p));
                return None;
            }
        };
        names.sort();
        let names = Arc::new(names);
        let trusted = trusted(mtime, pass.now_sys);
        match cache.dirs.get_mut(dir) {
            Some(dc) => {
                pass.changed |= dc.names != names;
                dc.mtime = mtime;
                dc.trusted = trusted;
                dc.names = names.clone();
            }
            None => {
                pass.changed = true;
                let dc = DirCache {
                    mtime,
                    trusted,
                    names: names.clone(),
                    files: HashMap::new(),
                };
                cache.dirs.insert(dir.to_path_buf(), dc);
            }
        }
        Some(names)
    }

    /// Brings one file's cache entry up to date and marks it seen.
    #[allow(clippy::too_many_arguments)]
    fn refresh_file(
        &self,
        stats: &mut DiscoverStats,
        current: u64,
        dc: &mut DirCache,
        fd: &OwnedFd,
        dir: &Path,
        name: &str,
        pass: &mut Pass,
    ) {
        let Some(key) = stat_meta(fd, name) else {
            return;
        };
        let fresh = dc
            .files
            .get(name)
            .is_some_and(|fc| fc.trusted && fc.key == key);
        if !fresh {
            stats.files_read += 1;
            let meta = meta_path(dir, name);
            let (text, checked) = load(&meta);
            let trusted = trusted(key.mtime, pass.now_sys);
            match dc.files.get_mut(name) {
                // Rewritten with the same text: nothing changed.
                Some(fc) if fc.text == text && fc.checked.is_ok() == checked.is_ok() => {
                    fc.key = key;
                    fc.trusted = trusted;
                }
                _ => {
                    pass.changed = true;
                    let fc = FileCache {
                        key,
                        trusted,
                        seen: current,
                        text,
                        checked,
                        built: None,
                    };
                    dc.files.insert(name.to_string(), fc);
                }
            }
        }
        let Some(fc) = dc.files.get_mut(name) else {
            return;
        };
        fc.seen = current;
        let stale = fc
            .built
            .as_ref()
            .is_none_or(|b| pass.now.duration_since(b.at) >= self.host_ttl);
        if !stale {
            return;
        }
        stats.resolutions += 1;
        let built = match &fc.checked {
            Ok(c) => {
                let host = pass.host.get_or_insert_with(|| self.host.indexed());
                build(c, dir, Some(&fc.text), host)
            }
            Err(_) => Built {
                tool: None,
                hidden: false,
                problems: Vec::new(),
            },
        };
        match &mut fc.built {
            Some(old) if old.same(&built) => old.at = pass.now,
            slot => {
                pass.changed = true;
                *slot = Some(BuiltCache {
                    at: pass.now,
                    tool: built.tool.map(Arc::new),
                    hidden: built.hidden,
                    problems: built.problems,
                });
            }
        }
    }
}

/// State of one discovery pass.
struct Pass {
    now_sys: SystemTime,
    now: Instant,
    changed: bool,
    /// The host with its PATH indexed, made when the first resolution needs it.
    host: Option<Host>,
    /// Directory problems and shadowing notes, by directory index.
    problems: Vec<(usize, Problem)>,
}

fn meta_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.meta"))
}

fn open_dir(dir: &Path) -> Option<OwnedFd> {
    use rustix::fs::{Mode, OFlags, open};
    open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// Stats `<name>.meta` relative to the open directory; `None` unless it is
/// a regular file (after following symlinks).
// The `stat` field types differ between architectures, hence the conversions.
#[allow(clippy::useless_conversion)]
fn stat_meta(fd: &OwnedFd, name: &str) -> Option<FileKey> {
    use rustix::fs::{AtFlags, FileType, statat};
    let st = statat(fd, format!("{name}.meta").as_str(), AtFlags::empty()).ok()?;
    if !FileType::from_raw_mode(st.st_mode as _).is_file() {
        return None;
    }
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
    Some(FileKey {
        mtime: SystemTime::UNIX_EPOCH + Duration::new(secs, nanos),
        size: u64::try_from(st.st_size).unwrap_or(0),
        ino: u64::try_from(st.st_ino).unwrap_or(0),
        dev: u64::try_from(st.st_dev).unwrap_or(0),
    })
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
