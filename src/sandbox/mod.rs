//! Sandbox profiles (YAML), path expansion, Landlock/seccomp rules applied
//! between fork and exec, environment filtering and command validation.
