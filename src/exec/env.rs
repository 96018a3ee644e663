//! A tool's environment: a base shared by every call (the server's, captured
//! once, or a profile's filtered copy of it) plus the few per-call variables.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

/// Environment variables as (name, value) pairs.
pub type Vars = Arc<[(OsString, OsString)]>;

/// The environment a tool starts with: `base` minus the names `set` gives,
/// then `set`. Cloning shares the base.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Env {
    base: Vars,
    set: Vec<(OsString, OsString)>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values may be secrets: names only.
        f.debug_list().entries(self.iter().map(|(k, _)| k)).finish()
    }
}

impl From<Vec<(OsString, OsString)>> for Env {
    fn from(v: Vec<(OsString, OsString)>) -> Env {
        Env {
            base: v.into(),
            set: Vec::new(),
        }
    }
}

impl Env {
    /// `base` as it is (shared, not copied).
    pub fn new(base: Vars) -> Env {
        Env {
            base,
            set: Vec::new(),
        }
    }

    /// Sets `name` (replacing its value in the base or an earlier `set`).
    pub fn set(&mut self, name: impl Into<OsString>, value: impl Into<OsString>) {
        let name = name.into();
        let value = value.into();
        match self.set.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => self.set.push((name, value)),
        }
    }

    /// Every variable, each name once: the base's first, then the set ones.
    pub fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.base
            .iter()
            .filter(|(k, _)| !self.set.iter().any(|(s, _)| s == k))
            .chain(self.set.iter())
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// How many variables (at most; a set name may also be in the base).
    pub fn len_hint(&self) -> usize {
        self.base.len() + self.set.len()
    }

    /// The base, as shared (to cache what is derived from it).
    pub fn base(&self) -> &Vars {
        &self.base
    }

    /// Only the variables `keep` accepts; `base` is used as the new base
    /// when given (already filtered by the same rule, e.g. cached).
    pub fn filtered(&self, keep: impl Fn(&OsStr) -> bool, base: Option<Vars>) -> Env {
        let base =
            base.unwrap_or_else(|| self.base.iter().filter(|(k, _)| keep(k)).cloned().collect());
        Env {
            base,
            set: self.set.iter().filter(|(k, _)| keep(k)).cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(e: &'a Env, name: &str) -> Option<&'a OsStr> {
        e.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }

    fn vars(v: &[(&str, &str)]) -> Vars {
        v.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn set_overrides_base_once_and_keeps_order() {
        let base = vars(&[("A", "1"), ("PWD", "/old"), ("B", "2")]);
        let mut e = Env::new(base.clone());
        e.set("PWD", "/new");
        e.set("C", "3");
        e.set("C", "4");
        let got: Vec<_> = e
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect();
        assert_eq!(got, ["A=1", "B=2", "PWD=/new", "C=4"]);
        assert_eq!(get(&e, "PWD").unwrap(), "/new");
        assert!(
            Arc::ptr_eq(e.base(), &base),
            "the base is shared, not copied"
        );
        assert!(!format!("{e:?}").contains("/new"), "no values in Debug");
    }

    #[test]
    fn filtered_applies_to_base_and_set_and_can_reuse_a_base() {
        let mut e = Env::new(vars(&[("KEEP", "1"), ("DROP", "2")]));
        e.set("KEEP_TOO", "3");
        e.set("DROP_TOO", "4");
        let keep = |k: &OsStr| k.to_string_lossy().starts_with("KEEP");
        let f = e.filtered(keep, None);
        assert_eq!(f.iter().count(), 2);
        assert!(get(&f, "DROP").is_none() && get(&f, "DROP_TOO").is_none());
        let again = e.filtered(keep, Some(f.base().clone()));
        assert!(Arc::ptr_eq(again.base(), f.base()));
        assert_eq!(again, f);
    }
}
