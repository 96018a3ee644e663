//! R1/R2 (sync call latency against a direct spawn), R3 (throughput with N
//! clients against N threads spawning directly) and R6 (exit-to-wait).

use std::path::Path;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::fixture::{self, Server, World};

/// Median and p99 of a sample, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Dist {
    pub median: f64,
    pub p99: f64,
    pub n: usize,
}

pub fn dist(samples: &[Duration]) -> Dist {
    let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    us.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if us.is_empty() {
            return f64::NAN;
        }
        us[((us.len() as f64 * q) as usize).min(us.len() - 1)]
    };
    let median = if us.len().is_multiple_of(2) && !us.is_empty() {
        (us[us.len() / 2 - 1] + us[us.len() / 2]) / 2.0
    } else {
        at(0.5)
    };
    Dist {
        median,
        p99: at(0.99),
        n: us.len(),
    }
}

impl Dist {
    pub fn json(&self) -> Value {
        json!({"median_us": self.median, "p99_us": self.p99, "n": self.n})
    }
}

/// Latency of one tool: direct, through the `--yolo` server, through the sandboxed server.
pub struct Latency {
    pub tool: &'static str,
    pub direct: Dist,
    pub yolo: Dist,
    pub sandbox: Dist,
}

impl Latency {
    pub fn json(&self) -> Value {
        json!({
            "tool": self.tool,
            "direct": self.direct.json(),
            "yolo": self.yolo.json(),
            "sandbox": self.sandbox.json(),
            "r1_median_ratio": self.yolo.median / self.direct.median,
            "r1_p99_ratio": self.yolo.p99 / self.direct.median,
            "r2_median_ratio": self.sandbox.median / self.direct.median,
            "r2_p99_ratio": self.sandbox.p99 / self.direct.median,
        })
    }
}

/// R1 and R2 for `tool`: `iters` rounds of (direct, yolo call, sandboxed call),
/// interleaved so that machine noise hits all three alike.
pub fn sync_latency(
    w: &World,
    yolo: &Server,
    sandbox: &Server,
    tool: &'static str,
    iters: usize,
) -> Result<Latency, String> {
    let exe = w.tool(tool);
    let mut sy = yolo.loaded_session(&[tool])?;
    let mut ss = sandbox.loaded_session(&[tool])?;
    // Warm up every path (page cache, profile cache, first-call allocations).
    for _ in 0..(iters / 10).max(5) {
        fixture::direct(&exe, &w.work)?;
        fixture::call(&mut sy, tool, &w.work)?;
        fixture::call(&mut ss, tool, &w.work)?;
    }
    let (mut d, mut y, mut s) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..iters {
        // Rotate the order so none of the three always follows the same one.
        for k in 0..3 {
            let t = Instant::now();
            match (i + k) % 3 {
                0 => {
                    fixture::direct(&exe, &w.work)?;
                    d.push(t.elapsed());
                }
                1 => {
                    fixture::call(&mut sy, tool, &w.work)?;
                    y.push(t.elapsed());
                }
                _ => {
                    fixture::call(&mut ss, tool, &w.work)?;
                    s.push(t.elapsed());
                }
            }
        }
    }
    Ok(Latency {
        tool,
        direct: dist(&d),
        yolo: dist(&y),
        sandbox: dist(&s),
    })
}

/// CPU seconds (user + system) from `/proc/<pid>/stat`: the process's own
/// and that of its reaped children.
fn proc_cpu(pid: u32) -> Result<(f64, f64), String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
    // utime stime cutime cstime are fields 14..=17 (indices 11..=14 here).
    let at = |i: usize| f.get(i).copied().unwrap_or(0.0) / hz;
    Ok((at(11) + at(12), at(13) + at(14)))
}

/// Where the CPU of a throughput round went, in microseconds per call:
/// the calling process (bench client threads, or the direct spawner), the
/// server's own threads, and the tools (children of whoever spawned them).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuPerCall {
    pub caller: f64,
    pub server: f64,
    pub tools: f64,
}

impl CpuPerCall {
    pub fn total(&self) -> f64 {
        self.caller + self.server + self.tools
    }

    fn add(&mut self, o: CpuPerCall) {
        self.caller += o.caller;
        self.server += o.server;
        self.tools += o.tools;
    }

    fn scale(self, k: f64) -> CpuPerCall {
        CpuPerCall {
            caller: self.caller * k,
            server: self.server * k,
            tools: self.tools * k,
        }
    }

    pub fn json(&self) -> Value {
        json!({"caller_us": self.caller, "server_us": self.server, "tools_us": self.tools})
    }
}

