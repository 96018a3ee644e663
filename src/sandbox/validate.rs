//! Command validation before execution (deny patterns, built-in and from the
//! profile) and the per-agent cool-down after repeated rejections.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use regex::Regex;

/// One named deny pattern.
#[derive(Debug, Clone)]
pub struct DenyRule {
    name: String,
    regex: Regex,
}

impl DenyRule {
    /// Compile a rule; the error names the rule and says what is wrong.
    pub fn new(name: &str, pattern: &str) -> Result<DenyRule, String> {
        if name.trim().is_empty() {
            return Err(format!(
                "validation.deny: rule with pattern {pattern:?} has no name"
            ));
        }
        let regex = Regex::new(pattern)
            .map_err(|e| format!("validation.deny rule {name:?}: bad pattern: {e}"))?;
        Ok(DenyRule {
            name: name.to_string(),
            regex,
        })
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

// What a recursive delete/chmod must not target: /, /*, ~, $HOME, ${HOME}.
const ROOTS: &str = r#"["']?(?:/+\.?\*?|~/?\*?|\$\{?HOME\}?/?\*?)["']?(?:/\*?)?(?:\s|$|[;&|)`])"#;
const BLOCK_DEV: &str = r"/dev/(?:sd[a-z]|nvme\d|vd[a-z]|hd[a-z]|xvd[a-z]|mmcblk\d)";

/// The built-in rules: name and pattern.
pub fn default_rule_specs() -> Vec<(&'static str, String)> {
    vec![
        (
            "recursive-delete-root",
            format!(
                r"(?:^|[^\w.-])rm\s+(?:[^;&|\n]*\s)?(?:-[A-Za-z]*[rR][A-Za-z]*|--recursive)\s+(?:[^;&|\n]*\s)?{ROOTS}"
            ),
        ),
        (
            "block-device-write",
            format!(
                r#"(?:(?:^|[^\w.-])dd\s[^;&|\n]*\bof=["']?{BLOCK_DEV}|>\s*["']?{BLOCK_DEV}|(?:^|[^\w.-])tee\s+(?:-\S+\s+)*["']?{BLOCK_DEV})"#
            ),
        ),
        (
            "mkfs",
            // Only in command position, so `grep mkfs notes` passes.
            r"(?:^|[;&|(`\n]|\b(?:sudo|doas|exec|xargs|env|nohup|time|nice)\b)\s*(?:\S*/)?(?:mkfs(?:\.\w+)?|mke2fs)\s+\S"
                .to_string(),
        ),
        (
            "fork-bomb",
            r"[\w.:]+\s*\(\s*\)\s*\{\s*[\w.:]+\s*\|\s*[\w.:]+\s*&\s*\}".to_string(),
        ),
        (
            "recursive-chmod-root",
            format!(
                r"(?:^|[^\w.-])(?:chmod|chown|chgrp)\s+(?:[^;&|\n]*\s)?(?:-[A-Za-z]*R[A-Za-z]*|--recursive)\s+(?:[^;&|\n]*\s)?{ROOTS}"
            ),
        ),
    ]
}

static DEFAULT_RULES: LazyLock<Vec<DenyRule>> = LazyLock::new(|| {
    default_rule_specs()
        .into_iter()
        .filter_map(|(n, p)| DenyRule::new(n, &p).ok())
        .collect()
});

/// A command refused by a deny rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "command refused by sandbox validation rule {rule:?} (matched {matched:?}); \
     this pattern is never allowed — change the command"
)]
pub struct Rejection {
    /// Name of the rule that matched.
    pub rule: String,
    /// The text that matched.
    pub matched: String,
}

/// Checks command text and arguments against deny rules.
#[derive(Debug, Clone)]
pub struct Validator {
    rules: Vec<DenyRule>,
}

impl Default for Validator {
    fn default() -> Self {
        Validator {
            rules: DEFAULT_RULES.clone(),
        }
    }
}

impl Validator {
    /// The built-in rules plus `extra` (an extra rule with a built-in's name
    /// replaces it); `replace_defaults` drops the built-ins entirely.
    pub fn new(extra: Vec<DenyRule>, replace_defaults: bool) -> Validator {
        let mut rules: Vec<DenyRule> = if replace_defaults {
            Vec::new()
        } else {
            DEFAULT_RULES
                .iter()
                .filter(|d| !extra.iter().any(|e| e.name == d.name))
                .cloned()
                .collect()
        };
        rules.extend(extra);
        Validator { rules }
    }

    /// Names of the active rules.
    pub fn rule_names(&self) -> Vec<&str> {
        self.rules.iter().map(|r| r.name.as_str()).collect()
    }

