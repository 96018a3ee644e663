//! On-disk cache of tool embeddings, keyed by SHA-256 of the model name and
//! the embedded text, so a vector is recomputed only when its `.meta` changes.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Key of one cached vector: SHA-256 over `model`, a NUL, and the text.
pub type Key = [u8; 32];

const MAGIC: &[u8; 8] = b"TSEMB\x00\x00\x01";

/// Hashes `(model, text)` into a cache key. SHA-256 because the key must be
/// stable across runs, platforms and Rust versions (std's hasher is not), and
/// a collision would silently serve the wrong tool's vector.
pub fn key(model: &str, text: &str) -> Key {
    let mut h = Sha256::new();
    h.update(model.as_bytes());
    h.update([0u8]);
    h.update(text.as_bytes());
    h.finalize().into()
}

/// The cache file for `model` under `dir`. One file per model so switching
/// models never mixes vector spaces.
pub fn path_for(dir: &Path, model: &str) -> PathBuf {
    let k = key("toolsrv-embedding-cache", model);
    let hex: String = k[..8].iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("embeddings-{hex}.bin"))
}

/// Reads a cache file. A missing file is an empty cache; a corrupt or foreign
/// one is treated as empty too (it will be rewritten), with a warning.
pub fn load(path: &Path) -> HashMap<Key, Vec<f32>> {
    match fs::read(path) {
        Ok(bytes) => match decode(&bytes) {
            Some(map) => map,
            None => {
                tracing::warn!(path = %path.display(), "ignoring unreadable embedding cache");
                HashMap::new()
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => HashMap::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read embedding cache");
            HashMap::new()
        }
    }
}

/// Layout: magic, entry count (u32 LE), then per entry: key (32 bytes),
/// dimension (u32 LE), that many f32 LE.
fn decode(bytes: &[u8]) -> Option<HashMap<Key, Vec<f32>>> {
    let rest = bytes.strip_prefix(MAGIC.as_slice())?;
    let (count, mut rest) = take_u32(rest)?;
    let mut map = HashMap::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let (k, r) = rest.split_first_chunk::<32>()?;
        let (dim, r) = take_u32(r)?;
        let len = (dim as usize).checked_mul(4)?;
        if r.len() < len {
            return None;
        }
        let (data, r) = r.split_at(len);
        let v = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        map.insert(*k, v);
        rest = r;
    }
    rest.is_empty().then_some(map)
}

fn take_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (n, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*n), rest))
}

/// Writes the cache atomically (temporary file, then rename), creating `dir`.
pub fn store(path: &Path, map: &HashMap<Key, Vec<f32>>) -> io::Result<()> {
    let mut buf = Vec::new();
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&u32::try_from(map.len()).unwrap_or(u32::MAX).to_le_bytes());
    let mut keys: Vec<&Key> = map.keys().collect();
    keys.sort_unstable();
    for k in keys {
        let v = &map[k];
        buf.extend_from_slice(k);
        buf.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes());
        for x in v {
            buf.extend_from_slice(&x.to_le_bytes());
        }
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(&buf)?;
    f.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(dir.path(), "m");
        let mut map = HashMap::new();
        map.insert(key("m", "a"), vec![1.0, -2.5]);
        map.insert(key("m", "b"), vec![]);
        store(&path, &map).unwrap();
        assert_eq!(load(&path), map);
        fs::write(&path, b"garbage").unwrap();
        assert!(load(&path).is_empty());
        assert_ne!(key("m", "a"), key("n", "a"));
        assert_ne!(path_for(dir.path(), "m"), path_for(dir.path(), "n"));
    }
}