/// `run_threads` with CPU accounting: calls/s and CPU per call. `server` is
/// the pid of the server the calls go to (`None` for direct spawns).
fn measured<F>(
    clients: usize,
    dur: Duration,
    server: Option<u32>,
    make: F,
) -> Result<(f64, CpuPerCall), String>
where
    F: Fn() -> Result<Box<dyn FnMut() -> Result<(), String> + Send>, String> + Sync,
{
    let me = std::process::id();
    let own0 = proc_cpu(me)?;
    let srv0 = server.map(proc_cpu).transpose()?;
    let (calls, secs) = run_threads(clients, dur, make)?;
    let own1 = proc_cpu(me)?;
    let srv1 = server.map(proc_cpu).transpose()?;
    let n = (calls.max(1)) as f64;
    let (srv_self, srv_kids) = match (srv0, srv1) {
        (Some(a), Some(b)) => (b.0 - a.0, b.1 - a.1),
        _ => (0.0, 0.0),
    };
    let cpu = CpuPerCall {
        caller: (own1.0 - own0.0) * 1e6 / n,
        server: srv_self * 1e6 / n,
        tools: (own1.1 - own0.1 + srv_kids) * 1e6 / n,
    };
    Ok((calls as f64 / secs, cpu))
}

/// Calls made and seconds taken by `clients` threads each looping `work` for `dur`.
fn run_threads<F>(clients: usize, dur: Duration, make: F) -> Result<(u64, f64), String>
where
    F: Fn() -> Result<Box<dyn FnMut() -> Result<(), String> + Send>, String> + Sync,
{
    let barrier = Barrier::new(clients + 1);
    let failed = AtomicBool::new(false);
    let (calls, elapsed) = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for _ in 0..clients {
            handles.push(sc.spawn(|| -> Result<(u64, Instant), String> {
                let worker = make();
                barrier.wait();
                let mut worker = worker?;
                let start = Instant::now();
                let mut n = 0u64;
                while start.elapsed() < dur && !failed.load(Ordering::Relaxed) {
                    if let Err(e) = worker() {
                        failed.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                    n += 1;
                }
                Ok((n, Instant::now()))
            }));
        }
        barrier.wait();
        let start = Instant::now();
        let mut calls = 0;
        let mut end = start;
        for h in handles {
            let (n, at) = h.join().map_err(|_| "worker panicked".to_string())??;
            calls += n;
            end = end.max(at);
        }
        Ok::<_, String>((calls, end - start))
    })?;
    Ok((calls, elapsed.as_secs_f64()))
}

/// Throughput at one concurrency: direct, yolo server, sandboxed server (calls/s).
pub struct Throughput {
    pub clients: usize,
    pub direct: f64,
    pub yolo: f64,
    pub sandbox: f64,
    pub cpu_direct: CpuPerCall,
    pub cpu_yolo: CpuPerCall,
    pub cpu_sandbox: CpuPerCall,
}

impl Throughput {
    pub fn json(&self) -> Value {
        json!({
            "clients": self.clients,
            "direct_per_s": self.direct,
            "yolo_per_s": self.yolo,
            "sandbox_per_s": self.sandbox,
            "r3_yolo_ratio": self.yolo / self.direct,
            "r3_sandbox_ratio": self.sandbox / self.direct,
            "cpu_per_call": {
                "direct": self.cpu_direct.json(),
                "yolo": self.cpu_yolo.json(),
                "sandbox": self.cpu_sandbox.json(),
            },
        })
    }
}

