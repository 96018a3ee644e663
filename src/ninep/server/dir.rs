//! Directory reads: a directory's stat entries packed whole into reads, with the
//! 9P rule that a read continues where the last one ended or restarts at offset 0.

use crate::ninep::fs::{FileTree, FsError};
use crate::ninep::wire::encode_stat;

/// Where a directory fid's reads have got to.
#[derive(Default)]
pub(super) struct DirState {
    entries: Vec<Vec<u8>>,
    next: usize,
    offset: u64,
}

/// Packs whole stat entries of a directory into at most `count` bytes.
/// Offset 0 (re)reads the directory; any other offset must continue the last read.
pub(super) fn read_dir<T: FileTree>(
    tree: &T,
    node: &T::Node,
    dir: &mut DirState,
    offset: u64,
    count: u32,
) -> Result<Vec<u8>, FsError> {
    if offset == 0 {
        let mut entries = Vec::new();
        for stat in tree.readdir(node)? {
            let mut buf = Vec::new();
            encode_stat(&stat, &mut buf).map_err(|e| FsError::new(e.to_string()))?;
            entries.push(buf);
        }
        *dir = DirState {
            entries,
            next: 0,
            offset: 0,
        };
    } else if offset != dir.offset {
        return Err(FsError::new(format!(
            "directory read at offset {offset}, expected {}: read directories sequentially or restart at 0",
            dir.offset
        )));
    }
    let mut data = Vec::new();
    while let Some(entry) = dir.entries.get(dir.next) {
        if data.len() + entry.len() > count as usize {
            break;
        }
        data.extend_from_slice(entry);
        dir.next += 1;
    }
    if data.is_empty() && dir.next < dir.entries.len() {
        return Err(FsError::new(format!(
            "read count {count} is too small for the next directory entry"
        )));
    }
    dir.offset += data.len() as u64;
    Ok(data)
}
