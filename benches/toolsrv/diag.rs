//! Diagnostics behind `--only prep`: the parts of a sandboxed call measured
//! in-process (sandbox preparation, spawning with and without a pre-exec hook).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use toolsrv::sandbox::{ExpandContext, Profiles};

use crate::fixture::World;
use crate::latency::{Dist, dist};

fn time(n: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<Dist, String> {
    let mut v: Vec<Duration> = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed());
    }
    Ok(dist(&v))
}

fn spawn_wait(c: &mut Command) -> Result<(), String> {
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub fn prep(w: &World, n: usize) -> Result<Vec<(&'static str, Dist)>, String> {
    let profiles = Profiles::new(w.dir.path().join("diag-profiles"));
    let profile = profiles.load("default").map_err(|e| e.to_string())?;
    let exe = w.tool("echo_c");
    let mut out = Vec::new();
    out.push((
        "ExpandContext::from_process",
        time(n, || {
            std::hint::black_box(ExpandContext::from_process(&w.work));
            Ok(())
        })?,
    ));
    out.push((
        "Profile::prepare (default profile)",
        time(n, || {
            let ctx = ExpandContext::from_process(&w.work);
            let p = profile
                .prepare(&ctx, Some(&exe))
                .map_err(|e| e.to_string())?;
            drop(std::hint::black_box(p.into_pre_exec()));
            Ok(())
        })?,
    ));
    out.push((
        "spawn+wait (posix_spawn path)",
        time(n, || spawn_wait(Command::new(&exe).process_group(0)))?,
    ));
    out.push((
        "spawn+wait (fork: empty pre_exec)",
        time(n, || {
            let mut c = Command::new(&exe);
            c.process_group(0);
            // SAFETY: the hook does nothing.
            unsafe {
                c.pre_exec(|| Ok(()));
            }
            spawn_wait(&mut c)
        })?,
    ));
    out.push((
        "spawn+wait (fork: prepared sandbox)",
        time(n, || {
            let ctx = ExpandContext::from_process(&w.work);
            let hook = profile
                .prepare(&ctx, Some(&exe))
                .map_err(|e| e.to_string())?
                .into_pre_exec();
            let mut c = Command::new(&exe);
            c.process_group(0);
            // SAFETY: the sandbox hook is async-signal-safe by contract.
            unsafe {
                c.pre_exec(hook);
            }
            spawn_wait(&mut c)
        })?,
    ));
    Ok(out)
}