/// R3 at `clients`: `rounds` interleaved rounds of `dur` each for each of the three.
pub fn throughput(
    w: &World,
    yolo: &Server,
    sandbox: &Server,
    tool: &str,
    clients: usize,
    rounds: usize,
    dur: Duration,
) -> Result<Throughput, String> {
    let exe = w.tool(tool);
    let work = w.work.clone();
    let (mut d, mut y, mut s) = (0.0, 0.0, 0.0);
    let (mut cd, mut cy, mut cs) = Default::default();
    let via = |srv: &Server| {
        let work = work.clone();
        measured(clients, dur, Some(srv.pid()), move || {
            let mut sess = srv.loaded_session(&[tool])?;
            let work = work.clone();
            let tool = tool.to_string();
            Ok(Box::new(move || fixture::call(&mut sess, &tool, &work)))
        })
    };
    for _ in 0..rounds {
        let (rate, cpu) = measured(clients, dur, None, || {
            let exe = exe.clone();
            let work = work.clone();
            Ok(Box::new(move || fixture::direct(&exe, &work).map(|_| ())))
        })?;
        d += rate;
        CpuPerCall::add(&mut cd, cpu);
        let (rate, cpu) = via(yolo)?;
        y += rate;
        CpuPerCall::add(&mut cy, cpu);
        let (rate, cpu) = via(sandbox)?;
        s += rate;
        CpuPerCall::add(&mut cs, cpu);
    }
    let r = rounds as f64;
    Ok(Throughput {
        clients,
        direct: d / r,
        yolo: y / r,
        sandbox: s / r,
        cpu_direct: cd.scale(1.0 / r),
        cpu_yolo: cy.scale(1.0 / r),
        cpu_sandbox: cs.scale(1.0 / r),
    })
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn read_stamp(work: &Path) -> Result<i128, String> {
    let s = std::fs::read_to_string(work.join("stamp")).map_err(|e| format!("stamp: {e}"))?;
    s.trim().parse().map_err(|e| format!("stamp {s:?}: {e}"))
}

/// R6: from the tool's last timestamp before exit to `wait` returning, for a
/// background call; and the same for a direct spawn (`Child::wait`).
pub fn exit_to_wait(w: &World, srv: &Server, iters: usize) -> Result<(Dist, Dist), String> {
    let mut s = srv.loaded_session(&["stamp"])?;
    let exe = w.tool("stamp");
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    for i in 0..iters + 2 {
        let _ = std::fs::remove_file(w.work.join("stamp"));
        let pid = s
            .call_bg(fixture::AGENT, "stamp", &fixture::args(), Some(&w.work))
            .map_err(|e| e.to_string())?;
        let code = s
            .read(&format!("proc/{pid}/wait"))
            .map_err(|e| e.to_string())?;
        let returned = now_ns();
        if String::from_utf8_lossy(&code).trim() != "0" {
            return Err(format!("stamp exited {:?}", String::from_utf8_lossy(&code)));
        }
        let lag = returned - read_stamp(&w.work)?;
        let _ = s.write(&format!("proc/{pid}/ctl"), b"dismiss");

        let _ = std::fs::remove_file(w.work.join("stamp"));
        let mut c = fixture::clean_env(&mut std::process::Command::new(&exe))
            .current_dir(&w.work)
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        c.wait().map_err(|e| e.to_string())?;
        let dlag = now_ns() - read_stamp(&w.work)?;
        if i >= 2 {
            via.push(Duration::from_nanos(lag.max(0) as u64));
            direct.push(Duration::from_nanos(dlag.max(0) as u64));
        }
    }
    Ok((dist(&via), dist(&direct)))
}

/// Where a synchronous call's time goes, seen from the client (medians, µs):
/// walk+open of `proc/new`, the payload write, the read that returns the
/// result (the tool runs here), the empty read, the clunk; and a whole
/// `info` read (walk, open, read, read, clunk: the 9P floor of five round trips).
pub fn phases(
    w: &World,
    srv: &Server,
    tool: &str,
    iters: usize,
) -> Result<Vec<(&'static str, Dist)>, String> {
    use toolsrv::ninep::fs::{ORDWR, OREAD};
    let mut s = srv.loaded_session(&[tool])?;
    let payload = s.payload(fixture::AGENT, tool, &fixture::args(), Some(&w.work));
    let names = [
        "walk+open",
        "write",
        "read (runs the tool)",
        "read (EOF)",
        "clunk",
        "`info` read (5 RTT)",
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let e = |e: toolsrv::ninep::client::ClientError| e.to_string();
    for _ in 0..iters {
        let c = &mut s.client;
        let t = Instant::now();
        let fid = c.walk_open("proc/new", ORDWR).map_err(e)?;
        let t1 = Instant::now();
        c.write(fid, payload.as_bytes()).map_err(e)?;
        let t2 = Instant::now();
        let iounit = c.iounit();
        let data = c.read(fid, 0, iounit).map_err(e)?;
        let t3 = Instant::now();
        c.read(fid, data.len() as u64, iounit).map_err(e)?;
        let t4 = Instant::now();
        c.clunk(fid).map_err(e)?;
        let t5 = Instant::now();
        let fid = c.walk_open("info", OREAD).map_err(e)?;
        c.read_all(fid).map_err(e)?;
        c.clunk(fid).map_err(e)?;
        let t6 = Instant::now();
        for (i, d) in [t1 - t, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5]
            .into_iter()
            .enumerate()
        {
            samples[i].push(d);
        }
    }
    Ok(names
        .into_iter()
        .zip(samples.iter().map(|s| dist(s)))
        .collect())
}
