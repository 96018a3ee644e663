//! Per-agent registries of loaded tools and their revision counters.
//! Discovery says what exists on the host; loading makes a tool callable for one agent.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::meta::Tool;

/// Why a registry operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("agent ID must be a non-empty word without spaces")]
    BadAgent,
    #[error("tool {tool:?} is not loaded for agent {agent:?}")]
    NotLoaded { agent: String, tool: String },
}

#[derive(Default)]
struct Agent {
    tools: BTreeMap<String, Arc<Tool>>,
    revision: u64,
}

/// Loaded tools by agent ID. Revisions start at 0 and grow by one per change.
#[derive(Default)]
pub struct Registry {
    agents: Mutex<HashMap<String, Agent>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Agent>> {
        // A panic while holding this lock leaves the maps consistent (every
        // update is a single insert/remove), so a poisoned lock is still usable.
        self.agents.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Make `tool` callable by `agent` (replacing an earlier load of the same
    /// name) and return the agent's new revision.
    pub fn load(&self, agent: &str, tool: Arc<Tool>) -> Result<u64, RegistryError> {
        check_agent(agent)?;
        let mut agents = self.lock();
        let entry = agents.entry(agent.to_string()).or_default();
        entry.tools.insert(tool.name.clone(), tool);
        entry.revision += 1;
        Ok(entry.revision)
    }

    /// Remove a loaded tool and return the agent's new revision.
    pub fn unload(&self, agent: &str, tool: &str) -> Result<u64, RegistryError> {
        check_agent(agent)?;
        let mut agents = self.lock();
        let not_loaded = || RegistryError::NotLoaded {
            agent: agent.to_string(),
            tool: tool.to_string(),
        };
        let entry = agents.get_mut(agent).ok_or_else(not_loaded)?;
        entry.tools.remove(tool).ok_or_else(not_loaded)?;
        entry.revision += 1;
        Ok(entry.revision)
    }

    /// The agent's loaded tools, sorted by name.
    pub fn loaded(&self, agent: &str) -> Vec<Arc<Tool>> {
        self.lock()
            .get(agent)
            .map(|a| a.tools.values().cloned().collect())
            .unwrap_or_default()
    }

    /// One loaded tool.
    pub fn lookup(&self, agent: &str, tool: &str) -> Result<Arc<Tool>, RegistryError> {
        self.lock()
            .get(agent)
            .and_then(|a| a.tools.get(tool).cloned())
            .ok_or_else(|| RegistryError::NotLoaded {
                agent: agent.to_string(),
                tool: tool.to_string(),
            })
    }

    /// The agent's revision (0 for an agent that never loaded anything).
    pub fn revision(&self, agent: &str) -> u64 {
        self.lock().get(agent).map_or(0, |a| a.revision)
    }
}

fn check_agent(agent: &str) -> Result<(), RegistryError> {
    if agent.is_empty() || agent.chars().any(char::is_whitespace) {
        return Err(RegistryError::BadAgent);
    }
    Ok(())
}