    fn check_str(&self, text: &str) -> Result<(), Rejection> {
        for r in &self.rules {
            if let Some(m) = r.regex.find(text) {
                return Err(Rejection {
                    rule: r.name.clone(),
                    matched: m.as_str().trim().to_string(),
                });
            }
        }
        Ok(())
    }

    fn check_value(&self, v: &serde_json::Value) -> Result<(), Rejection> {
        match v {
            serde_json::Value::String(s) => self.check_str(s),
            serde_json::Value::Array(items) => {
                // An argv-like array is also checked as one command line.
                let words: Vec<&str> = items.iter().filter_map(|i| i.as_str()).collect();
                if words.len() > 1 {
                    self.check_str(&words.join(" "))?;
                }
                items.iter().try_for_each(|i| self.check_value(i))
            }
            serde_json::Value::Object(m) => m.values().try_for_each(|i| self.check_value(i)),
            _ => Ok(()),
        }
    }

    /// Check the command text and every string in `args` (recursively).
    pub fn check(&self, command_text: &str, args: &serde_json::Value) -> Result<(), Rejection> {
        self.check_str(command_text)?;
        self.check_value(args)
    }
}

/// When repeated rejections put an agent in a cool-down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CooldownConfig {
    /// Rejections within `window` that start a cool-down.
    pub max_rejections: u32,
    /// Sliding window over which rejections are counted.
    pub window: Duration,
    /// How long the agent is refused once the limit is hit.
    pub cooldown: Duration,
}

impl Default for CooldownConfig {
    fn default() -> Self {
        CooldownConfig {
            max_rejections: 5,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(60),
        }
    }
}

/// A monotonic clock (injectable for tests).
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// An agent is cooling down after too many rejected commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "agent {agent:?} had too many commands rejected by sandbox validation; tool calls are \
     refused for another {}s (until {}). Stop retrying variations of the refused command.",
    remaining.as_secs().max(1), fmt_utc(*until)
)]
pub struct CooldownError {
    pub agent: String,
    /// Wall-clock end of the cool-down.
    pub until: SystemTime,
    /// Time left.
    pub remaining: Duration,
}

#[derive(Debug, Default)]
struct AgentState {
    recent: VecDeque<Instant>,
    until: Option<Instant>,
}

/// Per-agent rejection counter and cool-down.
#[derive(Debug)]
pub struct Cooldown {
    cfg: CooldownConfig,
    clock: Arc<dyn Clock>,
    agents: Mutex<HashMap<String, AgentState>>,
}

impl Cooldown {
    pub fn new(cfg: CooldownConfig) -> Cooldown {
        Self::with_clock(cfg, Arc::new(SystemClock))
    }

    pub fn with_clock(cfg: CooldownConfig, clock: Arc<dyn Clock>) -> Cooldown {
        Cooldown {
            cfg,
            clock,
            agents: Mutex::new(HashMap::new()),
        }
    }

    fn error(&self, agent: &str, until: Instant, now: Instant) -> CooldownError {
        let remaining = until.saturating_duration_since(now);
        CooldownError {
            agent: agent.to_string(),
            until: SystemTime::now() + remaining,
            remaining,
        }
    }

    /// Refuse while `agent` is cooling down.
    pub fn check(&self, agent: &str) -> Result<(), CooldownError> {
        let now = self.clock.now();
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        let Some(st) = agents.get_mut(agent) else {
            return Ok(());
        };
        match st.until {
            Some(until) if now < until => Err(self.error(agent, until, now)),
            _ => {
                st.until = None;
                let window = self.cfg.window;
                st.recent.retain(|t| now.duration_since(*t) < window);
                if st.recent.is_empty() {
                    agents.remove(agent);
                }
                Ok(())
            }
        }
    }

    /// Count one rejection; `Err` when it starts (or extends into) a cool-down.
    pub fn record_rejection(&self, agent: &str) -> Result<(), CooldownError> {
        let now = self.clock.now();
        let mut agents = self.agents.lock().unwrap_or_else(|e| e.into_inner());
        let st = agents.entry(agent.to_string()).or_default();
        if let Some(until) = st.until.filter(|u| now < *u) {
            return Err(self.error(agent, until, now));
        }
        let window = self.cfg.window;
        st.recent.retain(|t| now.duration_since(*t) < window);
        st.recent.push_back(now);
        if st.recent.len() >= self.cfg.max_rejections as usize {
            let until = now + self.cfg.cooldown;
            st.until = Some(until);
            st.recent.clear();
            tracing::warn!(
                agent,
                cooldown_s = self.cfg.cooldown.as_secs(),
                "validation cool-down started"
            );
            return Err(self.error(agent, until, now));
        }
        Ok(())
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC`.
pub(crate) fn fmt_utc(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests;
