//! Tool metadata: `.meta` parsing, variants, merging, command resolution and
//! discovery over `OLLIE_TOOLS_PATH`.

use std::path::PathBuf;

/// What running a tool means once resolution is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// An executable file, run directly.
    Exec(PathBuf),
    /// A shell command from `cmd`, run with `sh -c`.
    Shell(String),
}
