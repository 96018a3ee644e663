//! `cargo bench --bench toolsrv [-- --quick] [-- --json PATH]`: the real
//! `target/release/toolsrv` on a real socket, every figure a ratio against a
//! baseline measured in the same run (interleaved), printed as a table and
//! written as JSON to `target/bench.json` (and `--json PATH`).
//!
//! Build first: `cargo build --release && cargo bench --bench toolsrv`.

mod catalog;
mod diag;
mod fixture;
mod latency;
mod peer;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Opts {
    quick: bool,
    json: Option<PathBuf>,
    /// Sections to run (`--only r1,ph,r3,r6,r4,r5,peer`); empty: all.
    only: Vec<String>,
}

impl Opts {
    fn wants(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts {
        quick: false,
        json: None,
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--json" => o.json = Some(it.next().ok_or("--json needs a path")?.into()),
            "--only" => {
                let list = it.next().ok_or("--only needs a list, e.g. r1,ph")?;
                o.only = list.split(',').map(str::to_string).collect();
            }
            "--bench" => {} // passed by `cargo bench`
            "-h" | "--help" => {
                return Err("usage: cargo bench --bench toolsrv -- [--quick] [--json PATH] [--only r1,ph,r3,r6,r4,r5,peer]".into());
            }
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            _ => {} // a cargo bench name filter: everything runs
        }
    }
    Ok(o)
}

/// One line of the result table.
struct Row {
    id: &'static str,
    what: String,
    value: String,
    ratio: Option<f64>,
    /// (target text, met)
    target: Option<(String, bool)>,
}

fn row(id: &'static str, what: impl Into<String>, value: impl Into<String>) -> Row {
    Row {
        id,
        what: what.into(),
        value: value.into(),
        ratio: None,
        target: None,
    }
}

impl Row {
    fn ratio(mut self, r: f64) -> Row {
        self.ratio = Some(r);
        self
    }
    fn target(mut self, text: impl Into<String>, met: bool) -> Row {
        self.target = Some((text.into(), met));
        self
    }
}

fn ms(us: f64) -> String {
    format!("{:.3} ms", us / 1e3)
}

fn print_table(rows: &[Row]) {
    let w = rows.iter().map(|r| r.what.len()).max().unwrap_or(10);
    let v = rows.iter().map(|r| r.value.len()).max().unwrap_or(10);
    println!(
        "\n| id | {:w$} | {:v$} | ratio | target | met |",
        "measure", "value"
    );
    println!(
        "|----|{}|{}|-------|--------|-----|",
        "-".repeat(w + 2),
        "-".repeat(v + 2)
    );
    for r in rows {
        let ratio = r.ratio.map_or("".into(), |x| format!("{x:.2}"));
        let (t, met) = match &r.target {
            Some((t, m)) => (t.as_str(), if *m { "yes" } else { "NO" }),
            None => ("", ""),
        };
        println!(
            "| {:2} | {:w$} | {:v$} | {ratio:>5} | {t} | {met} |",
            r.id, r.what, r.value
        );
    }
}

