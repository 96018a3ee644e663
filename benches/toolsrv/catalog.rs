//! R4 (`all` with many `.meta` files: first read, warm reads, time for a new
//! file to appear) and R5 (server memory idle, with 64 clients, during a 1 GiB flood).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fixture::{self, World};
use crate::latency::{Dist, dist};

/// `all` timings for one directory size.
pub struct Catalog {
    pub files: usize,
    pub first: Duration,
    pub warm: Dist,
    pub warm_max: Duration,
    /// Time from a new `.meta` being renamed into place to `all` listing it.
    pub new_visible: Option<Duration>,
}

impl Catalog {
    pub fn json(&self) -> Value {
        json!({
            "files": self.files,
            "first_ms": self.first.as_secs_f64() * 1e3,
            "warm_median_ms": self.warm.median / 1e3,
            "warm_p99_ms": self.warm.p99 / 1e3,
            "warm_max_ms": self.warm_max.as_secs_f64() * 1e3,
            "new_visible_ms": self.new_visible.map(|d| d.as_secs_f64() * 1e3),
        })
    }
}

fn meta_text(i: usize) -> String {
    format!(
        r#"{{"description":"bench tool {i}","cmd":"/bin/cat","args":{{"type":"object","properties":{{"text":{{"type":"string"}}}}}}}}"#
    )
}

fn write_atomically(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, dir.join(name)).map_err(|e| e.to_string())
}

/// R4 for a directory of `n` tools. Warm reads are spread over `warm_span`
/// (longer than the server's 2 s host-resolution TTL, so its refreshes count).
pub fn all_reads(
    w: &World,
    n: usize,
    warm_reads: usize,
    warm_span: Duration,
) -> Result<Catalog, String> {
    let dir = w.dir.path().join(format!("catalog{n}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for i in 0..n {
        std::fs::write(dir.join(format!("t{i:05}.meta")), meta_text(i))
            .map_err(|e| e.to_string())?;
    }
    // Files younger than a second are not trusted by the discovery cache;
    // a tools directory is normally older than that.
    std::thread::sleep(Duration::from_millis(1100));
    let srv = w.serve(&format!("r4-{n}"), &dir, true)?;
    let mut s = srv.session()?;
    let t = Instant::now();
    let first = s.read("all").map_err(|e| e.to_string())?;
    let first_t = t.elapsed();
    let listed: Vec<Value> = serde_json::from_slice(&first).map_err(|e| format!("all: {e}"))?;
    if listed.len() != n {
        return Err(format!("all lists {} tools, expected {n}", listed.len()));
    }
    let gap = warm_span / warm_reads.max(1) as u32;
    let mut warm = Vec::new();
    for _ in 0..warm_reads {
        std::thread::sleep(gap);
        let t = Instant::now();
        s.read("all").map_err(|e| e.to_string())?;
        warm.push(t.elapsed());
    }
    let warm_max = warm.iter().copied().max().unwrap_or_default();

    let t = Instant::now();
    write_atomically(&dir, "znew.meta", &meta_text(n))?;
    let mut new_visible = None;
    while t.elapsed() < Duration::from_secs(10) {
        let all = s.read("all").map_err(|e| e.to_string())?;
        if memmem(&all, b"\"name\":\"znew\"") {
            new_visible = Some(t.elapsed());
            break;
        }
    }
    Ok(Catalog {
        files: n,
        first: first_t,
        warm: dist(&warm),
        warm_max,
        new_visible,
    })
}

fn memmem(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// R5: VmRSS/VmHWM of a fresh sandboxed server (KiB).
pub struct Memory {
    pub idle: (u64, u64),
    pub clients64: (u64, u64),
    /// Largest VmRSS sampled during the flood, and VmHWM after it.
    pub flood_rss_max: u64,
    pub flood_hwm: u64,
    pub flood_result_ok: bool,
}

impl Memory {
    pub fn json(&self) -> Value {
        json!({
            "idle_rss_kib": self.idle.0, "idle_hwm_kib": self.idle.1,
            "clients64_rss_kib": self.clients64.0, "clients64_hwm_kib": self.clients64.1,
            "flood_rss_max_kib": self.flood_rss_max, "flood_hwm_kib": self.flood_hwm,
        })
    }
}

pub fn memory(w: &World) -> Result<Memory, String> {
    let srv = w.serve("r5", &w.tools, false)?;
    std::thread::sleep(Duration::from_millis(300));
    let idle = srv.memory_kib();
    let mut sessions = Vec::new();
    for _ in 0..64 {
        let mut s = srv.loaded_session(&["echo_c", "flood"])?;
        fixture::call(&mut s, "echo_c", &w.work)?;
        sessions.push(s);
    }
    std::thread::sleep(Duration::from_millis(200));
    let clients64 = srv.memory_kib();

    let mut s = sessions.pop().ok_or("no session")?;
    let work = w.work.clone();
    let flood = std::thread::spawn(move || {
        s.call(fixture::AGENT, "flood", &fixture::args(), Some(&work))
            .map_err(|e| e.to_string())
    });
    let mut rss_max = 0;
    while !flood.is_finished() {
        rss_max = rss_max.max(srv.memory_kib().0);
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = flood.join().map_err(|_| "flood thread panicked")??;
    let (rss, hwm) = srv.memory_kib();
    drop(sessions);
    Ok(Memory {
        idle,
        clients64,
        flood_rss_max: rss_max.max(rss),
        flood_hwm: hwm,
        flood_result_ok: !r.is_error,
    })
}
