//! The namespace as a table of files: names, parents, permissions and qids.
//! Lookup only; what a file does on read or write lives in `namespace`.

use crate::ninep::fs::{DMDIR, QTAUTH, QTDIR, QTFILE, Qid};

/// Every file the namespace can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum File {
    Auth,
    Root,
    Ctl,
    Tools,
    All,
    Info,
    ToolsRev,
    Search,
    BypassDir,
    Pending,
    Resolve,
    ProcDir,
    ProcList,
    ProcNew,
    ProcNewBg,
    Pid(u64),
    Out(u64),
    Wait(u64),
    Stat(u64),
    PidCtl(u64),
}

struct Entry {
    file: File,
    name: &'static str,
    parent: File,
    perm: u32,
}

const R: u32 = 0o444;
const W: u32 = 0o222;
const RW: u32 = 0o666;
const DIR: u32 = DMDIR | 0o555;

/// The fixed part of the tree, in directory order.
const TABLE: &[Entry] = &[
    Entry {
        file: File::Ctl,
        name: "ctl",
        parent: File::Root,
        perm: W,
    },
    Entry {
        file: File::Tools,
        name: "tools",
        parent: File::Root,
        perm: RW,
    },
    Entry {
        file: File::All,
        name: "all",
        parent: File::Root,
        perm: R,
    },
    Entry {
        file: File::Info,
        name: "info",
        parent: File::Root,
        perm: R,
    },
    Entry {
        file: File::ToolsRev,
        name: "tools_rev",
        parent: File::Root,
        perm: RW,
    },
    Entry {
        file: File::Search,
        name: "search",
        parent: File::Root,
        perm: RW,
    },
    Entry {
        file: File::BypassDir,
        name: "bypass",
        parent: File::Root,
        perm: DIR,
    },
    Entry {
        file: File::Pending,
        name: "pending",
        parent: File::BypassDir,
        perm: R,
    },
    Entry {
        file: File::Resolve,
        name: "resolve",
        parent: File::BypassDir,
        perm: W,
    },
    Entry {
        file: File::ProcDir,
        name: "proc",
        parent: File::Root,
        perm: DIR,
    },
    Entry {
        file: File::ProcList,
        name: "list",
        parent: File::ProcDir,
        perm: RW,
    },
    Entry {
        file: File::ProcNew,
        name: "new",
        parent: File::ProcDir,
        perm: RW,
    },
    Entry {
        file: File::ProcNewBg,
        name: "new.bg",
        parent: File::ProcDir,
        perm: RW,
    },
];

/// The files inside each `proc/{pid}` directory.
const PID_FILES: &[(&str, u32)] = &[("out", R), ("wait", R), ("stat", R), ("ctl", W)];

impl File {
    pub fn name(self) -> String {
        match self {
            File::Auth => "auth".into(),
            File::Root => "/".into(),
            File::Pid(p) => p.to_string(),
            File::Out(_) => "out".into(),
            File::Wait(_) => "wait".into(),
            File::Stat(_) => "stat".into(),
            File::PidCtl(_) => "ctl".into(),
            f => TABLE
                .iter()
                .find(|e| e.file == f)
                .map_or_else(String::new, |e| e.name.to_string()),
        }
    }

    /// The process a `proc/{pid}` file belongs to.
    pub fn pid(self) -> Option<u64> {
        match self {
            File::Pid(p) | File::Out(p) | File::Wait(p) | File::Stat(p) | File::PidCtl(p) => {
                Some(p)
            }
            _ => None,
        }
    }

    /// Permission bits, with `DMDIR` for directories.
    pub fn perm(self) -> u32 {
        match self {
            File::Auth => crate::ninep::fs::DMAUTH | 0o666,
            File::Root | File::Pid(_) => DIR,
            File::Out(_) | File::Wait(_) | File::Stat(_) => R,
            File::PidCtl(_) => W,
            f => TABLE.iter().find(|e| e.file == f).map_or(0, |e| e.perm),
        }
    }

    pub fn is_dir(self) -> bool {
        self.perm() & DMDIR != 0
    }

    pub fn parent(self) -> File {
        match self {
            File::Auth | File::Root => File::Root,
            File::Pid(_) => File::ProcDir,
            File::Out(p) | File::Wait(p) | File::Stat(p) | File::PidCtl(p) => File::Pid(p),
            f => TABLE
                .iter()
                .find(|e| e.file == f)
                .map_or(File::Root, |e| e.parent),
        }
    }

    /// The fixed child `name` of this directory (pids are resolved by the caller).
    pub fn child(self, name: &str) -> Option<File> {
        if let File::Pid(p) = self {
            return match name {
                "out" => Some(File::Out(p)),
                "wait" => Some(File::Wait(p)),
                "stat" => Some(File::Stat(p)),
                "ctl" => Some(File::PidCtl(p)),
                _ => None,
            };
        }
        TABLE
            .iter()
            .find(|e| e.parent == self && e.name == name)
            .map(|e| e.file)
    }

    /// The fixed children of this directory, in order.
    pub fn children(self) -> Vec<File> {
        if let File::Pid(p) = self {
            return PID_FILES
                .iter()
                .filter_map(|(n, _)| File::Pid(p).child(n))
                .collect();
        }
        TABLE
            .iter()
            .filter(|e| e.parent == self)
            .map(|e| e.file)
            .collect()
    }

    pub fn qid(self) -> Qid {
        let ty = if self == File::Auth {
            QTAUTH
        } else if self.is_dir() {
            QTDIR
        } else {
            QTFILE
        };
        let path = match self {
            File::Auth => 1,
            File::Root => 2,
            File::Pid(p) => pid_path(p, 0),
            File::Out(p) => pid_path(p, 1),
            File::Wait(p) => pid_path(p, 2),
            File::Stat(p) => pid_path(p, 3),
            File::PidCtl(p) => pid_path(p, 4),
            f => 16 + TABLE.iter().position(|e| e.file == f).unwrap_or(0) as u64,
        };
        Qid {
            ty,
            version: 0,
            path,
        }
    }
}

fn pid_path(pid: u64, kind: u64) -> u64 {
    (1 << 63) | (pid << 3) | kind
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_walks_back_to_root() {
        for e in TABLE {
            assert_eq!(e.parent.child(e.name), Some(e.file));
            let mut f = e.file;
            for _ in 0..4 {
                f = f.parent();
            }
            assert_eq!(f, File::Root);
        }
        assert_eq!(File::Pid(7).child("wait"), Some(File::Wait(7)));
        assert_eq!(File::Wait(7).parent(), File::Pid(7));
        assert_eq!(File::Pid(7).parent(), File::ProcDir);
    }

    #[test]
    fn qids_are_unique() {
        let mut files: Vec<File> = TABLE.iter().map(|e| e.file).collect();
        files.extend([File::Root, File::Auth]);
        for p in [1, 2] {
            files.push(File::Pid(p));
            files.extend(File::Pid(p).children());
        }
        let mut paths: Vec<u64> = files.iter().map(|f| f.qid().path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), files.len());
    }
}