fn main() -> ExitCode {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolsrv bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn stage(name: &str, t0: Instant) {
    eprintln!("[{:6.1}s] {name}", t0.elapsed().as_secs_f64());
}

fn run(o: &Opts) -> Result<(), String> {
    let t0 = Instant::now();
    let bin = fixture::release_binary()?;
    let w = fixture::World::new(bin.clone())?;
    let load_start = loadavg();
    let (iters, rounds, dur, warm, r6, peer_calls) = if o.quick {
        (80, 1, Duration::from_millis(500), 8, 10, 60)
    } else {
        (600, 3, Duration::from_millis(1500), 30, 60, 400)
    };
    let mut rows = Vec::new();
    let mut out = serde_json::Map::new();

    if !o.only.is_empty() && o.wants("prep") {
        stage(
            "diagnostics: sandbox preparation and spawning in-process",
            t0,
        );
        for (name, d) in diag::prep(&w, iters / 2)? {
            rows.push(row("dx", name, ms(d.median)));
        }
    }

    let yolo = w.serve("yolo", &w.tools, true)?;
    let sandbox = w.serve("sandbox", &w.tools, false)?;

    // R1 / R2
    let mut lat = Vec::new();
    for tool in ["echo_c", "echo_sh"].into_iter().filter(|_| o.wants("r1")) {
        stage(&format!("R1/R2 sync latency, {tool}"), t0);
        let l = latency::sync_latency(&w, &yolo, &sandbox, tool, iters)?;
        let d = l.direct.median;
        rows.push(row("R1", format!("{tool}: direct spawn, median"), ms(d)));
        rows.push(
            row(
                "R1",
                format!("{tool}: --yolo call, median"),
                ms(l.yolo.median),
            )
            .ratio(l.yolo.median / d)
            .target("≤ 1.15", l.yolo.median / d <= 1.15),
        );
        rows.push(
            row("R1", format!("{tool}: --yolo call, p99"), ms(l.yolo.p99)).ratio(l.yolo.p99 / d),
        );
        rows.push(
            row(
                "R2",
                format!("{tool}: sandboxed call, median"),
                ms(l.sandbox.median),
            )
            .ratio(l.sandbox.median / d)
            .target("≤ 1.30", l.sandbox.median / d <= 1.30),
        );
        rows.push(
            row(
                "R2",
                format!("{tool}: sandboxed call, p99"),
                ms(l.sandbox.p99),
            )
            .ratio(l.sandbox.p99 / d),
        );
        lat.push(l.json());
        if tool == "echo_c" {
            out.insert("direct_echo_c_median_us".into(), json!(d));
        }
    }
    out.insert("r1_r2".into(), Value::Array(lat));

    // Where the time of one call goes (context for R1/R2, not a target).
    stage("phases of one call", t0);
    let mut ph = serde_json::Map::new();
    for (label, srv) in [("--yolo", &yolo), ("sandboxed", &sandbox)]
        .into_iter()
        .filter(|_| o.wants("ph"))
    {
        let p = latency::phases(&w, srv, "echo_c", iters / 4)?;
        for (name, d) in &p {
            rows.push(row("ph", format!("{label} echo_c: {name}"), ms(d.median)));
        }
        ph.insert(
            label.trim_start_matches('-').into(),
            p.iter()
                .map(|(n, d)| ((*n).to_string(), d.json()))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        );
    }
    out.insert("phases".into(), Value::Object(ph));

    // R3
    let mut tp = Vec::new();
    for clients in [1, 8, 64].into_iter().filter(|_| o.wants("r3")) {
        stage(&format!("R3 throughput, {clients} clients"), t0);
        let t = latency::throughput(&w, &yolo, &sandbox, "echo_c", clients, rounds, dur)?;
        rows.push(row(
            "R3",
            format!("{clients:2} clients: direct spawn"),
            format!("{:.0} calls/s", t.direct),
        ));
        let mut r = row(
            "R3",
            format!("{clients:2} clients: --yolo"),
            format!("{:.0} calls/s", t.yolo),
        )
        .ratio(t.yolo / t.direct);
        if clients == 64 {
            r = r.target("≥ 0.85", t.yolo / t.direct >= 0.85);
        }
        rows.push(r);
        let mut r = row(
            "R3",
            format!("{clients:2} clients: sandboxed"),
            format!("{:.0} calls/s", t.sandbox),
        )
        .ratio(t.sandbox / t.direct);
        if clients == 64 {
            r = r.target("≥ 0.85", t.sandbox / t.direct >= 0.85);
        }
        rows.push(r);
        // CPU per call does not depend on what else the machine runs: at
        // saturation its inverse ratio is the throughput ratio.
        for (what, c) in [
            ("direct", t.cpu_direct),
            ("--yolo", t.cpu_yolo),
            ("sandboxed", t.cpu_sandbox),
        ] {
            let mut r = row(
                "R3",
                format!("{clients:2} clients: CPU/call {what}"),
                format!(
                    "{:.0} µs ({:.0} caller + {:.0} server + {:.0} tool)",
                    c.total(),
                    c.caller,
                    c.server,
                    c.tools
                ),
            );
            if what != "direct" {
                r = r.ratio(t.cpu_direct.total() / c.total());
            }
            rows.push(r);
        }
        tp.push(t.json());
    }
    out.insert("r3".into(), Value::Array(tp));

    // R6 (on the sandboxed server, before the big-directory servers load the machine)
    if o.wants("r6") {
        stage("R6 background exit → wait", t0);
        let (via, direct) = latency::exit_to_wait(&w, &sandbox, r6)?;
        rows.push(row(
            "R6",
            "direct spawn: exit → wait(), median",
            ms(direct.median),
        ));
        rows.push(
            row("R6", "bg call: exit → wait returns, median", ms(via.median))
                .target("≤ 2 ms", via.median <= 2000.0),
        );
        rows.push(row("R6", "bg call: exit → wait returns, p99", ms(via.p99)));
        out.insert(
            "r6".into(),
            json!({"server": via.json(), "direct": direct.json()}),
        );
    }
    drop(yolo);
    drop(sandbox);

    // R4
    let mut cat = Vec::new();
    for n in [10, 1_000, 10_000].into_iter().filter(|_| o.wants("r4")) {
        stage(&format!("R4 `all` with {n} .meta files"), t0);
        let span = if o.quick {
            Duration::from_millis(1000)
        } else {
            Duration::from_millis(4500)
        };
        let c = catalog::all_reads(&w, n, warm, span)?;
        rows.push(row(
            "R4",
            format!("{n:5} files: first read"),
            ms(c.first.as_secs_f64() * 1e6),
        ));
        let mut r = row(
            "R4",
            format!("{n:5} files: warm, median"),
            ms(c.warm.median),
        );
        if n == 10_000 {
            r = r.target("≤ 20 ms", c.warm.median <= 20_000.0);
        }
        rows.push(r);
        rows.push(row(
            "R4",
            format!("{n:5} files: warm, max"),
            ms(c.warm_max.as_secs_f64() * 1e6),
        ));
        let vis = c
            .new_visible
            .map_or("not within 10 s".into(), |d| ms(d.as_secs_f64() * 1e6));
        let mut r = row("R4", format!("{n:5} files: new .meta visible"), vis);
        if n == 10_000 {
            r = r.target(
                "≤ 1 s",
                c.new_visible.is_some_and(|d| d <= Duration::from_secs(1)),
            );
        }
        rows.push(r);
        cat.push(c.json());
    }
    out.insert("r4".into(), Value::Array(cat));

    // R5
    if o.wants("r5") {
        stage("R5 memory", t0);
        let m = catalog::memory(&w)?;
        let mib = |k: u64| format!("{:.1} MiB", k as f64 / 1024.0);
        rows.push(
            row("R5", "idle: VmRSS", mib(m.idle.0)).target("≤ 16 MiB", m.idle.0 <= 16 * 1024),
        );
        rows.push(row(
            "R5",
            "64 clients: VmRSS / VmHWM",
            format!("{} / {}", mib(m.clients64.0), mib(m.clients64.1)),
        ));
        rows.push(
            row(
                "R5",
                "1 GiB flood: max VmRSS / VmHWM",
                format!("{} / {}", mib(m.flood_rss_max), mib(m.flood_hwm)),
            )
            .target("≤ 64 MiB", m.flood_hwm <= 64 * 1024),
        );
        if !m.flood_result_ok {
            eprintln!("warning: the flood call returned an error result");
        }
        out.insert("r5".into(), m.json());
    }

    // Peer
    if o.wants("peer") {
        stage("peer: Python MCP SDK over stdio", t0);
        let peer = peer::run(&w.tool("echo_c"), peer_calls)?;
        // A fresh direct baseline right after the peer run.
        let mut d = Vec::new();
        for _ in 0..100 {
            let t = Instant::now();
            fixture::direct(&w.tool("echo_c"), &w.work)?;
            d.push(t.elapsed());
        }
        let base = latency::dist(&d).median;
        match &peer {
            Some(p) => {
                let med = p["median_us"].as_f64().unwrap_or(f64::NAN);
                let p99 = p["p99_us"].as_f64().unwrap_or(f64::NAN);
                let sdk = p["sdk"].as_str().unwrap_or("mcp");
                rows.push(row("MCP", format!("{sdk}, echo_c: median"), ms(med)).ratio(med / base));
                rows.push(row("MCP", format!("{sdk}, echo_c: p99"), ms(p99)).ratio(p99 / base));
                out.insert(
                    "peer".into(),
                    json!({"result": p, "direct_median_us": base, "ratio_median": med / base}),
                );
            }
            None => {
                rows.push(row("MCP", "Python MCP SDK", "skipped (not installed)"));
                out.insert("peer".into(), Value::Null);
            }
        }
    }

    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    out.insert(
        "run".into(),
        json!({
            "quick": o.quick,
            "commit": commit,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "loadavg_start": load_start,
            "loadavg_end": loadavg(),
            "seconds": t0.elapsed().as_secs_f64(),
            "binary": bin.display().to_string(),
        }),
    );
    print_table(&rows);
    println!(
        "\n{} run, commit {commit}, {} CPUs, load {} → {}, {:.0} s",
        if o.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_start,
        loadavg(),
        t0.elapsed().as_secs_f64()
    );

    let text = serde_json::to_string_pretty(&Value::Object(out)).map_err(|e| e.to_string())?;
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench.json");
    for p in std::iter::once(default).chain(o.json.clone()) {
        std::fs::write(&p, &text).map_err(|e| format!("{}: {e}", p.display()))?;
        println!("JSON written to {}", p.display());
    }
    Ok(())
}
